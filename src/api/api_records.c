/*
 * api_records: the /v2 records (themes, addresses, events): create, update,
 * read, list and delete, over the data layer. Routing and authentication
 * run when the headers are complete, so a bad path or bad credentials are
 * answered without decoding the body; the JSON decoder then consumes the
 * body chunk by chunk, and the endpoint runs when the request is complete.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "common/varint.h"
#include "core/etag.h"
#include "core/origin.h"
#include "core/reply.h"

/* metrics_api_route counts on these layouts. */
_Static_assert(REC_ADDRESS == REC_THEME + 1 && REC_EVENT == REC_THEME + 2, "record kinds");
_Static_assert(ACT_LIST == ACT_CREATE + 1 && ACT_GET == ACT_CREATE + 2 &&
                   ACT_UPDATE == ACT_CREATE + 3 && ACT_DELETE == ACT_CREATE + 4,
               "router actions");
_Static_assert(MR_THEME_LIST == MR_THEME_CREATE + 1 && MR_THEME_GET == MR_THEME_CREATE + 2 &&
                   MR_THEME_UPDATE == MR_THEME_CREATE + 3 &&
                   MR_THEME_DELETE == MR_THEME_CREATE + 4 &&
                   MR_ADDRESS_CREATE == MR_THEME_CREATE + 5 &&
                   MR_EVENT_CREATE == MR_THEME_CREATE + 10 &&
                   MR_EVENT_DELETE == MR_THEME_CREATE + 14,
               "metrics routes");

static bool is_write(uint8_t action) {
    return action == ACT_CREATE || action == ACT_UPDATE || action == ACT_DELETE;
}

/* A write refused before it changes anything (503, or 507 unless it deletes); true if so. */
static bool write_refused(struct handlers *h, uint8_t action, struct http_response *r) {
    if (!is_write(action)) return false;
    return action == ACT_DELETE ? reply_if_storage_failing(h, r) : reply_if_no_room(h, r);
}

/*
 * The quota of user u (docs/ACCOUNTS.md): a write that adds `add` records
 * and replaces a record of old_size bytes (0 for none) by one of new_size
 * must keep the user within its limits; a write that shrinks always may. One
 * lookup, no allocation. Returns false after answering 403.
 */
static bool within_quota(struct handlers *h, const struct record *u, uint64_t add,
                         uint64_t old_size, uint64_t new_size, struct http_response *r) {
    uint64_t user_id = u->id;
    uint64_t max_records = record_user_limit(u, USER_MAX_RECORDS, h->set.max_records_per_user);
    uint64_t max_bytes = record_user_limit(u, USER_MAX_BYTES, h->set.max_bytes_per_user);
    if (!(max_records && add) && !(max_bytes && new_size > old_size)) return true;
    struct index_usage use = db_usage(h->db, user_id);
    if (max_records && add && use.records + add > max_records) {
        reply_error(r, ERR_QUOTA, "MaxRecords",
                    "quota exceeded: this account holds %llu records and may hold %llu "
                    "(MaxRecords); delete some to make room",
                    (unsigned long long)use.records, (unsigned long long)max_records);
        return false;
    }
    if (max_bytes && new_size > old_size && use.bytes - old_size + new_size > max_bytes) {
        reply_error(r, ERR_QUOTA, "MaxBytes",
                    "quota exceeded: this account holds %llu bytes of records and may hold %llu "
                    "(MaxBytes); this write needs %llu more: delete or shorten records",
                    (unsigned long long)use.bytes, (unsigned long long)max_bytes,
                    (unsigned long long)(new_size - old_size));
        return false;
    }
    return true;
}

/* The cached user of this connection still has the key hash it verified with. */
static bool auth_still_valid(struct handlers *h, struct api_conn *c, const struct record *u) {
    uint64_t gen = db_users_gen(h->db);
    if (c->auth_gen == gen) return true; /* no user record changed since */
    if (!u || u->type != REC_USER) return false;
    union value kh = record_get(u, USER_KEY_HASH);
    if (kh.s.len != AUTH_HASH_BYTES || memcmp(kh.s.ptr, c->auth_hash, AUTH_HASH_BYTES) != 0)
        return false;
    c->auth_gen = gen;
    return true;
}

