/*
 * server_read: reading a connection, feeding the parser, the parser's
 * events (which hand requests to the handler), error answers and timeouts.
 *
 * When the ring holds max_pipeline responses, or max_pipeline_bytes of
 * answers (ring_full), the parser is paused on the message boundary and the
 * socket is no longer read: a client that pipelines without reading answers
 * gets TCP back-pressure instead of growing our memory. The unparsed rest of
 * the read buffer is kept and parsed when slots free up (server_write.c
 * resumes it).
 */
#include <string.h>

#include "common/log.h"
#include "http/server_internal.h"

/* ---- timers ---- */

static void on_timer(uv_timer_t *t);

void conn_timer_start(struct conn *c, uint64_t ms) {
    c->deadline = c->timer_due = uv_now(c->srv->loop) + ms;
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

void conn_arm_timer(struct conn *c) {
    if (c->closing || c->lingering) return;
    const struct server_settings *set = &c->srv->set;
    uint64_t now = uv_now(c->srv->loop), deadline;
    if (conn_in_request(c)) {
        if (!c->timing) {
            c->timing = true;
            c->req_start = now;
            c->kit->req_ns = c->kit->read_ns;
        }
        deadline = c->req_start +
                   (c->kit->parser.in_headers ? set->header_timeout_ms : set->request_timeout_ms);
    } else {
        deadline = c->idle_since + set->idle_timeout_ms;
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
            c->srv->set.linger_ms, (unsigned long long)c->drained);
        conn_close(c);
        return;
    }
    if (conn_in_request(c)) {
        LOG(LOG_DEBUG, "connection timed out inside a request");
        if (c->nwriting == 0) {
            /* Say why before closing, after the answers queued before it: they
             * wait for the disk, a hash or a held change feed call, not for the
             * client, and their requests may have been carried out. */
            c->kit->parser.error = ERR_TIMEOUT;
            conn_answer_error(c);
            conn_flush(c);
            return;
        }
        /* The client does not read what it was sent: nothing more would reach it. */
        conn_close(c);
        return;
    }
    if ((c->count > 0 || c->parked) && c->nwriting == 0) {
        /* Responses wait for the disk or the handler, not for the client: keep waiting. */
        conn_timer_start(c, c->srv->set.idle_timeout_ms);
        return;
    }
    conn_close(c);
}

/* ---- parser events ---- */

void conn_response_begin(struct conn *c, struct http_response *r, struct slice given) {
    struct server *srv = c->srv;
    /* A request that began in an earlier read started then (c->timing);
     * one that began in this read, with it. */
    r->start_ns = c->timing ? c->kit->req_ns : c->kit->read_ns;
    if (http_request_id_ok(given)) {
        memcpy(r->request_id, given.ptr, given.len);
        r->request_id_len = (uint8_t)given.len;
        return;
    }
    server__request_id_make(srv, r);
}

_Static_assert(sizeof((struct server *)0)->rid_text <= HTTP_REQUEST_ID_MAX,
               "a generated request id fits a response's");

void server__request_id_make(struct server *srv, struct http_response *r) {
    /* Cheap and unique for this process: the random prefix, '-', a count in
     * hex (1, 2, ... f, 10, ...), kept as text and counted up in place. */
    char *t = srv->rid_text;
    if (srv->rid_len == 0) {
        memcpy(t, srv->rid_prefix, 8);
        memcpy(t + 8, "-0", 2);
        srv->rid_len = 10;
    }
    for (size_t i = srv->rid_len - 1;; i--) {
        if (t[i] == '-') { /* every digit was f and is now 0: one digit more */
            t[i + 1] = '1';
            t[srv->rid_len++] = '0';
            break;
        }
        if (t[i] != 'f') {
            t[i] = t[i] == '9' ? 'a' : (char)(t[i] + 1);
            break;
        }
        t[i] = '0';
    }
    memcpy(r->request_id, t, sizeof srv->rid_text);
    r->request_id_len = srv->rid_len;
}

