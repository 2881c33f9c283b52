/*
 * bench_replay: writes N realistic theme and address records through the
 * real store (store_append, store_flush_sync) into a temporary directory,
 * then times store_replay feeding index_replay_apply, as a server start does.
 *
 *   bench_replay [N [MIN_RATE]]   N defaults to 1000000; with MIN_RATE the
 *                                 exit status is 1 when replay is slower.
 *
 * The log is written by a child process and read from the page cache, so
 * the timing is that of a server start on a warm cache: framing, checksums,
 * decoding and index building, not the disk.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "storage/index.h"
#include "storage/record.h"
#include "storage/store.h"

#define USERS 1000
#define FLUSH_EVERY 10000

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User + system CPU seconds of this process so far. */
static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void set_str(union value *v, char *scratch, size_t cap, const char *fmt, uint64_t i) {
    int n = snprintf(scratch, cap, fmt, i);
    v->s.ptr = scratch;
    v->s.len = (uint32_t)(n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1);
}

static void set_lit(union value *v, const char *lit) {
    v->s.ptr = lit;
    v->s.len = (uint32_t)strlen(lit);
}

/* Record i: themes and addresses alternate, with the lengths real ones have. */
static struct record *make_record(uint64_t i) {
    static char s[8][128];
    union value v[RECORD_MAX_FIELDS];
    uint64_t id = i + 1, user = 1 + i % USERS;
    if (i % 2 == 0) {
        record_defaults(&record_theme, v);
        set_str(&v[THEME_NAME], s[0], sizeof s[0], "Spring Gala %" PRIu64, i);
        set_str(&v[THEME_LOGO], s[1], sizeof s[1], "https://cdn.example.com/logos/%" PRIu64 ".png",
                i);
        set_str(&v[THEME_BACKGROUND_IMAGE], s[2], sizeof s[2],
                "https://cdn.example.com/bg/%" PRIu64 ".jpg", i);
        set_str(&v[THEME_PAGE_BG], s[3], sizeof s[3], "%06" PRIx64, i & 0xffffff);
        return record_build(&record_theme, id, user, v);
    }
    record_defaults(&record_address, v);
    set_str(&v[ADDR_NAME], s[0], sizeof s[0], "Conference Centre %" PRIu64, i);
    set_str(&v[ADDR_LINE1], s[1], sizeof s[1], "%" PRIu64 " Harbour Road", i % 997);
    set_str(&v[ADDR_LINE2], s[2], sizeof s[2], "Unit %" PRIu64, i % 40);
    set_lit(&v[ADDR_CITY], "Wellington");
    set_lit(&v[ADDR_STATE], "Wellington Region");
    set_lit(&v[ADDR_COUNTRY], "New Zealand");
    set_str(&v[ADDR_POST], s[6], sizeof s[6], "%04" PRIu64, 6000 + i % 100);
    v[ADDR_LON].d = 174.776 + (double)(i % 1000) / 1e4;
    v[ADDR_LAT].d = -41.2865 - (double)(i % 1000) / 1e4;
    v[ADDR_SHOW_MAP].b = i % 3 == 0;
    return record_build(&record_address, id, user, v);
}

/* The CLI path: appends plus a blocking flush every FLUSH_EVERY records. */
static int write_log(const char *dir, uint64_t n) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store s;
    struct store_opts opts = {.fsync = STORE_FSYNC_NEVER, .fsync_interval_ms = 1000};
    struct store_replay_info info;
    struct buf payload = BUF_INIT;
    if (store_open(&s, &loop, dir, &opts, NULL) < 0) return 1;
    if (store_replay(&s, NULL, NULL, &info) != STORE_REPLAY_EMPTY) return 1;
    for (uint64_t i = 0; i < n; i++) {
        struct record *r = make_record(i);
        buf_reset(&payload);
        record_encode(r, &payload);
        store_append(&s, r->type, payload.ptr, payload.len);
        record_free(r);
        if ((i + 1) % FLUSH_EVERY == 0 && store_flush_sync(&s) < 0) return 1;
    }
    if (store_close(&s) < 0) return 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    buf_destroy(&payload);
    return uv_loop_close(&loop) == 0 ? 0 : 1;
}

static void rmrf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    double min_rate = argc > 2 ? strtod(argv[2], NULL) : 0;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/eventd-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = 1;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store s;
    struct store_opts opts = {.fsync = STORE_FSYNC_NEVER, .fsync_interval_ms = 1000};
    struct store_replay_info info;

    /* Written by a child process, so that replay starts with a fresh heap as a
     * server start does (the writer's malloc churn would skew the timing). */
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        goto out;
    }
    if (pid == 0) _exit(write_log(dir, n));
    int wst;
    if (waitpid(pid, &wst, 0) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        fprintf(stderr, "bench: writing the log failed\n");
        goto out;
    }
    double t_write = now() - t0;

    struct stat st;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, STORE_LOG_NAME);
    if (stat(path, &st) < 0) goto out;

    /* Replay alone (checksums and framing), then replay into the index. */
    if (store_open(&s, &loop, dir, &opts, NULL) < 0) goto out;
    t0 = now();
    enum store_replay_status rs = store_replay(&s, NULL, NULL, &info);
    double t_scan = now() - t0;
    if (rs != STORE_REPLAY_OK || info.records != n) {
        fprintf(stderr, "bench: %s\n", info.message);
        goto out;
    }

    struct index ix;
    index_init(&ix);
    t0 = now();
    double c0 = cpu_now();
    struct index_replay z = {.ix = &ix, .file_bytes = (uint64_t)st.st_size}; /* as db.c replays */
    rs = store_replay(&s, index_replay_apply, &z, &info);
    double t_replay = now() - t0, c_replay = cpu_now() - c0;
    store_close(&s);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (rs != STORE_REPLAY_OK || ix.count != n) {
        fprintf(stderr, "bench: %s (index holds %zu of %" PRIu64 ")\n", info.message, ix.count, n);
        index_destroy(&ix);
        goto out;
    }
    index_destroy(&ix);

    double rate = (double)n / t_replay;
    printf("records            %" PRIu64 "\n", n);
    printf("log size           %.1f MB (%.1f bytes/record)\n", (double)st.st_size / 1e6,
           (double)st.st_size / (double)n);
    printf("write              %.0f records/s\n", (double)n / t_write);
    printf("replay, no index   %.0f records/s (%.0f MB/s)\n", (double)n / t_scan,
           (double)st.st_size / t_scan / 1e6);
    printf("replay into index  %.0f records/s (%.3f s; %.0f records per CPU second)\n", rate,
           t_replay, (double)n / c_replay);
    rc = 0;
    if (min_rate > 0 && rate < min_rate) {
        printf("below the target of %.0f records/s\n", min_rate);
        rc = 1;
    }
out:
    uv_loop_close(&loop);
    rmrf(dir);
    return rc;
}
