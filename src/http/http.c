/*
 * http: the request parser of http.h (responses are http_response.c).
 *
 * The header limit counts every byte from the start of a request to the end
 * of its headers, whitespace included, whatever the read boundaries: the
 * method's first piece says where a request begins, and the parser pauses
 * itself at the end of its headers, so http_parser_execute knows exactly
 * which bytes of each read were head bytes. The owner hears of the headers
 * only after that count has been checked. Spans (target, header names and
 * values) may arrive in several pieces when a read ends inside one, which is
 * why the few headers we keep are appended to buffers rather than pointed at.
 *
 * Framing rules that llhttp 8 leaves to us, even in strict mode (deps.cmake
 * builds it so: its lenient build took CR and any byte for a line's end), each
 * answered 400 because a front proxy may read the request differently
 * (RFC 9112 sections 2.2, 3.2, 5.1, 5.2, 6.1, 7.1): a missing (HTTP/1.1) or
 * repeated Host, a Host value outside the URI host grammar, a repeated
 * Authorization, whitespace before a header colon, an obs-fold, any
 * Transfer-Encoding but one "chunked" line in HTTP/1.1, a CONNECT (llhttp takes
 * what follows its head, body or not, for a tunnel), a chunk's data not
 * followed by CRLF (llhttp skips those two bytes unseen), and a bare LF ending
 * the request line or the headers (llhttp takes it for CRLF there).
 * An obs-fold shows as a gap between two pieces of one header value, so the
 * end of the last piece is kept, and carried to the next read when the piece
 * ended the read. The chunk terminator is found the same way: it is the two
 * bytes after the last byte of each chunk's data, wherever the read ends.
 */
#include "http/http.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What the header being parsed is (cur_header, name_kind). H_NAME_SPLIT: a
 * name that came in pieces, classified once complete. */
enum {
    H_OTHER,
    H_AUTHORIZATION,
    H_EXPECT,
    H_HOST,
    H_TRANSFER_ENCODING,
    H_CONTENT_ENCODING,
    H_FIELD,
    H_NAME_SPLIT
};

/* The kept headers (enum http_field), by lower-case name. */
static const struct {
    const char *name;
    uint8_t len;
} kept_fields[HF_COUNT] = {
    [HF_COOKIE] = {"cookie", 6},
    [HF_CONTENT_TYPE] = {"content-type", 12},
    [HF_ACCEPT] = {"accept", 6},
    [HF_FORWARDED_FOR] = {"x-forwarded-for", 15},
    [HF_REQUEST_ID] = {"x-request-id", 12},
    [HF_HOST] = {"host", 4}, /* matched as H_HOST first: kept as well as checked */
    [HF_ORIGIN] = {"origin", 6},
    [HF_FETCH_SITE] = {"sec-fetch-site", 14},
    [HF_IDEMPOTENCY_KEY] = {"idempotency-key", 15},
    [HF_IF_MATCH] = {"if-match", 8},
    [HF_IF_NONE_MATCH] = {"if-none-match", 13},
};

enum { HOST_VALUE, HOST_TRAILING_WS };

/* RFC 3986 host and port: unreserved, sub-delims, '%' (pct-encoded), ':' and
 * the brackets of an IP literal. Not '@': userinfo has no place here. A
 * table: every byte of every Host value is looked up. */
static const uint8_t host_chars[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['-'] = 1, ['.'] = 1,  ['_'] = 1,
    ['~'] = 1,         ['!'] = 1,         ['$'] = 1,         ['&'] = 1, ['\''] = 1, ['('] = 1,
    [')'] = 1,         ['*'] = 1,         ['+'] = 1,         [','] = 1, [';'] = 1,  ['='] = 1,
    ['%'] = 1,         [':'] = 1,         ['['] = 1,         [']'] = 1,
};

static bool host_char(unsigned char c) {
    return host_chars[c];
}

static bool ows(char c) {
    return c == ' ' || c == '\t';
}

static struct http_parser *P(llhttp_t *ll) {
    return (struct http_parser *)ll->data;
}

