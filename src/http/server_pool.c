/*
 * server_pool: the server's memory (see server.h for the policy): kits,
 * handler states and connection slots on free lists, the idle and warm lists
 * of connections, and the periodic sweep that gives back what a burst left.
 *
 * An idle connection has no kit: its reads land in the server's scratch
 * buffer and are copied into a kit taken then (a request is a few hundred
 * bytes). So a burst of closes (EOF on thousands of idle connections) takes
 * no kits.
 *
 * Parking: a connection whose only work is one response deferred with
 * server_defer_park (nothing unparsed, nothing else queued, no write in
 * flight) gives back its kit and its handler state at the end of the
 * callback (conn_settle), and keeps a struct server_parked of 32 bytes
 * plus the request id and the path. Reads then land in the scratch buffer as
 * on an idle connection; whatever takes a kit again (a pipelined request,
 * server_deferred when the answer is ready) gets the deferred slot back at
 * the head of the ring first, so answers keep their order.
 *
 * A ticket names a connection slot, so a slab with outstanding tickets is
 * never freed (slab->tickets): a ticket of a closed connection is looked at
 * (its gen no longer matches) before the handler drops its answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/log.h"
#include "common/slab.h"
#include "http/server_internal.h"

#define SLAB_BYTES (64 * 1024) /* one mapping of connection slots: idle ones pack densely */
#define HEADER_KEEP 8192       /* a kit's head buffers larger than this in all are freed */

/*
 * A slab is a mapping of its own, not a heap block: malloc would place it between
 * the kits and handler states of the burst that made it, and once those are freed,
 * the partly used pages at each end of every hole stay resident (malloc_trim gives
 * back only whole pages inside free chunks), about 9 KiB a slab, 140 bytes a
 * connection. A mapping is whole pages and goes back whole. (Under AddressSanitizer
 * it is a heap block all the same, so that a slot used after its slab went is reported
 * rather than landing in a later mapping at the same address.)
 */
struct server_slab {
    struct server_slab *next;
    uint32_t nfree;
    uint32_t tickets; /* outstanding tickets of its connections (server_defer) */
    struct conn conns[];
};

#define CONN_SLAB ((uint32_t)((SLAB_BYTES - sizeof(struct server_slab)) / sizeof(struct conn)))

static void on_sweep(uv_timer_t *t);

#define TRIM_MIN_BYTES (1u << 20) /* released since the last trim before on_sweep trims */

/* ---- kits ---- */

/* Not inlined: kit_take, on every request's path, stays small enough to be inlined. */
static __attribute__((noinline)) struct server_kit *kit_new(struct server *srv) {
    struct server_kit *k = xmalloc(sizeof *k);
    k->next = NULL;
    k->slots = xcalloc(srv->nslots, sizeof *k->slots);
    k->state = xcalloc(srv->nslots, 1);
    k->ticket = xcalloc(srv->nslots, sizeof *k->ticket);
    for (uint32_t i = 0; i < srv->nslots; i++)
        http_response_init(&k->slots[i]);
    http_parser_init(&k->parser, &srv->limits, &server__parser_events, NULL);
    return k;
}

static void kit_free(struct server *srv, struct server_kit *k) {
    const struct http_kept *kept = k->parser.req.kept;
    size_t bytes = sizeof *k + srv->nslots * (sizeof *k->slots + 1 + sizeof *k->ticket) +
                   sizeof *kept + kept->target.cap + kept->authorization.cap + kept->fields.cap;
    for (uint32_t i = 0; i < srv->nslots; i++) {
        bytes += k->slots[i].body.cap + k->slots[i].headers.cap + k->slots[i].path.cap;
        http_response_destroy(&k->slots[i]);
    }
    http_parser_destroy(&k->parser);
    free(k->slots);
    free(k->state);
    free(k->ticket);
    free(k);
    srv->freed_bytes += bytes;
}

static void unpark(struct conn *c);

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
    k->parser.owner = c;
    k->parser.req.peer = c->peer;
    /* The ring and the read offsets are empty already: kit_put and server__conn_get
     * leave them so, and nothing moves them without a kit. */
}

void conn_kit_get(struct conn *c) {
    if (c->kit) return;
    kit_take(c);
    if (c->parked) unpark(c);
}

