/*
 * server: see server.h.
 *
 * Each connection has a fixed read buffer and a ring of response slots, one
 * per request between "headers parsed" and "response written". When the
 * ring holds max_pipeline responses the parser is paused on the message
 * boundary and the socket is no longer read: a client that pipelines
 * without reading answers gets TCP back-pressure instead of growing our
 * memory. The unparsed rest of the read buffer is kept and parsed when
 * slots free up.
 *
 * Ready responses at the head of the ring leave together in one uv_write
 * (a writev of head and body slices); the next batch starts when it
 * completes, so at most one write request per connection is in flight.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#define READ_BUF_SIZE (16 * 1024) /* bytes per connection; the kernel buffers the rest */
#define MAX_BATCH 32              /* responses per writev */

enum slot_state { SLOT_OPEN, SLOT_READY, SLOT_WRITING };

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    struct server *srv;
    struct conn *prev, *next;  /* srv->conns, or srv->pool */
    struct conn *next_waiting; /* srv->waiting */
    struct http_parser parser;
    char *rbuf;        /* READ_BUF_SIZE bytes */
    size_t roff, rlen; /* unparsed bytes are rbuf[roff, rlen) */
    struct http_response *slots;
    uint8_t *state;            /* enum slot_state per slot */
    uint32_t nslots;           /* max_pipeline + 1: one more for an error answer */
    uint32_t head, count;      /* ring */
    uint32_t nwriting;         /* slots in the write in flight */
    struct http_response *cur; /* slot of the request being parsed */
    uint64_t req_start;        /* uv_now() when the current request's first byte came */
    uint64_t deadline;         /* uv_now() when the current timeout expires */
    uint64_t timer_due;        /* uv_now() when the armed timer fires (<= deadline) */
    uint64_t idle_since;       /* uv_now() of the last request or write progress; reads
                                * that start no request (stray CRLFs) do not move it */
    int pending_closes;        /* uv_close callbacks still to come */
    bool timing;               /* req_start is set */
    bool reading;
    bool paused;      /* parser paused with unparsed bytes */
    bool close_after; /* close once every queued response is written */
    bool closing;     /* uv_close called */
    bool discard;     /* the app answered at headers time: drop the body */
    bool in_waiting;
    void *state_mem; /* the app's per-connection request state */
    uv_buf_t iov[2 * MAX_BATCH];
};

static void conn_close(struct conn *c);
static void answer_error(struct conn *c);
static void flush(struct conn *c);
static void parse_buffered(struct conn *c);
static void parse_some(struct conn *c);
static void start_reading(struct conn *c);

static struct http_response *slot_at(struct conn *c, uint32_t i) {
    return &c->slots[(c->head + i) % c->nslots];
}

static uint8_t *state_at(struct conn *c, uint32_t i) {
    return &c->state[(c->head + i) % c->nslots];
}

static struct http_response *slot_push(struct conn *c) {
    if (c->count == c->nslots) return NULL;
    /* An empty ring starts over at slot 0, so a connection that does not
     * pipeline keeps reusing one slot whose buffers stay in cache. */
    if (c->count == 0) c->head = 0;
    uint32_t i = c->count++;
    struct http_response *r = slot_at(c, i);
    http_response_reset(r);
    *state_at(c, i) = SLOT_OPEN;
    return r;
}

static uint32_t pipeline_max(const struct conn *c) {
    return c->nslots - 1;
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t);

static void arm_timer(struct conn *c) {
    if (c->closing) return;
    const struct config *cfg = c->srv->cfg;
    uint64_t now = uv_now(c->srv->loop), deadline;
    if (c->parser.in_message) {
        if (!c->timing) {
            c->timing = true;
            c->req_start = now;
        }
        deadline = c->req_start +
                   (c->parser.in_headers ? cfg->header_timeout_ms : cfg->request_timeout_ms);
    } else {
        deadline = c->idle_since + cfg->idle_timeout_ms;
    }
    /* Most calls only push the deadline later (each request moves the idle
     * deadline): leave a timer that fires earlier alone, and let on_timer
     * re-arm it, instead of restarting a timer per request. */
    c->deadline = deadline;
    if (uv_is_active((uv_handle_t *)&c->timer) && c->timer_due <= deadline) return;
    c->timer_due = deadline;
    uv_timer_start(&c->timer, on_timer, deadline > now ? deadline - now : 0, 0);
}

