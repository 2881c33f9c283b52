/* The llhttp adapter: a request cut at every byte, pipelining, limits. */
#include "check.h"
#include "http/http.h"
#include "http/server_internal.h"

struct seen {
    int headers, completes;
    char body[256];
    size_t body_len;
    char path[64];
    char auth[64];
    bool keep_alive, expect;
    char fields[HF_COUNT][40];
};

static int on_headers(void *o, struct http_request *r) {
    struct seen *s = o;
    s->headers++;
    snprintf(s->path, sizeof s->path, "%.*s", (int)r->path.len, r->path.ptr);
    snprintf(s->auth, sizeof s->auth, "%.*s", (int)r->kept->authorization.len,
             r->kept->authorization.ptr);
    s->keep_alive = r->keep_alive;
    s->expect = r->expect_continue;
    for (int f = 0; f < HF_COUNT; f++) {
        struct slice v = http_request_field(r, (enum http_field)f);
        snprintf(s->fields[f], sizeof s->fields[f], "%.*s", (int)v.len, v.ptr);
    }
    return 0;
}

static void on_body(void *o, struct http_request *r, const char *p, size_t n) {
    struct seen *s = o;
    memcpy(s->body + s->body_len, p, n);
    s->body_len += n;
}

static bool on_complete(void *o, struct http_request *r) {
    ((struct seen *)o)->completes++;
    return false;
}

static const struct http_events ev = {on_headers, on_body, on_complete};

static enum http_status feed(struct http_parser *p, const char *s, size_t n) {
    size_t used;
    enum http_status st = http_parser_execute(p, s, n, &used);
    if (st == HTTP_OK) CHECK(used == n);
    return st;
}

static const struct http_limits lim = {1024, 100};

static const char req[] = "POST /v2/theme?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic abc=\r\n"
                          "Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

/* Cut into two reads at every byte: the same request every time. */
static void test_cut_at_every_byte(void) {
    size_t n = strlen(req);
    for (size_t cut = 0; cut <= n; cut++) {
        struct seen s = {0};
        struct http_parser p;
        http_parser_init(&p, &lim, &ev, &s);
        CHECK_EQ_INT(feed(&p, req, cut), HTTP_OK);
        CHECK_EQ_INT(feed(&p, req + cut, n - cut), HTTP_OK);
        CHECK_EQ_INT(s.completes, 1);
        CHECK_EQ_STR(s.path, "/v2/theme");
        CHECK_EQ_STR(s.auth, "Basic abc=");
        CHECK(s.expect && s.keep_alive);
        CHECK_EQ_INT((int)s.body_len, 11);
        CHECK(memcmp(s.body, "hello world", 11) == 0);
        http_parser_destroy(&p);
    }
}

/* Line ends llhttp's lenient build took, and two even its strict build takes (a bare
 * LF after the version, a bare LF ending the headers): refused at every cut into two
 * reads, before anything of the request is seen as complete. */
