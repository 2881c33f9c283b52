/*
 * site: the account site (register, sign in, sign out, the API key page)
 * and its JSON variant, as docs/ACCOUNTS.md describes them.
 *
 * Passwords are hashed and verified on the threadpool (pwhash.h): such a
 * request is answered later through a server ticket, and everything the
 * answer needs is in its job, never in the connection's state, which may
 * serve another request (or connection) meanwhile. When the job is done,
 * the world may have changed (the name taken by a faster registration, the
 * user removed): the answer is decided then, from the index as it is.
 *
 * Sessions and cookies are site_session.c's, the CSRF token before sign-in
 * and the Origin check site_csrf.c's: every form post passes the Origin
 * check and carries its CSRF token (the session's once signed in).
 */
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/json_write.h"
#include "common/log.h"
#include "core/origin.h"
#include "site/password_policy.h"
#include "site/site_internal.h"
#include "site/site_pages.h"

enum page {
    P_REGISTER_GET,
    P_REGISTER_POST,
    P_SIGNIN_GET,
    P_SIGNIN_POST,
    P_SIGNOUT,
    P_USER_API_GET,
    P_KEY_POST,
    P_REVOKE_POST,
    P_PASSWORD_GET,
    P_PASSWORD_POST,
    P_SIGNOUT_ALL,
};

static const struct {
    const char *path;
    uint8_t get, post; /* enum page + 1, or 0: method not served */
} routes[] = {
    {"/register", P_REGISTER_GET + 1, P_REGISTER_POST + 1},
    {"/signin", P_SIGNIN_GET + 1, P_SIGNIN_POST + 1},
    {"/signout", 0, P_SIGNOUT + 1},
    {"/user/api", P_USER_API_GET + 1, 0},
    {"/user/api/key", 0, P_KEY_POST + 1},
    {"/user/api/revoke", 0, P_REVOKE_POST + 1},
    {"/user/password", P_PASSWORD_GET + 1, P_PASSWORD_POST + 1},
    {"/signout/all", 0, P_SIGNOUT_ALL + 1},
};

static const struct form_field fields[] = {
    [F_USERNAME] = {"username", 64},
    [F_PASSWORD] = {"password", PWHASH_MAX_PASSWORD},
    [F_CONFIRM] = {"password_confirm", PWHASH_MAX_PASSWORD},
    [F_CSRF] = {"csrf", 64},
    [F_CURRENT] = {"current_password", PWHASH_MAX_PASSWORD},
};

/*
 * The pages' headers. The Content-Security-Policy allows the one inline
 * style sheet and the one inline script by their SHA-256, nothing else
 * (no other script, style, frame, font or image source).
 */
static char page_headers[768];
static size_t page_headers_len;

static void csp_hash(char out[64], const char *text) {
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)text, strlen(text));
    sodium_bin2base64(out, 64, h, sizeof h, sodium_base64_VARIANT_ORIGINAL);
}

int site_origin_check(const char *origin, char *msg, size_t msg_len) {
    const char *why = site_origin_setting_check(origin);
    if (!why) return 0;
    snprintf(msg, msg_len, "--site-origin: '%.255s' %s", origin, why);
    return -1;
}

int site_init(struct handlers *h, char *msg, size_t msg_len) {
    if (site_origin_check(h->set.site_origin, msg, msg_len) < 0) return -1;
    /* Without the site no form is ever signed: no file is made. */
    if (site_secret_init(h, h->set.site ? h->set.site_secret_path : NULL, msg, msg_len) < 0)
        return -1;
    char css[64], js[64];
    csp_hash(css, site_css);
    csp_hash(js, site_copy_script);
    int n = snprintf(page_headers, sizeof page_headers,
                     "Cache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\n"
                     "Referrer-Policy: no-referrer\r\n"
                     "Content-Security-Policy: default-src 'none'; style-src 'sha256-%s'; "
                     "script-src 'sha256-%s'; img-src data:; form-action 'self'; "
                     "frame-ancestors 'none'; base-uri 'none'\r\n",
                     css, js);
    page_headers_len = n > 0 && (size_t)n < sizeof page_headers ? (size_t)n : 0;
    return 0;
}

