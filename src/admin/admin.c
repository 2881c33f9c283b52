/*
 * admin: the admin API (docs/ACCOUNTS.md): users created, rotated, removed
 * and listed, and admin tokens created, with the username in the path so
 * that a load balancer can route by it.
 *
 * Who may call it: a client of the local Unix socket (DATA/admin.sock,
 * mode 0600: whoever can open it can read the data directory anyway), and,
 * only with --admin-on-listener, a client of the listener that presents an
 * admin token (Authorization: Bearer), stored as a BLAKE2b hash like API
 * keys and compared in constant time against every token. The token is
 * checked again when the request completes, so one revoked while a body
 * came changes nothing. Answers that carry a key or a token say
 * Cache-Control: no-store.
 */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "admin/admin.h"
#include "common/json_write.h"
#include "common/log.h"
#include "core/reply.h"

enum admin_route { A_LIST, A_GET, A_CREATE, A_REMOVE, A_ROTATE, A_TOKEN, A_TOKEN_REVOKE, A_LIMITS };

/* PUT /admin/users/NAME/limits: a user's own quota limits (docs/ACCOUNTS.md). */
static const struct form_field limit_fields[] = {{"MaxRecords", 20}, {"MaxBytes", 20}};
static const int limit_field_ids[] = {USER_MAX_RECORDS, USER_MAX_BYTES};

static const char prefix[] = "/admin/";

static bool refuse(struct http_response *r, enum err e, const char *allow) {
    http_response_error(r, e, NULL, NULL);
    r->extra = allow;
    return false;
}

/* Matches the path and method; false with r answered (404/405) when it does not. */
static bool route(struct admin_state *st, struct http_request *req, struct http_response *r) {
    struct slice p = {req->path.ptr + sizeof prefix - 1, req->path.len - (sizeof prefix - 1)};
    uint8_t m = req->method;
    bool get = m == HTTP_GET || m == HTTP_HEAD;
    struct slice name;
    if (slice_eq(p, "users", 5)) {
        if (!get) return refuse(r, ERR_METHOD_NOT_ALLOWED, "Allow: GET, HEAD\r\n");
        st->page = A_LIST;
        return true;
    }
    if (p.len > 6 && memcmp(p.ptr, "users/", 6) == 0) {
        name = (struct slice){p.ptr + 6, p.len - 6};
        const char *slash = memchr(name.ptr, '/', name.len);
        if (slash) {
            struct slice tail = {slash, (size_t)(name.ptr + name.len - slash)};
            if (slice_eq(tail, "/limits", 7)) {
                if (m != HTTP_PUT) return refuse(r, ERR_METHOD_NOT_ALLOWED, "Allow: PUT\r\n");
                st->page = A_LIMITS;
            } else {
                if (!slice_eq(tail, "/key", 4)) return refuse(r, ERR_NOT_FOUND, NULL);
                if (m != HTTP_POST) return refuse(r, ERR_METHOD_NOT_ALLOWED, "Allow: POST\r\n");
                st->page = A_ROTATE;
            }
            name.len = (size_t)(slash - name.ptr);
        } else if (get) {
            st->page = A_GET;
        } else if (m == HTTP_PUT) {
            st->page = A_CREATE;
        } else if (m == HTTP_DELETE) {
            st->page = A_REMOVE;
        } else {
            return refuse(r, ERR_METHOD_NOT_ALLOWED, "Allow: GET, HEAD, PUT, DELETE\r\n");
        }
    } else if (p.len > 7 && memcmp(p.ptr, "tokens/", 7) == 0) {
        name = (struct slice){p.ptr + 7, p.len - 7};
        if (memchr(name.ptr, '/', name.len)) return refuse(r, ERR_NOT_FOUND, NULL);
        if (m == HTTP_PUT)
            st->page = A_TOKEN;
        else if (m == HTTP_DELETE)
            st->page = A_TOKEN_REVOKE;
        else
            return refuse(r, ERR_METHOD_NOT_ALLOWED, "Allow: PUT, DELETE\r\n");
    } else {
        return refuse(r, ERR_NOT_FOUND, NULL);
    }
    if (name.len == 0 || name.len >= sizeof st->name) return refuse(r, ERR_NOT_FOUND, NULL);
    memcpy(st->name, name.ptr, name.len);
    st->name[name.len] = 0;
    const char *why = auth_check_username(st->name);
    if (why) {
        http_response_error(r, ERR_INVALID_FIELD, "username", why);
        return false;
    }
    return true;
}

/*
 * The id of the admin token that a Bearer header value presents, or 0; its
 * hash goes to hash. Every token is compared. The token is read by the rule
 * of Basic credentials (auth_credentials): a trailing space or tab is no
 * part of it.
 */