/* Our own verdict from inside a callback: llhttp stops with a callback error. */
static int stop(struct http_parser *p, enum err e) {
    p->error = e;
    p->stopped = true;
    return HPE_USER;
}

/* stop, saying what broke the rule (a static string): the answer's message names it. */
static int stop_why(struct http_parser *p, enum err e, const char *why) {
    p->why = why;
    return stop(p, e);
}

/* Pauses llhttp for our own bookkeeping; execute resumes it at once. */
static int pause_here(struct http_parser *p, uint8_t next) {
    p->internal_pause = next;
    return HPE_PAUSED;
}

static int field_open(struct http_parser *p);

static int on_message_begin(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    struct http_kept *k = r->kept;
    buf_reset(&k->target);
    buf_reset(&k->authorization);
    buf_reset(&k->fields);
    memset(k->len, 0, sizeof k->len);
    memset(k->off, 0, sizeof k->off);
    memset(k->seen, 0, sizeof k->seen);
    r->expect_continue = r->has_body = false;
    r->content_length = r->body_bytes = 0;
    r->head_bytes = 0;
    r->cur_header = H_OTHER;
    p->name_len = p->value_len = 0;
    p->n_host = p->n_auth = p->n_te = 0;
    p->te_chunked = p->coded = p->bad_field = p->version_done = p->value_open = p->cr_next = false;
    p->in_gap = p->gap_lf = false;
    p->crlf_left = 0;
    p->name_kind = H_OTHER;
    p->in_message = p->in_headers = true;
    return 0;
}

/* The method's first piece is where the request's head begins (llhttp has
 * skipped the empty lines before it): execute counts head bytes from here. */
static int on_method(llhttp_t *ll, const char *at, size_t n) {
    (void)n;
    struct http_parser *p = P(ll);
    if (!p->begin_at) p->begin_at = at;
    return 0;
}

static int on_url(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    /* Past the limit the request is refused anyway: stop growing the copy. */
    if (p->req.kept->target.len + n > p->limits->max_header_bytes)
        return stop(p, ERR_HEADERS_TOO_LARGE);
    buf_append(&p->req.kept->target, at, n);
    /* A target ended by the line's end, not a space: HTTP/0.9, no version.
     * Strict llhttp waits for a byte after its LF before it says so (and
     * on_url_complete runs): answered here, not after the header timeout. */
    if (at + n < p->seg_end && (at[n] == '\r' || at[n] == '\n')) return stop(p, ERR_VERSION);
    return 0;
}

/* HTTP/0.9 ("GET /" and CRLF) has no version and no headers: llhttp would
 * wait for headers that never come, so it is answered here. */
static int on_url_complete(llhttp_t *ll) {
    if (ll->http_major == 0 && ll->http_minor == 9) return stop(P(ll), ERR_VERSION);
    return 0;
}

static int on_version(llhttp_t *ll, const char *at, size_t n) {
    P(ll)->version_end = at + n;
    return 0;
}

/* The byte after the version must be CR: llhttp 8 (strict too) takes a bare LF
 * there for the line's end, which a front proxy may read otherwise (RFC 9112
 * 2.2). It is the next segment's first byte when the version ended this one. */
static int on_version_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    p->version_done = true;
    if (p->version_end == p->seg_end)
        p->cr_next = true;
    else if (*p->version_end != '\r')
        return stop_why(p, ERR_BAD_REQUEST, "a request line not ended by CRLF");
    return 0;
}

/* Bytes that arrive with the body but are not body (chunk extensions,
 * trailer fields) count against the body limit, or they would be unbounded. */
