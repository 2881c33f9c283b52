/*
 * fuzz_replay: store_replay over an arbitrary eventd.log, into an index, as
 * a server start does.
 *
 * Input: byte 0 bit 0 set replays with --repair; bit 1 set gives every whole
 * frame its correct checksum first, so that mutated payloads get past the
 * CRC to the record decoder and the index; the rest is the file.
 *
 * Properties, besides no crash and no leak:
 *  - a readable file never gives STORE_REPLAY_IO;
 *  - CORRUPT leaves the file as it was; OK leaves it as it was and read all;
 *  - TRUNCATED keeps exactly the first info.bytes bytes, and with --repair
 *    the rest is in eventd.log.damaged-<offset>, byte for byte;
 *  - whatever replay accepted (OK, EMPTY, TRUNCATED) replays again as OK
 *    with the same records and the same index.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "crc32c.h"
#include "fuzz_common.h"
#include "index.h"
#include "log.h"
#include "store.h"

static uv_loop_t loop;
static char dir[256], log_path[300];

static void cleanup(void) {
    fuzz_rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    log_threshold = LOG_OFF; /* every torn tail would print a warning */
    uv_loop_init(&loop);
    fuzz_tmpdir(dir, sizeof dir, "replay");
    snprintf(log_path, sizeof log_path, "%s/%s", dir, STORE_LOG_NAME);
    atexit(cleanup);
    return 0;
}

/* The whole file at path into a malloc'ed buffer (NULL if absent). */
static uint8_t *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) fuzz_die("fstat %s", path);
    uint8_t *p = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, p + got, (size_t)st.st_size - got);
        if (n <= 0) fuzz_die("read %s", path);
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return p;
}

static void spit(const char *path, const uint8_t *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) fuzz_die("open %s", path);
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) fuzz_die("write %s", path);
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Rewrites the checksum of every frame that fits in the file (see store.h for the layout). */
static void fix_checksums(uint8_t *p, size_t n) {
    size_t off = STORE_HEADER_SIZE;
    while (off + STORE_FRAME_HEADER_SIZE <= n) {
        uint32_t len = get_le32(p + off + 4);
        if (len > n - off - STORE_FRAME_HEADER_SIZE) break;
        uint32_t crc = crc32c(0, p + off + 4, 5 + (size_t)len);
        for (int i = 0; i < 4; i++)
            p[off + (size_t)i] = (uint8_t)(crc >> (8 * i));
        off += STORE_FRAME_HEADER_SIZE + len;
    }
}

/* Opens the store in dir, replays it into ix and closes it. */
static enum store_replay_status replay(bool repair, struct index *ix,
                                       struct store_replay_info *info) {
    struct store s;
    struct store_opts opts = {.fsync = STORE_FSYNC_NEVER, .repair = repair};
    int rc = store_open(&s, &loop, dir, &opts, NULL);
    if (rc < 0) fuzz_die("store_open: %d", rc);
    index_init(ix);
    enum store_replay_status st = store_replay(&s, index_apply, ix, info);
    if (st == STORE_REPLAY_OK || st == STORE_REPLAY_EMPTY || st == STORE_REPLAY_TRUNCATED)
        index_relink(ix);
    rc = store_close(&s);
    if (rc < 0) fuzz_die("store_close: %d", rc);
    uv_run(&loop, UV_RUN_DEFAULT); /* the store's handles close */
    return st;
}

