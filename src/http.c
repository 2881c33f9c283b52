/*
 * http: see http.h.
 *
 * The header limit counts every byte from the start of a request to the end
 * of its headers, whitespace included, whatever the read boundaries: the
 * parser pauses itself at the start of a message and at the end of its
 * headers, so http_parser_execute knows exactly which bytes of each read
 * were head bytes. The owner hears of the headers only after that count
 * has been checked. Spans (target, header names and values) may arrive in
 * several pieces when a read ends inside one, which is why the few headers
 * we keep are appended to buffers rather than pointed at.
 */
#include "http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "json.h"

enum { H_OTHER, H_AUTHORIZATION, H_EXPECT };

static struct http_parser *P(llhttp_t *ll) {
    return (struct http_parser *)ll->data;
}

/* Our own verdict from inside a callback: llhttp stops with a callback error. */
static int stop(struct http_parser *p, enum err e) {
    p->error = e;
    p->stopped = true;
    return HPE_USER;
}

/* Pauses llhttp for our own bookkeeping; execute resumes it at once. */
static int pause_here(struct http_parser *p, uint8_t next) {
    p->internal_pause = next;
    return HPE_PAUSED;
}

static int on_message_begin(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    buf_reset(&r->target);
    buf_reset(&r->authorization);
    r->expect_continue = r->has_body = false;
    r->content_length = r->body_bytes = 0;
    r->head_bytes = 0;
    r->cur_header = H_OTHER;
    p->name_len = p->value_len = 0;
    p->in_message = p->in_headers = true;
    return pause_here(p, PAUSE_BEGIN);
}

static int on_url(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    /* Past the limit the request is refused anyway: stop growing the copy. */
    if (p->req.target.len + n > p->limits->max_header_bytes) return stop(p, ERR_HEADERS_TOO_LARGE);
    buf_append(&p->req.target, at, n);
    return 0;
}

/* Header names and values may arrive in pieces; the few names we match are
 * short, so their first bytes are kept in a small array until complete. */
static int on_header_field(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    if (p->name_len + n <= sizeof p->name) memcpy(p->name + p->name_len, at, n);
    p->name_len += n;
    return 0;
}

static int on_header_field_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    if (p->name_len == 13 && strncasecmp(p->name, "authorization", 13) == 0)
        r->cur_header = H_AUTHORIZATION;
    else if (p->name_len == 6 && strncasecmp(p->name, "expect", 6) == 0)
        r->cur_header = H_EXPECT;
    else
        r->cur_header = H_OTHER;
    if (r->cur_header == H_AUTHORIZATION) buf_reset(&r->authorization);
    p->name_len = 0;
    p->value_len = 0;
    return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    if (r->cur_header == H_AUTHORIZATION) {
        if (r->authorization.len + n > p->limits->max_header_bytes)
            return stop(p, ERR_HEADERS_TOO_LARGE);
        buf_append(&r->authorization, at, n);
    } else if (r->cur_header == H_EXPECT) {
        if (p->value_len + n <= sizeof p->name) memcpy(p->name + p->value_len, at, n);
        p->value_len += n;
    }
    return 0;
}

static int on_header_value_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    if (r->cur_header == H_EXPECT) {
        /* Other expectations are ignored, as RFC 9110 allows. */
        if (p->value_len == 12 && strncasecmp(p->name, "100-continue", 12) == 0)
            r->expect_continue = true;
    }
    r->cur_header = H_OTHER;
    return 0;
}

static int on_headers_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    p->in_headers = false;
    r->method = (uint8_t)ll->method;
    r->version_minor = ll->http_minor;
    r->keep_alive = llhttp_should_keep_alive(ll);
    r->has_body = (ll->flags & F_CHUNKED) || ((ll->flags & F_CONTENT_LENGTH) && ll->content_length);
    r->content_length = (ll->flags & F_CONTENT_LENGTH) ? ll->content_length : 0;

    if (ll->http_major != 1) return stop(p, ERR_VERSION);
    /* The target is origin-form: "/path?query". */
    const char *t = r->target.ptr;
    size_t tl = r->target.len;
    if (tl == 0 || t[0] != '/') return stop(p, ERR_BAD_REQUEST);
    const char *q = memchr(t, '?', tl);
    r->path = (struct slice){t, q ? (size_t)(q - t) : tl};
    r->query = q ? (struct slice){q + 1, tl - (size_t)(q - t) - 1} : (struct slice){t + tl, 0};

    if (r->content_length > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    /* The owner hears of the headers in execute, once their size is known. */
    return pause_here(p, PAUSE_HEADERS);
}

