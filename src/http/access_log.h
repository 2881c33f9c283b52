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
 * Lines are formatted into one buffer, allocated once, and written later
 * (nginx's "access_log ... buffer=size flush=time", Envoy's flush interval):
 * with a flush interval, a timer started when the buffer goes from empty to
 * non-empty (never re-armed per line) writes them when it fires, so a line
 * waits at most one interval; with interval 0 they are written before the
 * loop next waits for I/O (a prepare handle), once per loop turn. Either
 * way the buffer is written at once when it holds its size in bytes, and on
 * access_log_flush (which eventd's app calls before each other log line:
 * log_before_write) and access_log_close. Behind a load balancer a shard
 * gets about one request per loop turn: the interval is what turns a
 * write(2) per request into one per buffer.
 *
 * Writes always hold whole lines. To a pipe, FIFO or socket each write is
 * also at most PIPE_BUF bytes (cut at a line end), which the kernel keeps
 * whole, so access lines never tear nor interleave with the other writers
 * of that pipe (this process's LOG lines included); a regular file or a
 * terminal takes the whole buffer in one write. Lines still buffered when
 * the process is killed (SIGKILL) are lost: at most one interval's worth
 * (or one buffer). No allocation per line. Loop thread only, but for
 * access_log_catch_fatal's handler.
 */
#ifndef EVENTD_ACCESS_LOG_H
#define EVENTD_ACCESS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "common/buf.h"

#define ACCESS_LOG_PATH_MAX 1024 /* bytes of escaped path in a line */

/* What the settings say (--access-log, --access-log-flush-ms, --access-log-buffer-bytes). */
struct access_log_settings {
    bool on;               /* false: access_log_write does nothing */
    uint32_t flush_ms;     /* longest a line waits in the buffer, ms; 0: until the loop turn ends */
    uint32_t buffer_bytes; /* the buffer is written at once when it holds this many bytes */
};

struct access_log {
    int fd;
    bool on;
    bool armed;           /* the timer or the prepare handle is started */
    bool has_handle;      /* ... and initialized */
    bool atomic_cap;      /* fd is a pipe, FIFO or socket: writes of PIPE_BUF at most */
    uint32_t flush_ms;    /* 0: the prepare handle, else the timer */
    size_t limit;         /* written at once at this many buffered bytes */
    struct buf pending;   /* whole lines not yet written; its capacity never grows */
    uv_timer_t timer;     /* flush_ms > 0: writes the lines flush_ms after the first */
    uv_prepare_t prepare; /* flush_ms == 0: writes the lines before the loop blocks */
    time_t time_at;       /* second of time_str */
    char time_str[24];    /* "2026-11-22T16:43:10Z" */
    uint64_t dropped;     /* lines the descriptor refused (full, closed) */
    uint64_t writes;      /* write(2) calls made (for tests and measurements) */
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
 * Initializes al (caller-owned storage) writing to fd (not owned) with the
 * settings s (copied; buffer_bytes below 4096 counts as 4096). With a loop,
 * lines wait for the timer or the loop turn's end as above (the handle is
 * closed by access_log_close; the loop must then run once; it never keeps
 * the loop alive); with loop NULL every line is written at once.
 */
void access_log_init(struct access_log *al, uv_loop_t *loop, int fd,
                     const struct access_log_settings *s);
void access_log_write(struct access_log *al, const struct access_entry *e);
/* Writes what is buffered now (the timer, if started, stays: it then finds less). */
void access_log_flush(struct access_log *al);
/* Flushes and closes the handle; al may not be written to afterwards. */
void access_log_close(struct access_log *al);
/*
 * A process that dies of SIGABRT (an abort, a failed assert, out of memory),
 * SIGSEGV, SIGBUS, SIGFPE or SIGILL first writes al's buffered lines, then
 * dies of the same signal. Only signals whose handler is still the default
 * are taken (a sanitizer's own stay). One log per process: al is kept until
 * access_log_catch_fatal(NULL), which access_log_close calls for it.
 */
void access_log_catch_fatal(struct access_log *al);

/* Appends s to out as the inside of a JSON string, cut at max output bytes. */
void access_log_escape(struct buf *out, struct slice s, size_t max);

#endif