/* The connection's cache now holds hdr, verified as u with key hash kh at users generation gen. */
static void remember(struct api_conn *c, const struct buf *hdr, uint64_t user_id, const uint8_t *kh,
                     uint64_t gen) {
    buf_reset(&c->auth_seen);
    buf_append(&c->auth_seen, hdr->ptr, hdr->len);
    c->auth_user_id = user_id;
    memcpy(c->auth_hash, kh, AUTH_HASH_BYTES);
    c->auth_gen = gen;
}

/*
 * The user behind the request's credentials, or NULL. Two caches spare the
 * full check (base64, the key's BLAKE2b, the user's lookup): the header that
 * verified last on this connection (a keep-alive client), then the
 * server-wide one (core/cred_cache.h: behind a balancer a pooled connection
 * carries many users in turn). A cached header is trusted again only if that
 * user still has the key hash it verified with (known without a look when no
 * user record changed since); anything else is checked in full, and what
 * verifies goes into both caches.
 */
static const struct record *authenticate(struct handlers *h, struct api_conn *c,
                                         const struct buf *hdr) {
    if (c->auth_user_id && hdr->len == c->auth_seen.len &&
        cred_same(hdr->ptr, c->auth_seen.ptr, hdr->len)) {
        const struct record *u = db_get(h->db, c->auth_user_id);
        if (auth_still_valid(h, c, u)) {
            h->creds.stats[CRED_BY_CONNECTION]++;
            return u;
        }
    }
    c->auth_user_id = 0;
    /* The server-wide cache knows a credential by its token alone, however the header
     * around it is written ("basic", extra spaces): one slot per key. */
    struct slice tok;
    bool basic = auth_credentials((struct slice){hdr->ptr, hdr->len}, "Basic", &tok);
    struct cred_entry *e = basic ? cred_cache_find(&h->creds, tok.ptr, tok.len) : NULL;
    if (e) {
        const struct record *u = db_get(h->db, e->user_id);
        remember(c, hdr, e->user_id, e->hash, e->gen);
        if (auth_still_valid(h, c, u)) {
            e->gen = c->auth_gen;
            h->creds.stats[CRED_BY_CACHE]++;
            return u;
        }
        c->auth_user_id = 0;
        cred_cache_drop(e);
    }
    h->creds.stats[CRED_FULL]++;
    const struct record *u = db_auth_check(h->db, (struct slice){hdr->ptr, hdr->len});
    if (u && record_get(u, USER_KEY_HASH).s.len == AUTH_HASH_BYTES) {
        const uint8_t *kh = (const uint8_t *)record_get(u, USER_KEY_HASH).s.ptr;
        uint64_t gen = db_users_gen(h->db);
        remember(c, hdr, u->id, kh, gen);
        if (basic) cred_cache_put(&h->creds, tok.ptr, tok.len, u->id, kh, gen);
    }
    return u;
}

/* from: the decoder rec was built from (json_write_record_decoded), or NULL. */
static void reply_record(struct http_response *r, const struct record *rec,
                         const struct json_decoder *from) {
    reply_ok_open(r);
    if (from)
        json_write_record_decoded(&r->body, rec, false, from);
    else
        json_write_record(&r->body, rec, false);
    buf_append_char(&r->body, '}');
}

/* The caller's record of this type with this id, or NULL (also for other users' records). */
static const struct record *owned(struct handlers *h, const struct api_state *st, uint64_t id) {
    return db_get_owned(h->db, id, st->route.type, st->user_id);
}

static void not_found(struct http_response *r, const struct api_state *st) {
    const struct kind_desc *k = record_kind(st->route.type);
    reply_error(r, ERR_NOT_FOUND, NULL, "no %s with ID %llu", k->path,
                (unsigned long long)st->route.id);
}

/* ---- conditional requests (README "Conditional requests") ---- */

/* The response's ETag is rec's. */
static void reply_etag(struct handlers *h, struct http_response *r, const struct record *rec) {
    etag_of(h->db, rec, &r->etag);
}

