/* origin: see origin.h. */
#include "core/origin.h"

#include <string.h>
#include <strings.h>

static bool eq_nocase(struct slice a, const char *b, size_t n) {
    return a.len == n && strncasecmp(a.ptr, b, n) == 0;
}

bool origin_same(const struct handlers *h, const struct http_request *req) {
    bool same_origin = false;
    if (req->kept->seen[HF_FETCH_SITE]) {
        struct slice site = http_request_field(req, HF_FETCH_SITE);
        /* "same-site" is another port or a sibling host: not this origin. */
        same_origin = eq_nocase(site, "same-origin", 11) || eq_nocase(site, "none", 4);
        if (!same_origin) return false;
    }
    if (!req->kept->seen[HF_ORIGIN]) return true;
    struct slice o = http_request_field(req, HF_ORIGIN);
    /* A browser sends "null" for its own form under Referrer-Policy:
     * no-referrer (the site's pages say so): then Sec-Fetch-Site decides,
     * and without it (a sandboxed frame, a data: URL) nothing vouches. */
    if (eq_nocase(o, "null", 4)) return same_origin;
    const char *want = h->set.site_origin;
    if (want && *want) return eq_nocase(o, want, strlen(want));
    /* No configured origin: https, or also http unless the cookies say
     * Secure (then the site is HTTPS only), and the request's Host. */
    size_t sl = 0;
    if (o.len > 8 && strncasecmp(o.ptr, "https://", 8) == 0)
        sl = 8;
    else if (!h->set.cookie_secure && o.len > 7 && strncasecmp(o.ptr, "http://", 7) == 0)
        sl = 7;
    if (!sl) return false;
    struct slice host = http_request_field(req, HF_HOST);
    return host.len && eq_nocase((struct slice){o.ptr + sl, o.len - sl}, host.ptr, host.len);
}
