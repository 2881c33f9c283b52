/*
 * test_llhttp_simd: llhttp's two builds (deps/llhttp_simd.c) parse alike.
 *
 * The SSE4.2 build scans a header value 16 bytes at a time and stops at the
 * first byte outside its ranges; the baseline looks at every byte. Requests
 * whose header values put every kind of byte (tab, obs-text, controls, DEL,
 * CR, LF) at every offset of a 16-byte window, fed whole and in pieces, must
 * give both builds the same callbacks with the same bytes, and the same
 * error at the same position.
 */
#include <stdint.h>

#include "check.h"
#include "llhttp_simd.h"

struct trace {
    char log[8192];
    size_t len;
};

static void put(struct trace *t, char tag, const char *at, size_t n) {
    if (t->len + n + 3 > sizeof t->log) {
        t->len = sizeof t->log; /* full: later entries are dropped alike for both builds */
        return;
    }
    t->log[t->len++] = tag;
    memcpy(t->log + t->len, at, n);
    t->len += n;
    t->log[t->len++] = '|';
}

#define SPAN(name, tag)                                                                            \
    static int name(llhttp_t *p, const char *at, size_t n) {                                       \
        put(p->data, tag, at, n);                                                                  \
        return 0;                                                                                  \
    }
#define MARK(name, tag)                                                                            \
    static int name(llhttp_t *p) {                                                                 \
        put(p->data, tag, "", 0);                                                                  \
        return 0;                                                                                  \
    }
SPAN(on_method, 'M')
SPAN(on_url, 'U')
SPAN(on_version, 'V')
SPAN(on_header_field, 'F')
SPAN(on_header_value, 'H')
SPAN(on_body, 'B')
MARK(on_headers_complete, 'E')
MARK(on_message_complete, 'C')
MARK(on_header_value_complete, 'h')

struct outcome {
    struct trace t;
    llhttp_errno_t err;
    const char *reason;
    ptrdiff_t pos; /* of the error, from the start of the input; -1 without one */
};

/* Feeds in to a fresh parser in pieces of piece bytes (0: whole), with the
 * SSE4.2 build or the baseline, and records what it did. */
static void parse(bool simd, const char *in, size_t len, size_t piece, struct outcome *o) {
    CHECK(llhttp_simd_set(simd));
    CHECK(llhttp_simd_active() == simd);
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_method = on_method;
    s.on_url = on_url;
    s.on_version = on_version;
    s.on_header_field = on_header_field;
    s.on_header_value = on_header_value;
    s.on_body = on_body;
    s.on_headers_complete = on_headers_complete;
    s.on_message_complete = on_message_complete;
    s.on_header_value_complete = on_header_value_complete;
    llhttp_t p;
    llhttp_init(&p, HTTP_REQUEST, &s);
    memset(o, 0, sizeof *o);
    p.data = &o->t;
    o->err = HPE_OK;
    o->pos = -1;
    size_t step = piece ? piece : len;
    for (size_t off = 0; off < len && o->err == HPE_OK; off += step) {
        size_t n = len - off < step ? len - off : step;
        o->err = llhttp_execute(&p, in + off, n);
        if (o->err != HPE_OK) {
            o->reason = llhttp_get_error_reason(&p);
            o->pos = llhttp_get_error_pos(&p) ? llhttp_get_error_pos(&p) - in : -1;
        }
    }
}

static void same(const char *in, size_t len) {
    static const size_t pieces[] = {0, 1, 7, 16, 17};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        struct outcome a, b;
        parse(false, in, len, pieces[i], &a);
        parse(true, in, len, pieces[i], &b);
        if (a.err != b.err || a.pos != b.pos || a.t.len != b.t.len ||
            memcmp(a.t.log, b.t.log, a.t.len) != 0 ||
            (a.reason && b.reason && strcmp(a.reason, b.reason) != 0))
            CHECK_FAIL_("the builds differ (pieces of %zu) on \"%.*s\": baseline %d at %td "
                        "\"%.*s\", SSE4.2 %d at %td \"%.*s\"",
                        pieces[i], (int)len, in, (int)a.err, a.pos, (int)a.t.len, a.t.log,
                        (int)b.err, b.pos, (int)b.t.len, b.t.log);
    }
}

static void test_the_cpu_picks_the_sse42_build(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2"))
        CHECK_FAIL_("this CPU has no SSE4.2: the SSE4.2 build cannot be compared here");
    CHECK(llhttp_simd_active());
}

static void test_ordinary_requests(void) {
    static const char *reqs[] = {
        "GET /v2/theme/12 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic "
        "YWxpY2U6ZXZfMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\r\n\r\n",
        "POST /v2/theme HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 27\r\nIdempotency-Key: 0123456789abcdef0123456789abcdef\r\n\r\n"
        "{\"Theme\":{\"Name\":\"a b c\"}}",
        "PUT /v2/address/7 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nX-Long: \t  value with   spaces and\ttabs, and more than "
        "sixteen\t\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++)
        same(reqs[i], strlen(reqs[i]));
}

/* Every byte class at every offset of a value longer than two windows. */
static void test_every_byte_at_every_offset(void) {
    static const unsigned char odd[] = {'\t', ' ',  0x80, 0xff, 0x7f, 0x01, 0x00,
                                        0x1f, '\r', '\n', '"',  '~',  ',',  ';'};
    char req[256];
    for (size_t k = 0; k < sizeof odd; k++) {
        for (size_t at = 0; at < 40; at++) {
            char value[48];
            memset(value, 'a', sizeof value);
            value[at] = (char)odd[k];
            int n = snprintf(req, sizeof req, "GET /x HTTP/1.1\r\nX-V: ");
            memcpy(req + n, value, sizeof value);
            n += (int)sizeof value;
            n += snprintf(req + n, sizeof req - (size_t)n, "\r\nHost: h\r\n\r\n");
            same(req, (size_t)n);
        }
    }
}

static uint64_t rng = 0x2545F4914F6CDD1Du;
static unsigned rand_below(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Random values mostly of ordinary bytes, some of the others. */
static void test_random_values(void) {
    static const unsigned char odd[] = {'\t', ' ', 0x80, 0xc3, 0xff, 0x7f, 0x01, '\r', '\n'};
    char req[512];
    for (int round = 0; round < 3000; round++) {
        int n = snprintf(req, sizeof req, "POST /v2/theme HTTP/1.1\r\n");
        int headers = 1 + (int)rand_below(3);
        for (int h = 0; h < headers; h++) {
            n += snprintf(req + n, sizeof req - (size_t)n, "X-%d: ", h);
            unsigned len = rand_below(70);
            for (unsigned i = 0; i < len; i++)
                req[n++] = rand_below(12) == 0 ? (char)odd[rand_below(sizeof odd)]
                                               : (char)(0x21 + rand_below(0x5e));
            n += snprintf(req + n, sizeof req - (size_t)n, "\r\n");
        }
        n += snprintf(req + n, sizeof req - (size_t)n, "Content-Length: 2\r\n\r\n{}");
        same(req, (size_t)n);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_the_cpu_picks_the_sse42_build),
    CHECK_CASE(test_ordinary_requests),
    CHECK_CASE(test_every_byte_at_every_offset),
    CHECK_CASE(test_random_values),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