static const char *const names[] = {"OK", "EMPTY", "TRUNCATED", "CORRUPT", "IO"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    bool repair = data[0] & 1;
    size_t n = size - 1;
    uint8_t *file = malloc(n + 1);
    memcpy(file, data + 1, n);
    if (data[0] & 2) fix_checksums(file, n);
    fuzz_empty_dir(dir);
    spit(log_path, file, n);

    struct index ix;
    struct store_replay_info info;
    enum store_replay_status st = replay(repair, &ix, &info);
    if ((unsigned)st > STORE_REPLAY_IO) fuzz_die("replay status %d", (int)st);
    if (!info.message[0]) fuzz_die("replay %s without a message", names[st]);
    if (st == STORE_REPLAY_IO) fuzz_die("replay of a readable file: IO (%s)", info.message);

    size_t now_len = 0;
    uint8_t *now = slurp(log_path, &now_len);
    if (!now) fuzz_die("replay %s removed %s", names[st], STORE_LOG_NAME);
    char damaged[400];
    snprintf(damaged, sizeof damaged, "%s/%s.damaged-%" PRIu64, dir, STORE_LOG_NAME, info.bytes);
    size_t aside_len = 0;
    uint8_t *aside = slurp(damaged, &aside_len);

    switch (st) {
    case STORE_REPLAY_CORRUPT:
    case STORE_REPLAY_OK:
        if (now_len != n || memcmp(now, file, n) != 0)
            fuzz_die("replay %s changed the file (%zu -> %zu bytes)", names[st], n, now_len);
        if (st == STORE_REPLAY_OK && info.bytes != n)
            fuzz_die("replay OK read %" PRIu64 " of %zu bytes", info.bytes, n);
        break;
    case STORE_REPLAY_EMPTY:
        if (n >= STORE_HEADER_SIZE) fuzz_die("replay EMPTY of a %zu-byte file", n);
        if (now_len != STORE_HEADER_SIZE) fuzz_die("replay EMPTY left %zu bytes", now_len);
        break;
    case STORE_REPLAY_TRUNCATED: {
        /* What was removed is in eventd.log.damaged-<offset> files, each exactly the
         * bytes at that offset of the original; a torn append is a cut (a prefix
         * stays), --repair may also skip damaged frames in the middle. */
        if (info.bytes != now_len || now_len >= n)
            fuzz_die("replay TRUNCATED kept %zu bytes (says %" PRIu64 ") of %zu", now_len,
                     info.bytes, n);
        if (info.dropped_bytes != n - now_len)
            fuzz_die("replay TRUNCATED says it dropped %" PRIu64 " bytes, not %zu",
                     info.dropped_bytes, n - now_len);
        size_t asides = 0, first = n;
        DIR *dp = opendir(dir);
        struct dirent *de;
        const char *prefix = STORE_LOG_NAME ".damaged-";
        while (dp && (de = readdir(dp))) {
            if (strncmp(de->d_name, prefix, strlen(prefix))) continue;
            size_t off = strtoull(de->d_name + strlen(prefix), NULL, 10), len = 0;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            uint8_t *d = slurp(path, &len);
            if (!d || off + len > n || memcmp(d, file + off, len) != 0)
                fuzz_die("%s is not the bytes at that offset", de->d_name);
            free(d);
            asides += len;
            if (off < first) first = off;
        }
        if (dp) closedir(dp);
        if (asides != n - now_len)
            fuzz_die("%zu bytes copied aside, %zu removed", asides, n - now_len);
        if (memcmp(now, file, first) != 0) fuzz_die("the log before the first removal changed");
        if (!repair && first != now_len) fuzz_die("without --repair only a tail may be cut");
        break;
    }
    default:
        break;
    }
    if (st != STORE_REPLAY_TRUNCATED && aside) fuzz_die("a damaged file after %s", names[st]);
    (void)aside_len;

    if (st != STORE_REPLAY_CORRUPT) {
        /* What replay kept must be a clean log now. */
        struct index ix2;
        struct store_replay_info info2;
        enum store_replay_status st2 = replay(false, &ix2, &info2);
        if (st2 != STORE_REPLAY_OK)
            fuzz_die("replay %s, then %s: %s", names[st], names[st2], info2.message);
        if (info2.records != info.records || info2.bytes != info.bytes)
            fuzz_die("replay again: %" PRIu64 " records / %" PRIu64 " bytes, first %" PRIu64
                     " / %" PRIu64,
                     info2.records, info2.bytes, info.records, info.bytes);
        if (ix2.count != ix.count || ix2.next_id != ix.next_id || ix2.live_bytes != ix.live_bytes)
            fuzz_die("replay again: another index (%zu records, next id %" PRIu64 ")", ix2.count,
                     ix2.next_id);
        index_destroy(&ix2);
    }
    index_destroy(&ix);
    free(now);
    free(aside);
    free(file);
    return 0;
}
