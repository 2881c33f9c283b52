/*
 * Mutation fuzzing with a fixed seed, bounded in count: valid requests and
 * bodies are bit-flipped, truncated, spliced and cut into random chunks.
 * Properties: nothing crashes (valgrind and the sanitizers see every run of
 * this file too), an accepted body holds only valid values, and the outcome
 * never depends on how the bytes were split across reads.
 */
#include <math.h>

#include "check.h"
#include "core/json.h"
#include "http/http.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Mutates src into out; returns the new length (at most cap). */
static size_t mutate(const char *src, size_t n, char *out, size_t cap) {
    if (n > cap) n = cap;
    memcpy(out, src, n);
    int edits = 1 + (int)(next() % 3);
    for (int e = 0; e < edits && n > 0; e++) {
        size_t at = next() % n;
        switch (next() % 5) {
        case 0:
            out[at] ^= (char)(1u << (next() % 8));
            break; /* flip a bit */
        case 1:
            if (next() % 4 == 0) n = at;
            break; /* truncate, sometimes */
        case 2:
            out[at] = "{}[]\":,\\\r\n 0a\xff\xc3"[next() % 16];
            break;
        case 3: /* duplicate a run */
            if (n < cap - 16) {
                size_t len = 1 + next() % 15;
                if (at + len > n) len = n - at;
                memmove(out + at + len, out + at, n - at);
                n += len;
            }
            break;
        case 4: /* delete a run */
        {
            size_t len = 1 + next() % 8;
            if (at + len > n) len = n - at;
            memmove(out + at, out + at + len, n - at - len);
            n -= len;
            break;
        }
        }
    }
    return n;
}

/* ---- JSON bodies ---- */

static int decode(struct arena *a, struct json_decoder *d, const struct kind_desc *k, const char *b,
                  size_t n, bool random_chunks) {
    arena_reset(a);
    json_decoder_begin(d, k, a, 255, 64);
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0;) {
        size_t step = random_chunks ? 1 + next() % 17 : n;
        if (step > n - off) step = n - off;
        rc = json_decoder_feed(d, b + off, step);
        off += step;
    }
    if (rc == 0) rc = json_decoder_finish(d);
    json_decoder_end(d);
    return rc;
}

static void check_values(const struct json_decoder *d, const struct kind_desc *k) {
    for (int i = 0; i < k->nfields; i++) {
        if (!(d->present & (UINT64_C(1) << i))) continue;
        const struct field *f = &k->fields[i];
        const union value *v = &d->vals[i];
        switch (f->type) {
        case FT_STR:
            CHECK(v->s.len <= 255 && record_utf8_valid(v->s.ptr, v->s.len));
            break;
        case FT_COLOR:
            /* Checked here without record.c, which the decoder itself relies on. */
            CHECK(v->s.len == 6 && strspn(v->s.ptr, "0123456789abcdefABCDEF") == 6);
            break;
        case FT_DOUBLE:
            CHECK(isfinite(v->d) && v->d >= f->min && v->d <= f->max);
            break;
        default:
            break;
        }
    }
}

