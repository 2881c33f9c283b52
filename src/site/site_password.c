/*
 * site_password: the password change (POST /user/password and its JSON
 * variant), for a signed-in user.
 *
 * Two steps on the threadpool, one answer: the current password is checked
 * as a sign-in's is (through the sign-in throttle, by address and by a name
 * key of its own, and counted as a failure when wrong), then the new one is
 * hashed; the change is in flight (signin_throttle.c) until both are done. Only
 * then, on the loop, is anything written: if the stored hash is still the
 * one checked (no other change won the race) and the session still exists,
 * the new hash replaces it, the API key is revoked, every session of the
 * user ends, and this client gets a new session (a new id and cookie) so that
 * it stays signed in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "site/password_policy.h"
#include "site/site_internal.h"

struct password_job {
    struct pwhash_job job;
    struct handlers *h;
    struct server_ticket ticket;
    uint8_t page;
    bool json;
    bool hashing; /* the second step: the new password is being hashed */
    uint64_t user_id, session_id;
    char name[68];
    char tkey[70]; /* the throttle's name key: PW_THROTTLE_MARK and the name */
    char csrf[SITE_TOKEN_CHARS + 1];
    char old_hash[crypto_pwhash_STRBYTES];      /* the hash the current password matched */
    char new_password[PWHASH_MAX_PASSWORD + 1]; /* wiped when done */
    uint8_t addr[17];                           /* the throttle's address key */
    size_t addr_len;
    struct signin_flight flight; /* on h->verifying until both hashes are done */
};

static void job_done(struct pwhash_job *pj);

static void job_free(struct password_job *j) {
    sodium_memzero(j, sizeof *j);
    free(j);
}

static void fail(struct password_job *j, struct http_response *r, enum err e, const char *field,
                 const char *msg) {
    site_fail(j->h, r, j->json, j->page, e, field, msg, j->name, j->csrf);
}

/* The user's stored hash is still the one checked, and the session is still there. */
static const struct record *unchanged(struct password_job *j, struct http_response *r) {
    struct handlers *h = j->h;
    const struct record *u = db_get(h->db, j->user_id);
    const struct record *ses = db_get(h->db, j->session_id);
    if (!u || !ses || ses->type != REC_SESSION || ses->user_id != j->user_id) {
        fail(j, r, ERR_UNAUTHORIZED, NULL, "sign in first");
        return NULL;
    }
    union value ph = record_get(u, USER_PASSWORD_HASH);
    if (ph.s.len != strlen(j->old_hash) || memcmp(ph.s.ptr, j->old_hash, ph.s.len) != 0) {
        fail(j, r, ERR_CONFLICT, "current_password",
             "the password was changed meanwhile; sign in again");
        return NULL;
    }
    return u;
}

/* The current password matched: hash the new one. Returns false after answering. */
static bool start_hashing(struct password_job *j, struct http_response *r) {
    j->hashing = true;
    j->job.verify = false;
    memcpy(j->job.password, j->new_password, sizeof j->job.password);
    if (pwhash_submit(&j->h->pw, &j->job) < 0) {
        fail(j, r, ERR_UNAVAILABLE, NULL,
             "too many sign-ins at once (--pwhash-queue); retry in a second");
        r->extra = hdr_retry_after;
        return false;
    }
    return true;
}

static void finish(struct password_job *j, struct http_response *r) {
    struct handlers *h = j->h;
    if (j->job.result < 0) {
        fail(j, r, ERR_INTERNAL, NULL, "the password could not be hashed");
        return;
    }
    const struct record *u = unchanged(j, r);
    if (!u || reply_if_storage_failing(h, r)) return;
    /* The API key goes too: one issued from a stolen session must not outlive
     * the owner's recovery (docs/ACCOUNTS.md). */
    uint64_t lsn =
        db_put_account(h->db, j->user_id, (struct slice){j->name, strlen(j->name)},
                       (struct slice){"", 0}, (struct slice){j->job.hash, strlen(j->job.hash)});
    site_session_end_all(h, j->user_id);
    uint64_t slsn = site_session_start(h, r, j->user_id, j->name);
    if (!slsn) return;
    LOG(LOG_INFO, "account: user %s changed its password (every session ended, API key revoked)",
        j->name);
    metrics_account(h->metrics, MA_PASSWORD_CHANGED);
    r->user_id = j->user_id;
    site_answer_account(h, r, j->json, 200, db_get(h->db, j->user_id));
    r->lsn = slsn > lsn ? slsn : lsn;
}

static void job_done(struct pwhash_job *pj) {
    struct password_job *j = (struct password_job *)pj;
    struct handlers *h = j->h;
    /* NULL: nobody waits for the answer any more (the client left, or shutdown). */
    struct http_response *r = reply_deferred(h, j->ticket);
    if (!j->hashing) {
        if (j->job.result != 0) {
            signin_flight_remove(h, &j->flight);
            signin_failed(h, &j->flight, uv_now(h->db->loop));
            metrics_account(h->metrics, MA_SIGNIN_FAILED);
            if (r)
                fail(j, r, ERR_INVALID_FIELD, "current_password", "the current password is wrong");
        } else {
            signin_succeeded(h, &j->flight);
            /* Answered by the second step, which stays in flight: it is a hash of the
             * sign-in queue too, counted toward the address's share (review, 2026-11-29:
             * uncounted, an address changing passwords held twice its share). */
            if (r && start_hashing(j, r)) return;
            signin_flight_remove(h, &j->flight);
        }
    } else {
        signin_flight_remove(h, &j->flight);
        if (r) finish(j, r);
    }
    if (r) reply_answer(h, r, &j->ticket);
    job_free(j);
}

