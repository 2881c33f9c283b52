/*
 * http_check: see http_check.h. The shapes, by Content-Type:
 *
 * - application/json: the API's envelope, {"Status":"ok",...} on 2xx and
 *   {"Status":"error","Error":{"Code":...}} otherwise (also the site's JSON
 *   variant).
 * - text/html; charset=utf-8: an account page (site_pages.c): it starts
 *   with "<!doctype html>\n<html lang=\"en\">\n" and ends with "</html>\n",
 *   comes with the pages' headers (Content-Security-Policy,
 *   X-Content-Type-Options: nosniff, Cache-Control: no-store), and holds
 *   only the tags and attributes the templates use, every attribute value
 *   quoted and free of '<' and '>', no raw '>' in its text, and no style or
 *   script but the page's own, byte for byte (site_css, site_copy_script):
 *   a request's bytes reflected without escaping would break one of these.
 * - text/plain; charset=utf-8: only a 303, whose Location is one of the
 *   site's pages and whose body is "See LOCATION\n" (site.c redirect()).
 *
 * A 303 has exactly one Location; nothing else has one. A Set-Cookie is
 * "NAME=VALUE; Path=/; Max-Age=N; HttpOnly; SameSite=Strict" for the
 * session cookie (USER:TOKEN for the session's lifetime, or empty with
 * Max-Age=0 to clear it) or the CSRF cookie (a token, for a day).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "http_check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <yajl/yajl_tree.h>

#include "site/site_pages.h"

#define TOKEN_CHARS 43 /* 256 bits, unpadded base64url */

enum ctype { CT_NONE, CT_JSON, CT_HTML, CT_TEXT };

/* What the header section of one response says. */
struct head {
    int status;
    bool has_date, close;
    int lengths, types, locations;
    uint64_t clen;
    enum ctype type;
    const char *location;
    size_t location_len;
    int csp, nosniff, nostore; /* the pages' headers */
};

static const char *find_crlf(const char *p, const char *end) {
    for (; p + 1 < end; p++)
        if (p[0] == '\r' && p[1] == '\n') return p;
    return NULL;
}

static bool header_is(const char *line, size_t len, const char *name) {
    size_t n = strlen(name);
    return len > n && line[n] == ':' && strncasecmp(line, name, n) == 0;
}

static bool value_is(const char *val, size_t vlen, const char *s) {
    return vlen == strlen(s) && memcmp(val, s, vlen) == 0;
}

