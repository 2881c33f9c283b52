/*
 * store_replay: reading eventd.log at startup, in the steps of
 * docs/STORAGE.md's "Replay":
 *
 *   1. The header: a missing, empty or torn one (a prefix of the header, or
 *      zeros) starts a new log; a wrong magic or another format refuses.
 *   2. The frames, in order: each length and checksum checked, each payload
 *      handed to the caller's apply.
 *   3. The first bad frame is classified. Zeros from its first byte to the
 *      end of the file are the log's end: the space a running server
 *      preallocates (store.c), or an append none of whose bytes reached the
 *      disk; they hold nothing and are cut without a copy. A torn append is
 *      what a crash can leave of the last, unsynced write: the file ends
 *      inside the frame, or the frame's bytes are zeros from a 512-byte
 *      sector boundary inside it to the end of the file (sectors the disk
 *      never got). In a format 3 log, a lost sector in the part of the log
 *      that no sync covered (no sync mark after it says otherwise) is the
 *      unsynced tail: a crash can leave those pages in any order, so intact
 *      frames may follow it. Anything else is damage: a flipped bit, even in
 *      the last frame, a bad frame followed by zeros, a hole under a later
 *      mark, a frame that does not decode.
 *   4. A torn append or an unsynced tail is copied aside (up to where the
 *      zeros after it start) and cut. Damage refuses to start; with --repair
 *      it is copied aside and skipped, and replay goes on at the next intact
 *      frame, so the records after it are kept.
 *   5. The log is synced: the previous process may have died with pages
 *      still in the cache, and what we now call durable must be on disk.
 *
 * Nothing is ever deleted: every byte cut or skipped is first copied to
 * eventd.log.damaged-<offset> and synced.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/varint.h"
#include "storage/logfile.h"
#include "storage/store.h"

#define DAMAGED_NAME STORE_LOG_NAME ".damaged-"
#define READ_CHUNK (4u << 20) /* replay reads this much per pread */
#define SECTOR 512u           /* the unit a disk writes whole or not at all */

/* A window over the log file, refilled with large preads. */
struct reader {
    int fd;
    uint8_t *buf;
    size_t cap;    /* bytes allocated */
    size_t len;    /* bytes held */
    uint64_t base; /* file offset of buf[0] */
    uint64_t size; /* file size */
    int err;       /* -errno of a failed read */
    uint32_t key;  /* the file's frame key */
};

/* A range of the file that replay cut or skipped. */
struct range {
    uint64_t off, end;
};

struct replay {
    struct store *s;
    struct reader r;
    store_apply_cb apply;
    void *ctx;
    struct store_replay_info *info;
    struct range *cut; /* ranges to remove, ascending */
    size_t ncut;
    uint64_t copy_end; /* a torn append's copy ends here (the zeros after it are not copied) */
    uint64_t zeros;  /* bytes of zeros that ended the file after the last frame (cut, not copied) */
    const char *why; /* what was wrong with the last bad frame */
    bool undecodable; /* ... it had a good checksum but apply refused it */
    bool unsynced;    /* the cut at the end is a crash's unsynced tail (unsynced_tail) */
};

/* The n bytes at file offset off, or NULL when the file ends first or a read fails. */
static const uint8_t *reader_at(struct reader *r, uint64_t off, size_t n) {
    if (off >= r->base && off + n <= r->base + r->len) return r->buf + (off - r->base);
    if (off > r->size || n > r->size - off) return NULL;
    size_t keep = 0;
    if (off >= r->base && off < r->base + r->len) {
        keep = (size_t)(r->base + r->len - off);
        memmove(r->buf, r->buf + (off - r->base), keep);
    }
    r->base = off;
    r->len = keep;
    if (n > r->cap) {
        /* Large reads, but no larger than the file: a small log costs little memory. */
        size_t want = r->size < READ_CHUNK ? (size_t)r->size : READ_CHUNK;
        r->cap = n > want ? n : want;
        r->buf = xrealloc(r->buf, r->cap);
    }
    while (r->len < n) {
        size_t want = r->cap - r->len;
        uint64_t left = r->size - (r->base + r->len);
        if (want > left) want = (size_t)left;
        ssize_t got = pread(r->fd, r->buf + r->len, want, (off_t)(r->base + r->len));
        if (got < 0) {
            if (errno == EINTR) continue;
            r->err = -errno;
            return NULL;
        }
        if (got == 0) {
            r->err = -EIO; /* the file shrank under us */
            return NULL;
        }
        r->len += (size_t)got;
    }
    return r->buf;
}

