/*
 * http_response: the response half of http.h (the request parser is
 * http.c): resetting a response, the error envelope, the Date, ETags and
 * the head, written when the response leaves.
 */
#include "common/json_write.h"
#include "http/http.h"

#include <string.h>
#include <time.h>

void http_response_init(struct http_response *r) {
    memset(r, 0, sizeof *r);
    buf_init(&r->body, 0); /* grows on first use, then keeps its capacity */
    buf_init(&r->headers, 0);
    buf_init(&r->path, 0);
    http_response_reset(r);
}

void http_response_destroy(struct http_response *r) {
    buf_destroy(&r->body);
    buf_destroy(&r->headers);
    buf_destroy(&r->path);
}

void http_response_reset(struct http_response *r) {
    r->status = 200;
    r->close = false;
    r->no_body = false;
    r->http10 = false;
    r->head_only = false;
    r->extra = NULL;
    r->content_type = NULL;
    r->lsn = 0;
    r->etag.n = 0;
    r->head_len = 0;
    r->route = 0;
    r->method = 0;
    r->request_id_len = 0;
    r->user_id = 0;
    buf_reset(&r->body);
    buf_reset(&r->headers);
    buf_reset(&r->path);
}

bool http_request_id_ok(struct slice v) {
    if (v.len == 0 || v.len > HTTP_REQUEST_ID_MAX) return false;
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.ptr[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '-';
        if (!ok) return false;
    }
    return true;
}

void http_response_error(struct http_response *r, enum err e, const char *field,
                         const char *message) {
    r->status = (uint16_t)err_status(e);
    r->no_body = false;
    r->extra = NULL; /* e.g. a 401's WWW-Authenticate, when a 413 replaces it */
    r->etag.n = 0;
    r->content_type = NULL;
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

size_t http_etag_format(const struct http_etag *e, char *out) {
    size_t n = 0;
    out[n++] = '"';
    for (uint8_t i = 0; i < e->n && i < 4; i++) {
        if (i) {
            out[n++] = '-';
            out[n++] = e->tag[i];
        }
        n += u64_digits(e->v[i], out + n);
    }
    out[n++] = '"';
    return n;
}

/* The head's first lines: status line, Date, and unless no_body, Content-Type
 * and the name of Content-Length. At most HEAD_START_MAX bytes. */
static size_t head_start(char *h, const struct http_response *r) {
    size_t n = PUT_LIT(h, "HTTP/1.1 ");
    h[n++] = (char)('0' + r->status / 100);
    h[n++] = (char)('0' + r->status / 10 % 10);
    h[n++] = (char)('0' + r->status % 10);
    h[n++] = ' ';
    const char *reason = http_reason(r->status);
    n += put(h + n, reason, strlen(reason));
    n += PUT_LIT(h + n, "\r\nDate: ");
    n += put(h + n, date_buf, 29);
    n += PUT_LIT(h + n, "\r\n");
    /* RFC 9110 forbids Content-Length on a 204; every other response has one. */
    if (!r->no_body) {
        n += PUT_LIT(h + n, "Content-Type: ");
        if (r->content_type)
            n += put(h + n, r->content_type, strlen(r->content_type));
        else
            n += PUT_LIT(h + n, "application/json");
        n += PUT_LIT(h + n, "\r\nContent-Length: ");
    }
    return n;
}

/*
 * The first lines change with the second, the status and the Content-Type
 * only: the last ones made are kept and copied while those stay the same
 * (content types are static strings, so their address tells them apart),
 * and not even copied into a response's head that has them already.
 */
#define HEAD_START_MAX 200
static struct {
    char text[HEAD_START_MAX];
    size_t len;
    uint64_t gen; /* bumped with each new text: a response whose head_gen is this has it */
    time_t at;
    uint16_t status;
    bool no_body;
    const char *content_type;
} head_cache;

void http_response_finish(struct http_response *r, bool keep_alive) {
    /* Hot path: no printf; every piece has a known bound within r->head. */
    char *h = r->head;
    http_date();
    if (head_cache.len == 0 || head_cache.at != date_at || head_cache.status != r->status ||
        head_cache.no_body != r->no_body || head_cache.content_type != r->content_type) {
        head_cache.len = head_start(head_cache.text, r);
        head_cache.at = date_at;
        head_cache.status = r->status;
        head_cache.no_body = r->no_body;
        head_cache.content_type = r->content_type;
        head_cache.gen++;
    }
    /* A response slot mostly answers like it did last time: its head then
     * begins with these lines already. */
    size_t n = head_cache.len;
    if (r->head_gen != head_cache.gen) {
        memcpy(h, head_cache.text, n);
        r->head_gen = head_cache.gen;
    }
    if (!r->no_body) {
        n += u64_digits(r->body.len, h + n);
        n += PUT_LIT(h + n, "\r\n");
    }
    if (!keep_alive)
        n += PUT_LIT(h + n, "Connection: close\r\n");
    else if (r->http10)
        n += PUT_LIT(h + n, "Connection: keep-alive\r\n");
    if (r->request_id_len) {
        /* At most 80 bytes: the head's other lines leave room for it (and extra
         * falls back to the built lines below when it does not fit). */
        n += PUT_LIT(h + n, "X-Request-ID: ");
        memcpy(h + n, r->request_id, sizeof r->request_id); /* the whole array: a fixed copy */
        n += r->request_id_len;
        n += PUT_LIT(h + n, "\r\n");
    }
    if (r->etag.n) {
        /* At most 80 bytes too: with it the head's lines stay below 350 bytes. */
        n += PUT_LIT(h + n, "ETag: ");
        n += http_etag_format(&r->etag, h + n);
        n += PUT_LIT(h + n, "\r\n");
    }
    if (r->extra) {
        size_t len = strlen(r->extra);
        if (n + len + 2 <= sizeof r->head) {
            n += put(h + n, r->extra, len);
        } else {
            /* Too long for the head: it goes first among the built lines. */
            size_t had = r->headers.len;
            buf_reserve(&r->headers, len);
            buf_commit(&r->headers, len);
            memmove(r->headers.ptr + len, r->headers.ptr, had);
            memcpy(r->headers.ptr, r->extra, len);
        }
    }
    /* The built header lines follow the head in the write; the blank line ends them. */
    if (r->headers.len)
        buf_append(&r->headers, "\r\n", 2);
    else
        n += PUT_LIT(h + n, "\r\n");
    r->head_len = (uint32_t)n;
    /* A response to HEAD ends with its head, whatever Content-Length says (RFC 9112 6.3). */
    if (r->head_only) buf_reset(&r->body);
}
