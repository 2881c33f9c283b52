/* The llhttp adapter: a request cut at every byte, pipelining, limits. */
#include "check.h"
#include "http/http.h"

struct seen {
    int headers, completes;
    char body[256];
    size_t body_len;
    char path[64];
    char auth[64];
    bool keep_alive, expect;
};

static int on_headers(void *o, struct http_request *r) {
    struct seen *s = o;
    s->headers++;
    snprintf(s->path, sizeof s->path, "%.*s", (int)r->path.len, r->path.ptr);
    snprintf(s->auth, sizeof s->auth, "%.*s", (int)r->kept->authorization.len,
             r->kept->authorization.ptr);
    s->keep_alive = r->keep_alive;
    s->expect = r->expect_continue;
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

static const struct check_case cases[] = {
    CHECK_CASE(test_cut_at_every_byte), CHECK_CASE(test_one_byte_per_read),
    CHECK_CASE(test_pipelined),         CHECK_CASE(test_headers_too_large),
    CHECK_CASE(test_body_too_large),    CHECK_CASE(test_garbage),
    CHECK_CASE(test_reset_after_error), CHECK_CASE(test_length_and_chunked),
    CHECK_CASE(test_response_head),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