/* Gives the kit back, its parser as it is (see conn_kit_put for when that is right). */
static void kit_put(struct conn *c) {
    struct server *srv = c->srv;
    struct server_kit *k = c->kit;
    /* Answers never sent (the connection closed with them queued): their buffers would
     * go on with the kit to whichever connection takes it next, for as long as kits are
     * in use (review, 2026-11-29: 8 reset pipelines left 8 MiB with 8 slow clients). */
    for (uint32_t i = 0; i < c->count; i++)
        slot_body_trim(c, i);
    c->kit = NULL;
    c->cur = NULL;
    c->head = c->count = c->nwriting = 0;
    c->continue_left = 0;
    c->roff = c->rlen = 0;
    /* A huge request head stays a rarity: do not keep its buffers around. */
    struct http_kept *kept = k->parser.req.kept;
    if (kept->target.cap + kept->authorization.cap + kept->fields.cap > HEADER_KEEP) {
        http_kept_destroy(kept);
        http_kept_init(kept);
    }
    /* No cap here: the sweep frees what the last period did not need. A cap (it was 256)
     * made 1,024 clients waiting on one sync free and rebuild a kit per request. */
    k->next = srv->kits;
    srv->kits = k;
    srv->nkits++;
    server__sweep_arm(srv);
}

/*
 * The parser starts over: it may be inside or past a request (an error answer, a
 * close, a request cut short, a "close" decided). Only a connection going idle gives
 * its kit back without this (conn_settle): it is between two requests, where the next
 * connection can go on with the parser as it is.
 */
void conn_kit_put(struct conn *c) {
    if (!c->kit) return;
    /* The parse a resume would go on with is in the kit: it goes with it. */
    q_remove(&c->rlink);
    c->paused = false;
    http_parser_reset(&c->kit->parser);
    kit_put(c);
}

/* ---- handler states ---- */

static void state_free(struct server *srv, struct server_state *s) {
    if (srv->handler.state_destroy) srv->handler.state_destroy(srv->handler.data, s->mem);
    free(s);
    srv->freed_bytes += sizeof *s + srv->handler.state_size;
}

void *conn_state_get(struct conn *c) {
    struct server *srv = c->srv;
    if (c->hstate) return c->hstate->mem;
    struct server_state *s = srv->states;
    if (s) {
        srv->states = s->h.next;
        if (--srv->nstates < srv->states_low) srv->states_low = srv->nstates;
    } else {
        s = xcalloc(1, sizeof *s + (srv->handler.state_size ? srv->handler.state_size : 1));
        if (srv->handler.state_init) srv->handler.state_init(srv->handler.data, s->mem);
    }
    /* It may have served another connection: nothing of that one may show. */
    if (srv->handler.state_reset) srv->handler.state_reset(srv->handler.data, s->mem);
    c->hstate = s;
    return s->mem;
}

void conn_state_put(struct conn *c) {
    struct server *srv = c->srv;
    struct server_state *s = c->hstate;
    if (c->in_warm) {
        q_remove(&c->wlink);
        c->in_warm = false;
    }
    if (!s) return;
    c->hstate = NULL;
    /* Drop what it knows of this connection (its credentials) now, not at reuse. */
    if (srv->handler.state_reset) srv->handler.state_reset(srv->handler.data, s->mem);
    s->h.next = srv->states;
    srv->states = s;
    srv->nstates++;
    server__sweep_arm(srv);
}

/* ---- parking ---- */

/*
 * Parks c if its only work is a response deferred with server_defer_park (conn_settle
 * calls it only when c->may_park says the ring holds one): keeps the response's
 * request facts, then gives the kit and the state back. Not inlined: conn_settle, on
 * every request's path, stays as small as it was.
 */
static __attribute__((noinline)) void park(struct conn *c) {
    if (c->count != 1 || !c->kit || c->kit->state[c->head] != SLOT_PARKABLE || c->nwriting ||
        c->kit->parser.in_message || c->roff != c->rlen || c->paused || c->continue_left ||
        c->closing || c->draining)
        return;
    const struct http_response *r = slot_at(c, 0);
    size_t path_len = r->path.len;
    struct server_parked *p = xmalloc(sizeof *p + r->request_id_len + path_len);
    p->user_id = r->user_id;
    p->start_ns = r->start_ns;
    p->ticket = c->kit->ticket[c->head];
    p->path_len = (uint16_t)path_len;
    p->method = r->method;
    p->route = r->route;
    p->request_id_len = r->request_id_len;
    p->http10 = r->http10;
    p->head_only = r->head_only;
    p->close = r->close;
    memcpy(p->data, r->request_id, r->request_id_len);
    if (path_len) memcpy(p->data + r->request_id_len, r->path.ptr, path_len);
    c->parked = p;
    c->srv->nparked++;
    conn_kit_put(c);
    conn_state_put(c);
}