static int on_headers(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = conn_slot_push(c);
    c->cur = r;
    r->http10 = req->version_minor == 0;
    r->head_only = req->method == HTTP_HEAD;
    r->method = (uint8_t)(req->method + 1);
    buf_append(&r->path, req->path.ptr,
               req->path.len < HTTP_PATH_KEEP ? req->path.len : HTTP_PATH_KEEP);
    conn_response_begin(c, r, http_request_field(req, HF_REQUEST_ID));
    c->discard =
        srv->handler.on_headers(srv->handler.data, conn_state_get(c), req, r) == SERVER_ANSWERED;
    if (c->discard && req->expect_continue && req->has_body) {
        /* The client waits for "100 Continue" before sending the body: answer
         * now and close, rather than read a body that may never come. */
        r->close = true;
        return 1;
    }
    if (!c->discard && req->expect_continue && req->has_body && req->version_minor >= 1 &&
        c->count == 1 && c->nwriting == 0) {
        uv_buf_t b = uv_buf_init((char *)CONTINUE_100, sizeof CONTINUE_100 - 1);
        /* Nothing else is queued, so this cannot overtake a response. If the
         * socket is full the client will send the body after its own timeout;
         * if it took only part, the rest leads the next write (collect). */
        int w = uv_try_write(&c->io.stream, &b, 1);
        if (w > 0 && (size_t)w < b.len) c->continue_left = (uint8_t)(b.len - (size_t)w);
    }
    /* The header deadline ends and the request deadline begins when
     * conn_parse_buffered, which this runs under, arms the timer after the
     * read's requests: no time passes on the loop's clock in between. */
    return 0;
}

static void on_body(void *owner, struct http_request *req, const char *ptr, size_t len) {
    struct conn *c = owner;
    if (!c->discard) c->srv->handler.on_body(c->srv->handler.data, c->hstate->mem, ptr, len);
}

static bool on_complete(void *owner, struct http_request *req) {
    struct conn *c = owner;
    struct server *srv = c->srv;
    struct http_response *r = c->cur;
    uint8_t state = SLOT_READY; /* SLOT_DEFERRED or SLOT_PARKABLE if server_defer* ran */
    if (!c->discard) {
        srv->completing = c;
        srv->deferred = SLOT_READY;
        srv->handler.on_complete(srv->handler.data, c->hstate->mem, req, r);
        srv->completing = NULL;
        state = srv->deferred;
    }
    c->discard = false;
    c->cur = NULL;
    c->timing = false;
    c->idle_since = uv_now(srv->loop);
    /* In a drain every answer ends its connection: the balancer opens a new
     * one for its next request, and the pool empties before the listener closes. */
    if (!req->keep_alive || srv->shutting_down || srv->draining) {
        if (srv->draining && req->keep_alive && !c->close_after) srv->stats_drain_closed++;
        r->close = true;
        c->close_after = true;
    }
    *state_at(c, c->count - 1) = state;
    return c->close_after || ring_full(c);
}

const struct http_events server__parser_events = {on_headers, on_body, on_complete};

/* ---- reading ---- */

/*
 * Answers the request in progress (or a new slot) with parser.error, then
 * closes. From here on the input is read and discarded (draining), so a
 * client still sending cannot fill the socket and block our answer.
 */
void conn_answer_error(struct conn *c) {
    struct http_response *r = c->cur;
    if (!r) {
        /* Before the headers were complete: no request id came (yet). The
         * request line, if it was read, is what the access log says. */
        r = conn_slot_push(c);
        conn_response_begin(c, r, (struct slice){NULL, 0});
        uint8_t method;
        struct slice path;
        if (http_parser_request_line(&c->kit->parser, &method, &path)) {
            r->method = (uint8_t)(method + 1);
            buf_append(&r->path, path.ptr, path.len < HTTP_PATH_KEEP ? path.len : HTTP_PATH_KEEP);
        }
    }
    struct http_parser *p = &c->kit->parser;
    if (p->error != ERR_NONE) {
        /* The message names the rule or the limit that was broken. */
        char msg[200];
        const struct http_limits *l = p->limits;
        if (p->error == ERR_HEADERS_TOO_LARGE)
            snprintf(msg, sizeof msg,
                     "request line and headers exceed %u bytes (--max-header-bytes)",
                     (unsigned)l->max_header_bytes);
        else if (p->error == ERR_BODY_TOO_LARGE)
            snprintf(msg, sizeof msg, "request body exceeds %llu bytes (--max-body-bytes)",
                     (unsigned long long)l->max_body_bytes);
        else if (p->error == ERR_BAD_REQUEST && p->why)
            snprintf(msg, sizeof msg, "malformed HTTP request: %s", p->why);
        else
            msg[0] = '\0';
        if (p->error == ERR_MEDIA_TYPE) { /* only the parser's own: a Content-Encoding */
            http_response_error(r, p->error, "Content-Encoding",
                                "request bodies are read as sent: send it without a "
                                "Content-Encoding (or \"identity\")");
            r->extra = "Accept-Encoding: identity\r\n"; /* RFC 9110 12.5.3 */
        } else {
            http_response_error(r, p->error, NULL, msg[0] ? msg : NULL);
        }
    }
    r->close = true;
    *state_at(c, c->count - 1) = SLOT_READY;
    c->cur = NULL;
    c->close_after = true;
    c->draining = true;
    p->in_message = false;
    c->roff = c->rlen;
    if (!c->reading && !c->eof) conn_start_reading(c);
}

