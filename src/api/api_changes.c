/*
 * api_changes: GET /v2/changes, the change feed (README "The change feed").
 *
 * A page is read from the index's per-user change lists (index.h): the
 * caller's changes with a rev above the cursor, each shown while it is
 * current (a record at the rev of the change, or a deletion whose record is
 * gone), in rev order. Like every answer, a page leaves only once the
 * store has acknowledged everything the index showed (front.c sets its
 * LSN), so only acknowledged changes are ever shown: a page that showed a
 * change whose batch then failed is answered 503 instead.
 *
 * A caller with nothing new and ?wait=S is held: its response is deferred
 * with reply_defer_park (while it waits, its connection gives back its kit
 * and its request state, so the answer is written whole from the waiter's
 * own copies) and a waiter of 104 bytes is kept, in a chain by user
 * (a change of the user's answers its waiters at once) and in a min-heap by
 * deadline (one timer for all of them answers the ones whose wait ended,
 * with an empty page).
 */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/etag.h"
#include "core/reply.h"

#define WAIT_BUCKETS 1024 /* chains of waiters by user id */
/* In a drain window, held calls are answered this long before it ends. */
#define DRAIN_FEED_MARGIN_MS 500

struct waiter {
    struct server_ticket t;
    uint64_t user_id, after;
    uint64_t deadline; /* uv_now, ms */
    uint32_t limit;
    uint32_t heap_at;
    struct waiter *next, **pprev; /* the user's chain */
    /* The key the call verified with: a key replaced or revoked while it waits
     * gets 401, not the changes (a held call must not outlive its credential). */
    uint64_t users_gen; /* db_users_gen when key_hash was the user's */
    uint8_t key_hash[AUTH_HASH_BYTES];
};

struct changes_waiters {
    struct handlers *h;
    uv_timer_t timer;
    struct waiter **heap; /* by deadline */
    uint32_t len, cap;
    struct waiter *chain[WAIT_BUCKETS];
};

/* ---- the page ---- */

/* Reads after, limit and wait from the query string. Returns false after answering 400. */
static bool changes_params(struct handlers *h, struct slice q, struct http_response *r,
                           uint64_t *after, uint32_t *limit, uint32_t *wait_s) {
    *after = 0;
    *limit = h->set.list_default;
    *wait_s = 0;
    struct slice name, val;
    while (query_next(&q, &name, &val)) {
        uint64_t v;
        if (slice_eq(name, "after", 5)) {
            if (!(val.len == 1 && val.ptr[0] == '0') &&
                u64_parse(val.ptr, val.len, UINT64_MAX, &v) < 0) {
                reply_error(r, ERR_INVALID_QUERY, "after",
                            "after must be the NextCursor of a previous page or of a list "
                            "(X-Changes-Cursor), or 0");
                return false;
            }
            *after = val.len == 1 && val.ptr[0] == '0' ? 0 : v;
        } else if (slice_eq(name, "limit", 5)) {
            if (!api_limit_param(h, val, r, limit)) return false;
        } else if (slice_eq(name, "wait", 4)) {
            if (!(val.len == 1 && val.ptr[0] == '0') &&
                u64_parse(val.ptr, val.len, h->set.changes_max_wait_s, &v) < 0) {
                reply_error(r, ERR_INVALID_QUERY, "wait",
                            "wait must be an integer from 0 to %u (seconds)",
                            h->set.changes_max_wait_s);
                return false;
            }
            *wait_s = val.len == 1 && val.ptr[0] == '0' ? 0 : (uint32_t)v;
        }
    }
    return true;
}

static void put_cursor(struct buf *b, uint64_t rev) {
    buf_append_char(b, '"');
    buf_append_u64(b, rev);
    buf_append_char(b, '"');
}

static const char *const op_name[] = {"", "create", "update", "delete"};

