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
 *  - CORRUPT leaves the file as it was; OK leaves it as it was and read all,
 *    but for info.zero_bytes of zeros that ended it, which it cut;
 *  - TRUNCATED keeps exactly the first info.bytes bytes, and with --repair
 *    the rest is in eventd.log.damaged-<offset>, byte for byte, but for the
 *    info.zero_bytes of zeros that ended the file (cut, not copied);
 *  - whatever replay accepted (OK, EMPTY, TRUNCATED) replays again as OK
 *    with the same records and, after TRUNCATED, the same index (after OK
 *    and EMPTY the file is byte for byte what was replayed, and index_apply
 *    is a pure function of the frames, so the index is the same by
 *    construction: the second replay then only counts the frames);
 *  - the data directory holds nothing else: eventd.log, LOCK, and after
 *    TRUNCATED the damaged- files.
 *
 * Speed: one store stays open across inputs (store_replay may be called
 * again on an open store: store.h), so an input costs no mkdir, open, lock
 * or close: the log is rewritten in place (ftruncate, write), read back
 * through the store's descriptor, and the directory is listed through one
 * descriptor kept open. A --repair rewrite renames a new file over the log
 * and the store keeps its descriptor; that case is read back by path.
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

#include "common/crc32c.h"
#include "common/log.h"
#include "fuzz_common.h"
#include "storage/index.h"
#include "storage/store.h"

static uv_loop_t loop;
static char dir[256], log_path[300];
static struct store store; /* open from LLVMFuzzerInitialize to exit */
static DIR *dirp;          /* dir, kept open: rewinddir lists it afresh */
static uint8_t *back;      /* what the log holds after replay */
static size_t back_cap;