/* Where the run of zero bytes that ends the file starts, at or after from (size if none). */
static int zero_tail_from(struct reader *r, uint64_t from, uint64_t *start) {
    uint64_t end = r->size;
    while (end > from) {
        uint64_t off = end - from > READ_CHUNK ? end - READ_CHUNK : from;
        const uint8_t *p = reader_at(r, off, (size_t)(end - off));
        if (!p) return r->err;
        for (size_t i = (size_t)(end - off); i > 0; i--) {
            if (p[i - 1]) {
                *start = off + i;
                return 0;
            }
        }
        end = off;
    }
    *start = from;
    return 0;
}

/* The offset of the first frame with a good checksum at or after off and before limit,
 * or 0 if none. */
static int next_frame(struct reader *r, uint64_t off, uint64_t limit, uint64_t *found) {
    *found = 0;
    for (; off < limit && off + STORE_FRAME_HEADER_SIZE <= r->size; off++) {
        const uint8_t *h = reader_at(r, off, STORE_FRAME_HEADER_SIZE);
        if (!h) return r->err;
        uint32_t crc = logfile_get_le32(h), len = logfile_get_le32(h + 4);
        if (len > STORE_MAX_PAYLOAD || len > r->size - off - STORE_FRAME_HEADER_SIZE) continue;
        const uint8_t *f = reader_at(r, off, STORE_FRAME_HEADER_SIZE + len);
        if (!f) return r->err;
        if (logfile_frame_check(r->key, f, len) == crc) {
            *found = off;
            return 0;
        }
    }
    return 0;
}

/*
 * Step 3: is the bad frame at pos a torn append? end is where its header
 * says it ends (0 when the header itself is incomplete). 1 torn, 0 damage,
 * or -errno.
 */
static int is_torn(struct replay *rp, uint64_t pos, uint64_t end, uint32_t len) {
    struct reader *r = &rp->r;
    if (!end) return 1; /* the file ends inside the frame header */
    if (end > r->size) {
        /* The file ends inside the frame: torn, unless the length cannot be a
         * frame's or an intact frame follows (then the length was damaged). */
        if (len > STORE_MAX_PAYLOAD) return 0;
        uint64_t next;
        int err = next_frame(r, pos + 1, r->size, &next);
        return err < 0 ? err : next == 0;
    }
    /* Complete but with a bad checksum: torn only if zeros run to the end of
     * the file from a sector boundary inside it (from its start: scan's zero tail). */
    uint64_t zeros = 0;
    int err = zero_tail_from(r, pos, &zeros);
    if (err < 0) return err;
    uint64_t sector = (zeros + SECTOR - 1) / SECTOR * SECTOR;
    bool torn = zeros < end && sector < end;
    if (torn) rp->copy_end = end;
    return torn;
}

/* Whether the n bytes at p are all zero. */
static bool all_zero(const uint8_t *p, size_t n) {
    while (n && !p[n - 1])
        n--;
    return n == 0;
}