static int count_body(struct http_parser *p, size_t n) {
    p->req.body_bytes += n;
    if (p->req.body_bytes > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    return 0;
}

/*
 * Whether the header name s (n bytes) is lit, a lower-case name of letters
 * and '-', ignoring case: a letter of lit matches itself with bit 5 set
 * (only its own upper case does that), any other byte matches only itself.
 * Compared a word at a time (n is 4 to 17; the words may overlap): the mask
 * has bit 5 set in the letters' bytes, whose bit 6 is set and '-''s is not.
 * lit is a literal, so its words and masks are constants.
 */
static inline bool word_is(const char *s, const char *lit, size_t w) {
    uint64_t a = 0, b = 0;
    memcpy(&a, s, w);
    memcpy(&b, lit, w);
    return (a | ((b & 0x4040404040404040ull) >> 1)) == b;
}

static inline bool name_is(const char *s, size_t n, const char *lit, size_t len) {
    if (n != len) return false;
    if (n < 8) return word_is(s, lit, 4) && word_is(s + n - 4, lit + n - 4, 4);
    for (size_t i = 0; i + 8 < n; i += 8)
        if (!word_is(s + i, lit + i, 8)) return false;
    return word_is(s + n - 8, lit + n - 8, 8);
}

#define NAME_IS(s, n, lit) name_is((s), (n), (lit), sizeof(lit) - 1)

/*
 * What a header name is: H_OTHER, or the header and (H_FIELD, H_HOST) its
 * enum http_field in *field. The length and first byte pick the one or two
 * candidates; the names of kept_fields are the table this mirrors.
 */
static uint8_t classify(const char *s, size_t n, uint8_t *field) {
    char c = (char)(s[0] | 0x20);
    switch (n) {
    case 4:
        *field = HF_HOST;
        return NAME_IS(s, n, "host") ? H_HOST : H_OTHER;
    case 6:
        if (c == 'e') return NAME_IS(s, n, "expect") ? H_EXPECT : H_OTHER;
        *field = c == 'c' ? HF_COOKIE : c == 'a' ? HF_ACCEPT : HF_ORIGIN;
        break;
    case 8:
        *field = HF_IF_MATCH;
        break;
    case 12:
        *field = c == 'c' ? HF_CONTENT_TYPE : HF_REQUEST_ID;
        break;
    case 13:
        if (c == 'a') return NAME_IS(s, n, "authorization") ? H_AUTHORIZATION : H_OTHER;
        *field = HF_IF_NONE_MATCH;
        break;
    case 14:
        *field = HF_FETCH_SITE;
        break;
    case 15:
        *field = c == 'x' ? HF_FORWARDED_FOR : HF_IDEMPOTENCY_KEY;
        break;
    case 16:
        return NAME_IS(s, n, "content-encoding") ? H_CONTENT_ENCODING : H_OTHER;
    case 17:
        return NAME_IS(s, n, "transfer-encoding") ? H_TRANSFER_ENCODING : H_OTHER;
    default:
        return H_OTHER;
    }
    return name_is(s, n, kept_fields[*field].name, kept_fields[*field].len) ? H_FIELD : H_OTHER;
}

/* llhttp keeps whitespace in a name (before the colon, or inside it); RFC
 * 9112 5.1 requires a 400 (a proxy might have read "Transfer-Encoding : x").
 * A name that is one of ours has none: only the others are scanned. */
static bool word_has_ows(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t sp = w ^ (ones * ' '), tab = w ^ (ones * '\t'); /* a zero byte where one was */
    return (((sp - ones) & ~sp) | ((tab - ones) & ~tab)) & highs;
}

static bool has_ows(const char *s, size_t n) {
    if (n < 8) {
        for (size_t i = 0; i < n; i++)
            if (ows(s[i])) return true;
        return false;
    }
    /* A word at a time, the last one overlapping the one before it. */
    uint64_t w;
    for (size_t i = 0; i + 8 < n; i += 8) {
        memcpy(&w, s + i, 8);
        if (word_has_ows(w)) return true;
    }
    memcpy(&w, s + n - 8, 8);
    return word_has_ows(w);
}

/*
 * Header names may arrive in pieces. A name that arrives whole (its piece
 * does not end the segment, which is the common case) is classified where
 * it lies, with no copy; the pieces of a split one are scanned as they come
 * and their first bytes kept in a small array (the names we match are
 * short), to be classified when the name is complete. After the headers,
 * llhttp reports trailer fields through the same callbacks: they are
 * counted, checked, and otherwise ignored.
 */
static int on_header_field(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    if (!p->in_headers && count_body(p, n)) return HPE_USER;
    p->gap_from = at + n;
    if (p->name_len == 0 && at + n != p->seg_end) {
        p->name_len = n;
        p->name_kind = classify(at, n, &p->cur_field);
        if (p->name_kind == H_OTHER && has_ows(at, n))
            return stop_why(p, ERR_BAD_REQUEST, "whitespace in a header name");
        return 0;
    }
    if (has_ows(at, n)) return stop_why(p, ERR_BAD_REQUEST, "whitespace in a header name");
    if (p->name_len + n <= sizeof p->name) memcpy(p->name + p->name_len, at, n);
    p->name_len += n;
    p->name_kind = H_NAME_SPLIT;
    return 0;
}

static int on_header_field_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    uint8_t kind = p->name_kind;
    if (kind == H_NAME_SPLIT)
        kind =
            p->name_len <= sizeof p->name ? classify(p->name, p->name_len, &p->cur_field) : H_OTHER;
    if (!p->in_headers) kind = H_OTHER; /* a trailer never authenticates */
    r->cur_header = kind;
    /* Counts saturate at 2: "more than one" is all that matters. */
    switch (kind) {
    case H_AUTHORIZATION:
        if (p->n_auth < 2) p->n_auth++;
        buf_reset(&r->kept->authorization);
        break;
    case H_HOST:
        p->cur_field = HF_HOST;
        if (field_open(p) < 0) return HPE_USER;
        if (p->n_host < 2) p->n_host++;
        p->host_state = HOST_VALUE;
        break;
    case H_FIELD:
        if (field_open(p) < 0) return HPE_USER;
        break;
    case H_TRANSFER_ENCODING:
        if (p->n_te < 2) p->n_te++;
        /* fall through */
    case H_EXPECT:
    case H_CONTENT_ENCODING:
        p->value_len = p->value_trim = 0;
        break;
    default:
        break;
    }
    p->name_len = 0;
    p->name_kind = H_OTHER; /* until the next name says what it is */
    p->value_open = false;
    p->in_gap = true;
    p->gap_lf = false;
    return 0;
}