/*
 * The preconditions of a request on the existing record rec (RFC 9110
 * 13.2.2): If-Match, then If-None-Match. A failed If-Match, or a matching
 * If-None-Match on a write, answers 412; a matching If-None-Match on a read
 * answers 304; both with rec's ETag. A value that is not a list of entity
 * tags (or "*") answers 400. Returns true when the request goes on.
 */
static bool check_preconditions(struct handlers *h, struct http_request *req,
                                const struct record *rec, bool read, struct http_response *r) {
    const struct http_kept *kept = req->kept;
    struct http_etag e;
    etag_of(h->db, rec, &e);
    char tag[ETAG_MAX];
    size_t n = http_etag_format(&e, tag);
    int m = 1;
    if (kept->seen[HF_IF_MATCH]) {
        m = etag_match(http_request_field(req, HF_IF_MATCH), tag, n, false);
        if (m < 0) {
            reply_error(r, ERR_INVALID_HEADER, "If-Match",
                        "If-Match must be * or a list of ETags (\"...\")");
            return false;
        }
        if (!m) {
            reply_error(r, ERR_PRECONDITION_FAILED, "If-Match",
                        "the record changed: its ETag is not one If-Match names; read it again");
            r->etag = e;
            return false;
        }
    }
    if (kept->seen[HF_IF_NONE_MATCH]) {
        m = etag_match(http_request_field(req, HF_IF_NONE_MATCH), tag, n, true);
        if (m < 0) {
            reply_error(r, ERR_INVALID_HEADER, "If-None-Match",
                        "If-None-Match must be * or a list of ETags (\"...\")");
            return false;
        }
        if (m && read) {
            r->status = 304;
            r->no_body = true;
            buf_reset(&r->body);
            r->etag = e;
            return false;
        }
        if (m) {
            reply_error(r, ERR_PRECONDITION_FAILED, "If-None-Match",
                        "the record's ETag is one If-None-Match names");
            r->etag = e;
            return false;
        }
    }
    return true;
}

/* The fields the body set, over vals (the defaults, or the record's values). */
static void take_present(const struct api_state *st, union value *vals) {
    for (uint64_t m = st->dec.present; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        vals[i] = st->dec.vals[i];
    }
}

/* Most requests have neither header: that is settled here, without a call. */
static inline bool preconditions(struct handlers *h, struct http_request *req,
                                 const struct record *rec, bool read, struct http_response *r) {
    const struct http_kept *kept = req->kept;
    if (!kept->seen[HF_IF_MATCH] && !kept->seen[HF_IF_NONE_MATCH]) return true;
    return check_preconditions(h, req, rec, read, r);
}

/* Reports a decoding error; returns true if there was one. */
static bool body_failed(struct api_state *st, struct http_response *r) {
    if (json_decoder_finish(&st->dec) == 0) return false;
    http_response_error(r, st->dec.err, st->dec.err_field, st->dec.err_msg);
    return true;
}

/* ---- Idempotency-Key (docs/STORAGE.md "Idempotency keys") ---- */

static const char hdr_replayed[] = "Idempotent-Replayed: true\r\n";

static crypto_generichash_state *idem_hash_state(struct api_state *st) {
    uintptr_t p = ((uintptr_t)st->hash_mem + 63) & ~(uintptr_t)63;
    return (crypto_generichash_state *)p;
}

_Static_assert(sizeof(crypto_generichash_state) + 63 <= IDEM_HASH_STATE_BYTES, "hash state");

static void idem_body(struct api_state *st, const char *ptr, size_t len) {
    crypto_generichash_update(idem_hash_state(st), (const unsigned char *)ptr, len);
}

/*
 * Takes the Idempotency-Key of a create: 1 to IDEM_KEY_MAX bytes of
 * printable ASCII without spaces (a repeated header is joined with ", ",
 * so it fails here too). Returns false after answering 400.
 */
