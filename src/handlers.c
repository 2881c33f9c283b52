/*
 * handlers: see handlers.h.
 *
 * Per connection there is one request state: the route, the authenticated
 * user and the body decoder with its arena. Routing and authentication run
 * when the headers are complete, so a bad path or bad credentials are
 * answered without decoding the body; the decoder then consumes the body
 * chunk by chunk, and the endpoint runs when the request is complete.
 *
 * Every /v2 response carries the store's latest LSN, so it leaves only
 * once everything it could have seen is acknowledged: a read never shows a
 * write that could still be lost.
 */
#include "handlers.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "json.h"
#include "router.h"

#define ARENA_BLOCK 16384

struct req_state {
    struct arena arena;
    struct json_decoder dec;
    struct route route;
    /* The caller, by id: a record pointer could be freed (a rotated key, an
     * undone write) between the headers and the end of the body. */
    uint64_t user_id;
    bool decoding;
    /* The Authorization header that last verified on this connection, and
     * what it verified as: a keep-alive client skips the base64 and the hash. */
    struct buf auth_seen;
    uint64_t auth_user_id;
    uint8_t auth_hash[AUTH_HASH_BYTES];
};

static void reply_error(struct http_response *r, enum err e, const char *field, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

static const char www_authenticate[] = "WWW-Authenticate: Basic realm=\"eventd\"\r\n";
static const char retry_after[] = "Retry-After: 1\r\n";

static bool is_write(uint8_t action) {
    return action == ACT_CREATE || action == ACT_UPDATE || action == ACT_DELETE;
}

/* While the disk refuses writes, a write is answered 503 before it changes anything. */
static bool storage_failing(struct handlers *h, struct http_response *r) {
    int err = db_writable(h->db);
    if (!err) return false;
    reply_error(r, ERR_STORAGE, NULL,
                "the disk refuses writes (%s); nothing was changed, retry later", strerror(-err));
    r->extra = retry_after;
    return true;
}

static void state_init(void *data, void *mem) {
    struct req_state *st = mem;
    arena_init(&st->arena, ARENA_BLOCK);
    buf_init(&st->auth_seen, 0);
}

static void state_reset(void *data, void *mem) {
    struct req_state *st = mem;
    buf_reset(&st->auth_seen);
    st->auth_user_id = 0;
}

static void state_destroy(void *data, void *mem) {
    struct req_state *st = mem;
    arena_destroy(&st->arena);
    buf_destroy(&st->auth_seen);
}

/*
 * The user behind the request's credentials, or NULL. A header identical to
 * the one that verified last on this connection is trusted again only if
 * that user still has the same key hash; anything else is checked in full.
 */
static const struct record *authenticate(struct handlers *h, struct req_state *st,
                                         const struct buf *hdr) {
    if (st->auth_user_id && hdr->len == st->auth_seen.len &&
        memcmp(hdr->ptr, st->auth_seen.ptr, hdr->len) == 0) {
        const struct record *u = index_get(&h->db->index, st->auth_user_id);
        if (u && u->type == REC_USER && u->v[USER_KEY_HASH].s.len == AUTH_HASH_BYTES &&
            memcmp(u->v[USER_KEY_HASH].s.ptr, st->auth_hash, AUTH_HASH_BYTES) == 0)
            return u;
    }
    st->auth_user_id = 0;
    const struct record *u = auth_check(&h->db->index, (struct slice){hdr->ptr, hdr->len});
    if (u && u->v[USER_KEY_HASH].s.len == AUTH_HASH_BYTES) {
        buf_reset(&st->auth_seen);
        buf_append(&st->auth_seen, hdr->ptr, hdr->len);
        st->auth_user_id = u->id;
        memcpy(st->auth_hash, u->v[USER_KEY_HASH].s.ptr, AUTH_HASH_BYTES);
    }
    return u;
}

/* {"Status":"ok","Result": */
static void ok_open(struct http_response *r) {
    r->status = 200;
    buf_reset(&r->body);
    buf_append_str(&r->body, "{\"Status\":\"ok\",\"Result\":");
}

static void reply_record(struct http_response *r, const struct record *rec) {
    ok_open(r);
    json_write_record(&r->body, rec, false);
    buf_append_char(&r->body, '}');
}

static void reply_error(struct http_response *r, enum err e, const char *field, const char *fmt,
                        ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    http_response_error(r, e, field, msg);
}

static void no_content(struct http_response *r) {
    r->status = 204;
    r->no_body = true;
    buf_reset(&r->body);
}

/* The caller's record of this type with this id, or NULL (also for other users' records). */
static struct record *owned(struct handlers *h, const struct req_state *st, uint64_t id) {
    struct record *r = index_get(&h->db->index, id);
    if (!r || r->type != st->route.type || r->user_id != st->user_id) return NULL;
    return r;
}

static void not_found(struct http_response *r, const struct req_state *st) {
    const struct kind_desc *k = record_kind(st->route.type);
    reply_error(r, ERR_NOT_FOUND, NULL, "no %s with ID %llu", k->path,
                (unsigned long long)st->route.id);
}

/* Reports a decoding error; returns true if there was one. */
static bool body_failed(struct req_state *st, struct http_response *r) {
    if (json_decoder_finish(&st->dec) == 0) return false;
    http_response_error(r, st->dec.err, st->dec.err_field, st->dec.err_msg);
    return true;
}

/*
 * Events link a theme and an address. A linked record must be the caller's,
 * of the right kind, and not linked to another event. Returns true if fine.
 */
static bool check_link(struct handlers *h, struct req_state *st, struct http_response *r,
                       const union value *vals, uint64_t event_id) {
    static const struct {
        int field;
        uint8_t type;
        const char *what;
    } links[] = {{EVENT_THEME_ID, REC_THEME, "theme"}, {EVENT_ADDRESS_ID, REC_ADDRESS, "address"}};
    for (int i = 0; i < 2; i++) {
        uint64_t id = vals[links[i].field].i;
        if (id == 0) continue;
        const char *name = record_event.fields[links[i].field].name;
        struct record *t = index_get(&h->db->index, id);
        if (!t || t->type != links[i].type || t->user_id != st->user_id) {
            reply_error(r, ERR_INVALID_FIELD, name, "%s %llu is not one of your %s records", name,
                        (unsigned long long)id, links[i].what);
            return false;
        }
        if (t->event_id && t->event_id != event_id) {
            reply_error(r, ERR_CONFLICT, name, "%s %llu already belongs to event %llu",
                        links[i].what, (unsigned long long)id, (unsigned long long)t->event_id);
            return false;
        }
    }
    return true;
}

static void do_create(struct handlers *h, struct req_state *st, struct http_response *r) {
    if (body_failed(st, r)) return;
    const struct kind_desc *k = record_kind(st->route.type);
    union value vals[RECORD_MAX_FIELDS];
    record_defaults(k, vals);
    for (int i = 0; i < k->nfields; i++)
        if (st->dec.present & (UINT64_C(1) << i)) vals[i] = st->dec.vals[i];
    if (k->type == REC_EVENT && !check_link(h, st, r, vals, 0)) return;
    uint64_t id;
    int rc = db_take_id(h->db, &id);
    if (rc == -ERANGE) {
        reply_error(r, ERR_UNAVAILABLE, NULL, "the id space is used up");
        return;
    }
    if (rc < 0) {
        /* Only on a disk slower than a whole block of creates. */
        reply_error(r, ERR_UNAVAILABLE, NULL, "new ids are being reserved on disk; retry");
        r->extra = retry_after;
        return;
    }
    struct record *rec = record_build(k, id, st->user_id, vals);
    r->lsn = db_put(h->db, rec);
    reply_record(r, index_get(&h->db->index, id));
}

static void do_update(struct handlers *h, struct req_state *st, struct http_response *r) {
    struct record *old = owned(h, st, st->route.id);
    if (!old) {
        not_found(r, st);
        return;
    }
    if (body_failed(st, r)) return;
    if (st->dec.has_id && st->dec.id_invalid) {
        reply_error(r, ERR_INVALID_FIELD, "ID", "ID must be a positive integer");
        return;
    }
    if (st->dec.has_id && st->dec.id != st->route.id) {
        reply_error(r, ERR_ID_MISMATCH, "ID", "ID %llu in the body differs from %llu in the path",
                    (unsigned long long)st->dec.id, (unsigned long long)st->route.id);
        return;
    }
    const struct kind_desc *k = record_kind(st->route.type);
    union value vals[RECORD_MAX_FIELDS];
    for (int i = 0; i < k->nfields; i++)
        vals[i] = (st->dec.present & (UINT64_C(1) << i)) ? st->dec.vals[i] : old->v[i];
    if (k->type == REC_EVENT && !check_link(h, st, r, vals, old->id)) return;
    r->lsn = db_put(h->db, record_build(k, old->id, old->user_id, vals));
    no_content(r);
}

static void do_get(struct handlers *h, struct req_state *st, struct http_response *r) {
    struct record *rec = owned(h, st, st->route.id);
    if (!rec) {
        not_found(r, st);
        return;
    }
    if (rec->type != REC_EVENT) {
        reply_record(r, rec);
        return;
    }
    /* An event answers with its theme and address embedded (null when unlinked). */
    ok_open(r);
    json_write_record(&r->body, rec, true);
    static const struct {
        int field;
        const char *key;
    } embeds[] = {{EVENT_THEME_ID, ",\"Theme\":"}, {EVENT_ADDRESS_ID, ",\"Address\":"}};
    for (int i = 0; i < 2; i++) {
        buf_append_str(&r->body, embeds[i].key);
        struct record *t =
            rec->v[embeds[i].field].i ? index_get(&h->db->index, rec->v[embeds[i].field].i) : NULL;
        if (t)
            json_write_record(&r->body, t, false);
        else
            buf_append_str(&r->body, "null");
    }
    buf_append_str(&r->body, "}}");
}

static void do_delete(struct handlers *h, struct req_state *st, struct http_response *r) {
    struct record *rec = owned(h, st, st->route.id);
    if (!rec) {
        not_found(r, st);
        return;
    }
    if (rec->type != REC_EVENT && rec->event_id) {
        const struct kind_desc *k = record_kind(rec->type);
        reply_error(r, ERR_CONFLICT, NULL,
                    "%s %llu belongs to event %llu: unlink it from the event first", k->path,
                    (unsigned long long)rec->id, (unsigned long long)rec->event_id);
        return;
    }
    r->lsn = db_delete(h->db, rec->id);
    no_content(r);
}

/* Reads "limit" and "cursor" from the query string. Returns false after answering 400. */
static bool list_params(struct handlers *h, struct slice q, struct http_response *r,
                        uint32_t *limit, uint64_t *cursor) {
    *limit = h->lim.list_default;
    *cursor = 0;
    const char *p = q.ptr, *end = q.ptr + q.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        struct slice name = {p, (size_t)((eq ? eq : stop) - p)};
        struct slice val =
            eq ? (struct slice){eq + 1, (size_t)(stop - eq - 1)} : (struct slice){stop, 0};
        uint64_t v;
        if (slice_eq(name, "limit", 5)) {
            if (u64_parse(val.ptr, val.len, h->lim.list_max, &v) < 0) {
                reply_error(r, ERR_INVALID_QUERY, "limit", "limit must be an integer from 1 to %u",
                            h->lim.list_max);
                return false;
            }
            *limit = (uint32_t)v;
        } else if (slice_eq(name, "cursor", 6)) {
            if (record_parse_id(val.ptr, val.len, &v) < 0) {
                reply_error(r, ERR_INVALID_QUERY, "cursor",
                            "cursor must be the NextCursor of a previous page");
                return false;
            }
            *cursor = v;
        }
        p = stop + 1;
    }
    return true;
}