/*
 * A kept header's line begins: its value goes at the end of req.fields. A
 * repeated header is joined to the value already kept, which is moved to
 * the end first if another header came in between (rare).
 */
static int field_open(struct http_parser *p) {
    struct http_kept *h = p->req.kept;
    uint8_t f = p->cur_field;
    if (!h->seen[f]) {
        h->seen[f] = true;
        h->off[f] = (uint32_t)h->fields.len;
        h->len[f] = 0;
        return 0;
    }
    const char *sep = f == HF_COOKIE ? "; " : ", ";
    if (h->fields.len + h->len[f] + 2 > p->limits->max_header_bytes)
        return stop(p, ERR_HEADERS_TOO_LARGE);
    if (h->off[f] + h->len[f] != h->fields.len) {
        uint32_t off = h->off[f], len = h->len[f];
        char *dst = buf_reserve(&h->fields, len); /* may move fields.ptr: copy after */
        memcpy(dst, h->fields.ptr + off, len);
        buf_commit(&h->fields, len);
        h->off[f] = (uint32_t)h->fields.len - len;
    }
    if (h->len[f]) {
        buf_append(&h->fields, sep, 2);
        h->len[f] += 2;
    }
    return 0;
}

/* Keeps the start of a short value (Expect, Transfer-Encoding) for matching. */
static void keep_value(struct http_parser *p, const char *at, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p->value_len + i < sizeof p->name) p->name[p->value_len + i] = at[i];
        if (!ows(at[i])) p->value_trim = p->value_len + i + 1;
    }
    p->value_len += n;
}

/* The kept value, without the trailing whitespace llhttp leaves in it, is s. */
static bool value_is(const struct http_parser *p, const char *s) {
    size_t n = strlen(s);
    return p->value_trim == n && n <= sizeof p->name && strncasecmp(p->name, s, n) == 0;
}