/*
 * Step 3 in a log with sync marks (format 3), for a bad frame at pos that is
 * not a torn append: is it in the tail no sync ever covered? A crash there
 * leaves pages of the last writes on disk in any order (over preallocated
 * zeros, or from a copy taken while a batch was written), so a sector the disk
 * never got may have intact frames after it. It is that tail when
 *   - a lost sector overlaps the frame: zeros from pos to the end of its sector,
 *     or a whole sector of zeros that starts inside it (a crash leaves zeros,
 *     it never flips a bit), and
 *   - no intact sync mark after pos says that the log was durable past pos
 *     (a mark starts every batch written after an "always" sync, follows an
 *     "interval" or "never" sync, and ends a cleanly closed log).
 * 1 unsynced tail (rp->copy_end: where the zeros that end the file start), 0
 * damage, or -errno. zeros is where those zeros start.
 */
static int unsynced_tail(struct replay *rp, uint64_t pos, uint64_t end, uint64_t zeros) {
    struct reader *r = &rp->r;
    /* The lost sector must be in the frame as far as the bytes can tell: not in the
     * zeros that end the file, nor past the next intact frame (then what is damaged
     * is the length, which a crash never flips). */
    uint64_t stop = end < zeros ? end : zeros, next;
    int err = next_frame(r, pos + 1, stop, &next);
    if (err < 0) return err;
    if (next) stop = next;
    bool lost = false;
    for (uint64_t at = pos; at < stop && !lost; at = (at / SECTOR + 1) * SECTOR) {
        uint64_t sector_end = (at / SECTOR + 1) * SECTOR;
        if (sector_end > r->size) sector_end = r->size;
        const uint8_t *p = reader_at(r, at, (size_t)(sector_end - at));
        if (!p) return r->err;
        lost = all_zero(p, (size_t)(sector_end - at));
    }
    if (!lost) return 0;
    for (uint64_t off = pos + 1;;) {
        uint64_t f;
        err = next_frame(r, off, zeros, &f);
        if (err < 0) return err;
        if (!f) break;
        const uint8_t *h = reader_at(r, f, STORE_FRAME_HEADER_SIZE);
        if (!h) return r->err;
        uint32_t len = logfile_get_le32(h + 4);
        uint8_t type = h[8];
        const uint8_t *payload = reader_at(r, f + STORE_FRAME_HEADER_SIZE, len);
        if (!payload) return r->err;
        /* A mark past its own offset: a --repair rewrite moved it back, and synced
         * the whole rewritten file, so all that is before it is durable. */
        uint64_t synced;
        if (type == STORE_FRAME_SYNCED && varint_get(payload, len, &synced) == len && len &&
            (synced > f ? f : synced) > pos)
            return 0; /* that sync returned before the mark was written: durable data */
        off = f + STORE_FRAME_HEADER_SIZE + len;
    }
    rp->copy_end = zeros;
    return 1;
}

/* Copies [off, end) to a new eventd.log.damaged-<off>[.N], synced, and names it in name. */
static int copy_aside(struct replay *rp, uint64_t off, uint64_t end, char *name, size_t cap) {
    struct store *s = rp->s;
    int fd = -1, err = 0;
    char *path = NULL;
    for (int i = 0; i < 1000 && fd < 0; i++) {
        if (i)
            snprintf(name, cap, "%s%" PRIu64 ".%d", DAMAGED_NAME, off, i);
        else
            snprintf(name, cap, "%s%" PRIu64, DAMAGED_NAME, off);
        free(path);
        path = logfile_path(s->dir, name);
        /* O_EXCL: an earlier repair's file is never overwritten. */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        err = -errno;
        goto out;
    }
    /* The log's header first: the copy is a log file of its own, whose frame key
     * (the log's next compaction makes another) says which frames are intact. */
    const uint8_t *h = reader_at(&rp->r, 0, STORE_HEADER_SIZE);
    if (!h) {
        err = rp->r.err ? rp->r.err : -EIO;
        goto out;
    }
    if ((err = logfile_write_all(fd, h, STORE_HEADER_SIZE))) goto out;
    for (uint64_t p = off; p < end;) {
        size_t n = end - p > READ_CHUNK ? READ_CHUNK : (size_t)(end - p);
        const uint8_t *d = reader_at(&rp->r, p, n);
        if (!d) {
            err = rp->r.err;
            goto out;
        }
        if ((err = logfile_write_all(fd, d, n))) goto out;
        p += n;
    }
    if (!(err = logfile_datasync(fd))) err = logfile_sync_dir(s->dir);
out:
    if (fd >= 0) close(fd);
    free(path);
    return err;
}