/* The request, copied out of the connection for the threadpool's answer. */
struct site_job {
    struct pwhash_job job;
    struct handlers *h;
    struct server_ticket ticket;
    uint8_t page;
    bool json;
    char name[68];
    char csrf[SITE_TOKEN_CHARS + 1]; /* the post's form token (checked): the form shown again */
    uint8_t addr[17];                /* family, address: the throttle's key */
    size_t addr_len;
    struct signin_flight flight; /* on h->verifying while a sign-in is checked */
};

/* ---- small helpers ---- */

static struct slice site_rel(struct handlers *h, struct slice path, bool *ok) {
    size_t n = strlen(h->set.site_path);
    *ok = path.len > n && memcmp(path.ptr, h->set.site_path, n) == 0 && path.ptr[n] == '/';
    return (struct slice){path.ptr + n, path.len - n};
}

static bool token_eq(struct slice a, const char *b) {
    size_t n = strlen(b);
    return a.len == n && n == SITE_TOKEN_CHARS && sodium_memcmp(a.ptr, b, n) == 0;
}

static bool wants_json(const struct http_request *req) {
    struct slice ct = http_request_field(req, HF_CONTENT_TYPE);
    struct slice acc = http_request_field(req, HF_ACCEPT);
    return (ct.len >= 16 && strncasecmp(ct.ptr, "application/json", 16) == 0) ||
           (acc.len >= 16 && strncasecmp(acc.ptr, "application/json", 16) == 0);
}

static void add_header(struct http_response *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_header(struct http_response *r, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line) buf_append(&r->headers, line, (size_t)n);
}

static void redirect(struct handlers *h, struct http_response *r, const char *to) {
    r->status = 303;
    buf_reset(&r->body);
    r->content_type = "text/plain; charset=utf-8";
    add_header(r, "Location: %s%s\r\n", h->set.site_path, to);
    buf_append_str(&r->body, "See ");
    buf_append_str(&r->body, h->set.site_path);
    buf_append_str(&r->body, to);
    buf_append_char(&r->body, '\n');
}

/* The page's variables: base and the caller's; missing ones render empty. */
static void render(struct handlers *h, struct http_response *r, uint16_t status,
                   enum site_page page, struct html_var *vars, size_t n) {
    struct html_var all[16];
    size_t k = 0;
    all[k++] = html_var_str("base", h->set.site_path);
    for (size_t i = 0; i < n && k < 16; i++)
        all[k++] = vars[i];
    r->status = status;
    r->no_body = false;
    buf_reset(&r->body);
    r->content_type = "text/html; charset=utf-8";
    buf_append(&r->headers, page_headers, page_headers_len);
    site_page_render(&r->body, page, all, k);
}

void site_fail(struct handlers *h, struct http_response *r, bool json, uint8_t page, enum err e,
               const char *field, const char *msg, const char *name, const char *csrf) {
    if (json) {
        http_response_error(r, e, field, msg);
        return;
    }
    char min[16];
    snprintf(min, sizeof min, "%u", h->set.password_min_bytes);
    struct html_var v[] = {html_var_str("error", msg),
                           html_var_str("username", name),
                           html_var_str("csrf", csrf),
                           html_var_str("password_min", min),
                           html_var_str("title", "Something went wrong"),
                           html_var_str("message", msg)};
    enum site_page sp = page == P_REGISTER_POST   ? SITE_REGISTER
                        : page == P_SIGNIN_POST   ? SITE_SIGNIN
                        : page == P_KEY_POST      ? SITE_USER_API
                        : page == P_REVOKE_POST   ? SITE_USER_API
                        : page == P_PASSWORD_POST ? SITE_PASSWORD
                                                  : SITE_MESSAGE;
    if (sp == SITE_USER_API) sp = SITE_MESSAGE; /* no session data here: a plain message */
    render(h, r, (uint16_t)err_status(e), sp, v, sizeof v / sizeof v[0]);
}

struct slice site_field(const struct site_state *st, int i) {
    struct slice s;
    if (!form_get(&st->body.form, (size_t)i, &s)) return (struct slice){"", 0};
    return s;
}

