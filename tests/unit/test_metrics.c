/*
 * test_metrics: the metrics module (status slots, histogram buckets, the
 * text format) and the access log's line format and JSON escaping.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/metrics.h"
#include "http/access_log.h"

static bool has_line(const struct buf *b, const char *line) {
    size_t n = strlen(line);
    for (const char *p = b->ptr; (p = strstr(p, line)) != NULL; p++)
        if ((p == b->ptr || p[-1] == '\n') && p[n] == '\n') return true;
    return false;
}

static void test_request_counters_by_route_and_code(void) {
    struct metrics m;
    metrics_init(&m);
    metrics_observe_request(&m, MR_THEME_CREATE, 200, 1000);
    metrics_observe_request(&m, MR_THEME_CREATE, 200, 1000);
    metrics_observe_request(&m, MR_THEME_CREATE, 503, 1000);
    metrics_observe_request(&m, 250, 404, 1000); /* out of range: other */
    struct buf b = BUF_INIT;
    metrics_render(&m, &b, 0, 0);
    CHECK(has_line(&b, "eventd_http_requests_total{route=\"theme_create\",code=\"200\"} 2"));
    CHECK(has_line(&b, "eventd_http_requests_total{route=\"theme_create\",code=\"503\"} 1"));
    CHECK(has_line(&b, "eventd_http_requests_total{route=\"other\",code=\"404\"} 1"));
    CHECK(!strstr(b.ptr, "route=\"theme_get\""));
    buf_destroy(&b);
}

static void test_status_slots_overflow_to_other(void) {
    struct metrics m;
    metrics_init(&m);
    for (uint16_t code = 100; code < 100 + METRICS_STATUSES + 5; code++)
        metrics_observe_request(&m, MR_HEALTH, code, 1);
    metrics_observe_request(&m, MR_HEALTH, 9999, 1);
    struct buf b = BUF_INIT;
    metrics_render(&m, &b, 0, 0);
    CHECK(has_line(&b, "eventd_http_requests_total{route=\"health\",code=\"100\"} 1"));
    /* 31 codes get their own slot; the 6 others and 9999 share "other". */
    CHECK(has_line(&b, "eventd_http_requests_total{route=\"health\",code=\"other\"} 7"));
    buf_destroy(&b);
}

static void test_histogram_is_cumulative(void) {
    struct metrics m;
    metrics_init(&m);
    metrics_observe_request(&m, MR_HEALTH, 200, 50000);       /* <= 5e-05 */
    metrics_observe_request(&m, MR_HEALTH, 200, 50001);       /* <= 0.0001 */
    metrics_observe_request(&m, MR_HEALTH, 200, 20000000000); /* > 10 s */
    struct buf b = BUF_INIT;
    metrics_render(&m, &b, 3, 1);
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_bucket{le=\"5e-05\"} 1"));
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_bucket{le=\"0.0001\"} 2"));
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_bucket{le=\"10\"} 2"));
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_bucket{le=\"+Inf\"} 3"));
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_count 3"));
    CHECK(has_line(&b, "eventd_http_request_duration_seconds_sum 20.000100001"));
    CHECK(has_line(&b, "eventd_compactions_total{result=\"ok\"} 3"));
    CHECK(has_line(&b, "eventd_compactions_total{result=\"failed\"} 1"));
    CHECK(has_line(&b, "# TYPE eventd_fsync_duration_seconds histogram"));
    buf_destroy(&b);
}

static void test_fsync_with_null_metrics_is_a_no_op(void) {
    metrics_observe_fsync(NULL, 5);
    struct metrics m;
    metrics_init(&m);
    metrics_observe_fsync(&m, 300000);
    CHECK_EQ_UINT(m.fsync.count, 1);
    CHECK_EQ_UINT(m.fsync.counts[3], 1); /* <= 0.0005 */
}

static void test_escape(void) {
    struct buf b = BUF_INIT;
    struct slice s = {"a\"b\\c\n\x01\xff/", 9};
    access_log_escape(&b, s, 1000);
    CHECK_EQ_STR(b.ptr, "a\\\"b\\\\c\\u000a\\u0001\\u00ff/");
    buf_reset(&b);
    /* Cut at max output bytes, never inside an escape. */
    access_log_escape(&b, (struct slice){"ab\ncd", 5}, 7);
    CHECK_EQ_STR(b.ptr, "ab");
    buf_destroy(&b);
}

/* The byte-by-byte rule: each byte as it is, '"' and '\\' after a backslash,
 * others as \u00XX; cut before the first piece that does not fit in max. */
static size_t escape_ref(char *out, const char *in, size_t n, size_t max) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)in[i];
        char piece[8];
        size_t k;
        if (x == '"' || x == '\\')
            k = (size_t)sprintf(piece, "\\%c", x);
        else if (x < 0x20 || x > 0x7e)
            k = (size_t)sprintf(piece, "\\u00%02x", x);
        else
            k = (size_t)sprintf(piece, "%c", x);
        if (w + k > max) break;
        memcpy(out + w, piece, k);
        w += k;
    }
    out[w] = 0;
    return w;
}