/* A line break between the header name and `to`: in an earlier segment, or in this one. */
static bool gap_has_lf(const struct http_parser *p, const char *to) {
    const char *from = p->gap_from ? p->gap_from : p->seg_start;
    return p->gap_lf || (to > from && memchr(from, '\n', (size_t)(to - from)) != NULL);
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    /* A piece that does not start where the last one ended follows a line
     * break: an obs-fold, which RFC 9112 5.2 lets us refuse. */
    if (p->value_open && at != p->value_end)
        return stop_why(p, ERR_BAD_REQUEST, "a header continuation line (obs-fold)");
    /* The same for a value whose first line was empty: llhttp reports no piece for
     * it, so the line break is looked for between the name and this piece. */
    if (p->in_gap) {
        /* ": " (the usual gap, within the segment) holds no line break. */
        bool short_gap = p->gap_from && !p->gap_lf && at - p->gap_from <= 2;
        if (n && !short_gap && gap_has_lf(p, at))
            return stop_why(p, ERR_BAD_REQUEST, "a header continuation line (obs-fold)");
        p->in_gap = false;
    }
    if (!p->in_headers && count_body(p, n)) return HPE_USER;
    p->value_open = true;
    p->value_end = at + n;
    if (r->cur_header == H_AUTHORIZATION) {
        if (r->kept->authorization.len + n > p->limits->max_header_bytes)
            return stop(p, ERR_HEADERS_TOO_LARGE);
        buf_append(&r->kept->authorization, at, n);
    } else if (r->cur_header == H_FIELD) {
        struct http_kept *h = r->kept;
        if (h->fields.len + n > p->limits->max_header_bytes) return stop(p, ERR_HEADERS_TOO_LARGE);
        buf_append(&h->fields, at, n);
        h->len[p->cur_field] += (uint32_t)n;
    } else if (r->cur_header == H_EXPECT || r->cur_header == H_TRANSFER_ENCODING ||
               r->cur_header == H_CONTENT_ENCODING) {
        keep_value(p, at, n);
    } else if (r->cur_header == H_HOST) {
        struct http_kept *h = r->kept;
        if (h->fields.len + n > p->limits->max_header_bytes) return stop(p, ERR_HEADERS_TOO_LARGE);
        buf_append(&h->fields, at, n);
        h->len[HF_HOST] += (uint32_t)n;
        /* llhttp has dropped the leading whitespace; trailing may follow. The
         * usual value is host characters only: they are skipped at once. */
        size_t i = 0;
        if (p->host_state == HOST_VALUE)
            while (i < n && host_char((unsigned char)at[i]))
                i++;
        for (; i < n; i++) {
            if (ows(at[i]))
                p->host_state = HOST_TRAILING_WS;
            else if (p->host_state == HOST_TRAILING_WS || !host_char((unsigned char)at[i]))
                p->bad_field = true;
        }
    }
    return 0;
}

static int on_header_value_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    if (r->cur_header == H_EXPECT) {
        /* Other expectations are ignored, as RFC 9110 allows. */
        if (value_is(p, "100-continue")) r->expect_continue = true;
    } else if (r->cur_header == H_TRANSFER_ENCODING) {
        p->te_chunked = value_is(p, "chunked");
    } else if (r->cur_header == H_CONTENT_ENCODING) {
        /* No content coding is decoded: only "identity" (or nothing) is the body as sent. */
        if (p->value_trim && !value_is(p, "identity")) p->coded = true;
    } else if (r->cur_header == H_FIELD || r->cur_header == H_HOST) {
        /* llhttp leaves the trailing whitespace in the value. */
        struct http_kept *h = r->kept;
        uint8_t f = p->cur_field;
        while (h->len[f] > 0 && ows(h->fields.ptr[h->off[f] + h->len[f] - 1])) {
            h->len[f]--;
            h->fields.len--;
        }
    }
    r->cur_header = H_OTHER;
    p->value_open = p->in_gap = false;
    return 0;
}

/* Splits the target into path and query. Origin-form is "/path?query";
 * absolute-form ("http://host/path?query"), which RFC 9112 3.2.2 says a
 * server MUST accept, is routed on its path (its host is not checked). */