static bool idem_begin(struct api_state *st, struct http_request *req, struct http_response *r) {
    struct slice v = http_request_field(req, HF_IDEMPOTENCY_KEY);
    bool ok = v.len >= 1 && v.len <= IDEM_KEY_MAX;
    for (size_t i = 0; ok && i < v.len; i++)
        ok = (unsigned char)v.ptr[i] >= 0x21 && (unsigned char)v.ptr[i] <= 0x7e;
    if (!ok) {
        reply_error(r, ERR_INVALID_HEADER, "Idempotency-Key",
                    "Idempotency-Key must be 1 to %d printable ASCII characters without spaces, "
                    "sent once",
                    IDEM_KEY_MAX);
        return false;
    }
    memcpy(st->idem_key, v.ptr, v.len);
    st->idem_key_len = (uint8_t)v.len;
    st->idem = true;
    /* The request is its kind (the path) and its body. */
    uint8_t kind = st->route.type;
    crypto_generichash_init(idem_hash_state(st), NULL, 0, IDEM_HASH_BYTES);
    crypto_generichash_update(idem_hash_state(st), &kind, 1);
    return true;
}

/*
 * A key seen before: while its create waits for the disk, 409; with another
 * request, 422; else the first answer again, byte for byte.
 */
static void idem_replay(struct handlers *h, const struct record *k, const uint8_t *hash,
                        struct http_response *r) {
    if (db_unacked(h->db, k->id)) {
        reply_error(r, ERR_CONFLICT, "Idempotency-Key",
                    "the first request with this Idempotency-Key is still being written; retry");
        r->extra = hdr_retry_after;
        metrics_idem(h->metrics, MI_IN_FLIGHT);
        return;
    }
    union value kh = record_get(k, IDEM_REQUEST_HASH);
    if (kh.s.len != IDEM_HASH_BYTES || sodium_memcmp(kh.s.ptr, hash, IDEM_HASH_BYTES) != 0) {
        reply_error(r, ERR_IDEMPOTENCY_KEY_REUSED, "Idempotency-Key",
                    "this Idempotency-Key was used with another request (another path or body) "
                    "in the last %u seconds; use a new key for a new request",
                    db_idem_ttl(h->db));
        metrics_idem(h->metrics, MI_REUSED);
        return;
    }
    buf_reset(&r->body);
    if (!json_write_key_answer(&r->body, h->db, k)) {
        /* Damage only: the API keeps the record a key refers to (storage/index.c). */
        reply_error(r, ERR_INTERNAL, "Idempotency-Key",
                    "the first answer to this Idempotency-Key is lost; use a new key");
        return;
    }
    r->status = (uint16_t)record_get(k, IDEM_STATUS).i;
    r->extra = hdr_replayed;
    metrics_idem(h->metrics, MI_REPLAYED);
}

/*
 * Room for one more key of this user (--max-idempotency-keys-per-user):
 * the oldest keys, first in the user's list, are deleted when expired, a
 * few per create, so a user at the cap makes room as keys age. Returns
 * false after answering 403.
 */
#define IDEM_RECLAIM_PER_CREATE 4
static bool idem_room(struct handlers *h, uint64_t user_id, uint64_t now, struct http_response *r) {
    for (int n = 0; n < IDEM_RECLAIM_PER_CREATE; n++) {
        const struct id_list *l = db_owned(h->db, user_id, REC_IDEM);
        const struct record *k = l->len ? db_get(h->db, l->ids[0]) : NULL;
        if (!k || !db_idem_expired(h->db, k, now)) break;
        db_delete(h->db, k->id);
    }
    uint64_t max = h->set.max_idem_keys_per_user, max_bytes = h->set.max_idem_bytes;
    uint32_t have = db_count(h->db, user_id, REC_IDEM);
    /* Bytes too: a key keeps its create's first answer, up to ~14 KB for a record of
     * escaped control characters, so a count alone bounds little. */
    uint64_t bytes = db_idem_bytes(h->db, user_id);
    if ((!max || have < max) && (!max_bytes || bytes < max_bytes)) return true;
    if (max && have >= max)
        reply_error(r, ERR_QUOTA, "Idempotency-Key",
                    "quota exceeded: this account has %u Idempotency-Keys kept and may have %llu "
                    "(--max-idempotency-keys-per-user); they are forgotten %u seconds after use",
                    have, (unsigned long long)max, db_idem_ttl(h->db));
    else
        reply_error(r, ERR_QUOTA, "Idempotency-Key",
                    "quota exceeded: this account's Idempotency-Keys hold %llu bytes and may hold "
                    "%llu (--max-idempotency-bytes-per-user); they are forgotten %u seconds after "
                    "use",
                    (unsigned long long)bytes, (unsigned long long)max_bytes, db_idem_ttl(h->db));
    return false;
}