/* Copies [off, end) of the log to fd. */
static int copy_range(struct reader *r, int fd, uint64_t off, uint64_t end) {
    while (off < end) {
        size_t n = end - off > READ_CHUNK ? READ_CHUNK : (size_t)(end - off);
        const uint8_t *d = reader_at(r, off, n);
        if (!d) return r->err;
        int err = logfile_write_all(fd, d, n);
        if (err) return err;
        off += n;
    }
    return 0;
}

/*
 * Step 4 for skipped damage in the middle: writes eventd.log.repair with
 * every range but the cut ones, syncs it and renames it over the log.
 */
static int rewrite(struct replay *rp, uint64_t *size) {
    struct store *s = rp->s;
    char *tmp = logfile_path(s->dir, STORE_REPAIR_NAME),
         *log = logfile_path(s->dir, STORE_LOG_NAME);
    /* Not O_APPEND: it becomes the log's fd, whose frames are written with pwrite. */
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = fd < 0 ? -errno : 0;
    uint64_t from = 0;
    for (size_t i = 0; !err && i <= rp->ncut; i++) {
        uint64_t to = i < rp->ncut ? rp->cut[i].off : rp->r.size;
        err = copy_range(&rp->r, fd, from, to);
        *size += to - from;
        if (i < rp->ncut) from = rp->cut[i].end;
    }
    if (!err) err = logfile_datasync(fd);
    if (!err && rename(tmp, log) < 0) err = -errno;
    if (!err) err = logfile_sync_dir(s->dir);
    if (err) {
        if (fd >= 0) close(fd);
        unlink(tmp);
    } else {
        close(s->fd);
        s->fd = fd;
    }
    free(tmp);
    free(log);
    return err;
}

/* Step 4: copies every cut range aside, then cuts the log or rewrites it without them. */
static int remove_cut(struct replay *rp, uint64_t *size) {
    struct store_replay_info *info = rp->info;
    for (size_t i = 0; i < rp->ncut; i++) {
        char name[64];
        struct range c = rp->cut[i];
        /* A torn append's copy stops where its frame ends, when zeros follow:
         * in preallocated space they run on for megabytes and hold nothing. */
        uint64_t copy = c.end == rp->r.size && rp->copy_end > c.off && rp->copy_end < c.end
                            ? rp->copy_end
                            : c.end;
        int err = copy_aside(rp, c.off, copy, name, sizeof name);
        if (err) return err;
        info->dropped_bytes += copy - c.off;
        info->zero_bytes += c.end - copy; /* zeros, cut without a copy */
        bool tail = c.end == rp->r.size && (rp->unsynced || !rp->s->opts.repair);
        LOG(LOG_WARN,
            "store: %s %" PRIu64 " bytes at offset %" PRIu64 " of %s/%s%s; copied to %s%s",
            !tail          ? "removed"
            : rp->unsynced ? "cut an unsynced tail of"
                           : "cut a torn append of",
            copy - c.off, c.off, rp->s->dir, STORE_LOG_NAME,
            tail && rp->unsynced ? " (a sector the disk never got, no sync mark after it)" : "",
            name, copy < c.end ? " (the zeros after it cut, not copied)" : "");
        snprintf(info->message, sizeof info->message,
                 "%s/%s: removed %" PRIu64 " bytes at offset %" PRIu64 " (copied to %s)",
                 rp->s->dir, STORE_LOG_NAME, copy - c.off, c.off, name);
    }
    if (rp->ncut == 1 && rp->cut[0].end == rp->r.size) {
        *size = rp->cut[0].off;
        return logfile_cut(rp->s->fd, *size);
    }
    *size = 0;
    return rewrite(rp, size);
}