/* ---- the threadpool's answers ---- */

static void job_done(struct pwhash_job *pj);

/* Queues the hash or verification; false after answering 503 when its lane is full. */
static bool submit(struct handlers *h, struct site_state *st, struct http_request *req,
                   struct http_response *r, bool verify, const char *hash) {
    struct site_job *j = xcalloc(1, sizeof *j);
    j->h = h;
    j->page = st->page;
    j->json = st->json;
    struct slice name = site_field(st, F_USERNAME), pw = site_field(st, F_PASSWORD);
    snprintf(j->name, sizeof j->name, "%.*s", (int)name.len, name.ptr);
    struct slice csrf = site_field(st, F_CSRF);
    if (csrf.len <= SITE_TOKEN_CHARS) memcpy(j->csrf, csrf.ptr, csrf.len + 1);
    memcpy(j->job.password, pw.ptr, pw.len);
    j->job.password[pw.len] = 0;
    j->job.verify = verify;
    if (verify) snprintf(j->job.hash, sizeof j->job.hash, "%s", hash);
    j->job.done = job_done;
    j->job.lane = st->page == P_REGISTER_POST ? PWHASH_LANE_REGISTER : PWHASH_LANE_SIGNIN;
    j->addr_len = site_client_addr(h, req, j->addr);
    if (pwhash_submit(&h->pw, &j->job) < 0) {
        uint8_t lane = j->job.lane;
        sodium_memzero(j, sizeof *j);
        free(j);
        /* Each lane names its own limit: raising the other one would change nothing. */
        site_fail(h, r, st->json, st->page, ERR_UNAVAILABLE, NULL,
                  lane == PWHASH_LANE_REGISTER
                      ? "too many registrations at once (--pwhash-register-queue); retry in a "
                        "second"
                      : "too many sign-ins at once (--pwhash-queue); retry in a second",
                  site_field(st, F_USERNAME).ptr, site_field(st, F_CSRF).ptr);
        r->extra = hdr_retry_after;
        return false;
    }
    j->ticket = reply_defer(h, r);
    if (verify) {
        j->flight =
            (struct signin_flight){.name = j->name, .addr = j->addr, .addr_len = j->addr_len};
        signin_flight_add(h, &j->flight);
    }
    return true;
}

/* {"Status":"ok","Result":{"Username":..,"UserID":N  (left open for more members);
 * not to be stored by any cache (an account's data, a new key). */
static void account_json_open(struct http_response *r, uint16_t status, const char *name,
                              size_t len, uint64_t id) {
    reply_ok_open(r);
    r->status = status;
    buf_append_str(&r->headers, "Cache-Control: no-store\r\n");
    buf_append_str(&r->body, "{\"Username\":");
    json_write_string(&r->body, name, len);
    buf_append_str(&r->body, ",\"UserID\":");
    buf_append_u64(&r->body, id);
}

void site_answer_account(struct handlers *h, struct http_response *r, bool json, uint16_t status,
                         const struct record *u) {
    if (!json) {
        redirect(h, r, "/user/api");
        return;
    }
    union value name = record_get(u, USER_NAME);
    account_json_open(r, status, name.s.ptr, name.s.len, u->id);
    buf_append_str(&r->body, "}}");
}

static void finish_register(struct site_job *j, struct http_response *r) {
    struct handlers *h = j->h;
    if (j->job.result < 0) {
        site_fail(h, r, j->json, j->page, ERR_INTERNAL, NULL, "the password could not be hashed",
                  j->name, j->csrf);
        return;
    }
    if (db_user_by_name(h->db, j->name, strlen(j->name))) {
        /* Taken while the password was being hashed. */
        site_fail(h, r, j->json, j->page, ERR_CONFLICT, "username", "this username is taken",
                  j->name, j->csrf);
        return;
    }
    if (reply_if_no_room(h, r)) return;
    uint64_t id;
    if (db_take_id(h->db, &id) < 0) {
        http_response_error(r, ERR_UNAVAILABLE, NULL, "no id for a new user; retry");
        r->extra = hdr_retry_after;
        return;
    }
    db_put_account(h->db, id, (struct slice){j->name, strlen(j->name)}, (struct slice){"", 0},
                   (struct slice){j->job.hash, strlen(j->job.hash)});
    uint64_t lsn = site_session_start(h, r, id, j->name);
    if (!lsn) return;
    LOG(LOG_INFO, "account: registered user %s (id %llu)", j->name, (unsigned long long)id);
    metrics_account(h->metrics, MA_REGISTRATION);
    r->user_id = id;
    site_answer_account(h, r, j->json, 201, db_get(h->db, id));
    r->lsn = lsn;
}