static void on_timer(uv_timer_t *t) {
    struct conn *c = t->data;
    uint64_t now = uv_now(c->srv->loop);
    if (now < c->deadline) {
        c->timer_due = c->deadline;
        uv_timer_start(&c->timer, on_timer, c->deadline - now, 0);
        return;
    }
    if (c->parser.in_message) {
        LOG(LOG_DEBUG, "connection timed out inside a request");
        if (c->count == 0 || (c->cur && c->count == 1 && c->cur == slot_at(c, 0))) {
            /* Nothing queued before it: say why before closing. */
            if (c->nwriting == 0) {
                c->parser.error = ERR_TIMEOUT;
                answer_error(c);
                flush(c);
                return;
            }
        }
        conn_close(c);
        return;
    }
    if (c->count > 0 && c->nwriting == 0) {
        /* Responses wait for the disk, not for the client: keep waiting. */
        c->deadline = c->timer_due = now + c->srv->cfg->idle_timeout_ms;
        uv_timer_start(&c->timer, on_timer, c->srv->cfg->idle_timeout_ms, 0);
        return;
    }
    conn_close(c);
}

/* ---- writing ---- */

static void on_write(uv_write_t *w, int status);

static bool slot_sendable(struct conn *c, uint32_t i) {
    return *state_at(c, i) == SLOT_READY && slot_at(c, i)->lsn <= c->srv->acked_lsn;
}

static void wait_for_ack(struct conn *c) {
    if (c->in_waiting) return;
    c->in_waiting = true;
    c->next_waiting = c->srv->waiting;
    c->srv->waiting = c;
}

/* Collects the sendable responses at the head of the ring into c->iov; returns
 * how many, and the number of buffers in *nbuf. */
static uint32_t collect(struct conn *c, unsigned *nbuf) {
    uint32_t n = 0;
    unsigned nb = 0;
    while (n < c->count && n < MAX_BATCH && slot_sendable(c, n)) {
        struct http_response *r = slot_at(c, n);
        bool last_queued = n + 1 == c->count && !c->parser.in_message;
        bool keep = !r->close && !(c->close_after && last_queued);
        if (!keep) r->close = true;
        http_response_finish(r, keep);
        c->iov[nb++] = uv_buf_init(r->head, r->head_len);
        if (!r->no_body && r->body.len)
            c->iov[nb++] = uv_buf_init(r->body.ptr, (unsigned)r->body.len);
        *state_at(c, n) = SLOT_WRITING;
        n++;
        if (r->close) break;
    }
    if (n < c->count && *state_at(c, n) == SLOT_READY && !slot_sendable(c, n)) wait_for_ack(c);
    *nbuf = nb;
    return n;
}

/* The responses being written have left. Returns false if the connection closed. */
static bool written(struct conn *c, int status) {
    uint32_t n = c->nwriting;
    bool close = false;
    for (uint32_t i = 0; i < n; i++)
        if (slot_at(c, i)->close) close = true;
    c->head = (c->head + n) % c->nslots;
    c->count -= n;
    c->nwriting = 0;
    c->idle_since = uv_now(c->srv->loop);
    if (c->closing) return false;
    if (status < 0 || close) {
        conn_close(c);
        return false;
    }
    if (c->paused && c->count < pipeline_max(c) && !c->close_after) {
        c->paused = false;
        http_parser_resume(&c->parser);
        parse_buffered(c);
    } else if (!c->parser.in_message) {
        arm_timer(c);
    }
    return true;
}

/*
 * Sends what is sendable. Most responses fit the socket buffer, so a
 * uv_try_write (one writev) finishes them at once; only a remainder goes
 * through uv_write and waits for the socket to drain.
 */