static void add_cut(struct replay *rp, uint64_t off, uint64_t end) {
    rp->cut = xrealloc(rp->cut, (rp->ncut + 1) * sizeof *rp->cut);
    rp->cut[rp->ncut++] = (struct range){off, end};
}

/* Step 1 for a file too short for a header: a new log, or not an eventd log. */
static enum store_replay_status short_header(struct replay *rp, int *err) {
    struct reader *r = &rp->r;
    uint8_t h[STORE_HEADER_SIZE];
    rp->s->frame_key = logfile_new_key();
    rp->s->log_version = STORE_VERSION;
    logfile_header_put(h, STORE_VERSION, rp->s->frame_key);
    const uint8_t *p = r->size ? reader_at(r, 0, (size_t)r->size) : NULL;
    if (r->size && !p) {
        *err = r->err;
        return STORE_REPLAY_IO;
    }
    /* Torn: the start of our magic (a key never decides it: it was random). */
    bool torn = r->size == 0 || memcmp(p, h, r->size < 8 ? (size_t)r->size : 8) == 0;
    for (size_t i = 0; !torn && i < r->size; i++)
        torn = p[i] == 0;
    if (!torn) {
        snprintf(rp->info->message, sizeof rp->info->message,
                 "%s/%s is not an eventd log (%" PRIu64 " bytes, no header)", rp->s->dir,
                 STORE_LOG_NAME, r->size);
        return STORE_REPLAY_CORRUPT;
    }
    if (r->size)
        LOG(LOG_WARN, "store: rewrote the torn %" PRIu64 "-byte header of %s/%s", r->size,
            rp->s->dir, STORE_LOG_NAME);
    int fd = rp->s->fd;
    if (!(*err = logfile_cut(fd, 0))) *err = logfile_write_at(fd, h, sizeof h, 0);
    if (!*err) *err = logfile_datasync(fd);
    /* The log file may be new: make its name durable too. */
    if (!*err) *err = logfile_sync_dir(rp->s->dir);
    if (*err) return STORE_REPLAY_IO;
    rp->s->file_size = rp->s->durable_size = rp->s->mark_size = STORE_HEADER_SIZE;
    rp->s->mark_end = STORE_HEADER_SIZE; /* nothing to cover yet */
    rp->info->bytes = STORE_HEADER_SIZE;
    snprintf(rp->info->message, sizeof rp->info->message, "%s/%s: created a new log", rp->s->dir,
             STORE_LOG_NAME);
    return STORE_REPLAY_EMPTY;
}

/* Step 1: 0 if the header is ours; otherwise the message says why (--repair cannot help). */
static enum store_replay_status check_header(struct replay *rp, int *err) {
    const uint8_t *h = reader_at(&rp->r, 0, STORE_HEADER_SIZE);
    const char *dir = rp->s->dir;
    if (!h) {
        *err = rp->r.err;
        return STORE_REPLAY_IO;
    }
    if (memcmp(h, STORE_MAGIC, 8) != 0) {
        snprintf(rp->info->message, sizeof rp->info->message,
                 "%s/%s is not an eventd log (bad magic at offset 0)", dir, STORE_LOG_NAME);
        return STORE_REPLAY_CORRUPT;
    }
    if ((rp->s->log_version = logfile_header_key(h, &rp->r.key))) {
        rp->s->frame_key = rp->r.key;
        return STORE_REPLAY_OK;
    }
    uint32_t version = logfile_get_le32(h + 8);
    snprintf(rp->info->message, sizeof rp->info->message,
             version > STORE_VERSION ? "%s/%s was written by a newer eventd (format %" PRIu32 ")"
                                     : "%s/%s has an unknown format %" PRIu32,
             dir, STORE_LOG_NAME, version);
    return STORE_REPLAY_CORRUPT;
}