static void do_create(struct handlers *h, struct api_state *st, const struct record *user,
                      struct http_response *r) {
    uint8_t hash[IDEM_HASH_BYTES];
    uint64_t now = 0, stale = 0; /* stale: an expired key record of this key, to delete */
    if (st->idem) {
        crypto_generichash_final(idem_hash_state(st), hash, sizeof hash);
        now = (uint64_t)time(NULL);
        const struct record *k = db_idem_get(h->db, st->user_id, st->idem_key, st->idem_key_len);
        if (k && !db_idem_expired(h->db, k, now)) {
            idem_replay(h, k, hash, r);
            return;
        }
        if (k) stale = k->id;
        if (write_refused(h, ACT_CREATE, r)) return;
    }
    if (body_failed(st, r)) return;
    const struct kind_desc *k = record_kind(st->route.type);
    /* The decoder's values are the kind's defaults where the body set nothing (json.h). */
    const union value *vals = st->dec.vals;
    if (k->type == REC_EVENT && !events_check_links(h, st->user_id, r, vals, 0)) return;
    /* Its size (which does not depend on the id) is checked first: ids go only to writes
     * that go on. */
    if (!within_quota(h, user, 1, 0, json_decoder_record_size(&st->dec), r)) return;
    if (st->idem) {
        /* An expired key of this name goes first, and the new key must fit as any other:
         * it may come to hold a much larger record than the one it replaces, so reusing
         * expired names must not skip the byte cap. */
        if (stale) db_delete(h->db, stale);
        if (!idem_room(h, st->user_id, now, r)) return;
    }
    uint64_t id, key_id = 0;
    int rc = db_take_id(h->db, &id);
    if (rc == 0 && st->idem) rc = db_take_id(h->db, &key_id);
    if (rc < 0) {
        if (rc == -ERANGE) {
            reply_error(r, ERR_UNAVAILABLE, NULL, "the id space is used up");
            return;
        }
        /* Only on a disk slower than a whole block of creates. */
        reply_error(r, ERR_UNAVAILABLE, NULL, "new ids are being reserved on disk; retry");
        r->extra = hdr_retry_after;
        return;
    }
    if (!st->idem) {
        /* Built and encoded into the log in one pass: rec is the index's now, with its rev. */
        const struct record *rec =
            db_put_values(h->db, k, id, st->user_id, vals, (uint32_t)st->dec.present, &r->lsn);
        reply_record(r, rec, &st->dec);
        reply_etag(h, r, rec);
        changes_notify(h, st->user_id);
        return;
    }
    /* The answer is rendered from the record before the frame is closed, to be kept
     * with it in the same frame. */
    const struct record *rec =
        db_keyed_begin(h->db, k, id, st->user_id, vals, (uint32_t)st->dec.present);
    reply_record(r, rec, &st->dec);
    union value kv[RECORD_MAX_FIELDS];
    record_defaults(&record_idem, kv);
    kv[IDEM_KEY].s.ptr = st->idem_key;
    kv[IDEM_KEY].s.len = st->idem_key_len;
    kv[IDEM_REQUEST_HASH].s.ptr = (const char *)hash;
    kv[IDEM_REQUEST_HASH].s.len = IDEM_HASH_BYTES;
    kv[IDEM_CREATED].i = now;
    kv[IDEM_STATUS].i = r->status;
    uint8_t ref[1 + VARINT_MAX] = {IDEM_REF_MARK};
    if (db_idem_by_ref(h->db) && key_id == id + 1) {
        /* By reference to the record (storage/record.h, idem_by_ref), with the size the
         * key may come to hold. */
        kv[IDEM_ANSWER].s.ptr = (const char *)ref;
        kv[IDEM_ANSWER].s.len = 1 + (uint32_t)varint_put(ref + 1, record_size(rec));
    } else {
        kv[IDEM_ANSWER].s.ptr = r->body.ptr;
        kv[IDEM_ANSWER].s.len = (uint32_t)r->body.len;
    }
    kv[IDEM_RECORD_ID].i = id;
    r->lsn = db_keyed_end(h->db, key_id, kv);
    reply_etag(h, r, db_get(h->db, id));
    changes_notify(h, st->user_id);
    metrics_idem(h->metrics, MI_STORED);
}

