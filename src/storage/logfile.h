/*
 * logfile: the file operations under the store: paths, whole writes, the
 * one sync path (fdatasync or fsync, retried on EINTR) that every sync of
 * the store goes through, cutting a file back durably, frame and header
 * encoding, and the fault hooks of test builds.
 *
 * Every function here may block: call them from threadpool jobs, or from
 * the loop only where blocking is the point (startup, replay, the CLI).
 * They return 0 or -errno.
 */
#ifndef EVENTD_LOGFILE_H
#define EVENTD_LOGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The log file format (docs/STORAGE.md): the store's, named for it. */
#define STORE_LOG_NAME "eventd.log"
#define STORE_REPAIR_NAME STORE_LOG_NAME ".repair" /* a --repair rewrite before its rename */
#define STORE_MAGIC "EVTDLOG\0"                    /* 8 bytes at offset 0 */
#define STORE_VERSION 4u /* format 3 and keys answered by reference; versions 1 to 3 are read */
#define STORE_VERSION_MARKS 3u        /* keyed frames and sync marks */
#define STORE_VERSION_KEYED 2u        /* keyed frames, no sync marks */
#define STORE_VERSION_UNKEYED 1u      /* key 0 */
#define STORE_HEADER_SIZE 16u         /* magic, u32 version, u32 frame key (0 in version 1) */
#define STORE_FRAME_HEADER_SIZE 9u    /* u32 crc32c, u32 payload length, u8 type */
#define STORE_MAX_PAYLOAD (64u << 20) /* larger lengths are damage, not records */
/* A frame of the store's own (version 3 on): varint S, the log's first S bytes were durable
 * (an fdatasync covering them had returned) before this frame was written. The first frame
 * of a batch when S grew since the last one ("always"), a frame of its own after a sync
 * ("interval", "never"), and the last of a cleanly closed log (store.c). Replay uses them
 * to tell the never-synced tail a crash can leave from damage (store_replay.c); records
 * never see them. */
#define STORE_FRAME_SYNCED 24u

/* Test builds: (re)reads the EVENTD_FAULT_* hooks and restarts their counts. */
void logfile_faults_rearm(void);

/* "dir/name", malloc'd: the caller frees it. */
char *logfile_path(const char *dir, const char *name);
/* Writes all len bytes (short writes and EINTR handled). */
int logfile_write_all(int fd, const void *ptr, size_t len);
/* Writes all len bytes at file offset off (pwrite: the file's own offset does not move). */
int logfile_write_at(int fd, const void *ptr, size_t len, uint64_t off);
/* Writes log frames at off, the log's end: logfile_write_at, and the write the fault hook
 * hits (ENOSPC). At an offset, not with O_APPEND: the file may run on past the log's end
 * with preallocated zeros (logfile_zero_fill). */
int logfile_append(int fd, const void *ptr, size_t len, uint64_t off);
/* Writes len zero bytes at off of the file at path and fdatasyncs them: space the log's
 * next frames overwrite without changing the file's size or blocks, so that their
 * fdatasync has no metadata to commit (store.c). The file is opened for this alone: a
 * write-back error that its fdatasync reports is still reported to the log's own fd
 * (each open file keeps its own error cursor), where a shared fd's sync would take it
 * and leave the log's next fdatasync to succeed over lost frames. Not hit by the fault
 * hooks: its failure costs speed, never data. */
int logfile_zero_fill(const char *path, uint64_t off, uint64_t len);
/* Bytes an unprivileged writer may still write to fd's file system (fstatvfs); 0 on error. */
uint64_t logfile_free_bytes(int fd);
/* fdatasync (data) or fsync (metadata), retried on EINTR; data syncs are what the hook hits (EIO).
 */
int logfile_sync(int fd, bool data);
static inline int logfile_datasync(int fd) {
    return logfile_sync(fd, true);
}
/* fsyncs a directory, so that names created or renamed in it are durable. */
int logfile_sync_dir(const char *dir);
/* Cuts a file to size and makes that durable, so records reported lost stay lost. */
int logfile_cut(int fd, uint64_t size);
/*
 * Asks whether the disk would take a page past size now: allocates it,
 * cuts it off again, and syncs. A crash in between leaves zeros at the
 * tail, which replay treats as a torn append.
 */
int logfile_probe(int fd, uint64_t size);
/* mkdir -p with mode 0700; fails with -ENOTDIR if dir is not a directory. */
int logfile_mkdir_p(const char *dir);
/*
 * Frames are keyed: a frame's checksum is its crc32c XOR the file's frame
 * key, a random number in the file header. Client data inside a payload can
 * hold bytes that form a whole frame with a good crc32c; without the key it
 * cannot make one that replay would take for a frame of the log (a torn
 * append cut there, or a --repair resync landing on it).
 */
uint32_t logfile_frame_check(uint32_t key, const uint8_t *frame, size_t len);
/* Writes one frame (header and payload: STORE_FRAME_HEADER_SIZE + len bytes) to out. */
void logfile_frame_put(uint8_t *out, uint32_t key, uint8_t type, const void *payload, size_t len);
/* Writes the header of the frame at out whose len bytes of payload are in place after it. */
void logfile_frame_seal(uint8_t *out, uint32_t key, uint8_t type, size_t len);
/* Rekeys the whole frames in p[0 .. len) from one key to another (a compaction's new file). */
void logfile_frames_rekey(uint8_t *p, size_t len, uint32_t from, uint32_t to);
/* A new frame key: random, never 0 (the key of version 1). */
uint32_t logfile_new_key(void);
/* Writes the file header (magic, version, key) to out: a log's is STORE_VERSION, an
 * export's STORE_VERSION_KEYED (it holds no sync marks, so eventd of format 2 reads
 * it too), version 1's key 0. */
void logfile_header_put(uint8_t out[STORE_HEADER_SIZE], uint32_t version, uint32_t key);
/* Reads a file header's frame key into *key (0 in version 1); returns its version, or 0 for
 * a version this build cannot read (the magic is checked apart). */
uint32_t logfile_header_key(const uint8_t h[STORE_HEADER_SIZE], uint32_t *key);

static inline void logfile_put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t logfile_get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