/* The user's changes after `after`, at most limit, as a whole answer. Returns how many. */
static uint32_t write_page(struct handlers *h, uint64_t user_id, uint64_t after, uint32_t limit,
                           struct http_response *r) {
    const struct db *db = h->db;
    const struct index_changes *l = db_changes(db, user_id);
    reply_ok_open(r);
    struct buf *b = &r->body;
    buf_append_str(b, "{\"Changes\":[");
    uint32_t n = 0;
    /* At the end of the user's changes the cursor is the server's last rev: the changes of
     * others up to it need not be looked at again. */
    uint64_t rev = db_rev(db), next = rev > after ? rev : after, last = after;
    for (uint32_t i = index_changes_after(l, after); i < l->len; i++) {
        const struct index_change *c = &l->v[i];
        const struct record *rec = db_change_current(db, c);
        if (rec == INDEX_CHANGE_STALE) continue;
        if (n == limit || b->len > h->set.list_max_bytes) {
            next = last; /* more to come: the next page starts after the last one shown */
            break;
        }
        last = c->rev;
        const struct kind_desc *k = record_kind(index_change_type(c));
        if (n++) buf_append_char(b, ',');
        buf_append_str(b, "{\"Cursor\":");
        put_cursor(b, c->rev);
        buf_append_str(b, ",\"Kind\":\"");
        buf_append_str(b, k->name);
        buf_append_str(b, "\",\"ID\":");
        buf_append_u64(b, index_change_id(c));
        buf_append_str(b, ",\"Operation\":\"");
        buf_append_str(b, op_name[index_change_op(c)]);
        buf_append_char(b, '"');
        if (rec) {
            struct http_etag e;
            etag_of(h->db, rec, &e);
            char tag[ETAG_MAX];
            size_t tn = http_etag_format(&e, tag);
            buf_append_str(b, ",\"ETag\":");
            json_write_string(b, tag, tn);
            buf_append_str(b, ",\"");
            buf_append_str(b, k->name);
            buf_append_str(b, "\":");
            json_write_record(b, rec, false);
        }
        buf_append_char(b, '}');
    }
    buf_append_str(b, "],\"NextCursor\":");
    put_cursor(b, next);
    buf_append_str(b, "}}");
    return n;
}

/* ---- waiters ---- */

static bool heap_less(const struct changes_waiters *w, uint32_t a, uint32_t b) {
    return w->heap[a]->deadline < w->heap[b]->deadline;
}

static void heap_swap(struct changes_waiters *w, uint32_t a, uint32_t b) {
    struct waiter *t = w->heap[a];
    w->heap[a] = w->heap[b];
    w->heap[b] = t;
    w->heap[a]->heap_at = a;
    w->heap[b]->heap_at = b;
}

static void heap_fix(struct changes_waiters *w, uint32_t i) {
    while (i > 0 && heap_less(w, i, (i - 1) / 2)) {
        heap_swap(w, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < w->len && heap_less(w, l, m)) m = l;
        if (l + 1 < w->len && heap_less(w, l + 1, m)) m = l + 1;
        if (m == i) break;
        heap_swap(w, i, m);
        i = m;
    }
}

/* Takes x out of the heap and its chain. */
static void unlink_waiter(struct changes_waiters *w, struct waiter *x) {
    uint32_t i = x->heap_at;
    w->len--;
    if (i != w->len) {
        w->heap[i] = w->heap[w->len];
        w->heap[i]->heap_at = i;
        heap_fix(w, i);
    }
    *x->pprev = x->next;
    if (x->next) x->next->pprev = x->pprev;
}

/* The user still has the key hash the call verified with. */
static bool key_still_valid(const struct handlers *h, const struct waiter *x) {
    if (db_users_gen(h->db) == x->users_gen) return true; /* no user record changed */
    const struct record *u = db_get(h->db, x->user_id);
    if (!u || u->type != REC_USER) return false;
    union value kh = record_get(u, USER_KEY_HASH);
    return kh.s.len == AUTH_HASH_BYTES && !memcmp(kh.s.ptr, x->key_hash, AUTH_HASH_BYTES);
}

/* Answers x with its page now (the connection may have gone: then nothing), and frees it. */
static void answer(struct changes_waiters *w, struct waiter *x) {
    struct handlers *h = w->h;
    struct http_response *r = reply_deferred(h, x->t);
    if (r) {
        if (key_still_valid(h, x)) {
            write_page(h, x->user_id, x->after, x->limit, r);
        } else {
            http_response_error(r, ERR_UNAUTHORIZED, NULL,
                                "invalid credentials: the API key was replaced or revoked "
                                "while the call waited");
            r->extra = hdr_www_authenticate;
        }
        reply_answer(h, r, &x->t);
    }
    free(x);
}