/* The fields' rules, before any hashing. Returns false after answering. */
static bool fields_ok(struct handlers *h, struct site_state *st, struct http_response *r,
                      const struct session *s, uint8_t page) {
    struct slice cur = site_field(st, F_CURRENT), pw = site_field(st, F_PASSWORD),
                 confirm = site_field(st, F_CONFIRM);
    const char *field = NULL, *why = NULL;
    char msg[128];
    if (!cur.len) {
        field = "current_password", why = "give the current password";
    } else if (pw.len < h->set.password_min_bytes) {
        snprintf(msg, sizeof msg, "the password must have at least %u characters",
                 h->set.password_min_bytes);
        field = "password", why = msg;
    } else if ((why = password_policy_check(pw.ptr, pw.len, s->name, strlen(s->name)))) {
        field = "password";
    } else if ((!st->json || form_get(&st->body.form, F_CONFIRM, &confirm)) &&
               (confirm.len != pw.len || memcmp(confirm.ptr, pw.ptr, pw.len) != 0)) {
        field = "password_confirm", why = "the password confirmation differs from the password";
    }
    if (!why) return true;
    site_fail(h, r, st->json, page, ERR_INVALID_FIELD, field, why, s->name, s->csrf);
    return false;
}

/*
 * A wrong current password is counted under a name key of its own: the mark,
 * then the name. No sign-in can use it: a sign-in as a name the server never
 * gives out (a control byte) is answered before the throttle (do_signin),
 * so strangers failing sign-ins on the name, which anyone can do, never
 * throttle the signed-in owner's password change (review, 2026-11-29); only
 * those who hold a session of the user fill it.
 */
#define PW_THROTTLE_MARK '\x01'

void site_password_change(struct handlers *h, struct site_state *st, struct http_request *req,
                          struct http_response *r, const struct session *s, uint8_t page) {
    if (!fields_ok(h, st, r, s, page)) return;
    uint8_t addr[17];
    size_t alen = site_client_addr(h, req, addr);
    char tkey[70];
    int tlen = snprintf(tkey, sizeof tkey, "%c%s", PW_THROTTLE_MARK, s->name);
    uint32_t wait =
        signin_wait(h, (struct slice){tkey, (size_t)tlen}, addr, alen, uv_now(h->db->loop));
    if (wait) {
        char msg[128];
        snprintf(msg, sizeof msg, "too many wrong passwords; retry in %u second%s", wait,
                 wait == 1 ? "" : "s");
        metrics_account(h->metrics, MA_SIGNIN_THROTTLED);
        site_fail(h, r, st->json, page, ERR_TOO_MANY, NULL, msg, s->name, s->csrf);
        char line[64];
        snprintf(line, sizeof line, "Retry-After: %u\r\n", wait);
        buf_append_str(&r->headers, line);
        return;
    }
    const struct record *u = db_get(h->db, s->user_id);
    union value ph = u ? record_get(u, USER_PASSWORD_HASH) : (union value){0};
    if (!ph.s.len || ph.s.len >= crypto_pwhash_STRBYTES) {
        site_fail(h, r, st->json, page, ERR_INVALID_FIELD, "current_password",
                  "this account has no password to change", s->name, s->csrf);
        return;
    }
    if (reply_if_storage_failing(h, r)) return;
    struct password_job *j = xcalloc(1, sizeof *j);
    j->h = h;
    j->page = page;
    j->json = st->json;
    j->user_id = s->user_id;
    j->session_id = s->session_id;
    snprintf(j->name, sizeof j->name, "%s", s->name);
    memcpy(j->tkey, tkey, (size_t)tlen + 1);
    snprintf(j->csrf, sizeof j->csrf, "%s", s->csrf);
    memcpy(j->old_hash, ph.s.ptr, ph.s.len);
    memcpy(j->job.hash, ph.s.ptr, ph.s.len);
    struct slice cur = site_field(st, F_CURRENT), pw = site_field(st, F_PASSWORD);
    memcpy(j->job.password, cur.ptr, cur.len);
    memcpy(j->new_password, pw.ptr, pw.len);
    j->job.verify = true;
    j->job.done = job_done;
    memcpy(j->addr, addr, alen);
    j->addr_len = alen;
    if (pwhash_submit(&h->pw, &j->job) < 0) {
        job_free(j);
        site_fail(h, r, st->json, page, ERR_UNAVAILABLE, NULL,
                  "too many sign-ins at once (--pwhash-queue); retry in a second", s->name,
                  s->csrf);
        r->extra = hdr_retry_after;
        return;
    }
    j->ticket = reply_defer(h, r);
    j->flight = (struct signin_flight){.name = j->tkey, .addr = j->addr, .addr_len = j->addr_len};
    signin_flight_add(h, &j->flight);
}
