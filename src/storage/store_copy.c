/*
 * store_copy: a copy of the log that a server may be writing (eventd backup;
 * docs/STORAGE.md, "Operating notes").
 *
 * A plain copy (cp) of a preallocating server's log can read the zeros ahead
 * of the writer, then, in its later reads, batches written after them: a
 * start refuses that copy, since a hole under a later sync mark is what a
 * disk that lost synced sectors leaves too. Here every frame is checked as it
 * is read, in order, and one that is not intact yet is read again after a
 * short wait (the writer may be in the middle of it), for 100 ms in all over
 * the copy (a busy server would otherwise be followed for as long as it
 * writes); then the copy ends there. So the copy is always a prefix of the
 * log, cut at a frame's end: the log as it was at some moment of the copy,
 * which a server starts on as it is. Where it ends, the bytes after are the
 * writer's next frame, zeros or the file's end; intact frames after a bad one
 * are damage (or a crash's unsynced tail), which only a start of the server
 * can judge: the backup fails then, rather than drop them unsaid.
 *
 * Reads only: it takes no lock, and the server keeps writing meanwhile. The
 * log it copies is the file the name held when the copy began; a compaction
 * that replaces it during the copy leaves that file whole, and the copy ends
 * at that file's end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/buf.h"
#include "storage/logfile.h"
#include "storage/store.h"

enum {
    COPY_CHUNK = 1 << 20, /* bytes read at a time */
    COPY_WAITS = 20,      /* waits in all for frames not intact yet: then the copy ends */
    COPY_WAIT_MS = 5,     /* each: 100 ms in all, many batches of a busy server */
    COPY_SCAN = 4 << 20,  /* bytes after the end looked through for intact frames */
};

/* The bytes [off, off + n) of the log, read with pread into win; short at the file's end. */
struct window {
    struct buf b;
    uint64_t off; /* of b's first byte in the file */
};

static int fill(int fd, struct window *w, uint64_t off, size_t n) {
    buf_reset(&w->b);
    w->off = off;
    char *p = buf_reserve(&w->b, n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) break;
        got += (size_t)r;
    }
    buf_commit(&w->b, got);
    return 0;
}

/* Bytes of the window from off on (0 when off is outside it). */
static size_t have(const struct window *w, uint64_t off) {
    return off >= w->off && off - w->off <= w->b.len ? (size_t)(w->b.len - (off - w->off)) : 0;
}

/* The whole frame at off, when it is intact: its size (header and payload); 0 when not. */
static int frame_at(int fd, struct window *w, uint32_t key, uint64_t off, size_t *size) {
    *size = 0;
    if (have(w, off) < STORE_FRAME_HEADER_SIZE) {
        int err = fill(fd, w, off, COPY_CHUNK);
        if (err) return err;
        if (have(w, off) < STORE_FRAME_HEADER_SIZE) return 0;
    }
    const uint8_t *f = (const uint8_t *)w->b.ptr + (off - w->off);
    uint32_t len = logfile_get_le32(f + 4);
    if (len > STORE_MAX_PAYLOAD) return 0;
    size_t need = STORE_FRAME_HEADER_SIZE + len;
    if (have(w, off) < need) {
        int err = fill(fd, w, off, need > COPY_CHUNK ? need : COPY_CHUNK);
        if (err) return err;
        if (have(w, off) < need) return 0;
        f = (const uint8_t *)w->b.ptr;
    }
    if (logfile_frame_check(key, f, len) == logfile_get_le32(f)) *size = need;
    return 0;
}

/* Whether an intact frame starts in (off, off + COPY_SCAN): *at, else 0. Runs of zero
 * bytes are skipped (the file's preallocated end). */
static int intact_after(int fd, struct window *w, uint32_t key, uint64_t off, uint64_t *at) {
    *at = 0;
    int err = fill(fd, w, off + 1, COPY_SCAN);
    if (err) return err;
    const uint8_t *p = (const uint8_t *)w->b.ptr;
    size_t n = w->b.len;
    for (size_t i = 0; i + STORE_FRAME_HEADER_SIZE <= n; i++) {
        if (!p[i] && !memcmp(p + i, p + i + 1, STORE_FRAME_HEADER_SIZE - 1)) continue;
        uint32_t len = logfile_get_le32(p + i + 4);
        if (len > n - i - STORE_FRAME_HEADER_SIZE) continue;
        if (logfile_frame_check(key, p + i, len) == logfile_get_le32(p + i)) {
            *at = off + 1 + i;
            return 0;
        }
    }
    return 0;
}

