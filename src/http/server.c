/*
 * server: see server.h; how its files divide the work: server_internal.h.
 *
 * This file: the listener, accepting connections within the cap (evicting
 * the longest-idle one, or answering 503), closing connections, and the
 * public API.
 */
#include "http/server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "http/server_internal.h"

#define SHUTDOWN_ACCEPT_MAX 4096 /* connections accepted from the backlog at shutdown */
#define SHUTDOWN_GRACE_MS 250    /* an idle connection may still bring a request this long */

/* ---- connection lifecycle ---- */

static void unwait(struct conn *c) {
    if (!c->in_waiting) return;
    struct conn **p = &c->srv->waiting;
    while (*p && *p != c)
        p = &(*p)->next_waiting;
    if (*p) *p = c->next_waiting;
    c->in_waiting = false;
}

static void on_closed(uv_handle_t *h) {
    struct conn *c = h->data;
    if (--c->pending_closes > 0) return;
    struct server *srv = c->srv;
    conn_release(c);
    srv->nconns--;
    srv->nclosing--;
    if (srv->shutting_down && srv->nconns == 0 && srv->on_drained) {
        void (*cb)(struct server *) = srv->on_drained;
        srv->on_drained = NULL;
        uv_timer_stop(&srv->shutdown_timer);
        cb(srv);
    }
}

void conn_close(struct conn *c) {
    if (c->closing) return;
    c->closing = true;
    c->srv->nclosing++;
    if (c->counted) net_counts_remove(&c->srv->per_addr, c->peer_key);
    c->counted = false;
    unwait(c);
    conn_list_leave(c);
    q_remove(&c->rlink);
    c->pending_closes = 2;
    uv_close(&c->io.handle, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

/*
 * A connection refused over the cap. Its 503 is written at once; the client
 * may already have sent a request, and closing with those bytes unread would
 * make the kernel send a reset that can destroy the 503 before it is read.
 * So, like an error answer (lingering close), it shuts down its sending side
 * and drains what comes for a short, bounded while, then closes. At most
 * REJECT_MAX are kept; past that a refused connection is closed at once.
 */
#define REJECT_MAX 64         /* refused connections draining at once */
#define REJECT_LINGER_MS 1000 /* ... each for at most this long */

struct rejected {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    struct server *srv;
    int pending_closes;
};

static void on_reject_closed(uv_handle_t *h) {
    struct rejected *rj = h->data;
    if (--rj->pending_closes > 0) return;
    rj->srv->nrejecting--;
    free(rj);
}

static void reject_close(struct rejected *rj) {
    if (uv_is_closing((uv_handle_t *)&rj->tcp)) return;
    uv_close((uv_handle_t *)&rj->tcp, on_reject_closed);
    uv_close((uv_handle_t *)&rj->timer, on_reject_closed);
}

static void on_reject_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    static char discard[4096]; /* what a refused client sends is read and dropped */
    *b = uv_buf_init(discard, sizeof discard);
}

static void on_reject_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    if (n < 0) reject_close(s->data); /* EOF: the client has read the 503 and closed */
}

static void on_reject_shutdown(uv_shutdown_t *req, int status) {
    struct rejected *rj = req->data;
    if (status < 0 || uv_read_start((uv_stream_t *)&rj->tcp, on_reject_alloc, on_reject_read) < 0)
        reject_close(rj);
}

static void on_reject_timer(uv_timer_t *t) {
    reject_close(t->data);
}

/*
 * Over the connection cap with nothing idle: a short 503 (the error
 * envelope every answer uses) if the socket takes it, then a bounded drain
 * and close.
 */
