/*
 * server: the listening socket and the connections on one libuv loop:
 * reads fed to the HTTP parser, the per-connection queue of responses (kept
 * in request order for pipelining), back-pressure, timeouts, the connection
 * cap and graceful shutdown.
 *
 * The server knows nothing of routes or records: it hands each request to
 * the app through struct server_app, and the app fills the response. A
 * response can carry an LSN; it leaves only once the app has told the
 * server (server_acked) that the store acknowledged that LSN, so replies
 * never get ahead of durability, and replies on one connection never
 * overtake each other.
 *
 * Ownership: the server owns its connections; a connection is freed (to a
 * pool) only in its uv_close callback.
 */
#ifndef EVENTD_SERVER_H
#define EVENTD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "http.h"

enum server_headers_result {
    SERVER_READ_BODY, /* the app wants the body (on_body, then on_complete) */
    SERVER_ANSWERED,  /* the app filled the response; the body is discarded */
};

struct server_app {
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
};

struct conn;

struct server {
    uv_loop_t *loop;
    const struct config *cfg;
    struct http_limits limits;
    struct server_app app;
    uv_tcp_t listener;
    uv_timer_t shutdown_timer;
    struct conn *conns;   /* every open connection (doubly linked) */
    struct conn *pool;    /* closed connections kept for reuse */
    struct conn *waiting; /* connections whose head response waits for an LSN */
    uint32_t nconns;
    uint32_t npool;
    uint64_t acked_lsn; /* responses with lsn <= this may leave */
    bool shutting_down;
    void (*on_drained)(struct server *srv); /* shutdown: every connection closed */
    char bound[96];                         /* "HOST:PORT" actually listened on */
};

/* Binds and listens on cfg->listen. Returns 0 or a negative libuv error. */
int server_start(struct server *srv, uv_loop_t *loop, const struct config *cfg,
                 const struct server_app *app);
/* The store acknowledged every LSN <= lsn: send what waited for it. */
void server_acked(struct server *srv, uint64_t lsn);
/* Writes of LSNs > lsn failed: their waiting responses become 503 storage_error. */
void server_fail_after(struct server *srv, uint64_t lsn);
/*
 * Stops accepting, lets requests in flight finish (at most
 * cfg->shutdown_timeout_ms), closes every connection, then calls on_drained.
 */
void server_shutdown(struct server *srv, void (*on_drained)(struct server *srv));
/* Frees the pooled connections (after the loop has closed everything). */
void server_destroy(struct server *srv);

#endif
