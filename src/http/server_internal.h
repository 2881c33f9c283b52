/*
 * server_internal: what the server's files share; not an API for anyone
 * else (server.h is). The server is split by job, as libuv splits its
 * streams:
 *
 *   server.c        the listener, accepting, the connection cap (eviction,
 *                   503), closing connections, the public API
 *   server_read.c   reads, the parser and its events, error answers, timers
 *   server_write.c  the ring of responses, batched writes, lingering close
 *   server_pool.c   memory: kits, handler states, connection slabs, the
 *                   idle and warm lists, the periodic sweep
 *
 * Functions declared here act on one connection (conn_*) or on the server
 * (server__*, libuv's uv__ convention for a module's internal calls).
 *
 * A busy connection has a kit: a fixed read buffer, the HTTP parser (the
 * request in progress and its kept headers) and a ring of response slots,
 * one per request between "headers parsed" and "response written". An idle
 * connection has none (see server_pool.c): all it keeps of its requests is
 * who its peer is. Connections go idle, and give their kit back, only at the
 * end of a libuv callback (conn_settle), never while the parser or a write
 * still uses the kit.
 *
 * A parked connection (c->parked) has no kit either: its only work is one
 * response deferred with server_defer_park (a long wait, the change feed's),
 * so it keeps a compact copy of that response's request facts instead of a
 * ring (see server_pool.c "parking"). Its count is 0; c->parked says an
 * answer is still owed, so it is never idle.
 */
#ifndef EVENTD_SERVER_INTERNAL_H
#define EVENTD_SERVER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "http/server.h"

#define READ_BUF_SIZE (16 * 1024) /* bytes per kit; the kernel buffers the rest */
#define MAX_BATCH SERVER_MAX_BATCH
#define CONTINUE_100 "HTTP/1.1 100 Continue\r\n\r\n" /* the interim response to Expect */

enum slot_state {
    SLOT_OPEN,     /* the request is being parsed */
    SLOT_DEFERRED, /* complete; the handler answers later (server_defer) */
    SLOT_PARKABLE, /* ... and the connection may park while it is its only work
                    * (server_defer_park) */
    SLOT_READY,    /* answered: leaves once its LSN is acknowledged */
    SLOT_WRITING
};
enum conn_list { LIST_NONE, LIST_IDLE, LIST_LINGER };

/* What a connection needs only while it has a request in progress. */
struct server_kit {
    struct server_kit *next; /* srv->kits while free */
    uv_write_t wreq;
    /* The parser, lent with the kit: owner is the connection that has it. On the free
     * list it is between requests (a connection going idle leaves it so; any other
     * that gives its kit back resets it), so the next connection goes on with it. */
    struct http_parser parser;
    struct http_response *slots; /* srv->nslots */
    uint8_t *state;              /* enum slot_state per slot */
    uint32_t *ticket;            /* the ticket id of each deferred slot */
    uint64_t read_ns;            /* uv_hrtime() of the last read that brought bytes */
    uint64_t req_ns;             /* ... of the read with the first byte of the request in
                                  * progress, when c->timing */
    char rbuf[READ_BUF_SIZE];
};

/*
 * What a parked connection keeps of its deferred response: the request's
 * facts the access log, the metrics and the head writer need (the rest of the
 * response the handler fills when it answers). One allocation, sized to
 * the request id and the path that follow it in data.
 */
struct server_parked {
    uint64_t user_id;
    uint64_t start_ns;
    uint32_t ticket; /* the deferral's ticket id */
    uint16_t path_len;
    uint8_t method, route, request_id_len;
    bool http10, head_only, close;
    char data[]; /* request id, then path */
};

/* The handler's per-connection state, with the link of the free list before it. */
struct server_state {
    union {
        struct server_state *next; /* srv->states while free */
        max_align_t align;
    } h;
    unsigned char mem[];
};

