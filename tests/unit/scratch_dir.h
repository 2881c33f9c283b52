/*
 * scratch_dir: the temporary directories of the unit tests that write real
 * files (test_store, test_db): made with mkdtemp, named inside, and removed
 * with everything in them (they hold only plain files) at the end of a case.
 */
#ifndef EVENTD_SCRATCH_DIR_H
#define EVENTD_SCRATCH_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/buf.h"

/* A new empty directory /tmp/eventd-test-WHAT-XXXXXX; the caller frees it with rmrf. */
static inline char *tmpdir(const char *what) {
    char tmpl[256];
    int n = snprintf(tmpl, sizeof tmpl, "/tmp/eventd-test-%s-XXXXXX", what);
    CHECK(n > 0 && (size_t)n < sizeof tmpl);
    char *d = mkdtemp(tmpl);
    CHECK(d != NULL);
    return xstrdup(d);
}

/* dir/name, valid until the next call. */
static inline char *path_of(const char *dir, const char *name) {
    static char p[1024];
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(n > 0 && (size_t)n < sizeof p);
    return p;
}

/* Removes dir, its files, and frees the name. */
static inline void rmrf(char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        CHECK_EQ_INT(unlink(path_of(dir, e->d_name)), 0);
    }
    closedir(d);
    CHECK_EQ_INT(rmdir(dir), 0);
    free(dir);
}

#endif
