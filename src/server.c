/*
 * server: see server.h.
 *
 * A busy connection has a kit: a fixed read buffer and a ring of response
 * slots, one per request between "headers parsed" and "response written".
 * When the ring holds max_pipeline responses the parser is paused on the
 * message boundary and the socket is no longer read: a client that
 * pipelines without reading answers gets TCP back-pressure instead of
 * growing our memory. The unparsed rest of the read buffer is kept and
 * parsed when slots free up.
 *
 * Ready responses at the head of the ring leave together in one uv_write
 * (a writev of head and body slices); the next batch starts when it
 * completes, so at most one write request per connection is in flight.
 *
 * An idle connection has no kit: its reads land in the server's scratch
 * buffer and are copied into a kit taken then (a request is a few hundred
 * bytes). So a burst of closes (EOF on thousands of idle connections) takes
 * no kits. Connections go idle, and give their kit back, only at the end
 * of a libuv callback (settle), never while the parser or a write still
 * uses the kit.
 */
#include "server.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "log.h"

#define READ_BUF_SIZE (16 * 1024) /* bytes per kit; the kernel buffers the rest */
#define MAX_BATCH SERVER_MAX_BATCH
#define CONN_SLAB 64          /* connection slots per allocation: idle ones pack densely */
#define POOL_CAP 256          /* free kits and free app states kept at most */
#define BODY_KEEP (64 * 1024) /* a response body buffer larger than this is freed once sent */
#define HEADER_KEEP 4096      /* target/authorization buffers larger than this are freed */

enum slot_state { SLOT_OPEN, SLOT_READY, SLOT_WRITING };
enum conn_list { LIST_NONE, LIST_IDLE, LIST_LINGER };

/* What a connection needs only while it has a request in progress. */
struct server_kit {
    struct server_kit *next; /* srv->kits while free */
    uv_write_t wreq;
    struct buf target, authorization; /* the parser's, parked here while idle */
    struct http_response *slots;      /* srv->nslots */
    uint8_t *state;                   /* enum slot_state per slot */
    char rbuf[READ_BUF_SIZE];
};

/* The app's per-connection state, with the link of the free list before it. */
struct server_state {
    union {
        struct server_state *next; /* srv->states while free */
        max_align_t align;
    } h;
    unsigned char mem[];
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct server *srv;
    struct server_slab *slab;
    struct server_link link;   /* srv->conns while open, srv->free_conns while free */
    struct server_link ilink;  /* srv->idle or srv->lingering, as list says */
    struct server_link wlink;  /* srv->warm, when in_warm */
    struct conn *next_waiting; /* srv->waiting */
    struct server_kit *kit;    /* NULL while idle or lingering */
    struct server_state *app;  /* NULL until the first request and SERVER_SWEEP_MS after the last */
    struct http_response *cur; /* slot of the request being parsed */
    struct http_parser parser;
    uint64_t req_start;     /* uv_now() when the current request's first byte came */
    uint64_t deadline;      /* uv_now() when the current timeout expires */
    uint64_t timer_due;     /* uv_now() when the armed timer fires (<= deadline) */
    uint64_t idle_since;    /* uv_now() of the last request or write progress; reads
                             * that start no request (stray CRLFs) do not move it */
    uint64_t idle_at;       /* uv_now() when it went on srv->idle */
    uint64_t drained;       /* bytes read and discarded after an error answer */
    uint32_t roff, rlen;    /* unparsed bytes are kit->rbuf[roff, rlen) */
    uint32_t head, count;   /* ring */
    uint32_t nwriting;      /* slots in the write in flight */
    uint8_t list;           /* enum conn_list */
    uint8_t pending_closes; /* uv_close callbacks still to come */
    bool timing;            /* req_start is set */
    bool reading;
    bool paused;      /* parser paused with unparsed bytes */
    bool close_after; /* close once every queued response is written */
    bool closing;     /* uv_close called */
    bool discard;     /* the app answered at headers time: drop the body */
    bool in_waiting;
    bool in_warm;
    bool draining;  /* an error answer ends the connection: input is discarded */
    bool lingering; /* ... the answer is written, the write side shut down */
    bool eof;       /* the client shut down its side */
};

