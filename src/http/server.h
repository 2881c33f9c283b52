/*
 * server: the listening socket and the connections on one libuv loop:
 * reads fed to the HTTP parser, the per-connection queue of responses (kept
 * in request order for pipelining), back-pressure, timeouts, the connection
 * cap and graceful shutdown.
 *
 * The server knows nothing of routes or records: it hands each request to
 * the handler through struct server_handler, and the handler fills the response. A
 * response can carry an LSN; it leaves only once the handler has told the
 * server (server_acked) that the store acknowledged that LSN, so replies
 * never get ahead of durability, and replies on one connection never
 * overtake each other.
 *
 * Memory: an idle connection (no request in progress, nothing queued or
 * being written) holds only its struct conn (640 bytes). What a request
 * needs (the read buffer, the ring of response slots, the parser with its
 * request and header buffers) is a "kit" taken from a server-wide LIFO free
 * list when a request starts and given back when the connection goes idle,
 * so a keep-alive client cycles the same warm kit with no heap traffic. The
 * handler's state stays with an idle connection for set.idle_sweep_ms more
 * (so its credential cache survives between requests) and then goes back to
 * its own free list; a state moving to another connection is reset first
 * (state_reset), so nothing of one connection's requests reaches another. A
 * connection whose only work is a long deferred answer (server_defer_park)
 * parks: it gives back its kit and state too, keeping a few dozen bytes of
 * request facts (a held change-feed caller costs about 0.8 KiB, its
 * connection included). A periodic sweep (every set.idle_sweep_ms) frees
 * what the free lists did not need during the last period and then returns
 * freed memory to the OS (malloc_trim).
 *
 * At the connection cap the longest-idle connection (lingering ones first)
 * is closed to admit the new one; only when none is idle does the new one
 * get a short 503.
 *
 * Closing after an error answer (400, 408, 413, 431) lingers, as nginx's
 * lingering_close: the response is written, the write side shut down, and
 * input is read and discarded for at most linger_ms and linger_bytes (the
 * settings), so the client reads the answer instead of a reset.
 *
 * Every response carries an X-Request-ID: the request's own when it is 1 to
 * 64 bytes of [A-Za-z0-9._:-], else one made of a per-process random prefix
 * and a counter. When a response is handed to the socket, on_sent (if set)
 * sees it with its size and latency: from the read that brought the
 * request's first byte to that moment, so in "always" mode it includes the
 * wait for the fdatasync that covers the response.
 *
 * Ownership: the server owns its connections; a connection slot is freed
 * (to a free list) only in its uv_close callback.
 */
#ifndef EVENTD_SERVER_H
#define EVENTD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/netaddr.h"
#include "http/http.h"

/*
 * The server's settings: app.c fills them from the configuration
 * (docs/ARCHITECTURE.md "Settings"); server_start copies them.
 */
struct server_settings {
    const char *listen;                   /* "HOST:PORT"; read by server_start only */
    const char *trusted_proxies;          /* no per-address cap for these: comma-separated
                                           * addresses / CIDR blocks, or ""; read by server_start */
    uint32_t max_header_bytes;            /* request line + headers, bytes */
    uint32_t max_body_bytes;              /* bytes */
    uint32_t max_connections;             /* open at once; then the longest idle is closed */
    uint32_t max_connections_per_address; /* per IPv4 address or IPv6 /64; 0: no cap */
    uint32_t evict_half_sent_ms;  /* at the cap, a request arriving this long may be closed */
    uint32_t max_pipeline;        /* queued responses per connection before reads pause */
    uint32_t max_pipeline_bytes;  /* ... or bytes of queued answer bodies */
    uint32_t header_timeout_ms;   /* first byte of a request to end of headers */
    uint32_t request_timeout_ms;  /* first byte of a request to end of body */
    uint32_t idle_timeout_ms;     /* keep-alive connection with nothing to do */
    uint32_t shutdown_timeout_ms; /* server_shutdown: wait this long for requests in flight */
    uint32_t linger_ms;           /* a connection closing after an error reads this long at most */
    uint32_t linger_bytes;        /* ... and discards at most this many bytes */
    uint32_t idle_sweep_ms;       /* idle memory given back this often */
};

enum server_headers_result {
    SERVER_READ_BODY, /* the handler wants the body (on_body, then on_complete) */
    SERVER_ANSWERED,  /* the handler filled the response; the body is discarded */
};

/*
 * The callbacks that serve requests (app/front.c supplies them): each gets
 * data and the connection's handler state, state_size bytes the server
 * allocates, keeps on its free lists and hands from connection to
 * connection (state_reset in between). data must outlive the server.
 *
 * Lifetimes: req is valid until the next request on the connection (see
 * struct http_request); resp belongs to the server and is the handler's
 * to fill only during on_headers and on_complete; on_body's ptr is valid
 * only during the call, except that the piece ending a body framed by
 * Content-Length stays valid, unchanged, through the request's on_complete,
 * which follows it within the same parse (http.h). The state is the
 * handler's from state_reset (or state_init) to the next state_reset.
 */