static uint64_t token_match(struct handlers *h, struct slice hdr, uint8_t hash[AUTH_HASH_BYTES]) {
    struct slice t;
    if (!auth_credentials(hdr, "Bearer", &t)) return 0;
    auth_hash_key(t.ptr, t.len, hash);
    const struct id_list *l = db_owned(h->db, DB_SYSTEM, REC_ADMIN);
    uint64_t found = 0;
    for (uint32_t i = 0; i < l->len; i++) {
        const struct record *a = db_get(h->db, l->ids[i]);
        if (!a || record_get(a, ADMIN_TOKEN_HASH).s.len != AUTH_HASH_BYTES) continue;
        uint64_t same =
            sodium_memcmp(record_get(a, ADMIN_TOKEN_HASH).s.ptr, hash, AUTH_HASH_BYTES) == 0;
        found |= l->ids[i] & (0 - same);
    }
    return found;
}

/* The token that let the request in is still an admin token (revocation means now). */
static bool token_still_valid(const struct handlers *h, const struct admin_state *st) {
    const struct record *a = db_get(h->db, st->admin_token_id);
    return a && a->type == REC_ADMIN && record_get(a, ADMIN_TOKEN_HASH).s.len == AUTH_HASH_BYTES &&
           memcmp(record_get(a, ADMIN_TOKEN_HASH).s.ptr, st->admin_token_hash, AUTH_HASH_BYTES) ==
               0;
}

static void unauthorized(const struct handlers *h, struct http_response *r, const char *msg) {
    http_response_error(r, ERR_UNAUTHORIZED, NULL, msg);
    r->extra = "WWW-Authenticate: Bearer realm=\"eventd-admin\"\r\n";
    /* A token change not yet durable may be why: the answer waits for it, as every
     * answer does, and becomes 503 if its batch fails. */
    r->lsn = db_visible_lsn(h->db);
}

bool admin_headers(struct handlers *h, struct admin_state *st, struct http_request *req,
                   struct http_response *r, enum server_headers_result *res) {
    /* The listener that accepted the connection says it, never an address. */
    bool local = req->peer.local;
    if (!local && !h->set.admin_on_listener) return false; /* not served here: 404 later */
    if (req->path.len < sizeof prefix - 1 || memcmp(req->path.ptr, prefix, sizeof prefix - 1) != 0)
        return false;
    *res = SERVER_ANSWERED;
    /* The state's memory may hold another surface's request: set what is read later. */
    st->body.kind = BODY_NONE;
    st->admin_token_id = 0;
    if (!local) {
        st->admin_token_id = token_match(
            h, (struct slice){req->kept->authorization.ptr, req->kept->authorization.len},
            st->admin_token_hash);
        if (!st->admin_token_id) {
            unauthorized(h, r, "the admin API needs Authorization: Bearer with an admin token");
            return true;
        }
    }
    if (!route(st, req, r)) return true;
    bool writes = st->page != A_LIST && st->page != A_GET;
    /* New users and tokens add data: the storage guard may refuse them. Removals, new keys
     * and limits replace or free what is there, and must work when space is short. */
    bool adds = st->page == A_CREATE || st->page == A_TOKEN;
    if (adds ? reply_if_no_room(h, r) : writes && reply_if_storage_failing(h, r)) return true;
    if (st->page == A_LIMITS) {
        if (!account_body_begin(&st->body, req, r, limit_fields, 2)) return true;
        st->body.numbers = true;
        st->body.form.strict = true; /* a mistyped limit is refused, never ignored */
    }
    *res = SERVER_READ_BODY; /* answered at completion; other bodies are read and ignored */
    return true;
}

/* A user's own limit as stored (record.h: limit + 1, 0 for the server's default), as JSON. */
static void write_own_limit(struct buf *b, const char *key, uint64_t stored) {
    buf_append_str(b, key);
    if (stored)
        buf_append_u64(b, stored - 1);
    else
        buf_append_str(b, "null");
}

/* ,"Quota":{...}: usage, the limits in effect (0: none) and the user's own (null: default). */
static void write_quota(struct handlers *h, struct buf *b, const struct record *u) {
    struct index_usage use = db_usage(h->db, u->id);
    buf_append_str(b, ",\"Quota\":{\"Records\":");
    buf_append_u64(b, use.records);
    buf_append_str(b, ",\"MaxRecords\":");
    buf_append_u64(b, record_user_limit(u, USER_MAX_RECORDS, h->set.max_records_per_user));
    buf_append_str(b, ",\"Bytes\":");
    buf_append_u64(b, use.bytes);
    buf_append_str(b, ",\"MaxBytes\":");
    buf_append_u64(b, record_user_limit(u, USER_MAX_BYTES, h->set.max_bytes_per_user));
    write_own_limit(b, ",\"OwnMaxRecords\":", record_get(u, USER_MAX_RECORDS).i);
    write_own_limit(b, ",\"OwnMaxBytes\":", record_get(u, USER_MAX_BYTES).i);
    buf_append_char(b, '}');
}

