/*
 * site_session: the account site's cookies and sessions (site_internal.h).
 *
 * Sessions are records (REC_SESSION) owned by their user: the hash of the
 * cookie's token, the expiry and the token the forms carry against CSRF.
 * The cookie is NAME:TOKEN; the name lets a load balancer route by user
 * (docs/SCALING.md) and grants nothing by itself.
 */
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/csprng.h"
#include "site/site_internal.h"

const char *site_cookie_name(const struct handlers *h, enum site_cookie c) {
    /* With HTTPS in front the __Host- prefix makes the browser refuse the
     * cookie unless it is Secure, Path=/ and has no Domain: a page on
     * another port or a sibling host cannot plant or shadow it. */
    if (h->set.cookie_secure)
        return c == SITE_COOKIE_SESSION ? "__Host-eventd_session" : "__Host-eventd_csrf";
    return c == SITE_COOKIE_SESSION ? "eventd_session" : "eventd_csrf";
}

/*
 * The cookie's value, or "" when it is missing. A session cookie named twice
 * is "" too: a balancer placing the request by one (HAProxy refuses two it
 * sees, but reads a quoted value, a="x;eventd_session=...", as one cookie
 * where this reads three) could send it to a shard where this one holds the
 * other (review, 2026-11-29). The CSRF cookie, which no balancer reads, is
 * the first one: refusing a second would lock a browser holding one it
 * cannot replace (another Path or Domain) out of every form.
 */
struct slice site_cookie(const struct handlers *h, const struct http_request *req,
                         enum site_cookie which) {
    const char *name = site_cookie_name(h, which);
    struct slice c = http_request_field(req, HF_COOKIE), found = {"", 0};
    size_t nl = strlen(name);
    bool seen = false;
    const char *p = c.ptr, *end = c.ptr + c.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == ';'))
            p++;
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end;
        if ((size_t)(stop - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            if (seen) return which == SITE_COOKIE_SESSION ? (struct slice){"", 0} : found;
            seen = true;
            found = (struct slice){p + nl + 1, (size_t)(stop - p - nl - 1)};
        }
        p = stop;
    }
    return found;
}

void site_set_cookie(struct handlers *h, struct http_response *r, enum site_cookie c,
                     const char *value, uint32_t max_age) {
    char line[512];
    int n = snprintf(
        line, sizeof line, "Set-Cookie: %s=%s; Path=/; Max-Age=%u; HttpOnly; SameSite=Strict%s\r\n",
        site_cookie_name(h, c), value, max_age, h->set.cookie_secure ? "; Secure" : "");
    if (n > 0 && (size_t)n < sizeof line) buf_append(&r->headers, line, (size_t)n);
}

void site_new_token(char out[SITE_TOKEN_CHARS + 1]) {
    unsigned char raw[32];
    csprng_bytes(raw, sizeof raw); /* no getrandom(2) per token: common/csprng.h */
    sodium_bin2base64(out, SITE_TOKEN_CHARS + 1, raw, sizeof raw,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof raw);
}

bool site_session_get(struct handlers *h, const struct http_request *req, struct session *s) {
    struct slice c = site_cookie(h, req, SITE_COOKIE_SESSION);
    const char *colon = memchr(c.ptr, ':', c.len);
    if (!colon) return false;
    struct slice name = {c.ptr, (size_t)(colon - c.ptr)};
    struct slice tok = {colon + 1, c.len - name.len - 1};
    if (tok.len != SITE_TOKEN_CHARS || name.len == 0 || name.len > 64) return false;
    const struct db *db = h->db;
    const struct record *u = db_user_by_name(db, name.ptr, name.len);
    /* An unknown name does the work of a known one: the sessions of a decoy
     * user (picked by the name, as cold in cache as a real one), and either
     * way the same number of hash comparisons, against nothing where a user
     * has fewer sessions. Without it a known name took ~1.4 us longer. */
    const struct record *against = u ? u : db_auth_decoy(db, name.ptr, name.len);
    static const struct id_list none;
    const struct id_list *l = against ? db_owned(db, against->id, REC_SESSION) : &none;
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(tok.ptr, tok.len, hash);
    static const uint8_t dummy[AUTH_HASH_BYTES];
    const struct record *found = NULL;
    uint32_t rounds = l->len > SITE_SESSIONS_PER_USER ? l->len : SITE_SESSIONS_PER_USER;
    for (uint32_t i = 0; i < rounds; i++) {
        const struct record *ses = i < l->len ? db_get(db, l->ids[i]) : NULL;
        const uint8_t *want = dummy;
        if (ses && record_get(ses, SESSION_TOKEN_HASH).s.len == AUTH_HASH_BYTES)
            want = (const uint8_t *)record_get(ses, SESSION_TOKEN_HASH).s.ptr;
        else
            ses = NULL;
        if (sodium_memcmp(want, hash, AUTH_HASH_BYTES) == 0 && ses && !found) found = ses;
    }
    if (!u || !found) return false;
    if (record_get(found, SESSION_EXPIRES).i <= (uint64_t)time(NULL)) return false;
    s->user_id = u->id;
    s->session_id = found->id;
    snprintf(s->name, sizeof s->name, "%.*s", (int)record_get(u, USER_NAME).s.len,
             record_get(u, USER_NAME).s.ptr);
    snprintf(s->csrf, sizeof s->csrf, "%.*s", (int)record_get(found, SESSION_CSRF).s.len,
             record_get(found, SESSION_CSRF).s.ptr);
    s->has_key = record_get(u, USER_KEY_HASH).s.len == AUTH_HASH_BYTES;
    return true;
}