static void do_update(struct handlers *h, struct api_state *st, const struct record *user,
                      struct http_request *req, struct http_response *r) {
    const struct record *old = owned(h, st, st->route.id);
    if (!old) {
        not_found(r, st);
        return;
    }
    if (!preconditions(h, req, old, false, r)) return;
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
    record_values(old, vals);
    uint32_t size =
        record_size_of_changed(k, vals, record_size(old), st->dec.vals, st->dec.present);
    take_present(st, vals);
    if (k->type == REC_EVENT && !events_check_links(h, st->user_id, r, vals, old->id)) return;
    if (!within_quota(h, user, 0, record_size(old), size, r)) return;
    /* Built and encoded into the log in one pass: rec is the index's now, with its rev and
     * link (old may be gone). */
    const struct record *rec = db_put_values(h->db, k, old->id, old->user_id, vals,
                                             old->set | (uint32_t)st->dec.present, &r->lsn);
    reply_no_content(r);
    reply_etag(h, r, rec);
    changes_notify(h, st->user_id);
}

static void do_get(struct handlers *h, struct api_state *st, struct http_request *req,
                   struct http_response *r) {
    const struct record *rec = owned(h, st, st->route.id);
    if (!rec) {
        not_found(r, st);
        return;
    }
    if (!preconditions(h, req, rec, true, r)) return;
    reply_etag(h, r, rec);
    if (rec->type != REC_EVENT) {
        reply_record(r, rec, NULL);
        return;
    }
    /* An event answers with its theme and address embedded (null when unlinked). */
    reply_ok_open(r);
    json_write_record(&r->body, rec, true);
    events_write_embeds(h, rec, &r->body);
    buf_append_str(&r->body, "}}");
}

static void do_delete(struct handlers *h, struct api_state *st, struct http_request *req,
                      struct http_response *r) {
    const struct record *rec = owned(h, st, st->route.id);
    if (!rec) {
        not_found(r, st);
        return;
    }
    if (!preconditions(h, req, rec, false, r)) return;
    if (rec->type != REC_EVENT && rec->event_id) {
        const struct kind_desc *k = record_kind(rec->type);
        reply_error(r, ERR_CONFLICT, NULL,
                    "%s %llu belongs to event %llu: unlink it from the event first", k->path,
                    (unsigned long long)rec->id, (unsigned long long)rec->event_id);
        return;
    }
    r->lsn = db_delete(h->db, rec->id);
    reply_no_content(r);
    changes_notify(h, st->user_id);
}

bool api_limit_param(struct handlers *h, struct slice val, struct http_response *r,
                     uint32_t *limit) {
    uint64_t v;
    if (u64_parse(val.ptr, val.len, h->set.list_max, &v) < 0) {
        reply_error(r, ERR_INVALID_QUERY, "limit", "limit must be an integer from 1 to %u",
                    h->set.list_max);
        return false;
    }
    *limit = (uint32_t)v;
    return true;
}

/* Reads "limit" and "cursor" from the query string. Returns false after answering 400. */
static bool list_params(struct handlers *h, struct slice q, struct http_response *r,
                        uint32_t *limit, uint64_t *cursor) {
    *limit = h->set.list_default;
    *cursor = 0;
    struct slice name, val;
    while (query_next(&q, &name, &val)) {
        if (slice_eq(name, "limit", 5)) {
            if (!api_limit_param(h, val, r, limit)) return false;
        } else if (slice_eq(name, "cursor", 6)) {
            if (record_parse_id(val.ptr, val.len, cursor) < 0) {
                reply_error(r, ERR_INVALID_QUERY, "cursor",
                            "cursor must be the NextCursor of a previous page");
                return false;
            }
        }
    }
    return true;
}