static void write_user(struct handlers *h, struct buf *b, const struct record *u, const char *key) {
    buf_append_str(b, "{\"Username\":");
    json_write_string(b, record_get(u, USER_NAME).s.ptr, record_get(u, USER_NAME).s.len);
    buf_append_str(b, ",\"UserID\":");
    buf_append_u64(b, u->id);
    if (key) {
        buf_append_str(b, ",\"APIKey\":\"");
        buf_append_str(b, key);
        buf_append_str(b, "\"}");
        return;
    }
    buf_append_str(b, record_get(u, USER_KEY_HASH).s.len == AUTH_HASH_BYTES ? ",\"HasKey\":true"
                                                                            : ",\"HasKey\":false");
    buf_append_str(b, record_get(u, USER_PASSWORD_HASH).s.len ? ",\"HasPassword\":true"
                                                              : ",\"HasPassword\":false");
    write_quota(h, b, u);
    buf_append_char(b, '}');
}

/*
 * PUT /admin/users/NAME/limits: {"MaxRecords":N,"MaxBytes":N} (or a form);
 * a member absent keeps that limit, null (in a form: "") gives it back the
 * server's default, N sets the user's own, 0 meaning no limit; any other
 * member, or a JSON string, is refused. Answers the user.
 */
static void set_limits(struct handlers *h, struct admin_state *st, const struct record *u,
                       struct http_response *r) {
    if (!account_body_finish(&st->body, r)) return;
    uint64_t stored[2];
    for (int i = 0; i < 2; i++) {
        stored[i] = record_get(u, limit_field_ids[i]).i;
        struct slice v;
        if (!form_get(&st->body.form, (size_t)i, &v)) continue;
        uint64_t n = 0;
        bool zero = v.len == 1 && v.ptr[0] == '0';
        if (v.len && !zero && u64_parse(v.ptr, v.len, RECORD_LIMIT_MAX, &n) < 0) {
            reply_error(r, ERR_INVALID_FIELD, limit_fields[i].name,
                        "%s must be null (the server's default) or an integer from 0 (no limit) "
                        "to %llu",
                        limit_fields[i].name, (unsigned long long)RECORD_LIMIT_MAX);
            return;
        }
        stored[i] = v.len ? n + 1 : 0;
    }
    uint64_t id = u->id;
    r->lsn = db_put_user_limits(h->db, id, stored[0], stored[1]);
    LOG(LOG_INFO, "admin: limits of user %s set", st->name);
    reply_ok_open(r);
    write_user(h, &r->body, db_get(h->db, id), NULL);
    buf_append_char(&r->body, '}');
}

static bool take_id(struct handlers *h, struct http_response *r, uint64_t *id) {
    if (db_take_id(h->db, id) == 0) return true;
    http_response_error(r, ERR_UNAVAILABLE, NULL, "no id available now; retry");
    r->extra = hdr_retry_after;
    return false;
}

/* PUT /admin/tokens/NAME (create or replace) and DELETE (revoke). */
static void admin_token(struct handlers *h, struct admin_state *st, struct http_response *r) {
    char key[AUTH_KEY_CHARS + 1];
    if (st->page == A_TOKEN_REVOKE) {
        uint64_t id = db_admin_token(h->db, st->name);
        if (!id) {
            reply_error(r, ERR_NOT_FOUND, NULL, "no admin token %s", st->name);
            return;
        }
        r->lsn = db_delete(h->db, id);
        LOG(LOG_INFO, "admin: revoked admin token %s", st->name);
        reply_no_content(r);
        return;
    }
    /* A token of that name is replaced: the old one stops at once. */
    uint64_t id = db_admin_token(h->db, st->name);
    bool replaced = id != 0;
    if (!replaced && !take_id(h, r, &id)) return;
    auth_new_key(key);
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(key, strlen(key), hash);
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_admin, v);
    v[ADMIN_NAME].s.ptr = st->name;
    v[ADMIN_NAME].s.len = (uint32_t)strlen(st->name);
    v[ADMIN_TOKEN_HASH].s.ptr = (const char *)hash;
    v[ADMIN_TOKEN_HASH].s.len = AUTH_HASH_BYTES;
    r->lsn = db_put(h->db, record_build(&record_admin, id, 0, v));
    LOG(LOG_INFO, "admin: %s admin token %s", replaced ? "replaced" : "created", st->name);
    reply_ok_open(r);
    r->status = replaced ? 200 : 201;
    buf_append_str(&r->body, "{\"Name\":");
    json_write_string(&r->body, st->name, strlen(st->name));
    buf_append_str(&r->body, ",\"Token\":\"");
    buf_append_str(&r->body, key);
    buf_append_str(&r->body, "\"}}");
    r->extra = hdr_no_store;
    sodium_memzero(key, sizeof key);
}