static void flush(struct conn *c) {
    while (!c->closing && !c->nwriting) {
        unsigned nbuf;
        uint32_t n = collect(c, &nbuf);
        if (n == 0) {
            if (c->count == 0 && c->close_after && !c->parser.in_message) conn_close(c);
            return;
        }
        c->nwriting = n;
        size_t total = 0;
        for (unsigned i = 0; i < nbuf; i++)
            total += c->iov[i].len;
        int w = uv_try_write((uv_stream_t *)&c->tcp, c->iov, nbuf);
        if (w == (int)total) {
            if (!written(c, 0)) return;
            continue;
        }
        if (w < 0 && w != UV_EAGAIN) {
            written(c, w);
            return;
        }
        unsigned first = 0;
        for (size_t done = w > 0 ? (size_t)w : 0; done;) {
            size_t take = done < c->iov[first].len ? done : c->iov[first].len;
            c->iov[first].base += take;
            c->iov[first].len -= take;
            done -= take;
            if (c->iov[first].len == 0) first++;
        }
        if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, c->iov + first, nbuf - first, on_write) < 0)
            written(c, UV_EPIPE);
        return;
    }
}

static void on_write(uv_write_t *w, int status) {
    struct conn *c = w->data;
    if (written(c, status)) flush(c);
}

/* ---- parser events ---- */