static int split_target(struct http_request *r) {
    static const char root[] = "/";
    const struct buf *target = &r->kept->target;
    const char *t = target->ptr, *end = t + target->len;
    if (target->len == 0) return -1;
    if (t[0] != '/') {
        size_t skip;
        if (target->len > 7 && strncasecmp(t, "http://", 7) == 0)
            skip = 7;
        else if (target->len > 8 && strncasecmp(t, "https://", 8) == 0)
            skip = 8;
        else
            return -1;
        const char *a = t + skip;
        for (t = a; t < end && *t != '/' && *t != '?'; t++)
            if (!host_char((unsigned char)*t)) return -1;
        if (t == a) return -1; /* an http URI has a host */
    }
    const char *q = memchr(t, '?', (size_t)(end - t));
    const char *path_end = q ? q : end;
    r->path = path_end > t ? (struct slice){t, (size_t)(path_end - t)} : (struct slice){root, 1};
    r->query = q ? (struct slice){q + 1, (size_t)(end - q - 1)} : (struct slice){end, 0};
    return 0;
}

static int on_headers_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    p->in_headers = false;
    r->method = (uint8_t)ll->method;
    r->version_minor = ll->http_minor;
    /* RFC 9112 9.3: "close" ends the connection in any version; llhttp lets an
     * HTTP/1.0 "keep-alive" in the same header override it. */
    r->keep_alive = llhttp_should_keep_alive(ll) && !(ll->flags & F_CONNECTION_CLOSE);
    r->has_body = (ll->flags & F_CHUNKED) || ((ll->flags & F_CONTENT_LENGTH) && ll->content_length);
    r->content_length = (ll->flags & F_CONTENT_LENGTH) ? ll->content_length : 0;

    if (ll->http_major != 1) return stop(p, ERR_VERSION);
    /* llhttp takes every byte after a CONNECT head for the tunnel, its Content-Length or
     * chunked body included, where RFC 9112 6.3 frames a body: the next request would
     * be parsed from bytes a front proxy sent as that body. No tunnels here. */
    if (ll->method == HTTP_CONNECT)
        return stop_why(p, ERR_BAD_REQUEST, "a CONNECT request (this server is not a proxy)");
    /* RFC 9112 3.2: Host is required in HTTP/1.1 and never repeated. Two
     * Authorization lines are refused too: which one a proxy checked is
     * anyone's guess. */
    if (p->n_host > 1) return stop_why(p, ERR_BAD_REQUEST, "two Host headers");
    if (p->n_auth > 1) return stop_why(p, ERR_BAD_REQUEST, "two Authorization headers");
    if (p->bad_field) return stop_why(p, ERR_BAD_REQUEST, "a malformed header name or Host value");
    if (p->n_host == 0 && ll->http_minor == 1)
        return stop_why(p, ERR_BAD_REQUEST, "no Host header (HTTP/1.1 requires one)");
    /* One Transfer-Encoding line, "chunked" alone, in HTTP/1.1: any other
     * coding is one we cannot decode, and HTTP/1.0 has no transfer codings
     * (RFC 9112 6.1 says to treat its framing as faulty). */
    if (p->n_te && (p->n_te > 1 || !p->te_chunked || ll->http_minor == 0))
        return stop_why(p, ERR_BAD_REQUEST,
                        "Transfer-Encoding other than one \"chunked\" line in HTTP/1.1");
    if (split_target(r) < 0) return stop_why(p, ERR_BAD_REQUEST, "a malformed request target");
    /* RFC 9110 15.5.16: a body in a content coding the server does not decode is 415. */
    if (p->coded && r->has_body) return stop(p, ERR_MEDIA_TYPE);

    if (r->content_length > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    /* The owner hears of the headers in execute, once their size is known. */
    return pause_here(p, PAUSE_HEADERS);
}

static int on_body(llhttp_t *ll, const char *at, size_t n) {
    struct http_parser *p = P(ll);
    struct http_request *r = &p->req;
    r->body_bytes += n;
    if (r->body_bytes > p->limits->max_body_bytes) return stop(p, ERR_BODY_TOO_LARGE);
    /* llhttp counts the chunk down in content_length: at 0 its data is done
     * and the next two bytes must be CRLF. */
    if ((ll->flags & F_CHUNKED) && ll->content_length == 0) {
        p->crlf_left = 2;
        p->crlf_at = at + n;
    }
    p->ev->on_body(p->owner, r, at, n);
    return 0;
}