static void reject(struct server *srv) {
    struct rejected *rj = xcalloc(1, sizeof *rj);
    rj->srv = srv;
    rj->tcp.data = rj->timer.data = rj->shut.data = rj;
    rj->pending_closes = 2;
    srv->nrejecting++;
    uv_tcp_init(srv->loop, &rj->tcp);
    uv_timer_init(srv->loop, &rj->timer);
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&rj->tcp) < 0) {
        reject_close(rj);
        return;
    }
    struct http_response r;
    http_response_init(&r);
    http_response_error(&r, ERR_UNAVAILABLE, NULL, "too many open connections (--max-connections)");
    r.extra = "Retry-After: 1\r\n";
    server__request_id_make(srv, &r);
    http_response_finish(&r, false);
    /* A best-effort write: a fresh socket's buffer takes this whole. */
    uv_buf_t b[2] = {uv_buf_init(r.head, r.head_len),
                     uv_buf_init(r.body.ptr, (unsigned)r.body.len)};
    uv_try_write((uv_stream_t *)&rj->tcp, b, 2);
    http_response_destroy(&r);
    if (srv->nrejecting > REJECT_MAX || srv->shutting_down ||
        uv_shutdown(&rj->shut, (uv_stream_t *)&rj->tcp, on_reject_shutdown) < 0) {
        reject_close(rj);
        return;
    }
    uv_timer_start(&rj->timer, on_reject_timer, REJECT_LINGER_MS, 0);
}

/*
 * A half-sent request: the connection is inside a request whose headers or
 * body are still coming, with no earlier answer queued before it.
 */
static bool half_sent(const struct conn *c) {
    if (!conn_in_request(c) || c->draining) return false;
    return c->count == 0 || (c->count == 1 && c->cur && c->cur == slot_at((struct conn *)c, 0));
}

/* The connection whose half-sent request started first, if that was at least
 * --evict-half-sent-ms ago, or NULL. O(connections): only at the cap with nothing idle. */
static struct conn *oldest_half_sent(struct server *srv) {
    struct conn *best = NULL;
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        if (!c->closing && half_sent(c) && (!best || c->req_start < best->req_start)) best = c;
    }
    uint64_t min_age = srv->set.evict_half_sent_ms;
    if (best && uv_now(srv->loop) - best->req_start < min_age) return NULL;
    return best;
}

static bool at_cap(const struct server *srv) {
    return srv->nconns - srv->nclosing >= srv->set.max_connections;
}

/* A connection make_room would close, or NULL. */
static struct conn *room_victim(struct server *srv) {
    struct server_link *q = !q_empty(&srv->lingering) ? &srv->lingering : &srv->idle;
    if (!q_empty(q)) return CONN_OF(q->next, ilink);
    return oldest_half_sent(srv);
}

/*
 * At the cap, make room as nginx reuses idle keep-alive connections: close
 * the oldest lingering connection, else the longest-idle one, else the one
 * whose request has been arriving the longest, if for --evict-half-sent-ms
 * at least (slow clients holding their slots with half-sent requests must
 * not keep new clients out; a request that just started is left alone). Returns
 * false if every connection is busy with a complete request. Closing ones
 * no longer count.
 */
static bool make_room(struct server *srv) {
    if (!at_cap(srv)) return true;
    struct conn *c = room_victim(srv);
    if (!c) return false;
    if (c->lingering || !conn_in_request(c)) {
        LOG(LOG_DEBUG, "at --max-connections %u: closing a %s connection (idle %llu ms)",
            srv->set.max_connections, c->lingering ? "lingering" : "idle",
            (unsigned long long)(uv_now(srv->loop) - c->idle_at));
    } else {
        LOG(LOG_DEBUG, "at --max-connections %u: closing a half-sent request (%llu ms old)",
            srv->set.max_connections, (unsigned long long)(uv_now(srv->loop) - c->req_start));
        srv->stats_evicted_half_sent++;
    }
    conn_close(c);
    return true;
}

/*
 * Records who is connected, for the handler (throttling, trusted proxies)
 * and the per-address cap. A TCP peer whose address cannot be read (it
 * reset the connection before we accepted it) is not served: false.
 */
static bool note_peer(struct conn *c, bool local) {
    struct http_peer *peer = &c->peer;
    memset(peer, 0, sizeof *peer);
    peer->local = local;
    if (local) return true;
    struct sockaddr_storage sa;
    int len = sizeof sa;
    if (uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)&sa, &len) < 0) return false;
    if (sa.ss_family == AF_INET) {
        peer->family = 4;
        memcpy(peer->addr, &((struct sockaddr_in *)&sa)->sin_addr, 4);
    } else if (sa.ss_family == AF_INET6) {
        peer->family = 6;
        memcpy(peer->addr, &((struct sockaddr_in6 *)&sa)->sin6_addr, 16);
    } else {
        return false;
    }
    return true;
}