struct server_slab {
    struct server_slab *next;
    uint32_t nfree;
    struct conn conns[CONN_SLAB];
};

static void conn_close(struct conn *c);
static void answer_error(struct conn *c);
static void flush(struct conn *c);
static void parse_buffered(struct conn *c);
static void parse_some(struct conn *c);
static void start_reading(struct conn *c);
static void sweep_arm(struct server *srv);
static void on_sweep(uv_timer_t *t);

#define CONN_OF(p, field) ((struct conn *)((char *)(p)-offsetof(struct conn, field)))

/* ---- lists ---- */

static void q_init(struct server_link *q) {
    q->prev = q->next = q;
}

static bool q_empty(const struct server_link *q) {
    return q->next == q;
}

static void q_push(struct server_link *q, struct server_link *n) {
    n->next = q;
    n->prev = q->prev;
    q->prev->next = n;
    q->prev = n;
}

static void q_remove(struct server_link *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* ---- kits and app states ---- */

static struct server_kit *kit_new(struct server *srv) {
    struct server_kit *k = xmalloc(sizeof *k);
    k->next = NULL;
    k->slots = xcalloc(srv->nslots, sizeof *k->slots);
    k->state = xcalloc(srv->nslots, 1);
    for (uint32_t i = 0; i < srv->nslots; i++)
        http_response_init(&k->slots[i]);
    buf_init(&k->target, 256);
    buf_init(&k->authorization, 128);
    return k;
}

static void kit_free(struct server *srv, struct server_kit *k) {
    size_t bytes =
        sizeof *k + srv->nslots * (sizeof *k->slots + 1) + k->target.cap + k->authorization.cap;
    for (uint32_t i = 0; i < srv->nslots; i++) {
        bytes += k->slots[i].body.cap;
        http_response_destroy(&k->slots[i]);
    }
    buf_destroy(&k->target);
    buf_destroy(&k->authorization);
    free(k->slots);
    free(k->state);
    free(k);
    srv->freed_bytes += bytes;
}

/* A request starts: the connection gets a kit (the most recently used free one). */
static void kit_take(struct conn *c) {
    struct server *srv = c->srv;
    struct server_kit *k = srv->kits;
    if (k) {
        srv->kits = k->next;
        if (--srv->nkits < srv->kits_low) srv->kits_low = srv->nkits;
    } else {
        k = kit_new(srv);
    }
    c->kit = k;
    k->wreq.data = c;
    c->parser.req.target = k->target;
    c->parser.req.authorization = k->authorization;
    c->head = c->count = c->nwriting = 0;
    c->roff = c->rlen = 0;
}

/* Nothing queued, parsed or written any more: the kit goes back. */
static void kit_put(struct conn *c) {
    struct server *srv = c->srv;
    struct server_kit *k = c->kit;
    if (!k) return;
    c->kit = NULL;
    c->cur = NULL;
    c->head = c->count = c->nwriting = 0;
    c->roff = c->rlen = 0;
    k->target = c->parser.req.target;
    k->authorization = c->parser.req.authorization;
    c->parser.req.target = c->parser.req.authorization = (struct buf)BUF_INIT;
    /* A huge request head stays a rarity: do not keep its buffers around. */
    if (k->target.cap > HEADER_KEEP) {
        buf_destroy(&k->target);
        buf_init(&k->target, 256);
    }
    if (k->authorization.cap > HEADER_KEEP) {
        buf_destroy(&k->authorization);
        buf_init(&k->authorization, 128);
    }
    if (srv->nkits >= POOL_CAP) {
        kit_free(srv, k);
        return;
    }
    k->next = srv->kits;
    srv->kits = k;
    srv->nkits++;
    sweep_arm(srv);
}

static void state_free(struct server *srv, struct server_state *s) {
    if (srv->app.state_destroy) srv->app.state_destroy(srv->app.data, s->mem);
    free(s);
    srv->freed_bytes += sizeof *s + srv->app.state_size;
}

/* The app needs its state: the connection's own, or a free one reset for it. */
static void *state_get(struct conn *c) {
    struct server *srv = c->srv;
    if (c->app) return c->app->mem;
    struct server_state *s = srv->states;
    if (s) {
        srv->states = s->h.next;
        if (--srv->nstates < srv->states_low) srv->states_low = srv->nstates;
    } else {
        s = xcalloc(1, sizeof *s + (srv->app.state_size ? srv->app.state_size : 1));
        if (srv->app.state_init) srv->app.state_init(srv->app.data, s->mem);
    }
    /* It may have served another connection: nothing of that one may show. */
    if (srv->app.state_reset) srv->app.state_reset(srv->app.data, s->mem);
    c->app = s;
    return s->mem;
}

static void state_put(struct conn *c) {
    struct server *srv = c->srv;
    struct server_state *s = c->app;
    if (c->in_warm) {
        q_remove(&c->wlink);
        c->in_warm = false;
    }
    if (!s) return;
    c->app = NULL;
    /* Drop what it knows of this connection (its credentials) now, not at reuse. */
    if (srv->app.state_reset) srv->app.state_reset(srv->app.data, s->mem);
    if (srv->nstates >= POOL_CAP) {
        state_free(srv, s);
        return;
    }
    s->h.next = srv->states;
    srv->states = s;
    srv->nstates++;
    sweep_arm(srv);
}

/* ---- idle connections ---- */

static bool is_idle(const struct conn *c) {
    return !c->closing && !c->draining && !c->parser.in_message && c->count == 0 &&
           c->roff == c->rlen && !c->close_after;
}

static void list_leave(struct conn *c) {
    if (c->list != LIST_NONE) q_remove(&c->ilink);
    c->list = LIST_NONE;
    if (c->in_warm) {
        q_remove(&c->wlink);
        c->in_warm = false;
    }
}

/*
 * Called as each libuv callback that touched c returns: a connection with
 * nothing in progress gives its kit back and joins the idle list (and, if
 * it holds an app state, the warm list the sweep releases it from).
 */
static void settle(struct conn *c) {
    if (c->list != LIST_NONE || !is_idle(c)) return;
    struct server *srv = c->srv;
    kit_put(c);
    c->idle_at = uv_now(srv->loop);
    c->list = LIST_IDLE;
    q_push(&srv->idle, &c->ilink);
    if (c->app) {
        c->in_warm = true;
        q_push(&srv->warm, &c->wlink);
        sweep_arm(srv);
    }
}

/* Bytes arrived on an idle connection (in srv->scratch): a request starts. */
static void wake(struct conn *c, size_t n) {
    list_leave(c);
    kit_take(c);
    memcpy(c->kit->rbuf, c->srv->scratch, n);
}

static struct http_response *slot_at(struct conn *c, uint32_t i) {
    return &c->kit->slots[(c->head + i) % c->srv->nslots];
}

static uint8_t *state_at(struct conn *c, uint32_t i) {
    return &c->kit->state[(c->head + i) % c->srv->nslots];
}

static struct http_response *slot_push(struct conn *c) {
    if (c->count == c->srv->nslots) return NULL;
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
    return c->srv->nslots - 1;
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t);

static void arm_timer(struct conn *c) {
    if (c->closing || c->lingering) return;
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
    if (c->lingering) {
        LOG(LOG_DEBUG, "closing connection after lingering %u ms (%llu bytes discarded)",
            c->srv->cfg->linger_ms, (unsigned long long)c->drained);
        conn_close(c);
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
static void on_shutdown(uv_shutdown_t *req, int status);

static bool slot_sendable(struct conn *c, uint32_t i) {
    return *state_at(c, i) == SLOT_READY && slot_at(c, i)->lsn <= c->srv->acked_lsn;
}

static void wait_for_ack(struct conn *c) {
    if (c->in_waiting) return;
    c->in_waiting = true;
    c->next_waiting = c->srv->waiting;
    c->srv->waiting = c;
}

/* Collects the sendable responses at the head of the ring into srv->iov;
 * returns how many, and the number of buffers in *nbuf. */
static uint32_t collect(struct conn *c, unsigned *nbuf) {
    uv_buf_t *iov = c->srv->iov;
    uint32_t n = 0;
    unsigned nb = 0;
    while (n < c->count && n < MAX_BATCH && slot_sendable(c, n)) {
        struct http_response *r = slot_at(c, n);
        bool last_queued = n + 1 == c->count && !c->parser.in_message;
        bool keep = !r->close && !(c->close_after && last_queued);
        if (!keep) r->close = true;
        http_response_finish(r, keep);
        iov[nb++] = uv_buf_init(r->head, r->head_len);
        if (!r->no_body && r->body.len) iov[nb++] = uv_buf_init(r->body.ptr, (unsigned)r->body.len);
        *state_at(c, n) = SLOT_WRITING;
        n++;
        if (r->close) break;
    }
    if (n < c->count && *state_at(c, n) == SLOT_READY && !slot_sendable(c, n)) wait_for_ack(c);
    *nbuf = nb;
    return n;
}

/*
 * Every response is written and the connection ends. After an error answer
 * the client may still be sending (a body we refused): closing now, with
 * its bytes unread, would make the kernel send a reset that can destroy
 * the answer in the client's receive buffer. So shut down the write side
 * (the client sees the end of the answer) and read and discard for a
 * bounded time and byte count first, as nginx's lingering_close does.
 */
static void end_connection(struct conn *c) {
    struct server *srv = c->srv;
    if (!c->draining || c->eof || srv->cfg->linger_ms == 0 || srv->shutting_down) {
        conn_close(c);
        return;
    }
    uv_shutdown_t *req = xmalloc(sizeof *req);
    req->data = c;
    if (uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
        free(req);
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->close_after = false;
    kit_put(c);
    state_put(c);
    if (!c->reading) start_reading(c);
    if (!c->reading) {
        conn_close(c);
        return;
    }
    list_leave(c);
    c->list = LIST_LINGER;
    q_push(&srv->lingering, &c->ilink);
    c->deadline = c->timer_due = uv_now(srv->loop) + srv->cfg->linger_ms;
    uv_timer_start(&c->timer, on_timer, srv->cfg->linger_ms, 0);
}

/* The responses being written have left. Returns false if the connection closed. */
static bool written(struct conn *c, int status) {
    uint32_t n = c->nwriting;
    bool close = false;
    for (uint32_t i = 0; i < n; i++) {
        struct http_response *r = slot_at(c, i);
        if (r->close) close = true;
        /* A rare huge body (a long list) should not stay with the kit. */
        if (r->body.cap > BODY_KEEP) {
            c->srv->freed_bytes += r->body.cap;
            buf_destroy(&r->body);
        }
    }
    c->head = (c->head + n) % c->srv->nslots;
    c->count -= n;
    c->nwriting = 0;
    c->idle_since = uv_now(c->srv->loop);
    if (c->closing) return false;
    if (status < 0) {
        conn_close(c);
        return false;
    }
    if (close) {
        end_connection(c);
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
            if (c->count == 0 && c->close_after && !c->parser.in_message) end_connection(c);
            return;
        }
        c->nwriting = n;
        uv_buf_t *iov = c->srv->iov;
        size_t total = 0;
        for (unsigned i = 0; i < nbuf; i++)
            total += iov[i].len;
        int w = uv_try_write((uv_stream_t *)&c->tcp, iov, nbuf);
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
            size_t take = done < iov[first].len ? done : iov[first].len;
            iov[first].base += take;
            iov[first].len -= take;
            done -= take;
            if (iov[first].len == 0) first++;
        }
        /* uv_write copies the buffer array: srv->iov is free again on return. */
        if (uv_write(&c->kit->wreq, (uv_stream_t *)&c->tcp, iov + first, nbuf - first, on_write) <
            0)
            written(c, UV_EPIPE);
        return;
    }
}

static void on_write(uv_write_t *w, int status) {
    struct conn *c = w->data;
    if (written(c, status)) flush(c);
    settle(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    struct conn *c = req->data;
    free(req);
    /* UV_ECANCELED: the connection is closing already. */
    if (status < 0 && status != UV_ECANCELED) conn_close(c);
}

/* ---- parser events ---- */

static int on_headers(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = slot_push(c);
    c->cur = r;
    r->http10 = req->version_minor == 0;
    r->head_only = req->method == HTTP_HEAD;
    c->discard = srv->app.on_headers(srv->app.data, state_get(c), req, r) == SERVER_ANSWERED;
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
    if (!c->discard) c->srv->app.on_body(c->srv->app.data, c->app->mem, ptr, len);
}

static bool on_complete(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = c->cur;
    if (!c->discard) srv->app.on_complete(srv->app.data, c->app->mem, req, r);
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

/*
 * Answers the request in progress (or a new slot) with parser.error, then
 * closes. From here on the input is read and discarded (draining), so a
 * client still sending cannot fill the socket and block our answer.
 */
static void answer_error(struct conn *c) {
    struct http_response *r = c->cur ? c->cur : slot_push(c);
    if (c->parser.error != ERR_NONE) http_response_error(r, c->parser.error, NULL, NULL);
    r->close = true;
    *state_at(c, c->count - 1) = SLOT_READY;
    c->cur = NULL;
    c->close_after = true;
    c->draining = true;
    c->parser.in_message = false;
    c->roff = c->rlen;
    if (!c->reading && !c->eof) start_reading(c);
}

static void parse_buffered(struct conn *c) {
    while (c->roff < c->rlen) {
        /* After "close" was decided no new request starts; one in progress finishes. */
        if (c->close_after && !c->parser.in_message) break;
        size_t used;
        enum http_status st =
            http_parser_execute(&c->parser, c->kit->rbuf + c->roff, c->rlen - c->roff, &used);
        c->roff += (uint32_t)used;
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
    bool want_read = c->draining || (!c->paused && c->roff == c->rlen &&
                                     (!c->close_after || c->parser.in_message));
    if (want_read && !c->reading && !c->closing && !c->eof) start_reading(c);
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
    /* Reads happen only when everything before has been parsed. Idle and
     * draining connections have no read buffer of their own. */
    *b = uv_buf_init(c->kit && !c->draining ? c->kit->rbuf : c->srv->scratch, READ_BUF_SIZE);
}

/* Input after an error answer: counted and dropped. */
static void drain(struct conn *c, ssize_t nread) {
    if (nread == 0) return;
    if (nread < 0) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
        c->eof = true;
        /* Before the answer is out, it still goes (close_after is set). */
        if (c->lingering || nread != UV_EOF) conn_close(c);
        return;
    }
    c->drained += (uint64_t)nread;
    if (c->drained > c->srv->cfg->linger_bytes) {
        LOG(LOG_DEBUG, "closing connection: %llu bytes discarded after an error answer",
            (unsigned long long)c->drained);
        conn_close(c);
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    struct conn *c = s->data;
    if (c->draining) {
        drain(c, nread);
        return;
    }
    if (nread == 0) return;
    if (nread < 0) {
        /* EOF or error. A client that half-closed after its requests still
         * gets the responses already queued; a request cut short gets none. */
        uv_read_stop(s);
        c->reading = false;
        c->eof = true;
        if (nread != UV_EOF || c->parser.in_message || c->count == 0) {
            conn_close(c);
            return;
        }
        c->close_after = true;
        flush(c);
        settle(c);
        return;
    }
    if (!c->kit) wake(c, (size_t)nread);
    c->roff = 0;
    c->rlen = (uint32_t)nread;
    parse_some(c);
    settle(c);
}

static void start_reading(struct conn *c) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
}

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
    /* A write in flight was cancelled before this callback: the kit is unused. */
    kit_put(c);
    state_put(c);
    q_remove(&c->link);
    srv->nconns--;
    srv->nclosing--;
    q_push(&srv->free_conns, &c->link);
    srv->nfree_conns++;
    c->slab->nfree++;
    sweep_arm(srv);
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
    c->srv->nclosing++;
    unwait(c);
    list_leave(c);
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

static void slab_new(struct server *srv) {
    struct server_slab *sl = xmalloc(sizeof *sl);
    sl->next = srv->slabs;
    srv->slabs = sl;
    sl->nfree = CONN_SLAB;
    for (uint32_t i = 0; i < CONN_SLAB; i++) {
        struct conn *c = &sl->conns[i];
        memset(c, 0, sizeof *c);
        c->srv = srv;
        c->slab = sl;
        /* The parser's header buffers come with a kit: none while idle. */
        http_parser_init(&c->parser, &srv->limits, &events, c);
        http_parser_destroy(&c->parser);
        q_push(&srv->free_conns, &c->link);
    }
    srv->nfree_conns += CONN_SLAB;
}

static struct conn *conn_get(struct server *srv) {
    if (q_empty(&srv->free_conns)) slab_new(srv);
    struct conn *c = CONN_OF(srv->free_conns.next, link);
    q_remove(&c->link);
    if (--srv->nfree_conns < srv->free_low) srv->free_low = srv->nfree_conns;
    c->slab->nfree--;
    http_parser_reset(&c->parser);
    c->kit = NULL;
    c->app = NULL;
    c->cur = NULL;
    c->next_waiting = NULL;
    q_init(&c->ilink);
    q_init(&c->wlink);
    c->list = LIST_NONE;
    c->roff = c->rlen = 0;
    c->head = c->count = c->nwriting = 0;
    c->drained = 0;
    c->timing = c->reading = c->paused = c->close_after = c->closing = c->discard = false;
    c->in_waiting = c->in_warm = c->draining = c->lingering = c->eof = false;
    c->tcp.data = c->timer.data = c;
    return c;
}

static void on_reject_closed(uv_handle_t *h) {
    free(h);
}

/* Over the connection cap with nothing idle: a short 503 if the socket takes it, then close. */
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

/*
 * At the cap, make room as nginx reuses idle keep-alive connections: close
 * the oldest lingering connection, else the longest-idle one. Returns false
 * if every connection is busy. Closing ones no longer count.
 */
static bool make_room(struct server *srv) {
    if (srv->nconns - srv->nclosing < srv->cfg->max_connections) return true;
    struct server_link *q = !q_empty(&srv->lingering) ? &srv->lingering : &srv->idle;
    if (q_empty(q)) return false;
    struct conn *c = CONN_OF(q->next, ilink);
    LOG(LOG_DEBUG, "at --max-connections %u: closing a %s connection (idle %llu ms)",
        srv->cfg->max_connections, c->lingering ? "lingering" : "idle",
        (unsigned long long)(uv_now(srv->loop) - c->idle_at));
    conn_close(c);
    return true;
}

static void on_connection(uv_stream_t *l, int status) {
    struct server *srv = l->data;
    if (status < 0) {
        LOG(LOG_WARN, "accept: %s", uv_strerror(status));
        return;
    }
    if (srv->shutting_down) return;
    if (!make_room(srv)) {
        LOG(LOG_WARN, "connection refused: %u connections open, none idle (--max-connections)",
            srv->nconns);
        reject(srv);
        return;
    }
    struct conn *c = conn_get(srv);
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    q_push(&srv->conns, &c->link);
    srv->nconns++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->idle_since = uv_now(srv->loop);
    start_reading(c);
    arm_timer(c);
    settle(c);
}

/* ---- memory ---- */

static void sweep_arm(struct server *srv) {
    if (!uv_is_active((uv_handle_t *)&srv->sweep_timer) && !srv->shutting_down)
        uv_timer_start(&srv->sweep_timer, on_sweep, SERVER_SWEEP_MS, SERVER_SWEEP_MS);
}

/*
 * Once a period: idle connections give their app state back after
 * SERVER_SWEEP_MS, and the free lists give back to the heap what they did
 * not need during the last period (the fewest free entries seen since the
 * last sweep were never taken), so a burst's memory goes but a steady load
 * keeps cycling the same kits (its free lists' low-water marks stay near
 * zero, so it frees nothing). After a release the heap is trimmed: freed
 * blocks sit between live ones (connection slabs, records), where free()
 * alone cannot return them. At most once a period, and only after a
 * release, since malloc_trim walks every free chunk.
 */
static void on_sweep(uv_timer_t *t) {
    struct server *srv = t->data;
    uint64_t now = uv_now(srv->loop);

    /* First, so that states given back now are freed at the next sweep if unused. */
    while (!q_empty(&srv->warm)) {
        struct conn *c = CONN_OF(srv->warm.next, wlink);
        if (now - c->idle_at < SERVER_SWEEP_MS) break;
        state_put(c);
    }

    for (uint32_t n = srv->kits_low; n > 0 && srv->kits; n--) {
        struct server_kit *k = srv->kits;
        srv->kits = k->next;
        srv->nkits--;
        kit_free(srv, k);
    }
    srv->kits_low = srv->nkits;
    for (uint32_t n = srv->states_low; n > 0 && srv->states; n--) {
        struct server_state *s = srv->states;
        srv->states = s->h.next;
        srv->nstates--;
        state_free(srv, s);
    }
    srv->states_low = srv->nstates;
    uint32_t spare = srv->free_low;
    uint32_t empty = 0;
    for (struct server_slab **p = &srv->slabs; *p;) {
        struct server_slab *sl = *p;
        if (sl->nfree < CONN_SLAB) {
            p = &sl->next;
            continue;
        }
        if (spare < CONN_SLAB) {
            empty++;
            p = &sl->next;
            continue;
        }
        for (uint32_t i = 0; i < CONN_SLAB; i++)
            q_remove(&sl->conns[i].link);
        srv->nfree_conns -= CONN_SLAB;
        spare -= CONN_SLAB;
        *p = sl->next;
        free(sl);
        srv->freed_bytes += sizeof *sl;
    }
    srv->free_low = srv->nfree_conns;

#ifdef __GLIBC__
    if (srv->freed_bytes > 0) {
        malloc_trim(0);
        LOG(LOG_DEBUG, "returned idle memory: ~%zu KiB freed since the last trim",
            srv->freed_bytes / 1024);
        srv->freed_bytes = 0;
    }
#endif
    if (q_empty(&srv->warm) && !srv->kits && !srv->states && !empty) uv_timer_stop(t);
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
    srv->nslots = cfg->max_pipeline + 1;
    q_init(&srv->conns);
    q_init(&srv->idle);
    q_init(&srv->warm);
    q_init(&srv->lingering);
    q_init(&srv->free_conns);
    srv->scratch = xmalloc(READ_BUF_SIZE);

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
    uv_timer_init(loop, &srv->sweep_timer);
    srv->sweep_timer.data = srv;
    /* The sweep alone never keeps the loop running. */
    uv_unref((uv_handle_t *)&srv->sweep_timer);
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
        settle(c);
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
                r->lsn = 0;
            }
        }
    }
    server_acked(srv, lsn);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        flush(c);
        settle(c);
    }
}