static void on_resume(uv_idle_t *h) {
    struct server *srv = h->data;
    while (!q_empty(&srv->resumes)) {
        struct conn *c = CONN_OF(srv->resumes.next, rlink);
        q_remove(&c->rlink);
        if (c->closing || !c->kit || !c->paused || ring_full(c) || c->close_after) continue;
        c->paused = false;
        http_parser_resume(&c->kit->parser);
        conn_parse_buffered(c);
        conn_flush(c);
        conn_settle(c);
    }
    uv_idle_stop(h);
}

void conn_resume_later(struct conn *c) {
    struct server *srv = c->srv;
    if (q_empty(&c->rlink)) q_push(&srv->resumes, &c->rlink);
    uv_idle_start(&srv->resume_idle, on_resume);
}

void conn_parse_buffered(struct conn *c) {
    while (c->roff < c->rlen) {
        /* After "close" was decided no new request starts; one in progress finishes. */
        if (c->close_after && !c->kit->parser.in_message) break;
        size_t used;
        enum http_status st =
            http_parser_execute(&c->kit->parser, c->kit->rbuf + c->roff, c->rlen - c->roff, &used);
        c->roff += (uint32_t)used;
        if (st == HTTP_OK) break;
        if (st == HTTP_ERROR) {
            conn_answer_error(c);
            break;
        }
        /* Paused on a message boundary: go on unless the ring is full. */
        if (c->close_after) break;
        if (ring_full(c)) {
            c->paused = true;
            break;
        }
        http_parser_resume(&c->kit->parser);
    }
    if (c->roff >= c->rlen) c->roff = c->rlen = 0;
    bool want_read = c->draining || (!c->paused && c->roff == c->rlen &&
                                     (!c->close_after || c->kit->parser.in_message));
    if (want_read && !c->reading && !c->closing && !c->eof) conn_start_reading(c);
    if (!want_read && c->reading) {
        uv_read_stop(&c->io.stream);
        c->reading = false;
    }
    conn_arm_timer(c);
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
        uv_read_stop(&c->io.stream);
        c->reading = false;
        c->eof = true;
        /* Before the answer is out, it still goes (close_after is set). */
        if (c->lingering || nread != UV_EOF) conn_close(c);
        return;
    }
    c->drained =
        (uint64_t)nread > UINT32_MAX - c->drained ? UINT32_MAX : c->drained + (uint32_t)nread;
    if (c->drained > c->srv->set.linger_bytes) {
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
         * gets the responses already queued, even when it ended inside a
         * later request: that one, cut short, gets none. */
        uv_read_stop(s);
        c->reading = false;
        c->eof = true;
        uint32_t complete = c->count - (c->cur ? 1 : 0) + (c->parked ? 1 : 0);
        if (nread != UV_EOF || complete == 0) {
            conn_close(c);
            return;
        }
        if (conn_in_request(c)) {
            if (c->cur) c->count--; /* the tail slot: open, never written */
            c->cur = NULL;
            c->discard = false;
            c->kit->parser.in_message = false;
        }
        c->close_after = true;
        conn_flush(c);
        conn_settle(c);
        return;
    }
    if (!c->kit) conn_wake(c, (size_t)nread);
    c->kit->read_ns = uv_hrtime();
    c->roff = 0;
    c->rlen = (uint32_t)nread;
    conn_parse_buffered(c);
    conn_flush(c);
    conn_settle(c);
}

void conn_start_reading(struct conn *c) {
    if (uv_read_start(&c->io.stream, on_alloc, on_read) == 0) c->reading = true;
}