/* A local client is served only with our own uid, or root's. */
static bool peer_credentials_ok(struct conn *c) {
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno(&c->io.handle, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return false;
    return cred.uid == geteuid() || cred.uid == 0;
}

enum peer_verdict { PEER_ADMITTED, PEER_OVER_CAP, PEER_OVER_CAP_TWICE };

/*
 * Counts c under its client's key. A client at its cap is refused, with a
 * 503 that lingers until it is read: that connection is counted too, so one
 * address holds at most its cap again in refusals, and past that it is
 * closed at once (review, 2026-11-29: 3,000 connects of one address held
 * 3,000 sockets for --linger-ms).
 */
static enum peer_verdict count_peer(struct server *srv, struct conn *c) {
    const struct http_peer *peer = &c->peer;
    uint32_t cap = srv->set.max_connections_per_address;
    if (cap == 0) return PEER_ADMITTED;
    for (uint32_t i = 0; i < srv->nexempt; i++)
        if (net_block_contains(&srv->exempt[i], peer->family, peer->addr)) return PEER_ADMITTED;
    net_client_key(peer->family, peer->addr, c->peer_key);
    uint32_t n = net_counts_get(&srv->per_addr, c->peer_key);
    if (n >= 2 * (uint64_t)cap) return PEER_OVER_CAP_TWICE;
    net_counts_add(&srv->per_addr, c->peer_key);
    c->counted = true;
    return n >= cap ? PEER_OVER_CAP : PEER_ADMITTED;
}

/* A connection slot for a new client (over the cap only when told to). */
static struct conn *conn_new(struct server *srv, bool local) {
    struct conn *c = server__conn_get(srv);
    if (local)
        uv_pipe_init(srv->loop, &c->io.pipe, 0);
    else
        uv_tcp_init(srv->loop, &c->io.tcp);
    uv_timer_init(srv->loop, &c->timer);
    q_push(&srv->conns, &c->link);
    srv->nconns++;
    return c;
}

/* Closes a connection refused before its first byte was read, and counts why. */
static void refuse(struct conn *c, enum server_refusal why) {
    c->srv->stats_refused[why]++;
    LOG(LOG_DEBUG, "connection refused: %s", server_refusal_label(why));
    conn_close(c);
}

/*
 * Over its address's cap: a 503 naming the limit, then the connection
 * closes as after any error answer (lingering, so the client reads it).
 */
static void refuse_per_address(struct conn *c) {
    struct server *srv = c->srv;
    srv->stats_refused[SERVER_REFUSED_PER_ADDRESS]++;
    c->idle_since = uv_now(srv->loop);
    conn_wake(c, 0);
    c->kit->read_ns = uv_hrtime(); /* its duration counts from now: nothing was read */
    c->kit->parser.error = ERR_UNAVAILABLE;
    conn_answer_error(c);
    struct http_response *r = slot_at(c, c->count - 1);
    http_response_error(r, ERR_UNAVAILABLE, NULL,
                        "too many open connections from your address "
                        "(--max-connections-per-address)");
    r->extra = "Retry-After: 1\r\n";
    conn_arm_timer(c);
    conn_flush(c);
}

/* The client is connected: start serving it (or refuse it: see on_connection).
 * full: it came at --max-connections; room is made for it here, once it is
 * known to be admitted. */
static void conn_begin(struct conn *c, bool local, bool full) {
    if (!note_peer(c, local)) {
        refuse(c, SERVER_REFUSED_PEER_UNKNOWN);
        return;
    }
    if (local && !peer_credentials_ok(c)) {
        LOG(LOG_WARN, "admin socket: refused a client of another user (SO_PEERCRED)");
        refuse(c, SERVER_REFUSED_PEER_CREDENTIALS);
        return;
    }
    if (!local) {
        uv_tcp_nodelay(&c->io.tcp, 1);
        enum peer_verdict v = count_peer(c->srv, c);
        if (v != PEER_ADMITTED) {
            /* At the cap it is closed at once: its 503 would linger over the cap,
             * and no other client's connection is closed to make room for it. */
            if (full || v == PEER_OVER_CAP_TWICE)
                refuse(c, SERVER_REFUSED_PER_ADDRESS);
            else
                refuse_per_address(c);
            return;
        }
    }
    if (full) make_room(c->srv); /* c is not a candidate: not idle, no request yet */
    c->idle_since = uv_now(c->srv->loop);
    conn_start_reading(c);
    conn_arm_timer(c);
    conn_settle(c);
}

static void on_connection(uv_stream_t *l, int status) {
    struct server *srv = l->data;
    bool local = l == (uv_stream_t *)&srv->local;
    if (status < 0) {
        LOG(LOG_WARN, "accept: %s", uv_strerror(status));
        return;
    }
    if (srv->shutting_down) return;
    /* At the cap, room is made in conn_begin, for a client that is admitted: one
     * over its address's cap must not close another client's connection first. */
    bool full = at_cap(srv);
    if (full && !room_victim(srv)) {
        LOG(LOG_WARN, "connection refused: %u connections open, none idle (--max-connections)",
            srv->nconns);
        if (!local) {
            srv->stats_refused[SERVER_REFUSED_CAP]++;
            reject(srv);
            return;
        }
        /* The local socket's few clients (the CLI) are let in over the cap. */
        full = false;
    }
    struct conn *c = conn_new(srv, local);
    if (uv_accept(l, &c->io.stream) < 0) {
        conn_close(c);
        return;
    }
    conn_begin(c, local, full);
}

/*
 * Shutdown: the connections the kernel completed but we have not accepted
 * yet would be reset when the listener closes, after their clients may
 * have sent a request (a load balancer cannot tell whether a POST sent on
 * such a connection was processed, so it must not retry it). Accept them
 * all first, at most SHUTDOWN_ACCEPT_MAX, and serve them like the others.
 */
static void accept_backlog(struct server *srv) {
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&srv->listener, &fd) < 0) return;
    for (int i = 0; i < SHUTDOWN_ACCEPT_MAX; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) return;
        struct conn *c = conn_new(srv, false);
        if (uv_tcp_open(&c->io.tcp, cfd) < 0) {
            close(cfd);
            conn_close(c);
            continue;
        }
        conn_begin(c, false, false);
    }
}