static void finish_signin(struct site_job *j, struct http_response *r) {
    struct handlers *h = j->h;
    const struct record *u = db_user_by_name(h->db, j->name, strlen(j->name));
    bool ok =
        j->job.result == 0 && u && record_get(u, USER_PASSWORD_HASH).s.len > 0 &&
        record_get(u, USER_PASSWORD_HASH).s.len == strlen(j->job.hash) &&
        memcmp(record_get(u, USER_PASSWORD_HASH).s.ptr, j->job.hash, strlen(j->job.hash)) == 0;
    uint64_t now = uv_now(h->db->loop);
    if (!ok) {
        signin_failed(h, &j->flight, now);
        metrics_account(h->metrics, MA_SIGNIN_FAILED);
        site_fail(h, r, j->json, j->page, ERR_UNAUTHORIZED, NULL, "wrong username or password",
                  j->name, j->csrf);
        return;
    }
    signin_succeeded(h, &j->flight);
    if (reply_if_storage_failing(h, r)) return;
    uint64_t lsn = site_session_start(h, r, u->id, j->name);
    if (!lsn) return;
    metrics_account(h->metrics, MA_SIGNIN_OK);
    r->user_id = u->id;
    site_answer_account(h, r, j->json, 200, db_get(h->db, u->id));
    r->lsn = lsn;
}

static void job_done(struct pwhash_job *pj) {
    struct site_job *j = (struct site_job *)pj;
    if (j->job.verify) signin_flight_remove(j->h, &j->flight);
    /* NULL: nobody waits for the answer any more (the client left, or shutdown). */
    struct http_response *r = reply_deferred(j->h, j->ticket);
    if (r) {
        if (j->page == P_REGISTER_POST)
            finish_register(j, r);
        else
            finish_signin(j, r);
        reply_answer(j->h, r, &j->ticket);
    }
    sodium_memzero(j, sizeof *j);
    free(j);
}

/* ---- pages ---- */

/*
 * Pages before sign-in carry a CSRF token: the MAC of the CSRF cookie under
 * the server secret (site_csrf.c). A cookie already there is kept, so that
 * forms open in several tabs all stay valid.
 */
static void page_with_csrf(struct handlers *h, const struct http_request *req,
                           struct http_response *r, enum site_page page) {
    char cookie[SITE_TOKEN_CHARS + 1], csrf[SITE_TOKEN_CHARS + 1];
    struct slice have = site_cookie(h, req, SITE_COOKIE_CSRF);
    bool reuse = have.len == SITE_TOKEN_CHARS;
    for (size_t i = 0; reuse && i < have.len; i++) {
        char c = have.ptr[i];
        reuse = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_';
    }
    if (reuse) {
        memcpy(cookie, have.ptr, SITE_TOKEN_CHARS);
        cookie[SITE_TOKEN_CHARS] = 0;
    } else {
        site_new_token(cookie);
    }
    site_csrf_form_token(h, cookie, csrf);
    char min[16];
    snprintf(min, sizeof min, "%u", h->set.password_min_bytes);
    struct html_var v[] = {html_var_str("csrf", csrf), html_var_str("password_min", min)};
    render(h, r, 200, page, v, 2);
    if (!reuse) site_set_cookie(h, r, SITE_COOKIE_CSRF, cookie, 86400);
}