uint64_t site_session_start(struct handlers *h, struct http_response *r, uint64_t user_id,
                            const char *name) {
    uint64_t now = (uint64_t)time(NULL), lsn = 0;
    const struct id_list *l = db_owned(h->db, user_id, REC_SESSION);
    /* Collect first: deleting changes the list. */
    uint64_t old[64];
    uint32_t nold = 0, live = 0;
    for (uint32_t i = 0; i < l->len && nold < 64; i++) {
        const struct record *ses = db_get(h->db, l->ids[i]);
        if (ses && record_get(ses, SESSION_EXPIRES).i > now)
            live++;
        else
            old[nold++] = l->ids[i];
    }
    for (uint32_t i = 0; i < l->len && live >= SITE_SESSIONS_PER_USER && nold < 64; i++) {
        const struct record *ses = db_get(h->db, l->ids[i]);
        if (ses && record_get(ses, SESSION_EXPIRES).i > now) {
            old[nold++] = l->ids[i]; /* ids ascend: the oldest first */
            live--;
        }
    }
    for (uint32_t i = 0; i < nold; i++)
        lsn = db_delete(h->db, old[i]);
    uint64_t id;
    if (db_take_id(h->db, &id) < 0) {
        http_response_error(r, ERR_UNAVAILABLE, NULL, "no id for a new session; retry");
        r->extra = hdr_retry_after;
        return 0;
    }
    char token[SITE_TOKEN_CHARS + 1], csrf[SITE_TOKEN_CHARS + 1];
    site_new_token(token);
    site_new_token(csrf);
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(token, SITE_TOKEN_CHARS, hash);
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_session, v);
    v[SESSION_TOKEN_HASH].s.ptr = (const char *)hash;
    v[SESSION_TOKEN_HASH].s.len = AUTH_HASH_BYTES;
    v[SESSION_EXPIRES].i = now + h->set.session_ttl_s;
    v[SESSION_CSRF].s.ptr = csrf;
    v[SESSION_CSRF].s.len = SITE_TOKEN_CHARS;
    lsn = db_put(h->db, record_build(&record_session, id, user_id, v));
    char value[68 + SITE_TOKEN_CHARS + 2];
    snprintf(value, sizeof value, "%s:%s", name, token);
    site_set_cookie(h, r, SITE_COOKIE_SESSION, value, h->set.session_ttl_s);
    sodium_memzero(token, sizeof token);
    return lsn;
}

uint64_t site_session_end_all(struct handlers *h, uint64_t user_id) {
    uint64_t lsn = 0;
    /* Deleting changes the list: take from its end until it is empty. Each
     * pass deletes one, so the loop is bounded by the list's length. */
    const struct id_list *l = db_owned(h->db, user_id, REC_SESSION);
    for (uint32_t guard = l->len; l->len && guard; guard--) {
        uint32_t before = l->len;
        lsn = db_delete(h->db, l->ids[l->len - 1]);
        l = db_owned(h->db, user_id, REC_SESSION);
        if (l->len >= before) break; /* not removed: never loop on it */
    }
    return lsn;
}