struct conn {
    union {
        uv_tcp_t tcp;   /* from the listener */
        uv_pipe_t pipe; /* from the local (Unix socket) listener */
        uv_stream_t stream;
        uv_handle_t handle;
    } io;
    uv_timer_t timer;
    struct server *srv;
    struct server_slab *slab;
    struct server_link link;      /* srv->conns while open, srv->free_conns while free */
    struct server_link ilink;     /* srv->idle or srv->lingering, as list says */
    struct server_link wlink;     /* srv->warm, when in_warm */
    struct server_link rlink;     /* srv->resumes: its parse resumes on the next loop turn */
    struct conn *next_waiting;    /* srv->waiting */
    struct server_kit *kit;       /* NULL while idle or lingering */
    struct server_state *hstate;  /* handler state: NULL until the first request and
                                   * set.idle_sweep_ms after the last */
    struct http_response *cur;    /* slot of the request being parsed */
    struct server_parked *parked; /* the deferred answer owed while parked, else NULL */
    /* Times and deadlines: uv_now(), in ms. */
    uint64_t req_start;         /* uv_now() when the current request's first byte came */
    uint64_t deadline;          /* uv_now() when the current timeout expires */
    uint64_t timer_due;         /* uv_now() when the armed timer fires (<= deadline) */
    uint64_t idle_since;        /* uv_now() of the last request or write progress; reads
                                 * that start no request (stray CRLFs) do not move it */
    uint64_t idle_at;           /* uv_now() when it went on srv->idle */
    uint32_t drained;           /* bytes read and discarded after an error answer, saturating
                                 * (set.linger_bytes is 32-bit too) */
    uint32_t roff, rlen;        /* unparsed bytes are kit->rbuf[roff, rlen) */
    uint32_t head, count;       /* ring */
    uint32_t nwriting;          /* slots in the write in flight */
    uint32_t gen;               /* bumped when the slot is released: tickets of the
                                 * connection it was become stale */
    uint32_t tickets;           /* ticket ids given (server_defer), this connection's */
    uint8_t list : 2;           /* enum conn_list */
    uint8_t pending_closes : 2; /* uv_close callbacks still to come (the socket, the timer) */
    uint8_t continue_left;      /* bytes of a CONTINUE_100 the socket did not take: they go
                                 * first in the next write, so it is never torn */
    bool timing;                /* req_start is set */
    bool reading;
    bool paused;      /* parser paused with unparsed bytes */
    bool close_after; /* close once every queued response is written */
    bool closing;     /* uv_close called */
    bool discard;     /* the handler answered at headers time: drop the body */
    bool in_waiting;
    bool in_warm;
    bool draining;  /* an error answer ends the connection: input is discarded */
    bool lingering; /* ... the answer is written, the write side shut down */
    bool eof;       /* the client shut down its side */
    bool counted;   /* counted in srv->per_addr under peer_key */
    bool may_park;  /* a SLOT_PARKABLE response may be in the ring (conn_settle tries) */
    uint8_t peer_key[NET_KEY_BYTES];
    /* Who is connected: set at accept, copied into the parser's request with each kit. */
    struct http_peer peer;
};

#define CONN_OF(p, field) ((struct conn *)((char *)(p)-offsetof(struct conn, field)))

/* ---- intrusive lists ---- */

static inline void q_init(struct server_link *q) {
    q->prev = q->next = q;
}

static inline bool q_empty(const struct server_link *q) {
    return q->next == q;
}

static inline void q_push(struct server_link *q, struct server_link *n) {
    n->next = q;
    n->prev = q->prev;
    q->prev->next = n;
    q->prev = n;
}