struct server_handler {
    void *data;
    size_t state_size; /* bytes of per-connection request state the server allocates */
    void (*state_init)(void *data, void *state);
    /* A new connection starts using this state (it may have served another before). */
    void (*state_reset)(void *data, void *state);
    void (*state_destroy)(void *data, void *state);
    enum server_headers_result (*on_headers)(void *data, void *state, struct http_request *req,
                                             struct http_response *resp);
    void (*on_body)(void *data, void *state, const char *ptr, size_t len);
    void (*on_complete)(void *data, void *state, struct http_request *req,
                        struct http_response *resp);
    /* server_destroy ran: every ticket (server_defer) is void, and no callback
     * comes any more; work still running must not answer. Optional. */
    void (*on_server_gone)(void *data);
};

/*
 * A response handed to the socket (written, or queued behind a full socket
 * buffer): what the access log and the metrics see. Valid during the call.
 */
struct server_sent {
    const struct http_response *r; /* status, route, method, path, request id, user */
    uint64_t bytes;                /* head, header lines and body */
    uint64_t ns;                   /* from the read of the request's first byte to now */
    uint8_t family;                /* the peer: 4, 6, or 0 for the local Unix socket */
    const uint8_t *addr;           /* network order */
};
typedef void (*server_sent_cb)(void *ctx, const struct server_sent *s);

/* Why a connection was refused (the /metrics label of each). */
#define SERVER_REFUSAL_MAP(X)                                                                      \
    X(CAP, "cap")                   /* --max-connections, nothing idle or half-sent to close */    \
    X(PER_ADDRESS, "per_address")   /* --max-connections-per-address */                            \
    X(PEER_UNKNOWN, "peer_unknown") /* a TCP peer whose address cannot be read (reset) */          \
    X(PEER_CREDENTIALS, "peer_credentials") /* admin socket: another uid than ours or root */

enum server_refusal {
#define X(e, label) SERVER_REFUSED_##e,
    SERVER_REFUSAL_MAP(X)
#undef X
        SERVER_REFUSALS
};
/* The /metrics label of a refusal, e.g. "per_address". */
const char *server_refusal_label(enum server_refusal r);

struct conn;
struct server_kit;
struct server_state;
struct server_slab;

/* An intrusive circular list (a sentinel in struct server, a node per connection). */
struct server_link {
    struct server_link *prev, *next;
};

#define SERVER_MAX_BATCH 32 /* responses per writev */

struct server {
    uv_loop_t *loop;
    struct server_settings set; /* a copy (server_start) */
    struct http_limits limits;
    struct server_handler handler;
    uv_tcp_t listener;
    uv_pipe_t local; /* the local listener (a Unix socket), if has_local */
    bool has_local;
    uv_timer_t shutdown_timer;
    uv_timer_t drain_timer;       /* the drain window (server_drain) */
    uv_timer_t sweep_timer;       /* gives back idle memory; runs while there is some */
    struct server_link conns;     /* every open connection */
    struct server_link idle;      /* idle connections, longest idle first */
    struct server_link warm;      /* idle connections still holding a handler state, oldest first */
    struct server_link lingering; /* closing connections draining input, oldest first */
    struct server_link resumes;   /* connections whose parse resumes on the next loop turn */
    uv_idle_t resume_idle;        /* ... runs them, while there are some */
    struct server_link free_conns;  /* free connection slots (of srv->slabs) */
    struct server_slab *slabs;      /* connection slots are allocated in slabs */
    struct server_kit *kits;        /* free kits (LIFO) */
    struct server_state *states;    /* free handler states (LIFO) */
    struct conn *waiting;           /* connections whose head response waits for an LSN */
    struct conn *completing;        /* the connection inside on_complete, else NULL */
    uint8_t deferred;               /* ... the state its slot takes (enum slot_state,
                                     * server_internal.h): ready, or deferred (server_defer*) */
    uint32_t nconns;                /* open, closing ones included */
    uint32_t nclosing;              /* uv_close called, callback still to come */
    uint32_t nrejecting;            /* refused over the cap, 503 sent, still draining */
    uint32_t nkits, kits_low;       /* free kits; fewest since the last sweep */
    uint32_t nstates, states_low;   /* free handler states; fewest since the last sweep */
    uint32_t nfree_conns, free_low; /* free connection slots; fewest since the last sweep */
    uint32_t nslots;                /* response slots per kit: max_pipeline + 1 */
    uint32_t nparked;               /* connections parked on a deferred answer */
    size_t freed_bytes;             /* freed since the last malloc_trim, roughly */
    uint64_t acked_lsn;             /* responses with lsn <= this may leave */
    server_sent_cb on_sent;         /* each response handed to the socket, or NULL */
    void *sent_ctx;
    char rid_text[32];  /* the last generated request id: rid_prefix, '-', a count in hex */
    uint8_t rid_len;    /* its length; 0: none made yet */
    char rid_prefix[9]; /* 8 random hex digits per process */
    bool draining;      /* server_drain: in the window, before server_shutdown */
    bool shutting_down;
    void (*on_drained)(struct server *srv); /* shutdown: every connection closed */
    char *scratch;                          /* reads of idle and draining connections land here */
    uv_buf_t iov[3 * SERVER_MAX_BATCH + 1]; /* the batch being written (used only inside a flush):
                                             * 3 per response, and a 100 Continue's rest */
    char bound[96];                         /* "HOST:PORT" actually listened on */
    struct net_counts per_addr;             /* open TCP connections by client key */
    struct net_block exempt[16];            /* --trusted-proxies: no per-address cap */
    uint32_t nexempt;
    uint64_t stats_refused[SERVER_REFUSALS]; /* connections refused, by enum server_refusal */
    uint64_t stats_evicted_half_sent;        /* busy connections closed at the cap */
    uint64_t stats_drain_closed;             /* connections closed after an answer in a drain */
};