/*
 * Step 2: checks and applies the frame at *pos. Returns 1 and moves *pos on
 * for a good frame, 0 for a bad one (rp->why says why, *end is where its
 * header says it ends, 0 if the header is incomplete), or -errno.
 */
static int read_frame(struct replay *rp, uint64_t *pos, uint64_t *end, uint32_t *len) {
    struct reader *r = &rp->r;
    *end = 0;
    rp->undecodable = false;
    const uint8_t *fh = reader_at(r, *pos, STORE_FRAME_HEADER_SIZE);
    if (!fh) {
        rp->why = "incomplete frame header";
        return r->err ? r->err : 0;
    }
    uint32_t crc = logfile_get_le32(fh);
    *len = logfile_get_le32(fh + 4);
    uint8_t type = fh[8];
    *end = *pos + STORE_FRAME_HEADER_SIZE + *len;
    if (*end > r->size) {
        rp->why = "frame length runs past the end of the file";
        return 0;
    }
    const uint8_t *f = reader_at(r, *pos, STORE_FRAME_HEADER_SIZE + *len);
    if (!f) return r->err;
    if (logfile_frame_check(r->key, f, *len) != crc) {
        rp->why = "bad checksum";
        return 0;
    }
    if (type == STORE_FRAME_SYNCED && rp->s->log_version >= STORE_VERSION_MARKS) {
        /* The store's own, not a record's. (Its offset may lie past itself after a
         * --repair rewrite moved it: unsynced_tail reads it as its own offset then.) */
        uint64_t synced;
        if (varint_get(f + STORE_FRAME_HEADER_SIZE, *len, &synced) != *len || *len == 0) {
            rp->why = "sync mark that cannot be decoded";
            rp->undecodable = true;
            return 0;
        }
        *pos = *end;
        return 1;
    }
    if (rp->apply && rp->apply(rp->ctx, type, f + STORE_FRAME_HEADER_SIZE, *len) < 0) {
        /* A checksummed frame was fully written: never torn, never cut silently. */
        rp->why = "record that cannot be decoded";
        rp->undecodable = true;
        *end = *pos + STORE_FRAME_HEADER_SIZE + *len;
        return 0;
    }
    rp->info->records++;
    *pos = *end;
    return 1;
}

/*
 * Steps 2-4 over the frames. Returns OK (rp->cut lists what to remove) or
 * CORRUPT (the message says where and what --repair would do), or IO.
 */
static enum store_replay_status scan(struct replay *rp, int *err) {
    struct reader *r = &rp->r;
    struct store_replay_info *info = rp->info;
    uint64_t pos = STORE_HEADER_SIZE;
    while (pos < r->size) {
        uint64_t end;
        uint32_t len = 0;
        int rc = read_frame(rp, &pos, &end, &len);
        if (rc < 0) goto io;
        if (rc == 1) continue;
        /* Where the zeros that end the file start: no frame starts there or after. */
        uint64_t zeros = r->size;
        if ((rc = zero_tail_from(r, pos, &zeros)) < 0) goto io;
        if (!rp->undecodable && zeros <= pos) {
            /* Only zeros from here on: the end of the log. */
            rp->zeros = r->size - pos;
            r->size = pos;
            break;
        }
        rp->copy_end = 0;
        rc = rp->undecodable ? 0 : is_torn(rp, pos, end, len);
        if (rc == 0 && !rp->undecodable && rp->s->log_version >= STORE_VERSION_MARKS) {
            rc = unsynced_tail(rp, pos, end, zeros);
            rp->unsynced = rc == 1;
        }
        if (rc < 0) goto io;
        if (rc == 1) {
            add_cut(rp, pos, r->size);
            break;
        }
        /* The next intact frame: from the next byte, as the length may be the
         * damaged part. A version 1 log (no key) trusts a length inside the
         * file: from there on, a payload's bytes could pass for a frame. */
        uint64_t next, from = r->key || !end || end > r->size ? pos + 1 : end;
        if ((rc = next_frame(r, from, zeros, &next)) < 0) goto io;
        /* What is damaged ends where the zeros start, or where its frame says it ends. */
        uint64_t data_end = end <= r->size && end > zeros ? end : zeros;
        if (!rp->s->opts.repair) {
            info->bad_offset = pos;
            snprintf(info->message, sizeof info->message,
                     "%s/%s is damaged at offset %" PRIu64 " (%s), with %" PRIu64
                     " bytes after it; start with --repair to copy %s aside and keep %s",
                     rp->s->dir, STORE_LOG_NAME, pos, rp->why, data_end - pos,
                     next ? "the damaged bytes" : "them",
                     next ? "the intact records after them" : "the records before them");
            return STORE_REPLAY_CORRUPT;
        }
        LOG(LOG_WARN, "store: --repair: skipping damage at offset %" PRIu64 " of %s/%s (%s)", pos,
            rp->s->dir, STORE_LOG_NAME, rp->why);
        if (!next) rp->copy_end = data_end; /* the zeros after it go uncopied */
        add_cut(rp, pos, next ? next : r->size);
        if (!next) break;
        pos = next;
    }
    return STORE_REPLAY_OK;
io:
    *err = r->err ? r->err : -EIO;
    return STORE_REPLAY_IO;
}