/* Newest first: ids below the cursor, walking the ascending list from its end. */
static void do_list(struct handlers *h, struct api_state *st, struct http_request *req,
                    struct http_response *r) {
    uint32_t limit;
    uint64_t cursor;
    if (!list_params(h, req->query, r, &limit, &cursor)) return;
    const struct id_list *l = db_owned(h->db, st->user_id, st->route.type);
    uint32_t hi = cursor ? id_list_lower_bound(l, cursor) : l->len; /* first index not to show */
    reply_ok_open(r);
    buf_append_str(&r->body, "{\"Items\":[");
    uint32_t n = 0;
    uint32_t i = hi;
    /* A page also ends past --list-max-bytes: what a client that does not read makes
     * the server keep is one page, whatever the records hold. */
    while (i > 0 && n < limit && r->body.len <= h->set.list_max_bytes) {
        const struct record *rec = db_get(h->db, l->ids[--i]);
        if (n++) buf_append_char(&r->body, ',');
        json_write_record(&r->body, rec, false);
    }
    /* Where the change feed goes on from this state (README "The change feed"). */
    buf_append_str(&r->headers, "X-Changes-Cursor: ");
    buf_append_u64(&r->headers, db_rev(h->db));
    buf_append_str(&r->headers, "\r\n");
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

enum server_headers_result api_headers(struct handlers *h, struct api_conn *c, struct api_state *st,
                                       struct http_request *req, struct http_response *r) {
    /* The state's memory may hold another surface's request: set what is read later. */
    st->decoding = false;
    st->idem = false;
    st->user_id = 0;
    struct slice base = {h->set.base_path, strlen(h->set.base_path)};
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
        r->route = MR_HEALTH;
        /* A load balancer takes a shard whose disk refuses writes out of rotation. */
        if (reply_if_storage_failing(h, r)) return SERVER_ANSWERED;
        /* ... and one that is stopping (SIGTERM's drain window, then the stop), while it
         * still serves. */
        if (server_stopping(h->srv)) {
            http_response_error(r, ERR_DRAINING, NULL, NULL);
            return SERVER_ANSWERED;
        }
        buf_reset(&r->body);
        buf_append_str(&r->body, "{\"Status\":\"ok\"}");
        return SERVER_ANSWERED;
    }
    if (st->route.action == ACT_OPENAPI) {
        api_openapi_reply(h, r);
        return SERVER_ANSWERED;
    }
    r->route = st->route.action == ACT_CHANGES
                   ? MR_CHANGES
                   : metrics_api_route(st->route.type - REC_THEME, st->route.action - ACT_CREATE);
    /* A browser holding Basic credentials for this origin (typed into its prompt)
     * sends them with a form another site posts (text/plain, a body that reads as
     * JSON): the API takes no write from a page of another site. */
    if (is_write(st->route.action) && !origin_same(h, req)) {
        http_response_error(r, ERR_CSRF, NULL,
                            "a browser sent this write from a page of another site "
                            "(Origin, Sec-Fetch-Site); the API takes none");
        return SERVER_ANSWERED;
    }
    const struct record *user = authenticate(h, c, &req->kept->authorization);
    if (!user) {
        http_response_error(r, ERR_UNAUTHORIZED, NULL,
                            req->kept->authorization.len
                                ? "invalid credentials"
                                : "this call needs HTTP Basic authentication "
                                  "with your username and API key");
        r->extra = hdr_www_authenticate;
        /* The refusal may come from a key change not yet durable: it leaves once
         * that is, as every answer does (reply_answer), and becomes 503 if its
         * batch fails and the old key is valid again. */
        r->lsn = db_visible_lsn(h->db);
        return SERVER_ANSWERED;
    }
    st->user_id = user->id;
    /* An answer given here (a bad Idempotency-Key, a write refused) is the user's too:
     * the access log names who it was (README "Observability"). */
    r->user_id = user->id;
    /* Updates and deletions are idempotent by themselves: only creates take a key. A keyed
     * create is let through the storage checks until its key is looked up: a replay writes
     * nothing, so it is answered even while writes are refused. */
    if (st->route.action == ACT_CREATE && req->kept->seen[HF_IDEMPOTENCY_KEY]) {
        if (!idem_begin(st, req, r)) return SERVER_ANSWERED;
    } else if (write_refused(h, st->route.action, r)) {
        return SERVER_ANSWERED;
    }
    if (st->route.action == ACT_CREATE || st->route.action == ACT_UPDATE) {
        arena_reset(&c->arena);
        json_decoder_begin(&st->dec, record_kind(st->route.type), &c->arena,
                           h->set.max_string_bytes, h->set.max_json_depth);
        st->decoding = true;
        st->body_left = req->content_length;
    }
    return SERVER_READ_BODY;
}