/* Bytes from the client wait in the socket, unread. */
bool conn_has_input(struct conn *c) {
    uv_os_fd_t fd;
    int n = 0;
    return uv_fileno(&c->io.handle, &fd) == 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* ---- the server ---- */

int server_start(struct server *srv, uv_loop_t *loop, const struct server_settings *set,
                 const struct server_handler *handler) {
    memset(srv, 0, sizeof *srv);
    srv->loop = loop;
    srv->set = *set;
    srv->handler = *handler;
    srv->limits.max_header_bytes = set->max_header_bytes;
    srv->limits.max_body_bytes = set->max_body_bytes;
    srv->nslots = set->max_pipeline + 1;
    q_init(&srv->conns);
    q_init(&srv->idle);
    q_init(&srv->warm);
    q_init(&srv->lingering);
    q_init(&srv->resumes);
    q_init(&srv->free_conns);
    net_counts_init(&srv->per_addr);
    char why[160];
    int n = net_block_parse_list(set->trusted_proxies, srv->exempt,
                                 sizeof srv->exempt / sizeof srv->exempt[0], why, sizeof why);
    if (n < 0) return UV_EINVAL;
    srv->nexempt = (uint32_t)n;
    srv->scratch = xmalloc(READ_BUF_SIZE);
    /* Generated request ids: a random prefix keeps them apart across
     * processes and restarts; a counter, within the process. */
    uint8_t rnd[4] = {0};
    if (uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL) < 0) {
        uint64_t t = uv_hrtime() ^ (uint64_t)getpid() << 32;
        memcpy(rnd, &t, sizeof rnd);
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 4; i++) {
        srv->rid_prefix[2 * i] = hex[rnd[i] >> 4];
        srv->rid_prefix[2 * i + 1] = hex[rnd[i] & 15];
    }

    char host[256];
    int port, rc;
    struct sockaddr_storage sa;
    if (config_split_listen(set->listen, host, sizeof host, &port) < 0) return UV_EINVAL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0)
        return UV_EINVAL;
    uv_tcp_init(loop, &srv->listener);
    srv->listener.data = srv;
    uv_timer_init(loop, &srv->shutdown_timer);
    srv->shutdown_timer.data = srv;
    uv_timer_init(loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    uv_timer_init(loop, &srv->sweep_timer);
    srv->sweep_timer.data = srv;
    uv_idle_init(loop, &srv->resume_idle);
    srv->resume_idle.data = srv;
    /* The sweep alone never keeps the loop running. */
    uv_unref((uv_handle_t *)&srv->sweep_timer);
    if ((rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&sa, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&srv->listener, 1024, on_connection)) < 0) {
        /* A busy port is the common case: close what was opened, so that the loop
         * closes cleanly and the process says only why it could not listen. */
        uv_close((uv_handle_t *)&srv->listener, NULL);
        uv_close((uv_handle_t *)&srv->shutdown_timer, NULL);
        uv_close((uv_handle_t *)&srv->drain_timer, NULL);
        uv_close((uv_handle_t *)&srv->sweep_timer, NULL);
        uv_close((uv_handle_t *)&srv->resume_idle, NULL);
        free(srv->scratch);
        srv->scratch = NULL;
        return rc;
    }

    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&got, &len);
    char ip[48];
    if (got.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&got, ip, sizeof ip);
        snprintf(srv->bound, sizeof srv->bound, "[%s]:%d", ip,
                 ntohs(((struct sockaddr_in6 *)&got)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&got, ip, sizeof ip);
        snprintf(srv->bound, sizeof srv->bound, "%s:%d", ip,
                 ntohs(((struct sockaddr_in *)&got)->sin_port));
    }
    return 0;
}

