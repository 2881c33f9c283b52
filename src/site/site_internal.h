/*
 * site_internal: what the account site's files share: site.c (routing, the
 * pages and their flows, register and sign-in on the threadpool),
 * site_session.c (sessions and cookies), site_csrf.c (the server secret,
 * the pre-sign-in CSRF token and the Origin check) and site_password.c (the
 * password change). Not an API for anyone else. The site's other files are
 * modules with their own headers: site_pages (the page templates), html
 * (the template renderer), password_policy, and signin_throttle (declared
 * in site.h).
 */
#ifndef EVENTD_SITE_INTERNAL_H
#define EVENTD_SITE_INTERNAL_H

#include "core/reply.h"
#include "site/site.h"

#define SITE_TOKEN_CHARS 43 /* 256 bits, unpadded base64url */
#define SITE_SESSIONS_PER_USER 8

/* A signed-in session: the user and the session record. */
struct session {
    uint64_t user_id, session_id;
    char name[68];
    char csrf[SITE_TOKEN_CHARS + 1];
    bool has_key;
};

/* ---- cookies and sessions (site_session.c) ---- */

enum site_cookie { SITE_COOKIE_SESSION, SITE_COOKIE_CSRF };
/* The cookie's name: "__Host-" prefixed with --cookie-secure (static). */
const char *site_cookie_name(const struct handlers *h, enum site_cookie c);
/* The value of cookie c in the request's Cookie header, or an empty slice;
 * points into the request (valid as http_request_field's result). */
struct slice site_cookie(const struct handlers *h, const struct http_request *req,
                         enum site_cookie c);
/* Adds the Set-Cookie line (Path=/, HttpOnly, SameSite=Strict, Secure with --cookie-secure). */
void site_set_cookie(struct handlers *h, struct http_response *r, enum site_cookie c,
                     const char *value, uint32_t max_age);
void site_new_token(char out[SITE_TOKEN_CHARS + 1]);
/*
 * The session of the request's cookie, if valid, into *s. The work is the
 * same for a known and an unknown name: an unknown one is checked against a
 * decoy user's sessions, and either way SITE_SESSIONS_PER_USER hashes are
 * compared.
 */
bool site_session_get(struct handlers *h, const struct http_request *req, struct session *s);
/*
 * Starts a session for the user: the record, and the cookie in r. Ends the
 * user's expired sessions and, beyond SITE_SESSIONS_PER_USER, the oldest.
 * Returns the LSN to wait for, or 0 after answering 503 (no id).
 */
uint64_t site_session_start(struct handlers *h, struct http_response *r, uint64_t user_id,
                            const char *name);
/* Ends every session of the user. Returns the LSN to wait for (0: there was none). */
uint64_t site_session_end_all(struct handlers *h, uint64_t user_id);

/* ---- CSRF before sign-in, and the Origin check (site_csrf.c) ---- */

/*
 * Loads the server secret from path, or creates it there (mode 0600) when
 * the file does not exist; path NULL or "": a random secret for this
 * process only. Returns 0, or -1 after writing the reason to msg.
 */
int site_secret_init(struct handlers *h, const char *path, char *msg, size_t msg_len);
/* The form token for the CSRF cookie's value cookie (SITE_TOKEN_CHARS): its MAC under the secret.
 */
void site_csrf_form_token(const struct handlers *h, const char *cookie,
                          char out[SITE_TOKEN_CHARS + 1]);
/* A form's token before sign-in is the MAC of the request's CSRF cookie. */
bool site_csrf_pre_ok(const struct handlers *h, const struct http_request *req, struct slice got);
/* NULL when o is a valid --site-origin ("" or http(s)://HOST[:PORT]), else the reason. */
const char *site_origin_setting_check(const char *o);

/* ---- the flows' shared pieces (site.c) ---- */

/* The fields of every form post, and of the JSON variant. */
enum { F_USERNAME, F_PASSWORD, F_CONFIRM, F_CSRF, F_CURRENT };
/* A field's value (NUL-terminated; "" when absent), valid until the next body. */
struct slice site_field(const struct site_state *st, int i);
/* A failure: the JSON error, or the page of the post again (page: site.c's
 * enum page) with the reason, the name and the CSRF token refilled. */
void site_fail(struct handlers *h, struct http_response *r, bool json, uint8_t page, enum err e,
               const char *field, const char *msg, const char *name, const char *csrf);
/* The account's answer: the JSON {"Username","UserID"} or a 303 to /user/api. */
void site_answer_account(struct handlers *h, struct http_response *r, bool json, uint16_t status,
                         const struct record *u);

/* ---- the password change (site_password.c) ---- */

/*
 * POST /user/password for the signed-in s: checks the fields, then the
 * current password on the threadpool (through the sign-in throttle), then
 * hashes the new one; then the user's sessions all end and this client gets
 * a new one. page: site.c's page number of the post (for site_fail).
 */
void site_password_change(struct handlers *h, struct site_state *st, struct http_request *req,
                          struct http_response *r, const struct session *s, uint8_t page);

#endif