/* Newest first: ids below the cursor, walking the ascending list from its end. */
static void do_list(struct handlers *h, struct req_state *st, struct http_request *req,
                    struct http_response *r) {
    uint32_t limit;
    uint64_t cursor;
    if (!list_params(h, req->query, r, &limit, &cursor)) return;
    const struct id_list *l = index_owned(&h->db->index, st->user_id, st->route.type);
    uint32_t hi = cursor ? id_list_lower_bound(l, cursor) : l->len; /* first index not to show */
    ok_open(r);
    buf_append_str(&r->body, "{\"Items\":[");
    uint32_t n = 0;
    uint32_t i = hi;
    while (i > 0 && n < limit) {
        struct record *rec = index_get(&h->db->index, l->ids[--i]);
        if (n++) buf_append_char(&r->body, ',');
        json_write_record(&r->body, rec, false);
    }
    buf_append_str(&r->body, "],\"NextCursor\":");
    if (i > 0 && n > 0) {
        buf_append_char(&r->body, '"');
        buf_append_u64(&r->body, l->ids[i]);
        buf_append_char(&r->body, '"');
    } else {
        buf_append_str(&r->body, "null");
    }
    buf_append_str(&r->body, "}}");
}

static enum server_headers_result on_headers(void *data, void *mem, struct http_request *req,
                                             struct http_response *r) {
    struct handlers *h = data;
    struct req_state *st = mem;
    st->decoding = false;
    st->user_id = 0;
    struct slice base = {h->lim.base_path, strlen(h->lim.base_path)};
    enum err e = router_match(base, req->path, req->method, &st->route);
    if (e == ERR_METHOD_NOT_ALLOWED) {
        http_response_error(r, e, NULL, NULL);
        r->extra = st->route.allow;
        return SERVER_ANSWERED;
    }
    if (e != ERR_NONE) {
        http_response_error(r, e, NULL, NULL);
        return SERVER_ANSWERED;
    }
    if (st->route.action == ACT_HEALTH) {
        /* A load balancer takes a shard whose disk refuses writes out of rotation. */
        if (storage_failing(h, r)) return SERVER_ANSWERED;
        buf_reset(&r->body);
        buf_append_str(&r->body, "{\"Status\":\"ok\"}");
        return SERVER_ANSWERED;
    }
    const struct record *user = authenticate(h, st, &req->kept->authorization);
    if (!user) {
        http_response_error(r, ERR_UNAUTHORIZED, NULL,
                            req->kept->authorization.len
                                ? "invalid credentials"
                                : "this call needs HTTP Basic authentication "
                                  "with your username and API key");
        r->extra = www_authenticate;
        return SERVER_ANSWERED;
    }
    st->user_id = user->id;
    if (is_write(st->route.action) && storage_failing(h, r)) return SERVER_ANSWERED;
    if (st->route.action == ACT_CREATE || st->route.action == ACT_UPDATE) {
        arena_reset(&st->arena);
        json_decoder_begin(&st->dec, record_kind(st->route.type), &st->arena,
                           h->lim.max_string_bytes);
        st->decoding = true;
    }
    return SERVER_READ_BODY;
}