static struct server_ticket defer(struct server *srv, struct http_response *r, uint8_t state) {
    struct conn *c = srv->completing;
    /* Only the response of the request being completed can be deferred. */
    if (!c || c->cur != r) abort();
    srv->deferred = state;
    if (state == SLOT_PARKABLE) c->may_park = true;
    uint32_t id = ++c->tickets;
    c->kit->ticket[(c->head + c->count - 1) % srv->nslots] = id;
    server__ticket_taken(c);
    return (struct server_ticket){c, c->gen, id};
}

struct server_ticket server_defer(struct server *srv, struct http_response *r) {
    return defer(srv, r, SLOT_DEFERRED);
}

struct server_ticket server_defer_park(struct server *srv, struct http_response *r) {
    return defer(srv, r, SLOT_PARKABLE);
}

/* The ring position of a deferred response, or -1 if the ticket is stale. A parked
 * connection takes a kit and gets its response back first (position 0). */
static int64_t ticket_slot(struct server_ticket t) {
    struct conn *c = t.c;
    if (c->gen != t.gen || c->closing) return -1;
    if (c->parked) {
        if (c->parked->ticket != t.id) return -1;
        conn_kit_get(c);
    }
    if (!c->kit) return -1;
    for (uint32_t i = 0; i < c->count; i++) {
        uint8_t st = *state_at(c, i);
        if ((st == SLOT_DEFERRED || st == SLOT_PARKABLE) &&
            c->kit->ticket[(c->head + i) % c->srv->nslots] == t.id)
            return i;
    }
    return -1;
}

bool server_ticket_live(const struct server *srv, struct server_ticket t) {
    (void)srv;
    struct conn *c = t.c; /* state_at takes it as it is: nothing is written */
    if (c->gen != t.gen || c->closing) return false;
    if (c->parked) return c->parked->ticket == t.id;
    if (!c->kit) return false;
    for (uint32_t i = 0; i < c->count; i++) {
        uint8_t st = *state_at(c, i);
        if ((st == SLOT_DEFERRED || st == SLOT_PARKABLE) &&
            c->kit->ticket[(c->head + i) % c->srv->nslots] == t.id)
            return true;
    }
    return false;
}