/* A chunk larger than what is left of the body limit is refused from its
 * size line, as a Content-Length is, without reading its data. */
static int on_chunk_header(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    if (ll->content_length > p->limits->max_body_bytes - p->req.body_bytes)
        return stop(p, ERR_BODY_TOO_LARGE);
    return 0;
}

/* Checks the bytes of a chunk terminator that lie in [from, to). */
static bool check_crlf(struct http_parser *p, const char *from, const char *to) {
    for (; p->crlf_left && from < to; from++, p->crlf_left--)
        if (*from != (p->crlf_left == 2 ? '\r' : '\n')) return false;
    return true;
}

static int on_chunk_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    /* llhttp has just consumed the terminator, within this segment. */
    if (!check_crlf(p, p->crlf_at ? p->crlf_at : p->seg_start, p->seg_end))
        return stop_why(p, ERR_BAD_REQUEST, "a chunk's data not followed by CRLF");
    return 0;
}

/* Chunk extensions count against the body limit: they arrive with the body. */
static int on_chunk_extension(llhttp_t *ll, const char *at, size_t n) {
    return count_body(P(ll), n);
}

static int on_message_complete(llhttp_t *ll) {
    struct http_parser *p = P(ll);
    p->in_message = false;
    /* A chunked body ends with the empty line after its trailers: execute checks
     * that it is CRLF before the owner hears of the request. */
    if (p->te_chunked) return pause_here(p, PAUSE_CHUNKED_END);
    return p->ev->on_complete(p->owner, &p->req) ? HPE_PAUSED : 0;
}

static llhttp_settings_t settings;

void http_kept_init(struct http_kept *k) {
    memset(k, 0, sizeof *k);
    buf_init(&k->target, 256);
    buf_init(&k->authorization, 128);
    buf_init(&k->fields, 0);
}

void http_kept_destroy(struct http_kept *k) {
    buf_destroy(&k->target);
    buf_destroy(&k->authorization);
    buf_destroy(&k->fields);
}