static void on_timer(uv_timer_t *t);

static void rearm(struct changes_waiters *w) {
    if (!w->len) {
        uv_timer_stop(&w->timer);
        return;
    }
    uint64_t now = uv_now(w->timer.loop), due = w->heap[0]->deadline;
    uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
}

static void on_timer(uv_timer_t *t) {
    struct changes_waiters *w = t->data;
    uint64_t now = uv_now(t->loop);
    while (w->len && w->heap[0]->deadline <= now) {
        struct waiter *x = w->heap[0];
        unlink_waiter(w, x);
        answer(w, x);
    }
    rearm(w);
}

static struct changes_waiters *waiters_of(struct handlers *h) {
    if (!h->waiters) {
        struct changes_waiters *w = xcalloc(1, sizeof *w);
        w->h = h;
        uv_timer_init(h->db->loop, &w->timer);
        w->timer.data = w;
        h->waiters = w;
    }
    return h->waiters;
}

/* A user holds at most --changes-max-waiters-per-user calls: before one more
 * is held, the user's oldest are answered (an empty page, as when a wait
 * ends), so one account cannot park connections and waiters without bound.
 * And the server holds at most --changes-max-waiters in all, so that a few
 * accounts cannot take every connection (this server's, or the balancer's
 * per-shard maxconn) from everybody else (review, 2026-11-29): past it, the
 * call whose wait ends first is answered. Each caller is answered as at the
 * end of its wait and polls again; none is refused.
 * An answer can run pipelined requests that hold more: count again each time. */
static void make_room_for(struct changes_waiters *w, uint64_t user_id) {
    bool answered = false;
    uint32_t total = w->h->set.changes_max_waiters_total;
    if (total && w->len >= total) {
        /* Calls whose client left go first: a client that resets or closes its held calls
         * must not keep the places (and push out the calls of others) until its waits end.
         * A close() is a FIN, which the server reads as EOF and cannot tell from a
         * half-close: such a call is answered now (its page, as at the cap), a reset one
         * dropped. Answers here run inside a handler: no pipelined request runs. */
        for (uint32_t i = w->len; i-- > 0;) {
            if (i >= w->len || !reply_ticket_client_left(w->h, w->heap[i]->t)) continue;
            struct waiter *x = w->heap[i];
            unlink_waiter(w, x);
            answer(w, x); /* frees x (the answer is dropped when nobody waits) */
            answered = true;
        }
    }
    for (;;) {
        uint32_t n = 0;
        struct waiter *oldest = NULL; /* the chain is newest first */
        for (struct waiter *y = w->chain[user_id % WAIT_BUCKETS]; y; y = y->next)
            if (y->user_id == user_id) {
                n++;
                oldest = y;
            }
        if (n < w->h->set.changes_max_waiters || !oldest) break;
        unlink_waiter(w, oldest);
        answer(w, oldest);
        answered = true;
    }
    while (total && w->len && w->len >= total) {
        struct waiter *first = w->heap[0];
        unlink_waiter(w, first);
        answer(w, first);
        answered = true;
    }
    if (answered) rearm(w);
}

/* Holds the request being completed until a change of user_id or wait_ms. */
static void hold(struct handlers *h, uint64_t user_id, uint64_t after, uint32_t limit,
                 uint64_t wait_ms, struct http_response *r) {
    struct changes_waiters *w = waiters_of(h);
    make_room_for(w, user_id);
    struct waiter *x = xcalloc(1, sizeof *x);
    x->t = reply_defer_park(h, r); /* the connection parks: the answer is filled whole */
    x->user_id = user_id;
    x->after = after;
    x->limit = limit;
    x->deadline = uv_now(h->db->loop) + wait_ms;
    /* api_complete verified the caller's key against this record just now. */
    const struct record *u = db_get(h->db, user_id);
    union value kh = u ? record_get(u, USER_KEY_HASH) : (union value){0};
    if (kh.s.len == AUTH_HASH_BYTES) memcpy(x->key_hash, kh.s.ptr, AUTH_HASH_BYTES);
    x->users_gen = db_users_gen(h->db);
    if (w->len == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->heap = xrealloc(w->heap, w->cap * sizeof *w->heap);
    }
    x->heap_at = w->len;
    w->heap[w->len++] = x;
    heap_fix(w, x->heap_at);
    struct waiter **head = &w->chain[user_id % WAIT_BUCKETS];
    x->next = *head;
    x->pprev = head;
    if (*head) (*head)->pprev = &x->next;
    *head = x;
    if (w->heap[0] == x) rearm(w);
}