static void on_body(void *data, void *mem, const char *ptr, size_t len) {
    struct req_state *st = mem;
    if (st->decoding) json_decoder_feed(&st->dec, ptr, len);
}

/* Runs the endpoint of a complete request. */
static void dispatch(struct handlers *h, struct req_state *st, struct http_request *req,
                     struct http_response *r) {
    const struct record *user = db_get(h->db, st->user_id);
    if (!user || user->type != REC_USER) {
        /* The user was removed (or its creation undone) while the body came. */
        http_response_error(r, ERR_UNAUTHORIZED, NULL, "invalid credentials");
        r->extra = www_authenticate;
        return;
    }
    if (is_write(st->route.action) && storage_failing(h, r)) return;
    switch (st->route.action) {
    case ACT_CREATE:
        do_create(h, st, r);
        break;
    case ACT_UPDATE:
        do_update(h, st, r);
        break;
    case ACT_GET:
        do_get(h, st, r);
        break;
    case ACT_DELETE:
        do_delete(h, st, r);
        break;
    case ACT_LIST:
        do_list(h, st, req, r);
        break;
    default:
        http_response_error(r, ERR_INTERNAL, NULL, NULL);
    }
}

static void on_complete(void *data, void *mem, struct http_request *req, struct http_response *r) {
    struct handlers *h = data;
    struct req_state *st = mem;
    dispatch(h, st, req, r);
    /* Whatever this response shows must be acknowledged before it leaves. */
    if (r->lsn < db_visible_lsn(h->db)) r->lsn = db_visible_lsn(h->db);
    if (st->decoding) {
        json_decoder_end(&st->dec);
        st->decoding = false;
    }
}

void handlers_init(struct handlers *h, struct db *db, const struct handler_limits *lim,
                   struct server_handler *out) {
    h->db = db;
    h->lim = *lim;
    memset(out, 0, sizeof *out);
    out->data = h;
    out->state_size = sizeof(struct req_state);
    out->state_init = state_init;
    out->state_reset = state_reset;
    out->state_destroy = state_destroy;
    out->on_headers = on_headers;
    out->on_body = on_body;
    out->on_complete = on_complete;
}