/* A kit was just taken (kit_take): the parked response goes back to the head of the ring. */
static void unpark(struct conn *c) {
    struct server_parked *p = c->parked;
    c->parked = NULL;
    c->srv->nparked--;
    struct http_response *r = conn_slot_push(c);
    r->user_id = p->user_id;
    r->start_ns = p->start_ns;
    r->method = p->method;
    r->route = p->route;
    r->http10 = p->http10;
    r->head_only = p->head_only;
    r->close = p->close;
    r->request_id_len = p->request_id_len;
    memcpy(r->request_id, p->data, p->request_id_len);
    buf_append(&r->path, p->data + p->request_id_len, p->path_len);
    *state_at(c, 0) = SLOT_PARKABLE;
    c->kit->ticket[c->head] = p->ticket;
    free(p);
}

void server__ticket_taken(struct conn *c) {
    c->slab->tickets++;
}

void server__ticket_used(struct conn *c) {
    if (c->slab->tickets) c->slab->tickets--;
}

/* ---- idle connections ---- */

static bool is_idle(const struct conn *c) {
    /* Not paused either: a paused parser waits to be resumed (conn_resume_later's
     * queue), with its kit. */
    return !c->closing && !c->draining && !conn_in_request(c) && c->count == 0 &&
           c->roff == c->rlen && !c->close_after && !c->parked && !c->paused;
}

void conn_list_leave(struct conn *c) {
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
 * it holds a handler state, the warm list the sweep releases it from).
 */
void conn_settle(struct conn *c) {
    if (c->list != LIST_NONE) return;
    if (!is_idle(c)) {
        if (c->may_park) park(c);
        return;
    }
    struct server *srv = c->srv;
    /* Idle: the last request is complete, nothing of the next one came, and its
     * parser is not paused (is_idle: a paused one waits for its resume, with its kit). */
    if (c->kit) kit_put(c);
    c->idle_at = uv_now(srv->loop);
    c->list = LIST_IDLE;
    q_push(&srv->idle, &c->ilink);
    if (c->hstate) {
        c->in_warm = true;
        q_push(&srv->warm, &c->wlink);
        server__sweep_arm(srv);
    }
}

void conn_wake(struct conn *c, size_t n) {
    conn_list_leave(c);
    kit_take(c);
    if (c->parked) unpark(c);
    memcpy(c->kit->rbuf, c->srv->scratch, n);
}

/* ---- connection slots ---- */

/* SLAB_BYTES of zeroed memory. */
static struct server_slab *slab_map(void) {
    if (slab_asan()) return xcalloc(1, SLAB_BYTES);
    void *p = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "eventd: out of memory (mapping %u bytes)\n", SLAB_BYTES);
        abort();
    }
    return p;
}

static void slab_unmap(struct server_slab *sl) {
    if (slab_asan())
        free(sl);
    else
        munmap(sl, SLAB_BYTES);
}

static void slab_new(struct server *srv) {
    struct server_slab *sl = slab_map();
    sl->next = srv->slabs;
    srv->slabs = sl;
    sl->nfree = CONN_SLAB;
    for (uint32_t i = 0; i < CONN_SLAB; i++) {
        struct conn *c = &sl->conns[i]; /* zeroed (slab_map) */
        c->srv = srv;
        c->slab = sl;
        q_push(&srv->free_conns, &c->link);
    }
    srv->nfree_conns += CONN_SLAB;
}

struct conn *server__conn_get(struct server *srv) {
    if (q_empty(&srv->free_conns)) slab_new(srv);
    struct conn *c = CONN_OF(srv->free_conns.next, link);
    q_remove(&c->link);
    if (--srv->nfree_conns < srv->free_low) srv->free_low = srv->nfree_conns;
    c->slab->nfree--;
    c->kit = NULL;
    c->hstate = NULL;
    c->cur = NULL;
    c->parked = NULL;
    c->next_waiting = NULL;
    q_init(&c->ilink);
    q_init(&c->wlink);
    q_init(&c->rlink);
    c->list = LIST_NONE;
    c->roff = c->rlen = 0;
    c->head = c->count = c->nwriting = 0;
    c->continue_left = 0;
    c->drained = 0;
    c->timing = c->reading = c->paused = c->close_after = c->closing = c->discard = false;
    c->in_waiting = c->in_warm = c->draining = c->lingering = c->eof = c->may_park = false;
    c->io.handle.data = c->timer.data = c;
    return c;
}

