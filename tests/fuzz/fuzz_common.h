/*
 * Helpers shared by the fuzz targets: a loud failure that libFuzzer reports
 * as a crash (and saves the input for), and a scratch data directory.
 */
#ifndef EVENTD_FUZZ_COMMON_H
#define EVENTD_FUZZ_COMMON_H

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property does not hold: say which, then abort so libFuzzer keeps the input. */
static void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fuzz_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\n==== FUZZ PROPERTY FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* Removes every file in dir (the data directories hold no subdirectories). */
static inline void fuzz_empty_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static inline void fuzz_rmdir(const char *dir) {
    if (!dir[0]) return;
    fuzz_empty_dir(dir);
    rmdir(dir);
}

/*
 * Creates a fresh directory named after the target under $TMPDIR, else
 * /dev/shm, else /tmp: the store fsyncs on every replay, which costs
 * milliseconds on a disk and nothing on tmpfs.
 */
static inline void fuzz_tmpdir(char *out, size_t cap, const char *name) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(out, cap, "%s/eventd-fuzz-%s-XXXXXX", tmp, name);
    if (!mkdtemp(out)) fuzz_die("mkdtemp %s failed", out);
}

#endif