static int on_headers(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = slot_push(c);
    c->cur = r;
    r->http10 = req->version_minor == 0;
    c->discard = srv->app.on_headers(srv->app.data, c->state_mem, req, r) == SERVER_ANSWERED;
    if (c->discard && req->expect_continue && req->has_body) {
        /* The client waits for "100 Continue" before sending the body: answer
         * now and close, rather than read a body that may never come. */
        r->close = true;
        return 1;
    }
    if (!c->discard && req->expect_continue && req->has_body && req->version_minor >= 1 &&
        c->count == 1 && c->nwriting == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
        /* Nothing else is queued, so this cannot overtake a response. If the
         * socket is full the client will send the body after its own timeout. */
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
    arm_timer(c); /* the header deadline ends; the request deadline begins */
    return 0;
}

static void on_body(void *owner, struct http_request *req, const char *ptr, size_t len) {
    struct conn *c = owner;
    if (!c->discard) c->srv->app.on_body(c->srv->app.data, c->state_mem, ptr, len);
}

static bool on_complete(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = c->cur;
    if (!c->discard) srv->app.on_complete(srv->app.data, c->state_mem, req, r);
    c->discard = false;
    c->cur = NULL;
    c->timing = false;
    c->idle_since = uv_now(srv->loop);
    if (!req->keep_alive || srv->shutting_down) {
        r->close = true;
        c->close_after = true;
    }
    *state_at(c, c->count - 1) = SLOT_READY;
    return c->close_after || c->count >= pipeline_max(c);
}

static const struct http_events events = {on_headers, on_body, on_complete};

/* ---- reading ---- */

/* Answers the request in progress (or a new slot) with parser.error, then closes. */
static void answer_error(struct conn *c) {
    struct http_response *r = c->cur ? c->cur : slot_push(c);
    if (c->parser.error != ERR_NONE) http_response_error(r, c->parser.error, NULL, NULL);
    r->close = true;
    *state_at(c, c->count - 1) = SLOT_READY;
    c->cur = NULL;
    c->close_after = true;
    c->parser.in_message = false;
    if (c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

static void parse_buffered(struct conn *c) {
    while (c->roff < c->rlen) {
        /* After "close" was decided no new request starts; one in progress finishes. */
        if (c->close_after && !c->parser.in_message) break;
        size_t used;
        enum http_status st =
            http_parser_execute(&c->parser, c->rbuf + c->roff, c->rlen - c->roff, &used);
        c->roff += used;
        if (st == HTTP_OK) break;
        if (st == HTTP_ERROR) {
            answer_error(c);
            break;
        }
        /* Paused on a message boundary: go on unless the ring is full. */
        if (c->close_after) break;
        if (c->count >= pipeline_max(c)) {
            c->paused = true;
            break;
        }
        http_parser_resume(&c->parser);
    }
    if (c->roff >= c->rlen) c->roff = c->rlen = 0;
    bool want_read = !c->paused && c->roff == c->rlen && (!c->close_after || c->parser.in_message);
    if (want_read && !c->reading && !c->closing) start_reading(c);
    if (!want_read && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    arm_timer(c);
}

static void parse_some(struct conn *c) {
    parse_buffered(c);
    flush(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    struct conn *c = h->data;
    /* Reads happen only when everything before has been parsed. */
    *b = uv_buf_init(c->rbuf, READ_BUF_SIZE);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    struct conn *c = s->data;
    if (nread == 0) return;
    if (nread < 0) {
        /* EOF or error. A client that half-closed after its requests still
         * gets the responses already queued; a request cut short gets none. */
        uv_read_stop(s);
        c->reading = false;
        if (nread != UV_EOF || c->parser.in_message || c->count == 0) {
            conn_close(c);
            return;
        }
        c->close_after = true;
        flush(c);
        return;
    }
    c->roff = 0;
    c->rlen = (size_t)nread;
    parse_some(c);
}

static void start_reading(struct conn *c) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
}

/* ---- connection lifecycle ---- */

static void list_remove(struct conn **head, struct conn *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void list_push(struct conn **head, struct conn *c) {
    c->prev = NULL;
    c->next = *head;
    if (*head) (*head)->prev = c;
    *head = c;
}

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
    list_remove(&srv->conns, c);
    srv->nconns--;
    list_push(&srv->pool, c);
    srv->npool++;
    if (srv->shutting_down && srv->nconns == 0 && srv->on_drained) {
        void (*cb)(struct server *) = srv->on_drained;
        srv->on_drained = NULL;
        uv_timer_stop(&srv->shutdown_timer);
        cb(srv);
    }
}

static void conn_close(struct conn *c) {
    if (c->closing) return;
    c->closing = true;
    unwait(c);
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

static struct conn *conn_get(struct server *srv) {
    struct conn *c = srv->pool;
    if (c) {
        list_remove(&srv->pool, c);
        srv->npool--;
    } else {
        c = xcalloc(1, sizeof *c);
        c->srv = srv;
        c->rbuf = xmalloc(READ_BUF_SIZE);
        c->nslots = srv->cfg->max_pipeline + 1;
        c->slots = xcalloc(c->nslots, sizeof *c->slots);
        c->state = xcalloc(c->nslots, 1);
        for (uint32_t i = 0; i < c->nslots; i++)
            http_response_init(&c->slots[i]);
        http_parser_init(&c->parser, &srv->limits, &events, c);
        c->state_mem = xcalloc(1, srv->app.state_size ? srv->app.state_size : 1);
        if (srv->app.state_init) srv->app.state_init(srv->app.data, c->state_mem);
    }
    http_parser_reset(&c->parser);
    c->roff = c->rlen = 0;
    c->head = c->count = c->nwriting = 0;
    c->cur = NULL;
    c->timing = c->reading = c->paused = c->close_after = c->closing = c->discard = false;
    c->in_waiting = false;
    c->tcp.data = c->timer.data = c->wreq.data = c;
    if (srv->app.state_reset) srv->app.state_reset(srv->app.data, c->state_mem);
    return c;
}

static void conn_free(struct server *srv, struct conn *c) {
    for (uint32_t i = 0; i < c->nslots; i++)
        http_response_destroy(&c->slots[i]);
    if (srv->app.state_destroy) srv->app.state_destroy(srv->app.data, c->state_mem);
    http_parser_destroy(&c->parser);
    free(c->state_mem);
    free(c->slots);
    free(c->state);
    free(c->rbuf);
    free(c);
}

static void on_reject_closed(uv_handle_t *h) {
    free(h);
}

/* Over the connection cap: a short 503 if the socket takes it, then close. */
static void reject(struct server *srv) {
    uv_tcp_t *t = xmalloc(sizeof *t);
    uv_tcp_init(srv->loop, t);
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)t) == 0) {
        static const char body[] = "{\"Status\":\"error\",\"Error\":{\"Code\":\"unavailable\","
                                   "\"Message\":\"too many open connections\"}}";
        char msg[512];
        int len = snprintf(msg, sizeof msg,
                           "HTTP/1.1 503 Service Unavailable\r\nDate: %s\r\n"
                           "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\nRetry-After: 1\r\n\r\n%s",
                           http_date(), sizeof body - 1, body);
        /* A best-effort write: a fresh socket's buffer takes this whole. */
        uv_buf_t b = uv_buf_init(msg, (unsigned)len);
        uv_try_write((uv_stream_t *)t, &b, 1);
    }
    uv_close((uv_handle_t *)t, on_reject_closed);
}

static void on_connection(uv_stream_t *l, int status) {
    struct server *srv = l->data;
    if (status < 0) {
        LOG(LOG_WARN, "accept: %s", uv_strerror(status));
        return;
    }
    if (srv->shutting_down) return;
    if (srv->nconns >= srv->cfg->max_connections) {
        LOG(LOG_WARN, "connection refused: %u connections open (--max-connections)", srv->nconns);
        reject(srv);
        return;
    }
    struct conn *c = conn_get(srv);
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    list_push(&srv->conns, c);
    srv->nconns++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->idle_since = uv_now(srv->loop);
    start_reading(c);
    arm_timer(c);
}

/* ---- server ---- */

int server_start(struct server *srv, uv_loop_t *loop, const struct config *cfg,
                 const struct server_app *app) {
    memset(srv, 0, sizeof *srv);
    srv->loop = loop;
    srv->cfg = cfg;
    srv->app = *app;
    srv->limits.max_header_bytes = cfg->max_header_bytes;
    srv->limits.max_body_bytes = cfg->max_body_bytes;

    char host[256];
    int port, rc;
    struct sockaddr_storage sa;
    if (config_split_listen(cfg->listen, host, sizeof host, &port) < 0) return UV_EINVAL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0)
        return UV_EINVAL;
    uv_tcp_init(loop, &srv->listener);
    srv->listener.data = srv;
    uv_timer_init(loop, &srv->shutdown_timer);
    srv->shutdown_timer.data = srv;
    if ((rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&sa, 0)) < 0) return rc;
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, 1024, on_connection)) < 0) return rc;

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

