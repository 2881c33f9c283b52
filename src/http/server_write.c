/*
 * server_write: the ring of responses of a connection and their writing.
 *
 * Responses are queued in request order. Ready responses at the head of the
 * ring leave together in one write (a writev of head and body slices); the
 * next batch starts when it completes, so at most one write request per
 * connection is in flight. A response carrying an LSN waits at the head
 * until the store has acknowledged it (server_acked), and holds back the
 * ones behind it, so replies never overtake each other or durability.
 */
#include <stdlib.h>

#include "http/server_internal.h"

static void on_write(uv_write_t *w, int status);
static void on_shutdown(uv_shutdown_t *req, int status);

struct http_response *conn_slot_push(struct conn *c) {
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
    struct server *srv = c->srv;
    uv_buf_t *iov = srv->iov;
    uint32_t n = 0;
    unsigned nb = 0;
    uint64_t now = 0; /* one clock read per batch */
    if (c->continue_left && c->count > 0 && slot_sendable(c, 0)) {
        iov[nb++] = uv_buf_init((char *)CONTINUE_100 + sizeof CONTINUE_100 - 1 - c->continue_left,
                                c->continue_left);
        c->continue_left = 0;
    }
    while (n < c->count && n < MAX_BATCH && slot_sendable(c, n)) {
        struct http_response *r = slot_at(c, n);
        bool last_queued = n + 1 == c->count && !c->kit->parser.in_message;
        bool keep = !r->close && !(c->close_after && last_queued);
        if (!keep) r->close = true;
        http_response_finish(r, keep);
        /* Set in place: uv_buf_init is a call into libuv. */
        iov[nb].base = r->head;
        iov[nb++].len = r->head_len;
        if (r->headers.len) {
            iov[nb].base = r->headers.ptr;
            iov[nb++].len = r->headers.len;
        }
        if (!r->no_body && r->body.len) {
            iov[nb].base = r->body.ptr;
            iov[nb++].len = r->body.len;
        }
        if (srv->on_sent) {
            if (!now) now = uv_hrtime();
            struct server_sent sent = {
                .r = r,
                .bytes = r->head_len + r->headers.len + (r->no_body ? 0 : r->body.len),
                .ns = now > r->start_ns ? now - r->start_ns : 0,
                .family = c->peer.family,
                .addr = c->peer.addr,
            };
            srv->on_sent(srv->sent_ctx, &sent);
        }
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
 * the client may still be sending (a body we refused), and a pipelining
 * client may have sent requests past the one that ended the connection (a
 * drain, Connection: close): closing now, with bytes unread, would make the
 * kernel send a reset that can destroy the answers in the client's receive
 * buffer. So shut down the write side (the client sees the end of the
 * answers) and read and discard for a bounded time and byte count first, as
 * nginx's lingering_close does.
 */
static void end_connection(struct conn *c) {
    struct server *srv = c->srv;
    /* The cheap tests first: the ioctl of conn_has_input only when lingering is possible. */
    if (c->eof || srv->set.linger_ms == 0 || srv->shutting_down ||
        !(c->draining || c->roff < c->rlen || conn_has_input(c))) {
        conn_close(c);
        return;
    }
    uv_shutdown_t *req = xmalloc(sizeof *req);
    req->data = c;
    if (uv_shutdown(req, &c->io.stream, on_shutdown) < 0) {
        free(req);
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->draining = true; /* what comes now is read and discarded */
    c->roff = c->rlen = 0;
    c->close_after = false;
    conn_kit_put(c);
    conn_state_put(c);
    if (!c->reading) conn_start_reading(c);
    if (!c->reading) {
        conn_close(c);
        return;
    }
    conn_list_leave(c);
    c->list = LIST_LINGER;
    q_push(&srv->lingering, &c->ilink);
    conn_timer_start(c, srv->set.linger_ms);
}

/* The responses being written have left. Returns false if the connection closed. */
static bool written(struct conn *c, int status) {
    uint32_t n = c->nwriting;
    bool close = false;
    for (uint32_t i = 0; i < n; i++) {
        struct http_response *r = slot_at(c, i);
        if (r->close) close = true;
        slot_body_trim(c, i);
    }
    c->head = (c->head + n) % c->srv->nslots;
    c->count -= n;
    c->nwriting = 0;
    uint64_t now = uv_now(c->srv->loop);
    bool moved = now != c->idle_since;
    c->idle_since = now;
    if (c->closing) return false;
    if (status < 0) {
        conn_close(c);
        return false;
    }
    if (close) {
        end_connection(c);
        return false;
    }
    if (c->paused && !ring_full(c) && !c->close_after) {
        if (c->srv->completing) {
            /* Written from inside another request's handler (an answer to a held
             * call): this connection's next requests must not run inside it. */
            conn_resume_later(c);
        } else {
            c->paused = false;
            http_parser_resume(&c->kit->parser);
            conn_parse_buffered(c);
        }
    } else if (!c->kit->parser.in_message &&
               (moved || c->deadline != c->idle_since + c->srv->set.idle_timeout_ms)) {
        /* Written in the loop turn that read the request, the idle deadline is
         * the one conn_parse_buffered armed already: no second arm. */
        conn_arm_timer(c);
    }
    return true;
}

/*
 * Sends what is sendable. Most responses fit the socket buffer, so a
 * uv_try_write (one writev) finishes them at once; only a remainder goes
 * through uv_write and waits for the socket to drain.
 */
void conn_flush(struct conn *c) {
    while (!c->closing && !c->nwriting) {
        unsigned nbuf;
        uint32_t n = collect(c, &nbuf);
        if (n == 0) {
            if (c->count == 0 && c->close_after && !conn_in_request(c) && !c->parked)
                end_connection(c);
            return;
        }
        c->nwriting = n;
        uv_buf_t *iov = c->srv->iov;
        size_t total = 0;
        for (unsigned i = 0; i < nbuf; i++)
            total += iov[i].len;
        int w = uv_try_write(&c->io.stream, iov, nbuf);
        if (w == (int)total) {
            if (!written(c, 0)) return;
            if (c->count == 0 && !c->close_after) return; /* nothing more to send or end */
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
        if (uv_write(&c->kit->wreq, &c->io.stream, iov + first, nbuf - first, on_write) < 0)
            written(c, UV_EPIPE);
        return;
    }
}

static void on_write(uv_write_t *w, int status) {
    struct conn *c = w->data;
    if (written(c, status)) conn_flush(c);
    conn_settle(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    struct conn *c = req->data;
    free(req);
    /* UV_ECANCELED: the connection is closing already. */
    if (status < 0 && status != UV_ECANCELED) conn_close(c);
}