static void user_api_page(struct handlers *h, const struct http_request *req,
                          struct http_response *r, const struct session *s, const char *key,
                          const char *notice) {
    char id[24], url[320];
    snprintf(id, sizeof id, "%llu", (unsigned long long)s->user_id);
    struct slice host = http_request_field(req, HF_HOST);
    snprintf(url, sizeof url, "http://%.*s%s", (int)(host.len < 255 ? host.len : 255), host.ptr,
             h->set.base_path);
    struct html_var v[] = {
        html_var_str("csrf", s->csrf), html_var_str("username", s->name),
        html_var_str("user_id", id),   html_var_str("api_key", key),
        html_var_str("api_url", url),  html_var_str("has_key", (s->has_key || key) ? "1" : ""),
        html_var_str("notice", notice)};
    render(h, r, 200, SITE_USER_API, v, sizeof v / sizeof v[0]);
}

static void password_page(struct handlers *h, struct http_response *r, const struct session *s) {
    char min[16];
    snprintf(min, sizeof min, "%u", h->set.password_min_bytes);
    struct html_var v[] = {html_var_str("csrf", s->csrf), html_var_str("username", s->name),
                           html_var_str("password_min", min)};
    render(h, r, 200, SITE_PASSWORD, v, sizeof v / sizeof v[0]);
}

static void not_signed_in(struct handlers *h, struct http_response *r, bool json) {
    if (json) {
        http_response_error(r, ERR_UNAUTHORIZED, NULL, "sign in first");
        return;
    }
    redirect(h, r, "/signin");
}

bool site_claims_under(const struct handlers *h, const char *prefix, size_t n) {
    if (!h->set.site) return false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char full[512];
        int len = snprintf(full, sizeof full, "%s%s", h->set.site_path, routes[i].path);
        if (len < 0 || (size_t)len >= sizeof full) return true; /* cannot tell: it may */
        if ((size_t)len >= n && memcmp(full, prefix, n) == 0) return true;
    }
    return false;
}

bool site_headers(struct handlers *h, struct site_state *st, struct http_request *req,
                  struct http_response *r, enum server_headers_result *res) {
    if (!h->set.site) return false;
    bool ok;
    struct slice rel = site_rel(h, req->path, &ok);
    if (!ok) return false;
    int found = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (slice_eq(rel, routes[i].path, strlen(routes[i].path))) found = (int)i;
    if (found < 0) return false;
    /* The state's memory may hold another surface's request: set what is read later. */
    st->body.kind = BODY_NONE;
    st->json = wants_json(req);
    *res = SERVER_ANSWERED;
    uint8_t m = req->method;
    uint8_t pg = (m == HTTP_GET || m == HTTP_HEAD) ? routes[found].get
                 : m == HTTP_POST                  ? routes[found].post
                                                   : 0;
    if (!pg) {
        http_response_error(r, ERR_METHOD_NOT_ALLOWED, NULL, NULL);
        r->extra = !routes[found].get    ? "Allow: POST\r\n"
                   : !routes[found].post ? "Allow: GET, HEAD\r\n"
                                         : "Allow: GET, HEAD, POST\r\n";
        return true;
    }
    st->page = (uint8_t)(pg - 1);
    static const uint8_t page_route[] = {
        [P_REGISTER_GET] = MR_SITE_REGISTER_FORM,
        [P_REGISTER_POST] = MR_SITE_REGISTER,
        [P_SIGNIN_GET] = MR_SITE_SIGNIN_FORM,
        [P_SIGNIN_POST] = MR_SITE_SIGNIN,
        [P_SIGNOUT] = MR_SITE_SIGNOUT,
        [P_USER_API_GET] = MR_SITE_ACCOUNT,
        [P_KEY_POST] = MR_SITE_KEY_ISSUE,
        [P_REVOKE_POST] = MR_SITE_KEY_REVOKE,
        [P_PASSWORD_GET] = MR_SITE_PASSWORD_FORM,
        [P_PASSWORD_POST] = MR_SITE_PASSWORD,
        [P_SIGNOUT_ALL] = MR_SITE_SIGNOUT_ALL,
    };
    r->route = page_route[st->page];
    if (m == HTTP_POST) {
        if (!account_body_begin(&st->body, req, r, fields, sizeof fields / sizeof fields[0]))
            return true;
        if (st->body.kind == BODY_JSON) st->json = true;
        *res = SERVER_READ_BODY;
        return true;
    }
    *res = SERVER_READ_BODY; /* GET: answered at completion, from the index as it is then */
    return true;
}