static void test_bad_line_ends_refused_at_every_cut(void) {
    static const char *bad[] = {
        "GET /a HTTP/1.1\nHost: a\r\n\r\n",
        "GET /a HTTP/1.1\r\nHost: a\r\n\n",
        "GET /a HTTP/1.1\r\nHost: a\r\n\rXGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\rXhi\r\n0\r\n\r\n",
        "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\rX",
        ("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\nGET /b "
         "HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: 1\r\n\nGET /b "
         "HTTP/1.1\r\nHost: a\r\n\r\n"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = strlen(bad[i]);
        for (size_t cut = 0; cut <= n; cut++) {
            struct seen s = {0};
            struct http_parser p;
            http_parser_init(&p, &lim, &ev, &s);
            enum http_status st = feed(&p, bad[i], cut);
            if (st == HTTP_OK) st = feed(&p, bad[i] + cut, n - cut);
            CHECK_EQ_INT(st, HTTP_ERROR);
            CHECK_EQ_INT(p.error, ERR_BAD_REQUEST);
            CHECK_EQ_INT(s.completes, 0);
            http_parser_destroy(&p);
        }
    }
}

static void test_one_byte_per_read(void) {
    size_t n = strlen(req);
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(feed(&p, req + i, 1), HTTP_OK);
    CHECK_EQ_INT(s.completes, 1);
    CHECK_EQ_STR(s.path, "/v2/theme");
    http_parser_destroy(&p);
}

static void test_pipelined(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    const char *three = "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n"
                        "GET /c HTTP/1.0\r\n\r\n";
    CHECK_EQ_INT(feed(&p, three, strlen(three)), HTTP_OK);
    CHECK_EQ_INT(s.completes, 3);
    CHECK_EQ_STR(s.path, "/c");
    CHECK(!s.keep_alive); /* HTTP/1.0 without keep-alive */
    http_parser_destroy(&p);
}

static void test_headers_too_large(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    char big[2048];
    snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX: %01500d\r\n\r\n", 0);
    CHECK_EQ_INT(feed(&p, big, strlen(big)), HTTP_ERROR);
    CHECK_EQ_INT(p.error, ERR_HEADERS_TOO_LARGE);
    http_parser_destroy(&p);
}

/* A request of head bytes (request line to blank line), "GET /" and one X header. */
static size_t head_of(char *out, size_t bytes) {
    const char *fmt = "GET / HTTP/1.1\r\nHost: a\r\nX: %0*d\r\n\r\n";
    size_t fixed = strlen("GET / HTTP/1.1\r\nHost: a\r\nX: \r\n\r\n");
    return (size_t)sprintf(out, fmt, (int)(bytes - fixed), 0);
}

/* The limit counts a head's bytes exactly, for a request that begins in the
 * middle of a read (after another one and empty lines) and wherever the
 * reads are cut: at the limit it passes, one byte more is 431. */
static void test_head_limit_exact(void) {
    for (size_t extra = 0; extra <= 1; extra++) {
        char two[2 * 1100];
        size_t n = head_of(two, 40);
        n += (size_t)sprintf(two + n, "\r\n\r\n");
        size_t second = n;
        n += head_of(two + n, lim.max_header_bytes + extra);
        for (size_t cut = second - 8; cut <= n; cut += 7) {
            struct seen s = {0};
            struct http_parser p;
            http_parser_init(&p, &lim, &ev, &s);
            enum http_status a = feed(&p, two, cut);
            enum http_status b = a == HTTP_OK ? feed(&p, two + cut, n - cut) : a;
            CHECK_EQ_INT(b, extra ? HTTP_ERROR : HTTP_OK);
            CHECK_EQ_INT(s.completes, extra ? 1 : 2);
            if (extra) CHECK_EQ_INT(p.error, ERR_HEADERS_TOO_LARGE);
            http_parser_destroy(&p);
        }
    }
}

/* The kept headers, whatever the case of their names and wherever a read
 * cuts them; names that differ by one byte or carry a space are not ours. */
static void test_kept_names(void) {
    static const char head[] =
        "GET /k HTTP/1.1\r\nhOsT: a.example\r\nX-REQUEST-ID: rid-1\r\nIf-None-Match: \"1\"\r\n"
        "X-Forwarded-For: 1.2.3.4\r\nIdempotency-Key: k1\r\nSec-Fetch-Site: same-origin\r\n"
        "Cookie: a=1\r\nCOOKIE: b=2\r\nAccept: x/y\r\nOrigin: o\r\nContent-Type: t/u\r\n"
        "If-Match: m\r\nX-Request-Ix: no\r\nAcceps: no\r\nIf-Matcj: no\r\nAuthorization: A b\r\n"
        ": empty name\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n";
    static const char *const want[HF_COUNT] = {
        [HF_COOKIE] = "a=1; b=2",
        [HF_CONTENT_TYPE] = "t/u",
        [HF_ACCEPT] = "x/y",
        [HF_FORWARDED_FOR] = "1.2.3.4",
        [HF_REQUEST_ID] = "rid-1",
        [HF_HOST] = "a.example",
        [HF_ORIGIN] = "o",
        [HF_FETCH_SITE] = "same-origin",
        [HF_IDEMPOTENCY_KEY] = "k1",
        [HF_IF_MATCH] = "m",
        [HF_IF_NONE_MATCH] = "\"1\"",
    };
    size_t n = strlen(head);
    for (size_t cut = 0; cut <= n; cut++) {
        struct seen s = {0};
        struct http_parser p;
        http_parser_init(&p, &lim, &ev, &s);
        CHECK_EQ_INT(feed(&p, head, cut), HTTP_OK);
        CHECK_EQ_INT(feed(&p, head + cut, n - cut), HTTP_OK);
        CHECK_EQ_INT(s.completes, 1);
        for (int f = 0; f < HF_COUNT; f++)
            CHECK_EQ_STR(s.fields[f], want[f]);
        CHECK_EQ_STR(s.auth, "A b");
        CHECK(s.expect);
        http_parser_destroy(&p);
    }
    static const char *const spaced[] = {
        "GET / HTTP/1.1\r\nHost: a\r\nNa me: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nContent-Type : x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    };
    /* Names of other lengths: a space or a tab anywhere in them is refused. */
    for (size_t len = 1; len <= 20; len++) {
        for (size_t at = 0; at <= len; at++) {
            for (int ws = 0; ws < 2; ws++) {
                char name[24], h[96];
                memset(name, 'q', len);
                if (at < len) name[at] = ws ? '\t' : ' ';
                name[len] = 0;
                int n = snprintf(h, sizeof h, "GET / HTTP/1.1\r\nHost: a\r\n%s: x\r\n\r\n", name);
                struct seen s = {0};
                struct http_parser p;
                http_parser_init(&p, &lim, &ev, &s);
                CHECK_EQ_INT(feed(&p, h, (size_t)n), at < len ? HTTP_ERROR : HTTP_OK);
                if (at < len) CHECK_EQ_INT(p.error, ERR_BAD_REQUEST);
                http_parser_destroy(&p);
            }
        }
    }
    for (size_t i = 0; i < sizeof spaced / sizeof spaced[0]; i++) {
        size_t len = strlen(spaced[i]);
        for (size_t cut = 0; cut <= len; cut++) {
            struct seen s = {0};
            struct http_parser p;
            http_parser_init(&p, &lim, &ev, &s);
            enum http_status a = feed(&p, spaced[i], cut);
            enum http_status b = a == HTTP_OK ? feed(&p, spaced[i] + cut, len - cut) : a;
            CHECK_EQ_INT(b, HTTP_ERROR);
            CHECK_EQ_INT(p.error, ERR_BAD_REQUEST);
            http_parser_destroy(&p);
        }
    }
}

static void test_body_too_large(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    const char *cl = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n";
    CHECK_EQ_INT(feed(&p, cl, strlen(cl)), HTTP_ERROR);
    CHECK_EQ_INT(p.error, ERR_BODY_TOO_LARGE);
    CHECK_EQ_INT(s.headers, 0); /* refused before the owner saw it */
    http_parser_destroy(&p);
}

static void test_garbage(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    CHECK_EQ_INT(feed(&p, "GARBAGE\r\n\r\n", 11), HTTP_ERROR);
    CHECK_EQ_INT(p.error, ERR_BAD_REQUEST);
    http_parser_destroy(&p);
}

/* After an error, reset makes the parser take a new request. */
static void test_reset_after_error(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    CHECK_EQ_INT(feed(&p, "GARBAGE\r\n\r\n", 11), HTTP_ERROR);
    http_parser_reset(&p);
    const char *get = "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n";
    CHECK_EQ_INT(feed(&p, get, strlen(get)), HTTP_OK);
    CHECK_EQ_INT(s.completes, 1);
    CHECK_EQ_STR(s.path, "/ok");
    http_parser_destroy(&p);
}

static void test_length_and_chunked(void) {
    struct seen s = {0};
    struct http_parser p;
    http_parser_init(&p, &lim, &ev, &s);
    const char *both = "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK_EQ_INT(feed(&p, both, strlen(both)), HTTP_ERROR);
    CHECK_EQ_INT(s.completes, 0);
    http_parser_destroy(&p);
}

static void test_response_head(void) {
    struct http_response r;
    http_response_init(&r);
    http_response_error(&r, ERR_NOT_FOUND, "ID", "no \"theme\"");
    http_response_finish(&r, false);
    CHECK(strstr(r.head, "HTTP/1.1 404 Not Found\r\n") == r.head);
    CHECK(strstr(r.head, "Content-Type: application/json\r\n"));
    CHECK(strstr(r.head, "Connection: close\r\n"));
    CHECK(strstr(r.head, "Date: "));
    CHECK_EQ_STR(r.body.ptr, "{\"Status\":\"error\",\"Error\":{\"Code\":\"not_found\","
                             "\"Message\":\"no \\\"theme\\\"\",\"Field\":\"ID\"}}");
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", r.body.len);
    CHECK(strstr(r.head, cl));
    http_response_destroy(&r);
}

/* Generated request ids: the prefix, '-', 1, 2, ... in hex, and a digit
 * more at each power of 16. */
static void test_request_ids_count_in_hex(void) {
    static struct server srv; /* only the request id fields are used */
    memcpy(srv.rid_prefix, "abcdef01", 8);
    struct http_response r;
    http_response_init(&r);
    for (unsigned i = 1; i <= 5000; i++) {
        server__request_id_make(&srv, &r);
        char want[32];
        snprintf(want, sizeof want, "abcdef01-%x", i);
        CHECK_EQ_INT(r.request_id_len, (int)strlen(want));
        CHECK(memcmp(r.request_id, want, r.request_id_len) == 0);
    }
    memcpy(srv.rid_text, "abcdef01-fffffffffffffffe", 25);
    srv.rid_len = 25;
    server__request_id_make(&srv, &r);
    CHECK(r.request_id_len == 25 && memcmp(r.request_id, "abcdef01-ffffffffffffffff", 25) == 0);
    http_response_destroy(&r);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_cut_at_every_byte),
    CHECK_CASE(test_bad_line_ends_refused_at_every_cut),
    CHECK_CASE(test_one_byte_per_read),
    CHECK_CASE(test_pipelined),
    CHECK_CASE(test_headers_too_large),
    CHECK_CASE(test_body_too_large),
    CHECK_CASE(test_garbage),
    CHECK_CASE(test_reset_after_error),
    CHECK_CASE(test_length_and_chunked),
    CHECK_CASE(test_response_head),
    CHECK_CASE(test_head_limit_exact),
    CHECK_CASE(test_kept_names),
    CHECK_CASE(test_request_ids_count_in_hex),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