static void on_listener_closed(uv_handle_t *h) {
    (void)h;
}

static void on_shutdown_timeout(uv_timer_t *t) {
    struct server *srv = t->data;
    LOG(LOG_WARN, "shutdown: closing %u connection(s) still busy after %u ms", srv->nconns,
        srv->cfg->shutdown_timeout_ms);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next)
        conn_close(CONN_OF(q, link));
}

void server_shutdown(struct server *srv, void (*on_drained)(struct server *srv)) {
    if (srv->shutting_down) return;
    srv->shutting_down = true;
    srv->on_drained = on_drained;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    uv_timer_stop(&srv->sweep_timer);
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
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
    while (srv->kits) {
        struct server_kit *k = srv->kits;
        srv->kits = k->next;
        kit_free(srv, k);
    }
    while (srv->states) {
        struct server_state *s = srv->states;
        srv->states = s->h.next;
        state_free(srv, s);
    }
    /* Slabs with open connections (no shutdown) stay: libuv still knows their handles. */
    for (struct server_slab **p = &srv->slabs; *p;) {
        struct server_slab *sl = *p;
        if (sl->nfree < CONN_SLAB) {
            p = &sl->next;
            continue;
        }
        *p = sl->next;
        free(sl);
    }
    free(srv->scratch);
    srv->scratch = NULL;
    if (!uv_is_closing((uv_handle_t *)&srv->shutdown_timer))
        uv_close((uv_handle_t *)&srv->shutdown_timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&srv->sweep_timer))
        uv_close((uv_handle_t *)&srv->sweep_timer, NULL);
}