static void fuzz_json(void) {
    static const struct {
        const struct kind_desc *k;
        const char *body;
    } corpus[] = {
        {&record_theme, "{\"Theme\":{\"Name\":\"Gala \\u00e9\",\"PageBackgroundRGB\":\"aBc123\","
                        "\"Status\":\"draft\",\"ID\":5,\"Logo\":[1,{\"x\":null}]}}"},
        {&record_address, "{\"Address\":{\"City\":\"Lyon\",\"Lon\":4.8357,\"Lat\":\"45.764\","
                          "\"ShowMap\":\"yes\",\"Line4\":\"x\",\"Post\":\"69002\"}}"},
        {&record_event, "{\"Event\":{\"Name\":\"E\",\"ThemeID\":2,\"AddressID\":0}}"},
        {&record_theme, "{\"Name\":\"bare\",\"SmallHeadingRGB\":\"575757\"}"},
    };
    struct arena a;
    arena_init(&a, 4096);
    struct json_decoder d1, d2;
    char buf[512];
    int accepted = 0;
    for (int i = 0; i < 300000; i++) {
        int c = (int)(next() % 4);
        size_t n = mutate(corpus[c].body, strlen(corpus[c].body), buf, sizeof buf);
        int rc1 = decode(&a, &d1, corpus[c].k, buf, n, false);
        if (rc1 == 0) {
            check_values(&d1, corpus[c].k);
            accepted++;
        }
        enum err e1 = d1.err;
        uint64_t present = d1.present;
        int rc2 = decode(&a, &d2, corpus[c].k, buf, n, true);
        if (rc1 != rc2 || e1 != d2.err || (rc1 == 0 && present != d2.present)) {
            fprintf(stderr, "split changed the outcome of %.*s: %d/%d vs %d/%d\n", (int)n, buf, rc1,
                    e1, rc2, d2.err);
            exit(1);
        }
    }
    arena_destroy(&a);
    printf("json: 300000 mutated bodies, %d accepted\n", accepted);
    CHECK(accepted > 3000); /* the mutations must not all be trivially rejected */
}

/* ---- HTTP requests ---- */

struct outcome {
    int headers, completes;
    size_t body;
    char path[128];
};

static int on_headers(void *o, struct http_request *r) {
    struct outcome *s = o;
    s->headers++;
    snprintf(s->path, sizeof s->path, "%.*s", (int)r->path.len, r->path.ptr);
    return 0;
}

static void on_body(void *o, struct http_request *r, const char *p, size_t n) {
    ((struct outcome *)o)->body += n;
}

static bool on_complete(void *o, struct http_request *r) {
    ((struct outcome *)o)->completes++;
    return false;
}

static const struct http_events ev = {on_headers, on_body, on_complete};

static enum err parse(const char *b, size_t n, bool random_chunks, struct outcome *out) {
    static const struct http_limits lim = {1024, 256};
    struct http_parser p;
    memset(out, 0, sizeof *out);
    http_parser_init(&p, &lim, &ev, out);
    enum err e = ERR_NONE;
    for (size_t off = 0; off < n;) {
        size_t step = random_chunks ? 1 + next() % 23 : n - off;
        if (step > n - off) step = n - off;
        size_t used;
        if (http_parser_execute(&p, b + off, step, &used) == HTTP_ERROR) {
            e = p.error;
            break;
        }
        off += step;
    }
    http_parser_destroy(&p);
    return e;
}

static void fuzz_http(void) {
    static const char *corpus[] = {
        "POST /v2/theme?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YTpi\r\n"
        "Content-Length: 11\r\n\r\n{\"Name\":1}\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
        "PUT /v2/address/7 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: "
        "100-continue\r\n\r\n"
        "5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nTrailer: t\r\n\r\n",
        "GET /v2/theme/1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nDELETE /v2/theme/2 "
        "HTTP/1.1\r\nHost: a\r\n\r\n",
    };
    char buf[512];
    int complete = 0;
    for (int i = 0; i < 300000; i++) {
        const char *src = corpus[next() % 3];
        size_t n = mutate(src, strlen(src), buf, sizeof buf);
        struct outcome a, b;
        enum err e1 = parse(buf, n, false, &a);
        enum err e2 = parse(buf, n, true, &b);
        if (e1 != e2 || a.headers != b.headers || a.completes != b.completes || a.body != b.body ||
            strcmp(a.path, b.path) != 0) {
            fprintf(stderr, "split changed the outcome of %.*s: err %d/%d, completes %d/%d\n",
                    (int)n, buf, e1, e2, a.completes, b.completes);
            exit(1);
        }
        if (e1 == ERR_NONE && a.completes) complete++;
    }
    printf("http: 300000 mutated requests, %d parsed at least one request\n", complete);
    CHECK(complete > 3000);
}

static const struct check_case cases[] = {
    CHECK_CASE(fuzz_json),
    CHECK_CASE(fuzz_http),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