static bool token_chars(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static bool username_chars(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return n >= 1 && n <= 64;
}

/* A Set-Cookie value: see the top of the file. */
static const char *check_cookie(const char *val, size_t n) {
    static const char attrs[] = "; Path=/; Max-Age=";
    static const char tail[] = "; HttpOnly; SameSite=Strict";
    const char *eq = memchr(val, '=', n), *semi = memchr(val, ';', n);
    if (!eq || !semi || semi < eq) return "Set-Cookie without NAME=VALUE;";
    const char *v = eq + 1;
    size_t vlen = (size_t)(semi - v), rest = n - (size_t)(semi - val);
    if (rest < sizeof attrs - 1 + sizeof tail - 1 || memcmp(semi, attrs, sizeof attrs - 1) != 0 ||
        memcmp(val + n - (sizeof tail - 1), tail, sizeof tail - 1) != 0)
        return "Set-Cookie attributes are not \"; Path=/; Max-Age=N; HttpOnly; SameSite=Strict\"";
    const char *d = semi + sizeof attrs - 1, *dend = val + n - (sizeof tail - 1);
    uint64_t age = 0;
    if (d >= dend || dend - d > 10) return "Set-Cookie with a bad Max-Age";
    for (; d < dend; d++) {
        if (*d < '0' || *d > '9') return "Set-Cookie with a bad Max-Age";
        age = age * 10 + (uint64_t)(*d - '0');
    }
    if (value_is(val, (size_t)(eq - val), "eventd_csrf")) {
        if (vlen != TOKEN_CHARS || !token_chars(v, vlen) || age != 86400)
            return "eventd_csrf cookie is not a token for 86400 s";
        return NULL;
    }
    if (!value_is(val, (size_t)(eq - val), "eventd_session"))
        return "Set-Cookie of an unknown name";
    if (vlen == 0) return age == 0 ? NULL : "a cleared eventd_session with a Max-Age";
    const char *colon = memchr(v, ':', vlen);
    if (!colon || !username_chars(v, (size_t)(colon - v)) ||
        (size_t)(v + vlen - colon - 1) != TOKEN_CHARS || !token_chars(colon + 1, TOKEN_CHARS))
        return "eventd_session cookie is not USER:TOKEN";
    if (age != HTTP_CHECK_SESSION_TTL_S) return "eventd_session Max-Age is not the session TTL";
    return NULL;
}

static const char *content_type(struct head *h, const char *val, size_t vlen) {
    h->types++;
    h->type = value_is(val, vlen, "application/json")            ? CT_JSON
              : value_is(val, vlen, "text/html; charset=utf-8")  ? CT_HTML
              : value_is(val, vlen, "text/plain; charset=utf-8") ? CT_TEXT
                                                                 : CT_NONE;
    return h->type == CT_NONE ? "Content-Type is none of JSON, HTML or the redirects' text" : NULL;
}

/* One header line (n bytes at p, no CRLF). */
static const char *header_line(struct head *h, const char *p, size_t n) {
    const char *eol = p + n, *colon = memchr(p, ':', n);
    if (!colon || colon == p) return "header line without a name";
    for (const char *q = p; q < eol; q++)
        if (*q == '\n' || *q == '\r' || *q == 0) return "control byte in a header";
    const char *val = colon + 1;
    while (val < eol && *val == ' ')
        val++;
    size_t vlen = (size_t)(eol - val);
    if (header_is(p, n, "Content-Length")) {
        h->lengths++;
        h->clen = 0;
        if (vlen == 0 || vlen > 12) return "bad Content-Length";
        for (size_t i = 0; i < vlen; i++) {
            if (val[i] < '0' || val[i] > '9') return "bad Content-Length";
            h->clen = h->clen * 10 + (uint64_t)(val[i] - '0');
        }
    } else if (header_is(p, n, "Content-Type")) {
        return content_type(h, val, vlen);
    } else if (header_is(p, n, "Date")) {
        h->has_date = vlen == 29;
    } else if (header_is(p, n, "Connection")) {
        if (vlen == 5 && !strncasecmp(val, "close", 5))
            h->close = true;
        else if (!(vlen == 10 && !strncasecmp(val, "keep-alive", 10)))
            return "Connection is neither close nor keep-alive";
    } else if (header_is(p, n, "Location")) {
        h->locations++;
        h->location = val;
        h->location_len = vlen;
    } else if (header_is(p, n, "Set-Cookie")) {
        return check_cookie(val, vlen);
    } else if (header_is(p, n, "Content-Security-Policy")) {
        h->csp += vlen > 20 && memcmp(val, "default-src 'none'; ", 20) == 0;
    } else if (header_is(p, n, "X-Content-Type-Options")) {
        h->nosniff += value_is(val, vlen, "nosniff");
    } else if (header_is(p, n, "Cache-Control")) {
        h->nostore += value_is(val, vlen, "no-store");
    }
    return NULL;
}

/* The JSON envelope: {"Status":"ok",...} for 2xx, {"Status":"error","Error":{"Code":..}} else. */
static const char *check_json(int status, const char *p, size_t n) {
    static char copy[HTTP_CHECK_MAX + 1];
    memcpy(copy, p, n);
    copy[n] = 0;
    char err[128];
    yajl_val v = yajl_tree_parse(copy, err, sizeof err);
    if (!v) return "body is not JSON";
    const char *why = NULL;
    const char *status_path[] = {"Status", NULL};
    const char *code_path[] = {"Error", "Code", NULL};
    const char *openapi_path[] = {"openapi", NULL};
    yajl_val st = yajl_tree_get(v, status_path, yajl_t_string);
    /* GET {base}/openapi.json: the contract itself, not an answer in the envelope. */
    if (status == 200 && YAJL_IS_OBJECT(v) && !st && yajl_tree_get(v, openapi_path, yajl_t_string))
        why = NULL;
    else if (!YAJL_IS_OBJECT(v) || !st)
        why = "body is not an object with a string Status";
    else if (status < 400 && strcmp(YAJL_GET_STRING(st), "ok") != 0)
        why = "2xx body without Status ok";
    else if (status >= 400 && (strcmp(YAJL_GET_STRING(st), "error") != 0 ||
                               !yajl_tree_get(v, code_path, yajl_t_string)))
        why = "error body without Status error and an Error.Code";
    yajl_tree_free(v);
    return why;
}

/* Is name (len bytes) one of the NULL-terminated list? */
static bool known(const char *const *list, const char *name, size_t len) {
    for (; *list; list++)
        if (value_is(name, len, *list)) return true;
    return false;
}

/* Every tag and attribute the templates of site_pages.c use. */
static const char *const html_tags[] = {
    "html", "head", "meta", "link", "title", "style",  "body",   "header", "a",      "main",
    "h1",   "h2",   "h3",   "p",    "form",  "input",  "label",  "div",    "button", "section",
    "dl",   "dt",   "dd",   "code", "pre",   "script", "strong", "span",   NULL};
static const char *const html_attrs[] = {"lang",
                                         "charset",
                                         "name",
                                         "content",
                                         "rel",
                                         "href",
                                         "class",
                                         "method",
                                         "action",
                                         "type",
                                         "value",
                                         "id",
                                         "for",
                                         "role",
                                         "autocomplete",
                                         "autocapitalize",
                                         "autocorrect",
                                         "spellcheck",
                                         "maxlength",
                                         "minlength",
                                         "required",
                                         "pattern",
                                         "aria-describedby",
                                         "aria-labelledby",
                                         NULL};

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* The tag whose '<' is at p[*at]; moves *at past it (and past a style or script element). */
static const char *html_tag(const char *p, size_t n, size_t *at, int *scripts) {
    size_t i = *at + 1;
    bool closing = i < n && p[i] == '/';
    i += closing;
    size_t name = i;
    while (i < n && name_char(p[i]))
        i++;
    if (!known(html_tags, p + name, i - name)) return "a tag the pages do not use (an injection?)";
    bool style = value_is(p + name, i - name, "style"),
         script = value_is(p + name, i - name, "script");
    for (;;) {
        while (i < n && p[i] == ' ')
            i++;
        if (i >= n) return "HTML tag cut short";
        if (p[i] == '>') break;
        if (closing) return "attributes in a closing tag";
        size_t a = i;
        while (i < n && name_char(p[i]))
            i++;
        if (!known(html_attrs, p + a, i - a))
            return "an attribute the pages do not use (an injection?)";
        if (i < n && p[i] == '=') {
            if (i + 1 >= n || p[i + 1] != '"') return "unquoted attribute value";
            const char *v = p + i + 2, *q = memchr(v, '"', n - i - 2);
            if (!q) return "attribute value cut short";
            if (memchr(v, '<', (size_t)(q - v)) || memchr(v, '>', (size_t)(q - v)))
                return "raw < or > in an attribute value";
            i = (size_t)(q - p) + 1;
        }
    }
    i++;
    if (!closing && (style || script)) {
        const char *text = style ? site_css : site_copy_script;
        const char *end = style ? "</style>" : "</script>";
        size_t tl = strlen(text), el = strlen(end);
        if (n - i < tl + el || memcmp(p + i, text, tl) != 0 || memcmp(p + i + tl, end, el) != 0)
            return "a style or script that is not the page's own";
        i += tl + el;
        *scripts += script;
    }
    *at = i;
    return NULL;
}

/* An account page: see the top of the file. */
static const char *check_html(const char *p, size_t n) {
    static const char start[] = "<!doctype html>\n<html lang=\"en\">\n";
    static const char end[] = "</html>\n";
    if (n < sizeof start - 1 + sizeof end - 1 || memcmp(p, start, sizeof start - 1) != 0)
        return "HTML page does not start with its doctype";
    if (memcmp(p + n - (sizeof end - 1), end, sizeof end - 1) != 0)
        return "HTML page does not end with </html>";
    int scripts = 0;
    for (size_t i = strlen("<!doctype html>"); i < n;) {
        if (p[i] == '>') return "raw > in the text of a page (an injection?)";
        if (p[i] != '<') {
            i++;
            continue;
        }
        const char *why = html_tag(p, n, &i, &scripts);
        if (why) return why;
    }
    if (scripts > 1) return "more than one script in a page";
    if (scripts && !memmem(p, n, "id=\"api-key\"", 12)) return "the copy script without a key";
    return NULL;
}

/* The pages' headers, and the redirects' Location: whatever the body (HEAD has none). */
static const char *check_site_head(const struct head *h) {
    if (h->types > 1) return "more than one Content-Type";
    if (h->type == CT_HTML && (h->csp != 1 || h->nosniff != 1 || h->nostore != 1))
        return "a page without exactly one CSP, nosniff and no-store";
    if ((h->status == 303) != (h->locations == 1) || h->locations > 1)
        return "a 303 without exactly one Location, or a Location without a 303";
    if ((h->type == CT_TEXT) != (h->status == 303)) return "text/plain is only for a 303";
    if (h->locations && !value_is(h->location, h->location_len, "/user/api") &&
        !value_is(h->location, h->location_len, "/signin"))
        return "Location is not one of the site's pages";
    return NULL;
}

static const char *check_body(const struct head *h, const char *p, size_t n) {
    switch (h->type) {
    case CT_JSON:
        return check_json(h->status, p, n);
    case CT_HTML:
        return check_html(p, n);
    case CT_TEXT:
        if (n != 4 + h->location_len + 1 || memcmp(p, "See ", 4) != 0 ||
            memcmp(p + 4, h->location, h->location_len) != 0 || p[n - 1] != '\n')
            return "a redirect's body is not \"See LOCATION\\n\"";
        return NULL;
    default:
        return "no Content-Type";
    }
}

const char *http_check_response(const char *buf, size_t len, size_t *pos, int head, bool *close,
                                bool *interim) {
    const char *p = buf + *pos, *end = buf + len;
    const char *eol = find_crlf(p, end);
    if (!eol) return "status line cut short";
    if (eol - p < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0 || p[12] != ' ')
        return "malformed status line";
    struct head h = {0};
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9') return "status is not three digits";
        h.status = h.status * 10 + (p[i] - '0');
    }
    if (h.status < 100 || h.status > 599) return "status out of range";
    *interim = h.status == 100;
    for (p = eol + 2;;) {
        eol = find_crlf(p, end);
        if (!eol) return "headers cut short";
        if (eol == p) break;
        const char *why = header_line(&h, p, (size_t)(eol - p));
        if (why) return why;
        p = eol + 2;
    }
    p += 2;
    *close = h.close;
    if (*interim) {
        *pos = (size_t)(p - buf);
        return h.lengths ? "100 Continue with a Content-Length" : NULL;
    }
    if (!h.has_date) return "no Date";
    const char *why = check_site_head(&h);
    if (why) return why;
    if (head == 2 && (p == end || (end - p >= 5 && memcmp(p, "HTTP/", 5) == 0))) head = 1;
    if (head == 1) {
        /* RFC 9112 6.3: a response to HEAD ends with its header section, whatever its
         * Content-Length says; body bytes would be read as the next response. */
        *pos = (size_t)(p - buf);
        if (*pos < len && (len - *pos < 5 || memcmp(p, "HTTP/", 5) != 0))
            return "the response to a HEAD request carries a body";
        return NULL;
    }
    if (h.status == 204 || h.status == 304) {
        /* 304 (If-None-Match): no content either (RFC 9110 15.4.5); eventd sends neither. */
        if (h.lengths || h.types) return "204 or 304 with Content-Length or Content-Type";
        *pos = (size_t)(p - buf);
        return NULL;
    }
    if (h.lengths != 1) return "not exactly one Content-Length";
    if (!h.types) return "no Content-Type";
    if ((uint64_t)(end - p) < h.clen) return "body shorter than its Content-Length";
    why = check_body(&h, p, (size_t)h.clen);
    if (why) return why;
    *pos = (size_t)(p - buf) + (size_t)h.clen;
    return NULL;
}