/*
 * Binds and listens on set->listen. set and handler are copied (set's
 * strings are read here only); handler->data is borrowed and must outlive
 * the server. Returns 0 or a negative libuv error.
 */
int server_start(struct server *srv, uv_loop_t *loop, const struct server_settings *set,
                 const struct server_handler *handler);
/*
 * Also listens on a Unix socket at path, for local tools (the admin API).
 * The socket is private from its first moment: it is bound inside a new
 * directory of mode 0700 beside path, made 0600 there, and only then
 * renamed to path. A client is served only if its credentials (SO_PEERCRED)
 * are the server's own uid or root. Its requests have req->peer.local set.
 * Returns 0 or a negative libuv error.
 */
int server_listen_local(struct server *srv, const char *path);

/*
 * Answering later (work on the threadpool): during on_complete, the handler
 * takes a ticket for its response and returns without filling it. The
 * response keeps its place in the connection's order; later responses on
 * the connection wait behind it. When the work is done, server_deferred
 * gives the response to fill, or NULL if the connection closed meanwhile
 * (the client left, a timeout, shutdown): then the answer is dropped. After
 * filling it, server_deferred_done sends it in turn. A ticket is used once.
 *
 * server_defer_park is for long waits (the change feed's ?wait): while the
 * deferred response is its connection's only work (nothing unparsed, nothing
 * else queued or being written), the connection parks: it gives back its
 * kit (read buffer and response slots) and its handler state, and keeps only
 * a compact copy of the request's facts (method, path, request id, route,
 * user, start time, flags: about 64 bytes). server_deferred then takes a kit
 * again and gives a response that holds those facts and nothing else the
 * handler set before deferring (status 200, no header lines, empty body):
 * the handler fills it whole. So a handler parks only an answer that needs
 * neither what it put in the response before deferring nor the connection's
 * handler state (which may have been reset and lent to another connection).
 */
struct server_ticket {
    struct conn *c;
    uint32_t gen; /* the connection's, when the ticket was taken */
    uint32_t id;  /* which of its deferred responses */
};
struct server_ticket server_defer(struct server *srv, struct http_response *r);
struct server_ticket server_defer_park(struct server *srv, struct http_response *r);
struct http_response *server_deferred(struct server *srv, struct server_ticket t);
void server_deferred_done(struct server *srv, struct server_ticket t);
/* Whether t's connection is still open and waits for its answer: server_deferred would
 * give a response (it takes nothing: no kit, no ticket). */
bool server_ticket_live(const struct server *srv, struct server_ticket t);
/* Whether t's client has left or sent its EOF (a close(), or a half-close): nobody waits
 * for the answer, or its client sends nothing more (no side effect). */
bool server_ticket_client_left(const struct server *srv, struct server_ticket t);

/* Calls cb(ctx, ...) for every response handed to the socket from now on (NULL: none). */
void server_on_sent(struct server *srv, server_sent_cb cb, void *ctx);

/* The store acknowledged every LSN <= lsn: send what waited for it. */
void server_acked(struct server *srv, uint64_t lsn);
/* Writes of LSNs > lsn failed: their waiting responses become 503 storage_error. */
void server_fail_after(struct server *srv, uint64_t lsn);
/*
 * Stops accepting, lets requests in flight finish (at most
 * shutdown_timeout_ms), closes every connection, then calls on_drained.
 */
void server_shutdown(struct server *srv, void (*on_drained)(struct server *srv));
/*
 * Graceful drain (the "lame duck"): for ms, the server keeps accepting and
 * serving, but every response carries Connection: close and its connection
 * ends once it is written; idle keep-alive connections stay open (a
 * balancer may still send on them: they get their answer, with close).
 * server_draining() says so to the handler (/healthz answers 503). When the
 * window ends, server_shutdown(srv, on_drained) runs; calling it earlier
 * ends the window at once. ms 0 is server_shutdown now.
 */
void server_drain(struct server *srv, uint64_t ms, void (*on_drained)(struct server *srv));
/* In a drain window (server_drain, not yet shut down). */
bool server_draining(const struct server *srv);
/* Draining or shutting down: what /healthz and eventd_draining report, to the end. */
bool server_stopping(const struct server *srv);
/* The drain window's milliseconds left, or UINT64_MAX outside a drain window. */
uint64_t server_drain_left_ms(const struct server *srv);
/* Frees the free lists and connection slots (after the loop has closed every connection),
 * then tells the handler (on_server_gone). */
void server_destroy(struct server *srv);

#endif