/* Copies the frames of fd's log from its header on into out; 0 or -errno
 * (-EBADMSG: intact frames follow the first bad one, at st->bytes). */
static int copy_frames(int fd, int out, struct store_copy_stats *st) {
    uint8_t h[STORE_HEADER_SIZE];
    struct window w = {.b = BUF_INIT};
    struct buf pending = BUF_INIT;
    int err = fill(fd, &w, 0, COPY_CHUNK);
    if (err) goto done;
    uint32_t key = 0;
    if (have(&w, 0) < STORE_HEADER_SIZE || memcmp(w.b.ptr, STORE_MAGIC, 8) != 0) {
        err = -EINVAL; /* not a log */
        goto done;
    }
    memcpy(h, w.b.ptr, sizeof h);
    if (!logfile_header_key(h, &key)) {
        err = -EPROTONOSUPPORT; /* a newer format */
        goto done;
    }
    buf_append(&pending, h, sizeof h);
    uint64_t off = STORE_HEADER_SIZE;
    int waits = 0;
    for (;;) {
        size_t size = 0;
        err = frame_at(fd, &w, key, off, &size);
        while (!err && !size && waits < COPY_WAITS) {
            uv_sleep(COPY_WAIT_MS);
            waits++;
            buf_reset(&w.b); /* read it again */
            err = frame_at(fd, &w, key, off, &size);
        }
        if (!err && !size) {
            /* The end, unless intact frames follow: then read this one afresh (a
             * writer writes in order: what came before them is there now). */
            uint64_t at;
            err = intact_after(fd, &w, key, off, &at);
            if (!err && at) {
                buf_reset(&w.b);
                err = frame_at(fd, &w, key, off, &size);
                if (!err && !size) err = -EBADMSG;
            }
        }
        if (err || !size) break;
        buf_append(&pending, w.b.ptr + (off - w.off), size);
        off += size;
        st->frames++;
        if (pending.len >= COPY_CHUNK) {
            err = logfile_write_all(out, pending.ptr, pending.len);
            buf_reset(&pending);
            if (err) break;
        }
    }
    st->bytes = off;
    if (!err) err = logfile_write_all(out, pending.ptr, pending.len);
done:
    buf_destroy(&pending);
    buf_destroy(&w.b);
    return err;
}

/* fsyncs the directory that holds path, so that its name is durable too. */
static int sync_parent(const char *path) {
    char *d = xstrdup(path);
    char *slash = strrchr(d, '/');
    if (!slash)
        strcpy(d, ".");
    else
        slash[slash == d] = 0; /* "/name": the root, "/" */
    int err = logfile_sync_dir(d);
    free(d);
    return err;
}

int store_copy_log(const char *dir, const char *out_path, struct store_copy_stats *st) {
    memset(st, 0, sizeof *st);
    char *path = logfile_path(dir, STORE_LOG_NAME);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0) return -errno;
    /* Written under a name of its own, and linked to out_path when complete: a copy
     * stopped half-way (a signal, a full disk) is never taken for a backup. link, not
     * rename: it fails when out_path exists, never replacing a file. */
    size_t n = strlen(out_path) + 32;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.partial-%ld", out_path, (long)getpid());
    int err = access(out_path, F_OK) == 0 ? -EEXIST : 0;
    int out = err ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (!err && out < 0) err = -errno;
    if (!err) err = copy_frames(fd, out, st);
    if (!err) err = logfile_sync(out, false);
    if (out >= 0 && close(out) < 0 && !err) err = -errno;
    if (!err && link(tmp, out_path) < 0) {
        err = -errno;
        /* A file system without hard links: a rename, which the check above guards. */
        if ((err == -EPERM || err == -EOPNOTSUPP) && access(out_path, F_OK) != 0)
            err = rename(tmp, out_path) < 0 ? -errno : 0;
    }
    if (out >= 0) unlink(tmp);
    if (!err) err = sync_parent(out_path);
    free(tmp);
    close(fd);
    return err;
}