bool server_ticket_client_left(const struct server *srv, struct server_ticket t) {
    /* EOF: the client closed, or half-closed and may still read (on_read keeps its queued
     * answers); nothing tells the two apart without writing. */
    return !server_ticket_live(srv, t) || t.c->eof;
}

struct http_response *server_deferred(struct server *srv, struct server_ticket t) {
    (void)srv;
    int64_t i = ticket_slot(t);
    if (i >= 0) return slot_at(t.c, (uint32_t)i);
    server__ticket_used(t.c); /* the handler drops its answer: the ticket is done */
    return NULL;
}

void server_deferred_done(struct server *srv, struct server_ticket t) {
    (void)srv;
    int64_t i = ticket_slot(t);
    server__ticket_used(t.c);
    if (i < 0) return;
    if (*state_at(t.c, (uint32_t)i) == SLOT_PARKABLE) t.c->may_park = false;
    *state_at(t.c, (uint32_t)i) = SLOT_READY;
    conn_flush(t.c);
    conn_settle(t.c);
}

void server_on_sent(struct server *srv, server_sent_cb cb, void *ctx) {
    srv->on_sent = cb;
    srv->sent_ctx = ctx;
}

void server_acked(struct server *srv, uint64_t lsn) {
    if (lsn > srv->acked_lsn) srv->acked_lsn = lsn;
    struct conn *c = srv->waiting;
    srv->waiting = NULL;
    while (c) {
        struct conn *next = c->next_waiting;
        c->in_waiting = false;
        conn_flush(c);
        conn_settle(c);
        c = next;
    }
}

void server_fail_after(struct server *srv, uint64_t lsn) {
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        for (uint32_t i = 0; i < c->count; i++) {
            struct http_response *r = slot_at(c, i);
            if (*state_at(c, i) == SLOT_READY && r->lsn > lsn) {
                http_response_error(r, ERR_STORAGE, NULL, NULL);
                /* Nothing of the answer it replaces: a session's cookie, a cursor. */
                buf_reset(&r->headers);
                r->extra = "Retry-After: 1\r\n"; /* as every storage_error (README) */
                r->lsn = 0;
            }
        }
    }
    server_acked(srv, lsn);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        conn_flush(c);
        conn_settle(c);
    }
}

static void on_listener_closed(uv_handle_t *h) {
    (void)h;
}

static void on_shutdown_timeout(uv_timer_t *t) {
    struct server *srv = t->data;
    LOG(LOG_WARN, "shutdown: closing %u connection(s) still busy after %u ms", srv->nconns,
        srv->set.shutdown_timeout_ms);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next)
        conn_close(CONN_OF(q, link));
}

int server_listen_local(struct server *srv, const char *path) {
    /* Bound in a fresh directory of mode 0700 (mkdtemp), so that nobody else
     * can reach the socket between bind and chmod; the rename then puts it,
     * 0600 already, in place (replacing one left by a process that died: the
     * data directory's lock says no other server runs). */
    /* Both names must fit a socket's address: libuv cuts a longer one without a word,
     * and bound a socket under the cut name, outside the directory when the cut fell in
     * its path (review, 2026-11-29). The temporary name (".aXXXXXX/s") is no longer
     * than "admin.sock", so a path the CLI can reach is one the server can make. */
    char dir[4096], tmp[4096 + 8];
    const char *slash = strrchr(path, '/');
    int dlen = slash ? (int)(slash - path) : 1;
    size_t max = sizeof((struct sockaddr_un *)0)->sun_path - 1;
    if (snprintf(dir, sizeof dir, "%.*s/.aXXXXXX", dlen, slash ? path : ".") >= (int)sizeof dir ||
        strlen(path) > max || strlen(dir) + 2 > max)
        return UV_ENAMETOOLONG;
    if (!mkdtemp(dir)) return uv_translate_sys_error(errno);
    snprintf(tmp, sizeof tmp, "%s/s", dir);
    uv_pipe_init(srv->loop, &srv->local, 0);
    srv->local.data = srv;
    srv->has_local = true;
    int rc = uv_pipe_bind(&srv->local, tmp);
    if (rc == 0 && chmod(tmp, 0600) < 0) rc = uv_translate_sys_error(errno);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->local, 64, on_connection);
    if (rc == 0 && rename(tmp, path) < 0) rc = uv_translate_sys_error(errno);
    unlink(tmp); /* after a failure; gone already after the rename */
    rmdir(dir);
    return rc;
}