void conn_release(struct conn *c) {
    struct server *srv = c->srv;
    c->gen++;
    /* A write in flight was cancelled before the close callback: the kit is unused. */
    conn_kit_put(c);
    conn_state_put(c);
    if (c->parked) srv->nparked--;
    free(c->parked);
    c->parked = NULL;
    q_remove(&c->link);
    q_push(&srv->free_conns, &c->link);
    srv->nfree_conns++;
    c->slab->nfree++;
    server__sweep_arm(srv);
}

/* ---- the sweep ---- */

void server__sweep_arm(struct server *srv) {
    if (!uv_is_active((uv_handle_t *)&srv->sweep_timer) && !srv->shutting_down)
        uv_timer_start(&srv->sweep_timer, on_sweep, srv->set.idle_sweep_ms, srv->set.idle_sweep_ms);
}

/* Frees the free slabs beyond the spare slots the last period did not use;
 * returns how many free slabs stay. */
static uint32_t sweep_slabs(struct server *srv) {
    uint32_t spare = srv->free_low;
    uint32_t empty = 0;
    for (struct server_slab **p = &srv->slabs; *p;) {
        struct server_slab *sl = *p;
        if (sl->nfree < CONN_SLAB || sl->tickets) {
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
        slab_unmap(sl);
    }
    srv->free_low = srv->nfree_conns;
    return empty;
}

/*
 * Once a period: idle connections give their handler state back after
 * set.idle_sweep_ms, and the free lists give back to the heap what they did
 * not need during the last period (the fewest free entries seen since the
 * last sweep were never taken), so a burst's memory goes but a steady load
 * keeps cycling the same kits (its free lists' low-water marks stay near
 * zero, so it frees nothing). After a release the heap is trimmed: freed
 * blocks sit between live ones (connection slabs, records), where free()
 * alone cannot return them. At most once a period, and only once
 * TRIM_MIN_BYTES were released since the last trim: malloc_trim walks every
 * chunk of the heap, whose count grows with what is held (10,000 parked
 * change-feed callers are 10,000 small blocks), and a light load gives back a
 * kit or two each period: not worth a walk of the whole heap every second.
 * (Smaller releases at the heap's top go back anyway: glibc's own trim
 * threshold.)
 */
static void on_sweep(uv_timer_t *t) {
    struct server *srv = t->data;
    uint64_t now = uv_now(srv->loop);

    /* First, so that states given back now are freed at the next sweep if unused. */
    while (!q_empty(&srv->warm)) {
        struct conn *c = CONN_OF(srv->warm.next, wlink);
        if (now - c->idle_at < srv->set.idle_sweep_ms) break;
        conn_state_put(c);
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
    uint32_t empty = sweep_slabs(srv);

#ifdef __GLIBC__
    if (srv->freed_bytes >= TRIM_MIN_BYTES) {
        malloc_trim(0);
        LOG(LOG_DEBUG, "returned idle memory: ~%zu KiB freed since the last trim",
            srv->freed_bytes / 1024);
        srv->freed_bytes = 0;
    }
#endif
    if (q_empty(&srv->warm) && !srv->kits && !srv->states && !empty) uv_timer_stop(t);
}

void server__pool_destroy(struct server *srv) {
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
    /* Slabs with open connections (no shutdown) stay: libuv still knows their handles.
     * What parked ones keep goes now: no ticket is looked at any more (on_server_gone). */
    for (struct server_link *q = srv->conns.next; q != &srv->conns; q = q->next) {
        struct conn *c = CONN_OF(q, link);
        free(c->parked);
        c->parked = NULL;
    }
    for (struct server_slab **p = &srv->slabs; *p;) {
        struct server_slab *sl = *p;
        if (sl->nfree < CONN_SLAB) {
            p = &sl->next;
            continue;
        }
        *p = sl->next;
        slab_unmap(sl);
    }
}