void server_acked(struct server *srv, uint64_t lsn) {
    if (lsn > srv->acked_lsn) srv->acked_lsn = lsn;
    struct conn *c = srv->waiting;
    srv->waiting = NULL;
    while (c) {
        struct conn *next = c->next_waiting;
        c->in_waiting = false;
        flush(c);
        c = next;
    }
}

void server_fail_after(struct server *srv, uint64_t lsn) {
    for (struct conn *c = srv->conns; c; c = c->next) {
        for (uint32_t i = 0; i < c->count; i++) {
            struct http_response *r = slot_at(c, i);
            if (*state_at(c, i) == SLOT_READY && r->lsn > lsn) {
                http_response_error(r, ERR_STORAGE, NULL, NULL);
                r->lsn = 0;
            }
        }
    }
    server_acked(srv, lsn);
    for (struct conn *c = srv->conns; c; c = c->next)
        flush(c);
}

static void on_listener_closed(uv_handle_t *h) {
    (void)h;
}

static void on_shutdown_timeout(uv_timer_t *t) {
    struct server *srv = t->data;
    LOG(LOG_WARN, "shutdown: closing %u connection(s) still busy after %u ms", srv->nconns,
        srv->cfg->shutdown_timeout_ms);
    for (struct conn *c = srv->conns; c; c = c->next)
        conn_close(c);
}

void server_shutdown(struct server *srv, void (*on_drained)(struct server *srv)) {
    if (srv->shutting_down) return;
    srv->shutting_down = true;
    srv->on_drained = on_drained;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    struct conn *next;
    for (struct conn *c = srv->conns; c; c = next) {
        next = c->next;
        if (!c->parser.in_message && c->count == 0) {
            conn_close(c);
        } else {
            c->close_after = true;
            flush(c);
        }
    }
    if (srv->nconns == 0) {
        srv->on_drained = NULL;
        on_drained(srv);
        return;
    }
    uv_timer_start(&srv->shutdown_timer, on_shutdown_timeout, srv->cfg->shutdown_timeout_ms, 0);
}

void server_destroy(struct server *srv) {
    struct conn *c;
    while ((c = srv->pool)) {
        list_remove(&srv->pool, c);
        conn_free(srv, c);
    }
    if (!uv_is_closing((uv_handle_t *)&srv->shutdown_timer))
        uv_close((uv_handle_t *)&srv->shutdown_timer, NULL);
}