/* A form post's CSRF token is right (the JSON variant needs none): the
 * session's once signed in, before that the MAC of the CSRF cookie. */
static bool csrf_ok(struct handlers *h, const struct site_state *st, const struct http_request *req,
                    const struct session *s) {
    if (st->body.kind == BODY_JSON) return true;
    struct slice got = site_field(st, F_CSRF);
    if (s) return token_eq(got, s->csrf);
    return site_csrf_pre_ok(h, req, got);
}

static void do_register(struct handlers *h, struct site_state *st, struct http_request *req,
                        struct http_response *r) {
    struct slice name = site_field(st, F_USERNAME), pw = site_field(st, F_PASSWORD),
                 confirm = site_field(st, F_CONFIRM), csrf = site_field(st, F_CSRF);
    const char *why = auth_check_username(name.ptr);
    if (why) {
        site_fail(h, r, st->json, st->page, ERR_INVALID_FIELD, "username", why, name.ptr, csrf.ptr);
        return;
    }
    char msg[128];
    if (pw.len < h->set.password_min_bytes) {
        snprintf(msg, sizeof msg, "the password must have at least %u characters",
                 h->set.password_min_bytes);
        site_fail(h, r, st->json, st->page, ERR_INVALID_FIELD, "password", msg, name.ptr, csrf.ptr);
        return;
    }
    const char *weak = password_policy_check(pw.ptr, pw.len, name.ptr, name.len);
    if (weak) {
        site_fail(h, r, st->json, st->page, ERR_INVALID_FIELD, "password", weak, name.ptr,
                  csrf.ptr);
        return;
    }
    bool confirm_given = form_get(&st->body.form, F_CONFIRM, &confirm);
    if ((!st->json || confirm_given) &&
        (confirm.len != pw.len || memcmp(confirm.ptr, pw.ptr, pw.len) != 0)) {
        site_fail(h, r, st->json, st->page, ERR_INVALID_FIELD, "password_confirm",
                  "the password confirmation differs from the password", name.ptr, csrf.ptr);
        return;
    }
    /* A taken name is found only once the hash is done (finish_register): until then a
     * probe for it is throttled, queued and hashed like any registration. */
    uint8_t addr[17];
    size_t alen = site_client_addr(h, req, addr);
    uint64_t now = uv_now(h->db->loop);
    bool server_wide;
    uint32_t wait = register_wait(h, addr, alen, now, &server_wide);
    if (wait) {
        snprintf(msg, sizeof msg, "too many registrations %s; retry in %u second%s",
                 server_wide ? "on this server" : "from this address", wait, wait == 1 ? "" : "s");
        metrics_account(h->metrics, MA_REGISTRATION_THROTTLED);
        site_fail(h, r, st->json, st->page, ERR_TOO_MANY, NULL, msg, name.ptr, csrf.ptr);
        add_header(r, "Retry-After: %u\r\n", wait);
        return;
    }
    if (reply_if_no_room(h, r)) return;
    if (submit(h, st, req, r, false, NULL)) register_counted(h, addr, alen, now);
}