static inline void q_remove(struct server_link *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* Resumes c's paused parser on the next loop turn (from inside a handler, where parsing
 * its next requests would run them inside that request's completion). */
void conn_resume_later(struct conn *c);

/* A request is in progress: its first bytes were parsed and it is not complete. Only a
 * connection with a kit can be inside one. */
static inline bool conn_in_request(const struct conn *c) {
    return c->kit && c->kit->parser.in_message;
}

/* ---- the ring of response slots (only while c->kit is set) ---- */

/* The i-th queued response, counting from the oldest. */
static inline struct http_response *slot_at(struct conn *c, uint32_t i) {
    return &c->kit->slots[(c->head + i) % c->srv->nslots];
}

static inline uint8_t *state_at(struct conn *c, uint32_t i) {
    return &c->kit->state[(c->head + i) % c->srv->nslots];
}

/* Queued responses at which reading pauses. */
static inline uint32_t pipeline_max(const struct conn *c) {
    return c->srv->nslots - 1;
}

/* Reading pauses when the ring holds max_pipeline responses, or answers of
 * max_pipeline_bytes (their bodies, counted whole until written): a client
 * that pipelines requests for large answers (a list, the OpenAPI document)
 * without reading them gets TCP back-pressure after about that many bytes,
 * not after max_pipeline large answers. */
static inline bool ring_full(struct conn *c) {
    if (c->count >= pipeline_max(c)) return true;
    size_t bytes = 0;
    for (uint32_t i = 0; i < c->count; i++)
        bytes += slot_at(c, i)->body.len;
    return bytes >= c->srv->set.max_pipeline_bytes;
}

#define BODY_KEEP (64 * 1024) /* a response body buffer larger than this is freed once sent */
/* ... and in a slot but the first, which only pipelined requests use, one larger than this:
 * 32 pipelined list pages of 33 KB kept 1 MiB with a connection (review, 2026-11-29). */
#define BODY_KEEP_PIPELINED (4 * 1024)

/* The i-th queued response is done with (sent, or dropped with its connection): a rare
 * huge body (a long list) does not stay with the kit, nor a large one in a slot that only
 * pipelining reaches (conn_slot_push starts over at 0). */
static inline void slot_body_trim(struct conn *c, uint32_t i) {
    struct http_response *r = slot_at(c, i);
    bool first = (c->head + i) % c->srv->nslots == 0;
    if (r->body.cap > (first ? BODY_KEEP : BODY_KEEP_PIPELINED)) {
        c->srv->freed_bytes += r->body.cap;
        buf_destroy(&r->body);
    }
}

/* ---- server.c ---- */

/* Closes c (idempotent); its slot is released in the last uv_close callback. */
void conn_close(struct conn *c);
/* Bytes wait in c's socket, unread. */
bool conn_has_input(struct conn *c);

/* ---- server_read.c ---- */

/* The parser callbacks; every connection's parser is initialized with them. */
extern const struct http_events server__parser_events;
void conn_start_reading(struct conn *c);
/* Parses what is buffered, then decides whether to read more. */
void conn_parse_buffered(struct conn *c);
/* Gives a new response its start time and request id (given: the request's X-Request-ID). */
void conn_response_begin(struct conn *c, struct http_response *r, struct slice given);
/* Gives r a generated request id. */
void server__request_id_make(struct server *srv, struct http_response *r);
/* Queues the answer to c->kit->parser.error and makes the connection end after it. */
void conn_answer_error(struct conn *c);
/* Re-arms the timer for the connection's current state (request, idle). */
void conn_arm_timer(struct conn *c);
/* Starts the timer to fire ms from now, whatever it was armed for. */
void conn_timer_start(struct conn *c, uint64_t ms);

/* ---- server_write.c ---- */

/* A new response slot at the tail of the ring (reset, SLOT_OPEN), or NULL when full. */
struct http_response *conn_slot_push(struct conn *c);
/* Sends what is sendable; ends the connection when it is due to close. */
void conn_flush(struct conn *c);

/* ---- server_pool.c ---- */

/* Bytes arrived on an idle connection (in srv->scratch): a request starts. */
void conn_wake(struct conn *c, size_t n);
/* The end of a libuv callback that touched c: idle now? Then give the kit back. */
void conn_settle(struct conn *c);
/* Leaves the idle, lingering and warm lists. */
void conn_list_leave(struct conn *c);
/* Gives the kit back (nothing queued, parsed or written may use it any more), its parser
 * reset: for a connection that ends, or whose parser may be inside or past a request. */
void conn_kit_put(struct conn *c);
/* Takes a kit for a connection that has none (a parked one gets its deferred slot back). */
void conn_kit_get(struct conn *c);
/* The handler's state of this connection, taken (and reset) if it has none. */
void *conn_state_get(struct conn *c);
/* Gives the handler state back to the free list, reset. */
void conn_state_put(struct conn *c);
/* Returns a closed connection's kit, state and slot to the free lists. */
void conn_release(struct conn *c);
/* A ticket of c was taken; ... was used (answered, or dropped as stale): while a slab's
 * connections have tickets out, it is not freed. */
void server__ticket_taken(struct conn *c);
void server__ticket_used(struct conn *c);
/* A fresh connection slot (not yet on any list of open connections). */
struct conn *server__conn_get(struct server *srv);
/* Makes sure the sweep runs while there is idle memory to give back. */
void server__sweep_arm(struct server *srv);
/* Frees the free lists and the connection slabs no open connection uses. */
void server__pool_destroy(struct server *srv);

#endif