/*
 * Runs the endpoint of a complete request. Revocation means now: the key
 * that was checked when the headers came must still be the user's key when
 * the request is committed, so a key rotated, revoked or removed while the
 * body came writes nothing. authenticate left that key's hash in c, so
 * this costs one compare: of db_users_gen while no user record changed
 * since, else of the hash.
 */
void api_complete(struct handlers *h, struct api_conn *c, struct api_state *st,
                  struct http_request *req, struct http_response *r) {
    r->user_id = st->user_id;
    const struct record *user = db_get(h->db, st->user_id);
    if (!user || user->type != REC_USER) {
        /* The user was removed (or its creation undone) while the body came. */
        http_response_error(r, ERR_UNAUTHORIZED, NULL, "invalid credentials");
        r->extra = hdr_www_authenticate;
        return;
    }
    if (c->auth_user_id != st->user_id || !auth_still_valid(h, c, user)) {
        http_response_error(r, ERR_UNAUTHORIZED, NULL,
                            "invalid credentials: the API key was replaced or revoked while "
                            "the request came; nothing was changed");
        r->extra = hdr_www_authenticate;
        return;
    }
    if (!st->idem && write_refused(h, st->route.action, r)) return;
    switch (st->route.action) {
    case ACT_CREATE:
        do_create(h, st, user, r);
        break;
    case ACT_UPDATE:
        do_update(h, st, user, req, r);
        break;
    case ACT_GET:
        do_get(h, st, req, r);
        break;
    case ACT_DELETE:
        do_delete(h, st, req, r);
        break;
    case ACT_LIST:
        do_list(h, st, req, r);
        break;
    case ACT_CHANGES:
        api_changes(h, st, req, r);
        break;
    default:
        http_response_error(r, ERR_INTERNAL, NULL, NULL);
    }
}

void api_body(struct api_state *st, const char *ptr, size_t len) {
    if (st->decoding) {
        /* The piece that ends a Content-Length body stays in place through
         * api_complete (server.h): its strings are used there, not copied. */
        if (len && st->body_left == len) {
            st->body_left = 0;
            json_decoder_feed_held(&st->dec, ptr, len);
        } else {
            st->body_left = st->body_left > len ? st->body_left - len : 0;
            json_decoder_feed(&st->dec, ptr, len);
        }
    }
    if (st->idem) idem_body(st, ptr, len);
}

void api_request_end(struct api_state *st) {
    if (st->decoding) json_decoder_end(&st->dec);
    st->decoding = false;
}

#define ARENA_BLOCK 16384 /* bytes: a body's strings, most often in one block */

void api_conn_init(struct api_conn *c) {
    memset(c, 0, sizeof *c);
    arena_init(&c->arena, ARENA_BLOCK);
    buf_init(&c->auth_seen, 0);
}

void api_conn_reset(struct api_conn *c) {
    buf_reset(&c->auth_seen);
    c->auth_user_id = 0;
}

void api_conn_destroy(struct api_conn *c) {
    arena_destroy(&c->arena);
    buf_destroy(&c->auth_seen);
}
