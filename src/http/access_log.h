/*
 * access_log: one JSON line per response on a file descriptor (stderr),
 * README "Access log":
 *
 *   {"time":"2026-11-22T16:43:10Z","method":"GET","path":"/v2/theme/7","status":200,
 *    "bytes":231,"us":143,"user_id":3,"request_id":"5f3a9c01-2a","client":"127.0.0.1"}
 *
 * The path never carries the query string (it may hold secrets); it is
 * JSON-escaped (control bytes, quotes, backslashes and bytes >= 0x7f as
 * \u00XX) and cut at ACCESS_LOG_PATH_MAX bytes, so a line stays far below
 * PIPE_BUF. The request id is one the server checked or made: it needs no
 * escaping.
 *
 * Lines are formatted into one reusable buffer and written together before
 * the loop next waits for I/O (a prepare handle), or at once when the
 * buffer passes ACCESS_LOG_BATCH bytes. Each write holds whole lines and
 * stays under PIPE_BUF, so lines never interleave with other writers of the
 * same pipe (the LOG lines of this process included). No allocation per
 * line once the buffer has grown. Loop thread only.
 */
#ifndef EVENTD_ACCESS_LOG_H
#define EVENTD_ACCESS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "common/buf.h"

#define ACCESS_LOG_PATH_MAX 1024 /* bytes of escaped path in a line */
#define ACCESS_LOG_BATCH 2048    /* written at once past this many buffered bytes */

struct access_log {
    int fd;
    bool on;
    bool armed;           /* the prepare handle is started */
    bool has_handle;      /* ... and initialized */
    struct buf pending;   /* lines not yet written */
    uv_prepare_t prepare; /* writes pending before the loop blocks */
    time_t time_at;       /* second of time_str */
    char time_str[24];    /* "2026-11-22T16:43:10Z" */
    uint64_t dropped;     /* lines the descriptor refused (full, closed) */
    /* the last client address and its text */
    uint8_t addr_family, addr_len;
    uint8_t addr[16];
    char addr_str[48];
};

/* One response, as the server saw it hand it to the socket. */
struct access_entry {
    uint8_t method; /* llhttp_method_t + 1; 0: unknown (the request line was bad) */
    uint16_t status;
    struct slice path;       /* without the query */
    struct slice request_id; /* up to 64 bytes of [A-Za-z0-9._:-] (http_request_id_ok, or
                              * generated): written as it is; may be empty */
    uint64_t bytes;          /* response bytes handed to the socket */
    uint64_t us;             /* latency, microseconds */
    uint64_t user_id;        /* 0: none */
    uint8_t family;          /* 4, 6, or 0 for the local Unix socket */
    const uint8_t *addr;     /* network order; unused when family is 0 */
};

/*
 * Initializes al (caller-owned storage) writing to fd; off: access_log_write
 * does nothing. With a loop, lines are batched per loop turn (the prepare
 * handle is closed by access_log_close; the loop must then run once); with
 * loop NULL every line is written at once.
 */
void access_log_init(struct access_log *al, uv_loop_t *loop, int fd, bool on);
void access_log_write(struct access_log *al, const struct access_entry *e);
/* Writes what is buffered. */
void access_log_flush(struct access_log *al);
/* Flushes and closes the handle; al may not be written to afterwards. */
void access_log_close(struct access_log *al);

/* Appends s to out as the inside of a JSON string, cut at max output bytes. */
void access_log_escape(struct buf *out, struct slice s, size_t max);

#endif