enum store_replay_status store_replay(struct store *s, store_apply_cb apply, void *ctx,
                                      struct store_replay_info *info) {
    memset(info, 0, sizeof *info);
    struct replay rp = {.s = s, .r = {.fd = s->fd}, .apply = apply, .ctx = ctx, .info = info};
    enum store_replay_status status;
    int err = 0;
    struct stat st;
    if (s->fd < 0) {
        err = -EBADF;
        goto io;
    }
    if (fstat(s->fd, &st) < 0) {
        err = -errno;
        goto io;
    }
    rp.r.size = (uint64_t)st.st_size;
    if (rp.r.size < STORE_HEADER_SIZE) {
        status = short_header(&rp, &err);
        goto out;
    }
    if ((status = check_header(&rp, &err)) != STORE_REPLAY_OK) goto out;
    if ((status = scan(&rp, &err)) != STORE_REPLAY_OK) goto out;

    uint64_t size = rp.r.size;
    if (rp.ncut) {
        if ((err = remove_cut(&rp, &size))) goto io;
        status = STORE_REPLAY_TRUNCATED;
    } else {
        snprintf(info->message, sizeof info->message,
                 "%s/%s: %" PRIu64 " records, %" PRIu64 " bytes", s->dir, STORE_LOG_NAME,
                 info->records, size);
    }
    if (rp.zeros) {
        /* After a cut the file ends before the zeros already. */
        if (!rp.ncut && (err = logfile_cut(s->fd, size))) goto io;
        info->zero_bytes = rp.zeros;
        LOG(LOG_INFO,
            "store: %s/%s ended in %" PRIu64 " zero bytes at offset %" PRIu64
            " (space preallocated by the last server, or an append of which nothing reached "
            "the disk): cut",
            s->dir, STORE_LOG_NAME, rp.zeros, size);
    }
    /* Step 5. */
    if ((err = logfile_datasync(s->fd))) goto io;
    s->file_size = s->durable_size = info->bytes = size;
    /* The next batch's sync mark says that all of this is durable (a mark of the
     * header alone would say nothing). */
    s->mark_size = STORE_HEADER_SIZE;
    s->mark_end = size; /* a close or a sync marks what was read only with more after it */
    goto out;
io:
    snprintf(info->message, sizeof info->message, "%s/%s: %s", s->dir ? s->dir : "?",
             STORE_LOG_NAME, strerror(-err));
    status = STORE_REPLAY_IO;
out:
    free(rp.r.buf);
    free(rp.cut);
    return status;
}