static void cleanup(void) {
    if (dirp) closedir(dirp);
    store_close(&store);
    uv_run(&loop, UV_RUN_DEFAULT); /* the store's handles close */
    uv_loop_close(&loop);
    free(back);
    fuzz_rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    log_threshold = LOG_OFF; /* every torn tail would print a warning */
    uv_loop_init(&loop);
    fuzz_tmpdir(dir, sizeof dir, "replay");
    snprintf(log_path, sizeof log_path, "%s/%s", dir, STORE_LOG_NAME);
    struct store_opts opts = {.fsync = STORE_FSYNC_NEVER};
    int rc = store_open(&store, &loop, dir, &opts, NULL);
    if (rc < 0) fuzz_die("store_open: %d", rc);
    if (!(dirp = opendir(dir))) fuzz_die("opendir %s", dir);
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

/* Makes the store's log hold exactly p[0, n): its descriptor is O_APPEND. */
/* At offset 0 with pwrite: the store's descriptor has no O_APPEND (the log may run on
 * past its end with preallocated zeros), and its own offset is wherever it was left. */
static void put_log(const uint8_t *p, size_t n) {
    if (ftruncate(store.fd, 0) < 0) fuzz_die("ftruncate %s", log_path);
    for (off_t off = 0; n > 0;) {
        ssize_t w = pwrite(store.fd, p, n, off);
        if (w <= 0) fuzz_die("write %s", log_path);
        p += w;
        off += w;
        n -= (size_t)w;
    }
}

/* What the store's log holds now, into back (at most cap bytes; one pread when it is all). */
static size_t read_log(size_t cap) {
    if (cap + 1 > back_cap) {
        back_cap = cap + 1;
        back = realloc(back, back_cap);
    }
    size_t got = 0;
    for (int i = 0; i < 1000; i++) {
        ssize_t r = pread(store.fd, back + got, back_cap - got, (off_t)got);
        if (r < 0) fuzz_die("pread %s", log_path);
        if (r == 0) return got;
        got += (size_t)r;
        if (got == back_cap) fuzz_die("%s grew past %zu bytes", log_path, cap);
    }
    fuzz_die("pread %s: no end", log_path);
}
static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Rewrites the checksum of every frame that fits in the file (see store.h for the layout). */
static void fix_checksums(uint8_t *p, size_t n) {
    size_t off = STORE_HEADER_SIZE;
    uint32_t key = 0;
    if (n >= STORE_HEADER_SIZE) logfile_header_key(p, &key);
    while (off + STORE_FRAME_HEADER_SIZE <= n) {
        uint32_t len = get_le32(p + off + 4);
        if (len > n - off - STORE_FRAME_HEADER_SIZE) break;
        uint32_t crc = logfile_frame_check(key, p + off, len);
        for (int i = 0; i < 4; i++)
            p[off + (size_t)i] = (uint8_t)(crc >> (8 * i));
        off += STORE_FRAME_HEADER_SIZE + len;
    }
}

/* Replays the open store's log into ix (NULL: only count the frames), as a start does. */
static enum store_replay_status replay(bool repair, struct index *ix, bool relink,
                                       struct store_replay_info *info) {
    store.opts.repair = repair;
    if (ix) index_init(ix);
    enum store_replay_status st = store_replay(&store, ix ? index_apply : NULL, ix, info);
    if (relink &&
        (st == STORE_REPLAY_OK || st == STORE_REPLAY_EMPTY || st == STORE_REPLAY_TRUNCATED))
        index_relink(ix);
    return st;
}

static bool is_damaged_name(const char *name) {
    return strncmp(name, STORE_LOG_NAME ".damaged-", strlen(STORE_LOG_NAME ".damaged-")) == 0;
}

static const char *const names[] = {"OK", "EMPTY", "TRUNCATED", "CORRUPT", "IO"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    bool repair = data[0] & 1;
    size_t n = size - 1;
    uint8_t *file = malloc(n + 1);
    memcpy(file, data + 1, n);
    if (data[0] & 2) fix_checksums(file, n);
    put_log(file, n);

    struct index ix;
    struct store_replay_info info;
    enum store_replay_status st = replay(repair, &ix, true, &info);
    if ((unsigned)st > STORE_REPLAY_IO) fuzz_die("replay status %d", (int)st);
    if (!info.message[0]) fuzz_die("replay %s without a message", names[st]);
    if (st == STORE_REPLAY_IO) fuzz_die("replay of a readable file: IO (%s)", info.message);

    /* Only a --repair rewrite renames a new file over the log: read that one by its name. */
    size_t now_len = 0;
    uint8_t *now = NULL;
    if (st == STORE_REPLAY_TRUNCATED) {
        now = slurp(log_path, &now_len);
        if (!now) fuzz_die("replay %s removed %s", names[st], STORE_LOG_NAME);
    } else {
        now_len = read_log(n > STORE_HEADER_SIZE ? n : STORE_HEADER_SIZE);
        now = back;
    }

    /* Zeros that ended the file may be cut without a copy: they must be zeros. */
    if (info.zero_bytes > n)
        fuzz_die("replay %s cut %" PRIu64 " zeros of %zu bytes", names[st], info.zero_bytes, n);
    for (size_t i = n - info.zero_bytes; i < n; i++)
        if (file[i]) fuzz_die("replay %s cut byte %zu (not a zero) uncopied", names[st], i);
    switch (st) {
    case STORE_REPLAY_CORRUPT:
        if (now_len != n || memcmp(now, file, n) != 0)
            fuzz_die("replay CORRUPT changed the file (%zu -> %zu bytes)", n, now_len);
        break;
    case STORE_REPLAY_OK:
        if (info.bytes + info.zero_bytes != n || now_len != info.bytes ||
            memcmp(now, file, now_len) != 0)
            fuzz_die("replay OK kept %zu bytes (read %" PRIu64 ", %" PRIu64 " zeros) of %zu",
                     now_len, info.bytes, info.zero_bytes, n);
        break;
    case STORE_REPLAY_EMPTY:
        if (n >= STORE_HEADER_SIZE) fuzz_die("replay EMPTY of a %zu-byte file", n);
        if (now_len != STORE_HEADER_SIZE) fuzz_die("replay EMPTY left %zu bytes", now_len);
        break;
    case STORE_REPLAY_TRUNCATED:
        if (info.bytes != now_len || now_len >= n)
            fuzz_die("replay TRUNCATED kept %zu bytes (says %" PRIu64 ") of %zu", now_len,
                     info.bytes, n);
        if (info.dropped_bytes + info.zero_bytes != n - now_len)
            fuzz_die("replay TRUNCATED says it dropped %" PRIu64 " bytes and %" PRIu64
                     " zeros, not %zu",
                     info.dropped_bytes, info.zero_bytes, n - now_len);
        break;
    default:
        break;
    }

    /* The directory: eventd.log and LOCK, and after TRUNCATED what was removed, in
     * eventd.log.damaged-<offset> files, each the original's header (its frame key),
     * then exactly the bytes at that offset of the original. A torn append is a cut (a
     * prefix stays); --repair may also skip damaged frames in the middle. The damaged
     * files are removed for the next input. */
    size_t asides = 0, first = n;
    rewinddir(dirp);
    struct dirent *de;
    while ((de = readdir(dirp))) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, STORE_LOG_NAME) ||
            !strcmp(name, "LOCK"))
            continue;
        if (!is_damaged_name(name))
            fuzz_die("replay %s left %s in the data directory", names[st], name);
        if (st != STORE_REPLAY_TRUNCATED) fuzz_die("%s after replay %s", name, names[st]);
        size_t off = strtoull(name + strlen(STORE_LOG_NAME ".damaged-"), NULL, 10), len = 0;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        uint8_t *d = slurp(path, &len);
        if (!d || len < STORE_HEADER_SIZE || n < STORE_HEADER_SIZE ||
            memcmp(d, file, STORE_HEADER_SIZE) != 0)
            fuzz_die("%s does not start with the log's header", name);
        len -= STORE_HEADER_SIZE;
        if (off + len > n || memcmp(d + STORE_HEADER_SIZE, file + off, len) != 0)
            fuzz_die("%s is not the bytes at that offset", name);
        free(d);
        if (unlink(path) < 0) fuzz_die("unlink %s", path);
        asides += len;
        if (off < first) first = off;
    }
    if (st == STORE_REPLAY_TRUNCATED) {
        if (asides + info.zero_bytes != n - now_len)
            fuzz_die("%zu bytes copied aside and %" PRIu64 " zeros not, %zu removed", asides,
                     info.zero_bytes, n - now_len);
        if (memcmp(now, file, first) != 0) fuzz_die("the log before the first removal changed");
        if (!repair && first != now_len) fuzz_die("without --repair only a tail may be cut");
    }

    if (st != STORE_REPLAY_CORRUPT) {
        /* What replay kept must be a clean log now. */
        struct index ix2;
        struct store_replay_info info2;
        bool rebuilt = st == STORE_REPLAY_TRUNCATED;
        enum store_replay_status st2 = replay(false, rebuilt ? &ix2 : NULL, false, &info2);
        if (st2 != STORE_REPLAY_OK)
            fuzz_die("replay %s, then %s: %s", names[st], names[st2], info2.message);
        if (info2.records != info.records || info2.bytes != info.bytes)
            fuzz_die("replay again: %" PRIu64 " records / %" PRIu64 " bytes, first %" PRIu64
                     " / %" PRIu64,
                     info2.records, info2.bytes, info.records, info.bytes);
        if (rebuilt) {
            if (ix2.count != ix.count || ix2.next_id != ix.next_id ||
                ix2.live_bytes != ix.live_bytes)
                fuzz_die("replay again: another index (%zu records, next id %" PRIu64 ")",
                         ix2.count, ix2.next_id);
            index_destroy(&ix2);
        }
    }
    index_destroy(&ix);
    if (now != back) free(now);
    free(file);
    return 0;
}
