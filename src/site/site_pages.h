/*
 * site_pages: the account site's HTML pages, as html.h templates compiled
 * into the binary with their CSS. No external assets: the style is inline,
 * the only script is the inline copy button of a freshly issued API key,
 * and the icon is an empty data: URL (so browsers ask the server for no
 * /favicon.ico).
 *
 * Every page takes base (the site's base path, "" or e.g. "/account",
 * from the configuration: it goes into href and action attributes, so it
 * must never come from a request), error and notice (shown, when
 * non-empty, in a role="alert" and a role="status" element). The forms
 * post application/x-www-form-urlencoded with a hidden field csrf.
 *
 *   register  POST {base}/register: username, password, password_confirm, csrf.
 *             Variables: username (refilled after an error), password_min
 *             (the minimum length, shown and set as minlength when non-empty).
 *   signin    POST {base}/signin: username, password, csrf. Variables: username.
 *   user_api  username, user_id; api_key (non-empty only on the answer that
 *             issued it: shown in id="api-key" with a copy button and a curl
 *             line against api_url, e.g. "http://host:port/v2"); has_key
 *             (non-empty when the user has a key: shows the revoke button).
 *             POST {base}/user/api/key, {base}/user/api/revoke,
 *             {base}/signout and {base}/signout/all, each with csrf; a link
 *             to {base}/user/password.
 *   password  POST {base}/user/password: current_password, password,
 *             password_confirm, csrf. Variables: username (shown, and the
 *             hidden username field password managers read), password_min.
 *   message   title and message: a generic page, used for errors.
 */
#ifndef EVENTD_SITE_PAGES_H
#define EVENTD_SITE_PAGES_H

#include <stddef.h>

#include "common/buf.h"
#include "site/html.h"

enum site_page {
    SITE_REGISTER,
    SITE_SIGNIN,
    SITE_USER_API,
    SITE_MESSAGE,
    SITE_PASSWORD,
    SITE_PAGE_COUNT,
};

struct site_page_def {
    const char *name;        /* "register", "signin", "user_api", "message", "password" */
    const char *tpl;         /* the html.h template */
    const char *const *vars; /* the variables it uses: every one the template names */
    size_t nvars;
};

/* Indexed by enum site_page; static, never changed. */
extern const struct site_page_def site_pages[SITE_PAGE_COUNT];

/*
 * The inline style and script exactly as they appear in the pages, for a
 * Content-Security-Policy that allows them by hash ('sha256-...' of these
 * bytes) rather than 'unsafe-inline'.
 */
extern const char site_css[];
extern const char site_copy_script[];

/* Appends the page rendered with the nvars variables to out (html_render). */
void site_page_render(struct buf *out, enum site_page page, const struct html_var *vars,
                      size_t nvars);

#endif