static int on_body(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    r->body_bytes += n;
    if (r->body_bytes > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    p->ev->on_body(p->owner, r, at, n);
    return 0;
}

/* Chunk extensions count against the body limit: they arrive with the body. */
static int on_chunk_extension(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    p->req.body_bytes += n;
    if (p->req.body_bytes > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    return 0;
}

static int on_message_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    p->in_message = false;
    return p->ev->on_complete(p->owner, &p->req) ? HPE_PAUSED : 0;
}

static llhttp_settings_t settings;

void http_parser_init(struct http_parser *p, const struct http_limits *limits,
                      const struct http_events *ev, void *owner) {
    if (!settings.on_message_begin) {
        llhttp_settings_init(&settings);
        settings.on_message_begin = on_message_begin;
        settings.on_url = on_url;
        settings.on_chunk_extension_name = on_chunk_extension;
        settings.on_chunk_extension_value = on_chunk_extension;
        settings.on_header_field = on_header_field;
        settings.on_header_field_complete = on_header_field_complete;
        settings.on_header_value = on_header_value;
        settings.on_header_value_complete = on_header_value_complete;
        settings.on_headers_complete = on_headers_complete;
        settings.on_body = on_body;
        settings.on_message_complete = on_message_complete;
    }
    memset(p, 0, sizeof *p);
    p->limits = limits;
    p->ev = ev;
    p->owner = owner;
    buf_init(&p->req.target, 256);
    buf_init(&p->req.authorization, 128);
    http_parser_reset(p);
}

void http_parser_reset(struct http_parser *p) {
    llhttp_init(&p->ll, HTTP_REQUEST, &settings);
    p->ll.data = p;
    p->error = ERR_NONE;
    p->stopped = false;
    p->internal_pause = PAUSE_NONE;
    p->in_message = p->in_headers = false;
}

void http_parser_destroy(struct http_parser *p) {
    buf_destroy(&p->req.target);
    buf_destroy(&p->req.authorization);
}

enum http_status http_parser_execute(struct http_parser *p, const char *ptr, size_t len,
                                     size_t *consumed) {
    size_t off = 0;
    for (;;) {
        bool head = p->in_headers; /* were the bytes of this segment head bytes? */
        llhttp_errno_t e = llhttp_execute(&p->ll, ptr + off, len - off);
        size_t used =
            e == HPE_OK ? len - off : (size_t)(llhttp_get_error_pos(&p->ll) - (ptr + off));
        off += used;
        if (head) p->req.head_bytes += (uint32_t)used;
        if ((head || p->internal_pause == PAUSE_HEADERS) &&
            p->req.head_bytes > p->limits->max_header_bytes) {
            p->error = ERR_HEADERS_TOO_LARGE;
            *consumed = off;
            return HTTP_ERROR;
        }
        if (e == HPE_OK) {
            *consumed = len;
            return HTTP_OK;
        }
        if (e == HPE_PAUSED && p->internal_pause != PAUSE_NONE) {
            uint8_t what = p->internal_pause;
            p->internal_pause = PAUSE_NONE;
            if (what == PAUSE_HEADERS && p->ev->on_headers(p->owner, &p->req)) {
                p->error = ERR_NONE; /* the owner has answered */
                *consumed = off;
                return HTTP_ERROR;
            }
            llhttp_resume(&p->ll);
            continue;
        }
        *consumed = off;
        if (e == HPE_PAUSED) return HTTP_PAUSED;
        if (!p->stopped) {
            /* llhttp's own complaint: the request line, a header or a chunk is malformed. */
            p->error = e == HPE_INVALID_VERSION ? ERR_VERSION : ERR_BAD_REQUEST;
        }
        return HTTP_ERROR;
    }
}

void http_parser_resume(struct http_parser *p) {
    llhttp_resume(&p->ll);
}

/* ---- responses ---- */

void http_response_init(struct http_response *r) {
    memset(r, 0, sizeof *r);
    buf_init(&r->body, 0); /* grows on first use, then keeps its capacity */
    http_response_reset(r);
}

void http_response_destroy(struct http_response *r) {
    buf_destroy(&r->body);
}

void http_response_reset(struct http_response *r) {
    r->status = 200;
    r->close = false;
    r->no_body = false;
    r->http10 = false;
    r->extra = NULL;
    r->lsn = 0;
    r->head_len = 0;
    buf_reset(&r->body);
}

void http_response_error(struct http_response *r, enum err e, const char *field,
                         const char *message) {
    r->status = (uint16_t)err_status(e);
    r->no_body = false;
    buf_reset(&r->body);
    buf_append_str(&r->body, "{\"Status\":\"error\",\"Error\":{\"Code\":\"");
    buf_append_str(&r->body, err_code(e));
    buf_append_str(&r->body, "\",\"Message\":");
    const char *m = message ? message : err_message(e);
    json_write_string(&r->body, m, strlen(m));
    if (field) {
        buf_append_str(&r->body, ",\"Field\":");
        json_write_string(&r->body, field, strlen(field));
    }
    buf_append_str(&r->body, "}}");
}

static char date_buf[40];
static time_t date_at;

const char *http_date(void) {
    time_t now = time(NULL);
    if (now != date_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(date_buf, sizeof date_buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        date_at = now;
    }
    return date_buf;
}

static size_t put(char *h, const char *s, size_t n) {
    memcpy(h, s, n);
    return n;
}

#define PUT_LIT(h, s) put((h), (s), sizeof(s) - 1)

void http_response_finish(struct http_response *r, bool keep_alive) {
    /* Hot path: no printf; every piece has a known bound within r->head. */
    char *h = r->head;
    size_t n = PUT_LIT(h, "HTTP/1.1 ");
    h[n++] = (char)('0' + r->status / 100);
    h[n++] = (char)('0' + r->status / 10 % 10);
    h[n++] = (char)('0' + r->status % 10);
    h[n++] = ' ';
    const char *reason = http_reason(r->status);
    n += put(h + n, reason, strlen(reason));
    n += PUT_LIT(h + n, "\r\nDate: ");
    n += put(h + n, http_date(), 29);
    n += PUT_LIT(h + n, "\r\n");
    /* RFC 9110 forbids Content-Length on a 204; every other response has one. */
    if (!r->no_body) {
        n += PUT_LIT(h + n, "Content-Type: application/json\r\nContent-Length: ");
        n += u64_digits(r->body.len, h + n);
        n += PUT_LIT(h + n, "\r\n");
    }
    if (!keep_alive)
        n += PUT_LIT(h + n, "Connection: close\r\n");
    else if (r->http10)
        n += PUT_LIT(h + n, "Connection: keep-alive\r\n");
    if (r->extra) n += put(h + n, r->extra, strlen(r->extra));
    n += PUT_LIT(h + n, "\r\n");
    r->head_len = (uint32_t)n;
}