const char *server_refusal_label(enum server_refusal r) {
    static const char *const labels[] = {
#define X(e, label) label,
        SERVER_REFUSAL_MAP(X)
#undef X
    };
    return labels[r];
}

static void on_drain_end(uv_timer_t *t) {
    struct server *srv = t->data;
    LOG(LOG_INFO, "drain: window over (%llu connection(s) closed after their answer); stopping",
        (unsigned long long)srv->stats_drain_closed);
    server_shutdown(srv, srv->on_drained);
}

void server_drain(struct server *srv, uint64_t ms, void (*on_drained)(struct server *srv)) {
    if (srv->shutting_down || srv->draining) return;
    if (ms == 0) {
        server_shutdown(srv, on_drained);
        return;
    }
    srv->draining = true;
    srv->on_drained = on_drained;
    /* A connection with answers queued but not yet written (a parked one's
     * included) ends after the last of them, which says Connection: close.
     * Every other is left alone: a request in progress, or the next one, is
     * answered with close (on_complete), and an idle connection closes only
     * when the window is over. So is one whose queued answers are all in the
     * write already: they went out without close, and a balancer may reuse
     * the connection once they are read (a paused pipeline goes on with its
     * next request, which is answered with close). */
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        if (c->closing || c->lingering || c->close_after || (c->count == c->nwriting && !c->parked))
            continue;
        c->close_after = true;
        srv->stats_drain_closed++;
        conn_flush(c);
    }
    uv_timer_start(&srv->drain_timer, on_drain_end, ms, 0);
}

bool server_draining(const struct server *srv) {
    return srv->draining;
}

bool server_stopping(const struct server *srv) {
    return srv->draining || srv->shutting_down;
}

uint64_t server_drain_left_ms(const struct server *srv) {
    return srv->draining ? uv_timer_get_due_in(&srv->drain_timer) : UINT64_MAX;
}

void server_shutdown(struct server *srv, void (*on_drained)(struct server *srv)) {
    if (srv->shutting_down) return;
    uv_timer_stop(&srv->drain_timer);
    srv->draining = false;
    accept_backlog(srv);
    srv->shutting_down = true;
    srv->on_drained = on_drained;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    if (srv->has_local) uv_close((uv_handle_t *)&srv->local, on_listener_closed);
    uv_timer_stop(&srv->sweep_timer);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        if (!conn_in_request(c) && c->count == 0 && !c->parked) {
            /* Idle. A request may be on its way all the same: one already in
             * the socket, or one about to be sent on a connection that was
             * just opened or just answered. Such a connection gets a short
             * grace (its request is served, answered with Connection: close);
             * the others close now. */
            if (conn_has_input(c) || uv_now(srv->loop) - c->idle_since < SHUTDOWN_GRACE_MS)
                conn_timer_start(c, SHUTDOWN_GRACE_MS);
            else
                conn_close(c);
        } else {
            c->close_after = true;
            conn_flush(c);
        }
    }
    if (srv->nconns == 0) {
        srv->on_drained = NULL;
        on_drained(srv);
        return;
    }
    uv_timer_start(&srv->shutdown_timer, on_shutdown_timeout, srv->set.shutdown_timeout_ms, 0);
}

void server_destroy(struct server *srv) {
    server__pool_destroy(srv);
    if (srv->handler.on_server_gone) srv->handler.on_server_gone(srv->handler.data);
    net_counts_destroy(&srv->per_addr);
    free(srv->scratch);
    srv->scratch = NULL;
    if (!uv_is_closing((uv_handle_t *)&srv->shutdown_timer))
        uv_close((uv_handle_t *)&srv->shutdown_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&srv->sweep_timer))
        uv_close((uv_handle_t *)&srv->sweep_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&srv->drain_timer))
        uv_close((uv_handle_t *)&srv->drain_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&srv->resume_idle))
        uv_close((uv_handle_t *)&srv->resume_idle, NULL);
}