static void do_signin(struct handlers *h, struct site_state *st, struct http_request *req,
                      struct http_response *r) {
    struct slice name = site_field(st, F_USERNAME), csrf = site_field(st, F_CSRF);
    /* A name the server never gives out signs in nobody: answered at once as a wrong
     * password (the rules are public, so this tells nothing of any account), with no
     * hash and no throttle key, so that no string a client sends reaches a key of
     * another kind (the password change's, site_password.c; review, 2026-11-29). */
    if (auth_check_username(name.ptr) || strlen(name.ptr) != name.len) {
        metrics_account(h->metrics, MA_SIGNIN_FAILED);
        site_fail(h, r, st->json, st->page, ERR_UNAUTHORIZED, NULL, "wrong username or password",
                  name.ptr, csrf.ptr);
        return;
    }
    uint64_t now = uv_now(h->db->loop);
    uint8_t addr[17];
    size_t alen = site_client_addr(h, req, addr);
    uint32_t wait = signin_wait(h, name, addr, alen, now);
    if (wait) {
        char msg[128];
        snprintf(msg, sizeof msg, "too many sign-ins (failed, or at once); retry in %u second%s",
                 wait, wait == 1 ? "" : "s");
        metrics_account(h->metrics, MA_SIGNIN_THROTTLED);
        site_fail(h, r, st->json, st->page, ERR_TOO_MANY, NULL, msg, name.ptr, csrf.ptr);
        add_header(r, "Retry-After: %u\r\n", wait);
        return;
    }
    const struct record *u = db_user_by_name(h->db, name.ptr, name.len);
    const char *hash = pwhash_decoy(); /* an unknown user's answer takes as long */
    if (u && record_get(u, USER_PASSWORD_HASH).s.len > 0 &&
        record_get(u, USER_PASSWORD_HASH).s.len < crypto_pwhash_STRBYTES)
        hash = NULL;
    char stored[crypto_pwhash_STRBYTES];
    if (!hash) {
        memcpy(stored, record_get(u, USER_PASSWORD_HASH).s.ptr,
               record_get(u, USER_PASSWORD_HASH).s.len);
        stored[record_get(u, USER_PASSWORD_HASH).s.len] = 0;
        hash = stored;
    }
    submit(h, st, req, r, true, hash);
}

/* Revokes the user's API key (its password and sessions stay): the change's LSN. */
static uint64_t key_revoke(struct handlers *h, const struct session *s) {
    const struct record *u = db_get(h->db, s->user_id);
    if (!record_get(u, USER_KEY_HASH).s.len) return 0; /* none: nothing to write */
    union value ph = record_get(u, USER_PASSWORD_HASH);
    return db_put_account(h->db, s->user_id, (struct slice){s->name, strlen(s->name)},
                          (struct slice){"", 0}, (struct slice){ph.s.ptr, ph.s.len});
}

/* Ends this session, or with all every session of the user: cookie cleared. */
static void do_signout(struct handlers *h, struct site_state *st, struct http_response *r,
                       const struct session *s, bool all) {
    if (reply_if_storage_failing(h, r)) return;
    if (all) {
        /* Everything signed in from the password ends, the API key too: one issued
         * from a stolen session must not outlive the owner's recovery. */
        uint64_t klsn = key_revoke(h, s);
        r->lsn = site_session_end_all(h, s->user_id);
        if (klsn > r->lsn) r->lsn = klsn;
        LOG(LOG_INFO, "account: user %s signed out everywhere (API key revoked)", s->name);
        metrics_account(h->metrics, MA_SIGNOUT_ALL);
    } else {
        r->lsn = db_delete(h->db, s->session_id);
    }
    site_set_cookie(h, r, SITE_COOKIE_SESSION, "", 0);
    if (st->json)
        reply_no_content(r);
    else
        redirect(h, r, "/signin");
}

static void issue_key(struct handlers *h, struct site_state *st, struct http_request *req,
                      struct http_response *r, const struct session *s) {
    if (reply_if_storage_failing(h, r)) return;
    char key[AUTH_KEY_CHARS + 1];
    auth_new_key(key);
    r->lsn = db_put_user(h->db, s->user_id, s->name, key);
    LOG(LOG_INFO, "account: user %s issued a new API key", s->name);
    metrics_account(h->metrics, MA_KEY_ISSUED);
    if (st->json) {
        account_json_open(r, 200, s->name, strlen(s->name), s->user_id);
        buf_append_str(&r->body, ",\"APIKey\":\"");
        buf_append_str(&r->body, key);
        buf_append_str(&r->body, "\"}}");
    } else {
        user_api_page(h, req, r, s, key,
                      "Your new API key is below. Copy it now: it is shown only once.");
    }
    sodium_memzero(key, sizeof key);
}

/* Revokes the API key only: sessions are signed in with the password, not
 * the key, so they go on (docs/ACCOUNTS.md); "sign out everywhere" ends them. */