void http_parser_init(struct http_parser *p, const struct http_limits *limits,
                      const struct http_events *ev, void *owner) {
    if (!settings.on_message_begin) {
        llhttp_settings_init(&settings);
        settings.on_message_begin = on_message_begin;
        settings.on_method = on_method;
        settings.on_url = on_url;
        settings.on_url_complete = on_url_complete;
        settings.on_version = on_version;
        settings.on_version_complete = on_version_complete;
        settings.on_chunk_header = on_chunk_header;
        settings.on_chunk_complete = on_chunk_complete;
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
    p->req.kept = xcalloc(1, sizeof *p->req.kept);
    http_kept_init(p->req.kept);
    http_parser_reset(p);
}

void http_parser_reset(struct http_parser *p) {
    llhttp_init(&p->ll, HTTP_REQUEST, &settings);
    p->ll.data = p;
    p->error = ERR_NONE;
    p->stopped = false;
    p->why = NULL;
    p->internal_pause = PAUSE_NONE;
    p->in_message = p->in_headers = p->version_done = false;
    /* What a segment of the last request may have left for the next one. */
    p->value_open = p->in_gap = p->cr_next = false;
    p->crlf_left = 0;
}

bool http_parser_request_line(struct http_parser *p, uint8_t *method, struct slice *path) {
    if (!p->in_message || !p->version_done || split_target(&p->req) < 0) return false;
    *method = (uint8_t)p->ll.method;
    *path = p->req.path;
    return true;
}

void http_parser_destroy(struct http_parser *p) {
    if (p->req.kept) {
        http_kept_destroy(p->req.kept);
        free(p->req.kept);
        p->req.kept = NULL;
    }
}

/* A framing error found here, not by llhttp: the bytes up to off were parsed. */
static enum http_status refuse(struct http_parser *p, const char *why, size_t off,
                               size_t *consumed) {
    p->error = ERR_BAD_REQUEST;
    p->why = why;
    *consumed = off;
    return HTTP_ERROR;
}

static enum http_status execute(struct http_parser *p, const char *ptr, size_t len,
                                size_t *consumed) {
    size_t off = 0;
    for (;;) {
        bool head = p->in_headers; /* were the bytes of this segment head bytes? */
        p->begin_at = NULL;        /* ... or from where, if a request begins in it */
        /* A header value or a chunk terminator that the last segment ended
         * in goes on at the start of this one. */
        if (p->value_open) p->value_end = p->value_end == p->seg_end ? ptr + off : NULL;
        if (p->cr_next && off < len) {
            p->cr_next = false;
            if (ptr[off] != '\r')
                return refuse(p, "a request line not ended by CRLF", off, consumed);
        }
        p->seg_start = ptr + off;
        p->seg_end = ptr + len;
        llhttp_errno_t e = llhttp_execute(&p->ll, ptr + off, len - off);
        size_t used =
            e == HPE_OK ? len - off : (size_t)(llhttp_get_error_pos(&p->ll) - (ptr + off));
        off += used;
        /* A gap between a name and its value that this segment ended in. */
        if (p->in_gap && gap_has_lf(p, ptr + off)) p->gap_lf = true;
        p->gap_from = NULL;
        if (e == HPE_OK && p->crlf_left) {
            /* The segment ended inside a terminator: check its part here. */
            if (!check_crlf(p, p->crlf_at ? p->crlf_at : p->seg_start, ptr + off))
                return refuse(p, "a chunk's data not followed by CRLF", off, consumed);
            p->crlf_at = NULL;
        }
        if (head)
            p->req.head_bytes += (uint32_t)used;
        else if (p->begin_at)
            p->req.head_bytes += (uint32_t)(ptr + off - p->begin_at);
        if ((head || p->begin_at) && p->req.head_bytes > p->limits->max_header_bytes) {
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
            /* The headers, and a chunked body's trailers, end with an empty line,
             * CRLF: llhttp 8 (strict too) also takes a bare LF there. off is just
             * past that line's LF. */
            if ((off >= 2 ? ptr[off - 2] : p->prev_byte) != '\r')
                return refuse(p,
                              what == PAUSE_HEADERS
                                  ? "headers not ended by an empty line of CRLF"
                                  : "a chunked body not ended by an empty line of CRLF",
                              off, consumed);
            if (what == PAUSE_CHUNKED_END) {
                if (p->ev->on_complete(p->owner, &p->req)) {
                    *consumed = off;
                    return HTTP_PAUSED; /* llhttp stays paused, as the owner asked */
                }
                llhttp_resume(&p->ll);
                continue;
            }
            if (what == PAUSE_HEADERS && p->ev->on_headers(p->owner, &p->req)) {
                p->error = ERR_NONE; /* the owner has answered */
                *consumed = off;
                return HTTP_ERROR;
            }
            llhttp_resume(&p->ll);
            continue;
        }
        if (e == HPE_PAUSED_UPGRADE) {
            /* "Connection: Upgrade": RFC 9110 7.8 lets a server ignore it,
             * and this one speaks HTTP/1.1 on the connection as before. */
            llhttp_resume_after_upgrade(&p->ll);
            continue;
        }
        *consumed = off;
        if (e == HPE_PAUSED) return HTTP_PAUSED;
        if (!p->stopped) {
            /* llhttp's own complaint: the request line, a header or a chunk is
             * malformed. A version it refuses is 505 unless the version itself
             * was well formed and what followed it was not ("HTTP/1.1" and a
             * bare CR); the HTTP/2 preface is a version we do not speak. */
            p->error = (e == HPE_INVALID_VERSION && !p->version_done) || e == HPE_PAUSED_H2_UPGRADE
                           ? ERR_VERSION
                           : ERR_BAD_REQUEST;
            if (p->error == ERR_BAD_REQUEST) p->why = llhttp_get_error_reason(&p->ll);
        }
        return HTTP_ERROR;
    }
}

enum http_status http_parser_execute(struct http_parser *p, const char *ptr, size_t len,
                                     size_t *consumed) {
    enum http_status st = execute(p, ptr, len, consumed);
    if (*consumed) p->prev_byte = ptr[*consumed - 1];
    return st;
}

void http_parser_resume(struct http_parser *p) {
    llhttp_resume(&p->ll);
}