void admin_complete(struct handlers *h, struct admin_state *st, struct http_request *req,
                    struct http_response *r) {
    (void)req;
    if (st->admin_token_id && !token_still_valid(h, st)) {
        unauthorized(h, r,
                     "the admin token was replaced or revoked while the request came; "
                     "nothing was changed");
        return;
    }
    bool about_user = st->page != A_LIST && st->page != A_TOKEN && st->page != A_TOKEN_REVOKE;
    const struct record *u = about_user ? db_user_by_name(h->db, st->name, strlen(st->name)) : NULL;
    if (about_user && st->page != A_CREATE && !u) {
        reply_error(r, ERR_NOT_FOUND, NULL, "no user %s", st->name);
        return;
    }
    char key[AUTH_KEY_CHARS + 1];
    switch (st->page) {
    case A_LIST: {
        const struct id_list *l = db_owned(h->db, DB_SYSTEM, REC_USER);
        reply_ok_open(r);
        buf_append_str(&r->body, "{\"Items\":[");
        for (uint32_t i = 0; i < l->len; i++) {
            if (i) buf_append_char(&r->body, ',');
            write_user(h, &r->body, db_get(h->db, l->ids[i]), NULL);
        }
        buf_append_str(&r->body, "]}}");
        return;
    }
    case A_GET:
        reply_ok_open(r);
        write_user(h, &r->body, u, NULL);
        buf_append_char(&r->body, '}');
        return;
    case A_CREATE: {
        if (u) {
            reply_error(r, ERR_CONFLICT, "username", "user %s exists already", st->name);
            return;
        }
        uint64_t id;
        if (!take_id(h, r, &id)) return;
        auth_new_key(key);
        r->lsn = db_put_user(h->db, id, st->name, key);
        LOG(LOG_INFO, "admin: created user %s (id %llu)", st->name, (unsigned long long)id);
        metrics_account(h->metrics, MA_KEY_ISSUED);
        reply_ok_open(r);
        r->status = 201;
        write_user(h, &r->body, db_get(h->db, id), key);
        buf_append_char(&r->body, '}');
        r->extra = hdr_no_store;
        break;
    }
    case A_ROTATE: {
        /* u is the record the write replaces: freed at once where writes are acknowledged
         * at once (--fsync interval, never). */
        uint64_t id = u->id;
        auth_new_key(key);
        r->lsn = db_put_user(h->db, id, st->name, key);
        LOG(LOG_INFO, "admin: new API key for user %s", st->name);
        metrics_account(h->metrics, MA_KEY_ISSUED);
        reply_ok_open(r);
        write_user(h, &r->body, db_get(h->db, id), key);
        buf_append_char(&r->body, '}');
        r->extra = hdr_no_store;
        break;
    }
    case A_REMOVE: {
        uint64_t id = u->id;
        /* Its sessions first: nothing of the account is left to sign in with. Its
         * idempotency keys too: they answer for no one now. */
        static const uint8_t gone[] = {REC_SESSION, REC_IDEM};
        for (size_t k = 0; k < sizeof gone; k++) {
            const struct id_list *l = db_owned(h->db, id, gone[k]);
            while (l->len) {
                db_delete(h->db, l->ids[l->len - 1]);
                l = db_owned(h->db, id, gone[k]);
            }
        }
        r->lsn = db_delete(h->db, id);
        LOG(LOG_INFO, "admin: removed user %s", st->name);
        reply_no_content(r);
        return;
    }
    case A_LIMITS:
        set_limits(h, st, u, r);
        return;
    case A_TOKEN_REVOKE:
    case A_TOKEN:
        admin_token(h, st, r);
        return;
    default:
        http_response_error(r, ERR_INTERNAL, NULL, NULL);
        return;
    }
    sodium_memzero(key, sizeof key);
}

void admin_body(struct admin_state *st, const char *ptr, size_t len) {
    if (st->body.kind != BODY_NONE) account_body_feed(&st->body, ptr, len);
}

void admin_request_end(struct admin_state *st) {
    if (st->body.kind != BODY_NONE) account_body_end(&st->body);
}