static void revoke_key(struct handlers *h, struct site_state *st, struct http_response *r,
                       const struct session *s) {
    if (reply_if_storage_failing(h, r)) return;
    r->lsn = key_revoke(h, s);
    LOG(LOG_INFO, "account: user %s revoked its API key", s->name);
    metrics_account(h->metrics, MA_KEY_REVOKED);
    if (st->json)
        reply_no_content(r);
    else
        redirect(h, r, "/user/api");
}

/* The form posts (and their JSON variants); s: the session, if signed in. */
static void site_post(struct handlers *h, struct site_state *st, struct http_request *req,
                      struct http_response *r, const struct session *s) {
    if (!origin_same(h, req)) {
        site_fail(h, r, st->json, st->page, ERR_CSRF, "csrf",
                  "this form was posted from another site", site_field(st, F_USERNAME).ptr, "");
        return;
    }
    bool needs_session = st->page != P_REGISTER_POST && st->page != P_SIGNIN_POST;
    if (needs_session && !s) {
        if (st->page == P_SIGNOUT || st->page == P_SIGNOUT_ALL) {
            /* Signed out already: say so the same way. */
            site_set_cookie(h, r, SITE_COOKIE_SESSION, "", 0);
            if (st->json)
                reply_no_content(r);
            else
                redirect(h, r, "/signin");
            return;
        }
        not_signed_in(h, r, st->json);
        return;
    }
    if (!csrf_ok(h, st, req, needs_session ? s : NULL)) {
        site_fail(h, r, st->json, st->page, ERR_CSRF, "csrf", err_message(ERR_CSRF),
                  site_field(st, F_USERNAME).ptr, "");
        return;
    }
    switch (st->page) {
    case P_REGISTER_POST:
        do_register(h, st, req, r);
        return;
    case P_SIGNIN_POST:
        do_signin(h, st, req, r);
        return;
    case P_SIGNOUT:
    case P_SIGNOUT_ALL:
        do_signout(h, st, r, s, st->page == P_SIGNOUT_ALL);
        return;
    case P_KEY_POST:
        issue_key(h, st, req, r, s);
        return;
    case P_REVOKE_POST:
        revoke_key(h, st, r, s);
        return;
    case P_PASSWORD_POST:
        site_password_change(h, st, req, r, s, st->page);
        return;
    default:
        http_response_error(r, ERR_INTERNAL, NULL, NULL);
    }
}

void site_complete(struct handlers *h, struct site_state *st, struct http_request *req,
                   struct http_response *r) {
    if (st->body.kind != BODY_NONE && !account_body_finish(&st->body, r)) {
        if (!st->json) {
            site_fail(h, r, false, st->page, ERR_INVALID_FIELD, NULL, st->body.form.err_msg,
                      site_field(st, F_USERNAME).ptr, site_field(st, F_CSRF).ptr);
        }
        return;
    }
    struct session s;
    bool signed_in = site_session_get(h, req, &s);
    if (signed_in) r->user_id = s.user_id;
    switch (st->page) {
    case P_REGISTER_GET:
        page_with_csrf(h, req, r, SITE_REGISTER);
        return;
    case P_SIGNIN_GET:
        page_with_csrf(h, req, r, SITE_SIGNIN);
        return;
    case P_USER_API_GET:
        if (!signed_in) {
            not_signed_in(h, r, st->json);
        } else if (st->json) {
            account_json_open(r, 200, s.name, strlen(s.name), s.user_id);
            buf_append_str(&r->body, s.has_key ? ",\"HasKey\":true}}" : ",\"HasKey\":false}}");
        } else {
            user_api_page(h, req, r, &s, NULL, NULL);
        }
        return;
    case P_PASSWORD_GET:
        if (!signed_in)
            not_signed_in(h, r, st->json);
        else
            password_page(h, r, &s);
        return;
    default:
        break;
    }
    site_post(h, st, req, r, signed_in ? &s : NULL);
}

void site_body(struct site_state *st, const char *ptr, size_t len) {
    if (st->body.kind != BODY_NONE) account_body_feed(&st->body, ptr, len);
}

void site_request_end(struct site_state *st) {
    if (st->body.kind != BODY_NONE) account_body_end(&st->body);
}