/* Every byte value at every place of strings around a word's length, and
 * every cut of them, come out as the byte-by-byte rule says (the escaper
 * reads plain words at once). */
static void test_escape_every_byte_everywhere(void) {
    struct buf b = BUF_INIT;
    for (size_t len = 1; len <= 24; len++) {
        for (int c = 0; c < 256; c++) {
            for (size_t at = 0; at < len; at++) {
                char in[24], want[160];
                memset(in, 'a', sizeof in);
                in[at] = (char)c;
                size_t full = escape_ref(want, in, len, 1000);
                for (size_t max = c == 'a' || at % 7 == 0 ? 0 : full; max <= full + 1; max++) {
                    escape_ref(want, in, len, max);
                    buf_reset(&b);
                    access_log_escape(&b, (struct slice){in, len}, max);
                    CHECK_EQ_STR(b.ptr, want);
                }
            }
        }
    }
    buf_destroy(&b);
}

static void test_line(void) {
    char path[] = "/tmp/eventd-test-alog-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    struct access_log al;
    access_log_init(&al, NULL, fd, &(struct access_log_settings){.on = true});
    const uint8_t addr[4] = {10, 0, 0, 7};
    struct access_entry e = {.method = 1 + 1 /* llhttp: GET */,
                             .status = 200,
                             .path = {"/v2/theme", 9},
                             .request_id = {"r-1", 3},
                             .bytes = 123,
                             .us = 45,
                             .user_id = 6,
                             .family = 4,
                             .addr = addr};
    access_log_write(&al, &e);
    e.method = 0;
    e.family = 0;
    access_log_write(&al, &e);
    access_log_close(&al);
    char got[1024] = {0};
    ssize_t n = pread(fd, got, sizeof got - 1, 0);
    close(fd);
    CHECK(n > 0);
    /* Skip the timestamp: {"time":"YYYY-MM-DDTHH:MM:SSZ", is 31 bytes. */
    CHECK_EQ_INT(got[30], ',');
    char *second = strchr(got, '\n');
    CHECK(second != NULL);
    *second = 0;
    CHECK_EQ_STR(got + 31,
                 "\"method\":\"GET\",\"path\":\"/v2/theme\",\"status\":200,\"bytes\":123,"
                 "\"us\":45,\"user_id\":6,\"request_id\":\"r-1\",\"client\":\"10.0.0.7\"}");
    CHECK(strstr(second + 1, "\"method\":\"-\"") != NULL);
    CHECK(strstr(second + 1, "\"client\":\"local\"}\n") != NULL);
}

/* The numbers at their digit-count edges, 0 and the largest. */
static void test_line_numbers(void) {
    static const struct {
        uint64_t bytes, us, user_id;
        const char *text;
    } cases[] = {
        {0, 9, 10, "\"bytes\":0,\"us\":9,\"user_id\":10,"},
        {99, 100, 999, "\"bytes\":99,\"us\":100,\"user_id\":999,"},
        {1000, 123456789, 10000000000000000000ull,
         "\"bytes\":1000,\"us\":123456789,\"user_id\":10000000000000000000,"},
        {UINT64_MAX, 9999999999999999999ull, 1,
         "\"bytes\":18446744073709551615,\"us\":9999999999999999999,\"user_id\":1,"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[] = "/tmp/eventd-test-alog-XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        unlink(path);
        struct access_log al;
        access_log_init(&al, NULL, fd, &(struct access_log_settings){.on = true});
        struct access_entry e = {.method = 1 + 1,
                                 .status = 404,
                                 .path = {"/", 1},
                                 .request_id = {"r-2", 3},
                                 .family = 4,
                                 .addr = (const uint8_t[4]){127, 0, 0, 1},
                                 .bytes = cases[i].bytes,
                                 .us = cases[i].us,
                                 .user_id = cases[i].user_id};
        access_log_write(&al, &e);
        access_log_close(&al);
        char got[1024] = {0};
        CHECK(pread(fd, got, sizeof got - 1, 0) > 0);
        close(fd);
        CHECK(strstr(got, "\"status\":404,") != NULL);
        CHECK(strstr(got, cases[i].text) != NULL);
    }
}

static void test_off_writes_nothing(void) {
    char path[] = "/tmp/eventd-test-alog-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    struct access_log al;
    access_log_init(&al, NULL, fd, &(struct access_log_settings){.on = false});
    struct access_entry e = {.status = 200};
    access_log_write(&al, &e);
    access_log_close(&al);
    CHECK_EQ_INT((int)lseek(fd, 0, SEEK_END), 0);
    close(fd);
}

int main(int argc, char **argv) {
    static const struct check_case cases[] = {
        CHECK_CASE(test_request_counters_by_route_and_code),
        CHECK_CASE(test_status_slots_overflow_to_other),
        CHECK_CASE(test_histogram_is_cumulative),
        CHECK_CASE(test_fsync_with_null_metrics_is_a_no_op),
        CHECK_CASE(test_escape),
        CHECK_CASE(test_escape_every_byte_everywhere),
        CHECK_CASE(test_line),
        CHECK_CASE(test_line_numbers),
        CHECK_CASE(test_off_writes_nothing),
    };
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