/* Every waiter of the user leaves the chain and the heap before any is
 * answered. An answer can resume its connection's pipelined requests at once
 * (server_write.c), and one of them may be a write of the same user, which
 * comes back here from inside this call, or a held call, which joins the chain:
 * the walk must not hold a pointer into the chain across an answer. */
void changes_notify(struct handlers *h, uint64_t user_id) {
    struct changes_waiters *w = h->waiters;
    if (!w) return;
    struct waiter *x = w->chain[user_id % WAIT_BUCKETS], *ready = NULL;
    bool first = false;
    while (x) {
        struct waiter *next = x->next;
        if (x->user_id == user_id) {
            first |= x->heap_at == 0;
            unlink_waiter(w, x);
            x->next = ready;
            ready = x;
        }
        x = next;
    }
    if (first) rearm(w);
    while (ready) {
        x = ready;
        ready = x->next;
        answer(w, x);
    }
}

void changes_release(struct handlers *h) {
    struct changes_waiters *w = h->waiters;
    if (!w) return;
    while (w->len) {
        struct waiter *x = w->heap[0];
        unlink_waiter(w, x);
        answer(w, x);
    }
    uv_timer_stop(&w->timer);
}

static void on_timer_closed(uv_handle_t *t) {
    struct changes_waiters *w = t->data;
    free(w->heap);
    free(w);
}

void changes_close(struct handlers *h) {
    struct changes_waiters *w = h->waiters;
    if (!w) return;
    while (w->len) {
        struct waiter *x = w->heap[0];
        unlink_waiter(w, x);
        free(x);
    }
    h->waiters = NULL;
    uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}

size_t changes_waiting(const struct handlers *h) {
    return h->waiters ? h->waiters->len : 0;
}

/* ---- the endpoint ---- */

void api_changes(struct handlers *h, struct api_state *st, struct http_request *req,
                 struct http_response *r) {
    uint64_t after;
    uint32_t limit, wait_s;
    if (!changes_params(h, req->query, r, &after, &limit, &wait_s)) return;
    if (after < db_rev_horizon(h->db) || after > db_rev(h->db)) {
        reply_error(r, ERR_CURSOR_EXPIRED, "after",
                    after > db_rev(h->db)
                        ? "this cursor is ahead of the server's changes (they were lost in a "
                          "crash): list, then follow the list's X-Changes-Cursor"
                        : "this cursor is older than the log's last compaction: list, then "
                          "follow the list's X-Changes-Cursor");
        return;
    }
    uint32_t n = write_page(h, st->user_id, after, limit, r);
    /* In a drain window a call is held too (answered at once, its client would poll again
     * at once, and again, for the whole window: its user has no other shard), but answered
     * DRAIN_FEED_MARGIN_MS before the window ends, while eventd still closes the
     * connection after the answer rather than under a balancer's next request. */
    uint64_t wait_ms = (uint64_t)wait_s * 1000, left = server_drain_left_ms(h->srv);
    if (left != UINT64_MAX) {
        uint64_t until_end = left > DRAIN_FEED_MARGIN_MS ? left - DRAIN_FEED_MARGIN_MS : 0;
        if (wait_ms > until_end) wait_ms = until_end;
    } else if (server_stopping(h->srv)) {
        wait_ms = 0; /* past the drain: the stop's release of held calls has run */
    }
    if (n == 0 && wait_ms > 0 && !h->server_gone) {
        buf_reset(&r->body);
        hold(h, st->user_id, after, limit, wait_ms, r);
    }
}
