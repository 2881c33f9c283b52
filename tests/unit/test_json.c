/* The streaming body decoder: shapes, types, limits, errors, chunking. */
#include <float.h>
#include <math.h>

#include "check.h"
#include "common/json_write.h"
#include "core/json.h"
#include "records.h"

static struct arena arena;
static uint32_t depth_max = 64; /* --max-json-depth's default */

/* Decodes body fed in chunks of `step` bytes; returns 0 or -1. */
static int decode(struct json_decoder *d, const struct kind_desc *k, const char *body,
                  size_t step) {
    arena_reset(&arena);
    json_decoder_begin(d, k, &arena, 255, depth_max);
    size_t n = strlen(body);
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += step)
        rc = json_decoder_feed(d, body + off, n - off < step ? n - off : step);
    if (rc == 0) rc = json_decoder_finish(d);
    json_decoder_end(d);
    /* The size kept as the values came is the one a pass over them gives. */
    if (rc == 0) CHECK_EQ_UINT(json_decoder_record_size(d), record_size_of(k, d->vals));
    return rc;
}

static bool has(const struct json_decoder *d, int f) {
    return d->present & (UINT64_C(1) << f);
}

static void test_every_chunk_size(void) {
    struct json_decoder d;
    const char *body =
        "{\"Theme\":{\"Name\":\"Gala \\u00e9\\\"x\\\"\",\"PageBackgroundRGB\":\"aBc123\","
        "\"Status\":\"draft\",\"ID\":5,\"Logo\":\"ignored\",\"UserID\":99}}";
    /* Every chunk size gives the same result: the decoder keeps state across chunks. */
    for (size_t step = 1; step <= strlen(body); step++) {
        CHECK_EQ_INT(decode(&d, &record_theme, body, step), 0);
        CHECK(has(&d, THEME_NAME) && has(&d, THEME_PAGE_BG) && has(&d, THEME_STATUS));
        CHECK(!has(&d, THEME_LOGO));
        CHECK_EQ_STR(d.vals[THEME_NAME].s.ptr, "Gala \xc3\xa9\"x\"");
        CHECK_EQ_STR(d.vals[THEME_PAGE_BG].s.ptr, "aBc123");
        CHECK(d.has_id && d.id == 5);
    }
}

static void test_bare_object(void) {
    struct json_decoder d;
    /* A bare object works too. */
    CHECK_EQ_INT(decode(&d, &record_theme, "{\"Name\":\"bare\"}", 4), 0);
    CHECK_EQ_STR(d.vals[THEME_NAME].s.ptr, "bare");
}

static void test_address_types(void) {
    struct json_decoder d;
    /* Address types: numbers, numeric strings, ShowMap spellings. */
    CHECK_EQ_INT(decode(&d, &record_address,
                        "{\"Address\":{\"Lon\":-0.1276,\"Lat\":\"51.5072\",\"ShowMap\":\"yes\"}}",
                        7),
                 0);
    CHECK(d.vals[ADDR_LON].d == -0.1276 && d.vals[ADDR_LAT].d == 51.5072 &&
          d.vals[ADDR_SHOW_MAP].b);
}

static void test_show_map_truthy(void) {
    struct json_decoder d;
    const char *truthy[] = {"true", "\"true\"", "\"1\"", "\"YES\""};
    for (int i = 0; i < 4; i++) {
        char b[64];
        snprintf(b, sizeof b, "{\"ShowMap\":%s}", truthy[i]);
        CHECK_EQ_INT(decode(&d, &record_address, b, 3), 0);
        CHECK(d.vals[ADDR_SHOW_MAP].b);
    }
}

static void test_show_map_falsy(void) {
    struct json_decoder d;
    const char *falsy[] = {"false", "\"false\"", "\"0\"", "\"no\"", "\"\""};
    for (int i = 0; i < 5; i++) {
        char b[64];
        snprintf(b, sizeof b, "{\"ShowMap\":%s}", falsy[i]);
        CHECK_EQ_INT(decode(&d, &record_address, b, 3), 0);
        CHECK(has(&d, ADDR_SHOW_MAP) && !d.vals[ADDR_SHOW_MAP].b);
    }
}

/*
 * A \u escape of half a surrogate pair: yajl decoded "a\ud800b" as "a?b" and
 * "\ud800\u0041" as U+10041. Refused, at every chunk size (the scan keeps its
 * state across chunks); a whole pair and an escaped backslash before "u" pass.
 */
static void test_unpaired_surrogate_escapes_are_refused(void) {
    struct json_decoder d;
    const char *bad[] = {
        "{\"Theme\":{\"Name\":\"a\\ud800b\"}}",  "{\"Theme\":{\"Name\":\"\\ud800\\u0041\"}}",
        "{\"Theme\":{\"Name\":\"\\uDBFF\\n\"}}", "{\"Theme\":{\"Name\":\"\\udc00\"}}",
        "{\"Theme\":{\"Name\":\"\\ud800\"}}",    "{\"Theme\":{\"Name\":\"x\\ud83d\\ud83d\"}}",
        "{\"Theme\":{\"N\\ud800ame\":\"x\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t step = 1; step <= strlen(bad[i]); step++) {
            CHECK_EQ_INT(decode(&d, &record_theme, bad[i], step), -1);
            CHECK_EQ_INT(d.err, ERR_INVALID_JSON);
            CHECK(strstr(d.err_msg, "surrogate") != NULL);
        }
    }
    /* An error before the bad escape comes first, however the body is split (the
     * fuzzer's split property found the scan's error winning when in one chunk). */
    const char *earlier = "{\"Theme\":{\"Nx\":1,\"Name\":\"\\ud800\"}}";
    for (size_t step = 1; step <= strlen(earlier); step++) {
        CHECK_EQ_INT(decode(&d, &record_theme, earlier, step), -1);
        CHECK_EQ_INT(d.err, ERR_UNKNOWN_FIELD);
    }
    const char *good = "{\"Theme\":{\"Name\":\"\\ud83d\\ude00 \\\\ud800 \\\\\\u00e9\"}}";
    for (size_t step = 1; step <= strlen(good); step++) {
        CHECK_EQ_INT(decode(&d, &record_theme, good, step), 0);
        CHECK_EQ_STR(d.vals[THEME_NAME].s.ptr, "\xf0\x9f\x98\x80 \\ud800 \\\xc3\xa9");
    }
}

/* An unknown key is echoed cut on a character boundary, and not at all when it is
 * not text: an error answer is always valid UTF-8, its Field never cut at a NUL. */
/* Two wrappers: the second is a duplicate (400 duplicate_field naming it), as a field's. */
static void test_a_second_wrapper_is_a_duplicate(void) {
    struct json_decoder d;
    CHECK_EQ_INT(decode(&d, &record_theme, "{\"Theme\":{},\"Theme\":{}}", 5), -1);
    CHECK_EQ_INT(d.err, ERR_DUPLICATE_FIELD);
    CHECK_EQ_STR(d.err_field, "Theme");
}

static void test_unknown_keys_are_echoed_as_text(void) {
    struct json_decoder d;
    char body[200];
    snprintf(body, sizeof body, "{\"Theme\":{\"%s\xc3\xa9\":1}}",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"); /* 63 a */
    CHECK_EQ_INT(decode(&d, &record_theme, body, 7), -1);
    CHECK_EQ_INT(d.err, ERR_UNKNOWN_FIELD);
    CHECK_EQ_INT(strlen(d.err_field), 63);
    CHECK(strstr(d.err_msg, "(cut)") != NULL);
    const char *not_text[] = {"{\"Theme\":{\"Na\\u0000me\":1}}", "{\"Theme\":{\"\xc0\x80\":1}}"};
    for (size_t i = 0; i < 2; i++) {
        CHECK_EQ_INT(decode(&d, &record_theme, not_text[i], 3), -1);
        CHECK_EQ_INT(d.err, ERR_UNKNOWN_FIELD);
        CHECK(d.err_field == NULL);
        CHECK(strstr(d.err_msg, "not UTF-8 text") != NULL);
    }
}

static void test_errors_name_the_field(void) {
    struct json_decoder d;
    /* Errors name the field. */
    struct {
        const struct kind_desc *k;
        const char *body;
        enum err err;
        const char *field;
    } bad[] = {
        {&record_theme, "{\"Theme\":{\"PageBackgroundRGB\":\"#D0CBCB\"}}", ERR_INVALID_FIELD,
         "PageBackgroundRGB"},
        {&record_theme, "{\"Theme\":{\"PageBackgroundRGB\":\"D0CBCG\"}}", ERR_INVALID_FIELD,
         "PageBackgroundRGB"},
        {&record_theme, "{\"Theme\":{\"Name\":5}}", ERR_INVALID_FIELD, "Name"},
        {&record_theme, "{\"Theme\":{\"Status\":\"\"}}", ERR_INVALID_FIELD, "Status"},
        {&record_theme, "{\"Theme\":{\"Name\":\"a\",\"Name\":\"b\"}}", ERR_DUPLICATE_FIELD, "Name"},
        {&record_theme, "{\"Theme\":{\"Nmae\":\"a\"}}", ERR_UNKNOWN_FIELD, "Nmae"},
        {&record_theme, "{\"Theme\":{\"Name\":\"a\"},\"x\":1}", ERR_UNKNOWN_FIELD, "x"},
        {&record_theme, "{\"Theme\":[1]}", ERR_INVALID_FIELD, "Theme"},
        {&record_theme, "{\"Theme\":null}", ERR_INVALID_FIELD, "Theme"},
        {&record_theme, "{\"Theme\":\"x\"}", ERR_INVALID_FIELD, "Theme"},
        {&record_theme, "[]", ERR_INVALID_JSON, NULL},
        {&record_theme, "\"x\"", ERR_INVALID_JSON, NULL},
        {&record_theme, "{\"Theme\":{\"Name\":\"a\"}", ERR_INVALID_JSON, NULL},
        {&record_theme, "{\"Theme\":{\"Name\":\"a\"}} {}", ERR_INVALID_JSON, NULL},
        {&record_theme, "{\"Name\":\"\xff\"}", ERR_INVALID_JSON, NULL},
        {&record_theme, "", ERR_INVALID_JSON, NULL},
        {&record_address, "{\"Lat\":91}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lon\":-180.5}", ERR_INVALID_FIELD, "Lon"},
        {&record_address, "{\"Lon\":\"east\"}", ERR_INVALID_FIELD, "Lon"},
        {&record_address, "{\"ShowMap\":\"maybe\"}", ERR_INVALID_FIELD, "ShowMap"},
        {&record_address, "{\"ShowMap\":1}", ERR_INVALID_FIELD, "ShowMap"},
        {&record_address, "{\"City\":{\"a\":1}}", ERR_INVALID_FIELD, "City"},
        {&record_address, "{\"Address\":1}", ERR_INVALID_FIELD, "Address"},
        {&record_address, "{\"Address\":true}", ERR_INVALID_FIELD, "Address"},
        {&record_event, "{\"Event\":\"x\"}", ERR_INVALID_FIELD, "Event"},
        {&record_address, "{\"Lat\":1e400}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":-1e400}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"inf\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"nan\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"0x10\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"+1\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\" 1\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"1e\"}", ERR_INVALID_FIELD, "Lat"},
        {&record_address, "{\"Lat\":\"-\"}", ERR_INVALID_FIELD, "Lat"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        for (size_t step = 1; step <= 64; step *= 4) {
            int rc = decode(&d, bad[i].k, bad[i].body, step);
            if (rc != -1 || d.err != bad[i].err) {
                fprintf(stderr, "case %zu (%s) step %zu: rc %d err %d (%s)\n", i, bad[i].body, step,
                        rc, d.err, d.err_msg);
                CHECK(0);
            }
            if (bad[i].field) CHECK_EQ_STR(d.err_field, bad[i].field);
        }
    }
}

static void test_error_offset_independent_of_chunks(void) {
    struct json_decoder d;
    /* Malformed JSON reports the same byte offset (where yajl stopped) whatever the chunking. */
    CHECK_EQ_INT(decode(&d, &record_theme, "{\"Theme\":{\"Name\" \"x\"}}", 3), -1);
    CHECK(strstr(d.err_msg, "byte 20") != NULL);
    /* A key after a member's value without a comma: reported at its start, byte 21,
     * at every chunk size; yajl said byte 23 of it in one piece, and the first byte
     * of the chunk that ended it when it began in an earlier one. */
    const char *no_comma = "{\"Theme\":{\"Name\":\"x\" \"Status\":\"y\"}}";
    for (size_t step = 1; step <= strlen(no_comma); step++) {
        CHECK_EQ_INT(decode(&d, &record_theme, no_comma, step), -1);
        CHECK_EQ_STR(d.err_msg, "malformed JSON at byte 21: after key and value, inside map, "
                                "I expect ',' or '}'");
    }
}

/* What yajl alone says of a whole body: 0 when it parses and completes. */
static int yajl_verdict(const char *body) {
    static const yajl_callbacks none = {0};
    yajl_handle h = yajl_alloc(&none, NULL, NULL);
    int ok = yajl_parse(h, (const unsigned char *)body, strlen(body)) == yajl_status_ok &&
             yajl_complete_parse(h) == yajl_status_ok;
    yajl_free(h);
    return ok ? 0 : -1;
}

/* The decoder ends the body without yajl_complete_parse when the object ended with the
 * last byte: whatever follows the object (nothing, spaces, the start of a token, another
 * value), and however the body is cut, it answers as yajl does. */
static void test_end_of_body_as_yajl(void) {
    static const char *const tails[] = {"",  " ", "\n\t ", " tru", " \"ab",   " 1",
                                        "x", "}", " {",    "/",    " \"ab\"", "0"};
    char body[64];
    for (size_t t = 0; t < sizeof tails / sizeof *tails; t++) {
        snprintf(body, sizeof body, "{\"Name\":\"x\"}%s", tails[t]);
        int want = yajl_verdict(body);
        for (size_t step = 1; step <= strlen(body); step++) {
            struct json_decoder d;
            if (decode(&d, &record_theme, body, step) != want) {
                fprintf(stderr, "%s in chunks of %zu: not as yajl (%d)\n", body, step, want);
                CHECK(0);
            }
        }
    }
    CHECK_EQ_INT(yajl_verdict("{} "), 0);
    CHECK_EQ_INT(yajl_verdict("{} tru"), -1);
}

static void test_length_limit_in_bytes(void) {
    struct json_decoder d;
    /* Length limit in bytes of UTF-8. */
    char longname[400];
    snprintf(longname, sizeof longname, "{\"Name\":\"%0256d\"}", 0);
    CHECK_EQ_INT(decode(&d, &record_theme, longname, 50), -1);
    CHECK_EQ_STR(d.err_field, "Name");
    snprintf(longname, sizeof longname, "{\"Name\":\"%0255d\"}", 0);
    CHECK_EQ_INT(decode(&d, &record_theme, longname, 50), 0);
}

static void test_null_and_ignored_fields(void) {
    struct json_decoder d;
    /* null is "not given"; ignored fields may hold anything. */
    CHECK_EQ_INT(
        decode(&d, &record_address, "{\"Lon\":null,\"Type\":{\"x\":[1,2]},\"Line4\":\"z\"}", 5), 0);
    CHECK(!has(&d, ADDR_LON) && !has(&d, ADDR_TYPE) && !has(&d, ADDR_LINE4));
}

static void test_numbers_read_as_strtod(void) {
    struct json_decoder d;
    /* Numbers read exactly as strtod reads them, fast path or not. */
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 20000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        char num[64], b[96];
        int decimals = (int)(r % 19);
        snprintf(num, sizeof num, "%s%d.%0*llu", (r >> 20) & 1 ? "-" : "", (int)(r % 90),
                 decimals ? decimals : 1, (unsigned long long)((r >> 8) % 10000000000000ull));
        snprintf(b, sizeof b, (r >> 21) & 1 ? "{\"Lat\":%s}" : "{\"Lat\":\"%s\"}", num);
        CHECK_EQ_INT(decode(&d, &record_address, b, 64), 0);
        if (d.vals[ADDR_LAT].d != strtod(num, NULL)) {
            fprintf(stderr, "%s read as %.17g\n", num, d.vals[ADDR_LAT].d);
            CHECK(0);
        }
    }
}

static void test_plain_values_any_shape(void) {
    struct json_decoder d;
    /* A field's plain value (on_number's and on_string's own paths) reads as
     * the general path reads it, bit for bit, in a bare object or the
     * wrapper, in one chunk or cut anywhere; one out of range is refused. */
    const char *nums[] = {"-0",
                          "-0.0",
                          "0",
                          "0.1",
                          "51.5072",
                          "-51.5072",
                          "180",
                          "-180.0000",
                          "1.5e1",
                          "179.99999999999999",
                          "180.0001",
                          "-180.0001",
                          "99999999999999999999",
                          "123456789012.345"};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        double want = strtod(nums[i], NULL);
        bool ok = want >= -180 && want <= 180;
        for (int wrapped = 0; wrapped < 2; wrapped++) {
            char b[128];
            snprintf(b, sizeof b,
                     wrapped ? "{\"Address\":{\"Line1\":\"1 High St\",\"Lon\":%s}}"
                             : "{\"Line1\":\"1 High St\",\"Lon\":%s}",
                     nums[i]);
            for (size_t step = 1; step <= strlen(b); step++) {
                int rc = decode(&d, &record_address, b, step);
                if (!ok) {
                    CHECK_EQ_INT(rc, -1);
                    CHECK_EQ_STR(d.err_field, "Lon");
                    CHECK_EQ_STR(d.err_msg, "Lon must be within [-180, 180]");
                    continue;
                }
                CHECK_EQ_INT(rc, 0);
                CHECK(has(&d, ADDR_LON) && has(&d, ADDR_LINE1));
                CHECK(memcmp(&d.vals[ADDR_LON].d, &want, sizeof want) == 0);
                CHECK_EQ_STR(d.vals[ADDR_LINE1].s.ptr, "1 High St");
            }
        }
    }
}

static void test_subnormals_and_underflow(void) {
    struct json_decoder d;
    /* Every finite number in range is read as strtod reads it: subnormals
     * too (strtod's ERANGE on them is no fault), and a magnitude below the
     * smallest subnormal rounds to zero, keeping its sign. */
    const char *nums[] = {"1e-310",
                          "2.2250738585072011e-308",
                          "4.9406564584124654e-324",
                          "-1e-310",
                          "1e-400",
                          "-1e-400",
                          "0.0000000000000000000001e-300",
                          ("89.99999999999999999999999999999999999999999999999999999999999999999"
                           "9999999999")};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        char b[160];
        for (int quoted = 0; quoted < 2; quoted++) {
            snprintf(b, sizeof b, quoted ? "{\"Lat\":\"%s\"}" : "{\"Lat\":%s}", nums[i]);
            if (decode(&d, &record_address, b, 7) != 0) {
                fprintf(stderr, "%s refused: %s\n", b, d.err_msg);
                CHECK(0);
            }
            double want = strtod(nums[i], NULL);
            CHECK(memcmp(&d.vals[ADDR_LAT].d, &want, sizeof want) == 0);
        }
    }
    CHECK_EQ_INT(decode(&d, &record_address, "{\"Lon\":1e-400}", 64), 0);
    CHECK(d.vals[ADDR_LON].d == 0 && !signbit(d.vals[ADDR_LON].d));
    CHECK_EQ_INT(decode(&d, &record_address, "{\"Lon\":-1e-400}", 64), 0);
    CHECK(d.vals[ADDR_LON].d == 0 && signbit(d.vals[ADDR_LON].d));
}

static void test_writer_escapes(void) {
    /* Writer: escapes and round-tripping numbers. */
    struct buf b = BUF_INIT;
    json_write_string(&b, "a\"b\\c\n\x01\xc3\xa9", 9);
    CHECK_EQ_STR(b.ptr, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
    buf_reset(&b);
    json_write_double(&b, 0.1);
    CHECK_EQ_STR(b.ptr, "0.1");
    buf_reset(&b);
    json_write_double(&b, -122.41941550000001);
    CHECK(strtod(b.ptr, NULL) == -122.41941550000001);
    buf_destroy(&b);
}

/* The string writer's word-at-a-time paths against a byte-by-byte escaper: every
 * length up to 40, a special byte (or none) at every position, plain text around it. */
static size_t escape_bytewise(const char *s, size_t n, char *out) {
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : NULL;
        if (c == '\r') e = "\\r";
        if (c == '\t') e = "\\t";
        if (c == '\b') e = "\\b";
        if (c == '\f') e = "\\f";
        if (e) {
            memcpy(out + o, e, 2);
            o += 2;
        } else if (c < 0x20) {
            o += (size_t)sprintf(out + o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    return o;
}

static void test_writer_strings_word_paths(void) {
    static const char specials[] = {'"',        '\\',       '\n', 0x01, 0x1f, '\t', 0x7f,
                                    (char)0x80, (char)0xe9, ' ',  '!',  '#',  '[',  ']'};
    struct buf b = BUF_INIT;
    char s[48], want[48 * 6 + 2];
    for (size_t n = 0; n <= 40; n++) {
        for (size_t at = 0; at <= n; at++) {
            for (size_t k = 0; k < sizeof specials; k++) {
                for (size_t i = 0; i < n; i++)
                    s[i] = (char)('a' + (i * 7 + k) % 26);
                if (at < n) s[at] = specials[k];
                if (at + 3 < n) s[at + 3] = specials[(k + 1) % sizeof specials];
                buf_reset(&b);
                json_write_string(&b, s, n);
                size_t wn = escape_bytewise(s, n, want);
                if (b.len != wn || memcmp(b.ptr, want, wn) != 0) {
                    fprintf(stderr, "length %zu, special %zu at %zu: %.*s, want %.*s\n", n, k, at,
                            (int)b.len, b.ptr, (int)wn, want);
                    CHECK(0);
                }
            }
        }
    }
    buf_destroy(&b);
}

static void test_writer_shortest_forms(void) {
    struct buf b = BUF_INIT;
    /* Short forms where they exist, and every written number reads back exactly. */
    const struct {
        double d;
        const char *text;
    } shortest[] = {{51.5072, "51.5072"},
                    {-0.1276, "-0.1276"},
                    {180, "180"},
                    {-90, "-90"},
                    {0.000001, "0.000001"},
                    {1e-7, "0.0000001"},
                    {123456.789, "123456.789"}};
    for (size_t i = 0; i < sizeof shortest / sizeof *shortest; i++) {
        buf_reset(&b);
        json_write_double(&b, shortest[i].d);
        CHECK_EQ_STR(b.ptr, shortest[i].text);
    }
    buf_destroy(&b);
}

static void test_writer_numbers_round_trip(void) {
    struct buf b = BUF_INIT;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d = (double)(x % 360000000000ull) / 1e9 - 180.0;
        if (i % 3 == 0) d = (double)(int64_t)(x % 36000001) / 1e5 - 180.0;
        if (i % 5 == 0) memcpy(&d, &x, 8);
        if (!isfinite(d)) continue;
        buf_reset(&b);
        json_write_double(&b, d);
        if (strtod(b.ptr, NULL) != d) {
            fprintf(stderr, "%.17g written as %s\n", d, b.ptr);
            CHECK(0);
        }
        CHECK(strchr(b.ptr, 'n') == NULL && strchr(b.ptr, 'i') == NULL);
    }
    buf_destroy(&b);
}

/*
 * The double writer as it was before its digits went two at a time (main
 * 599fb4c): the reference the writer must match byte for byte.
 */
static size_t put_double_reference(char *out, double d) {
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7, 1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
    if (d == 0) {
        *out = '0';
        return 1;
    }
    double ad = fabs(d);
    for (int k = 0; ad < 1e15 && k <= 16; k++) {
        double scaled = ad * pow10[k];
        if (scaled >= 9007199254740992.0) break;
        double m = scaled < 4503599627370496.0 ? nearbyint(scaled) : scaled;
        if (m / pow10[k] != ad) continue;
        uint64_t v = (uint64_t)m;
        int n = 1;
        for (uint64_t top = 10; n < 16 && v >= top; top *= 10)
            n++;
        int len = (d < 0) + (n > k ? n : k + 1) + (k > 0);
        char *p = out + len;
        for (int f = 0; f < k; f++) {
            *--p = (char)('0' + v % 10);
            v /= 10;
        }
        if (k) *--p = '.';
        do {
            *--p = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        if (d < 0) *--p = '-';
        return (size_t)len;
    }
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(out, JSON_DOUBLE_MAX, "%.*g", prec, d);
        if (strtod(out, NULL) == d) break;
    }
    return (size_t)n;
}

static void check_double_as_reference(double d) {
    char got[JSON_DOUBLE_MAX], want[JSON_DOUBLE_MAX];
    size_t gn = json_put_double(got, d), wn = put_double_reference(want, d);
    if (gn != wn || memcmp(got, want, gn) != 0) {
        fprintf(stderr, "%.17g written as %.*s, want %.*s\n", d, (int)gn, got, (int)wn, want);
        CHECK(0);
    }
    got[gn] = 0;
    CHECK(strtod(got, NULL) == d);
}

static void test_writer_doubles_as_reference(void) {
    /* Specials: zeros, subnormals, extremes, integers, powers of ten and their neighbours. */
    const double specials[] = {0.0,
                               -0.0,
                               5e-324,
                               -5e-324,
                               2.2250738585072009e-308,
                               DBL_MIN,
                               DBL_MAX,
                               -DBL_MAX,
                               9007199254740992.0,
                               9007199254740991.0,
                               4503599627370496.0,
                               4503599627370495.5,
                               1e15,
                               1e15 - 1,
                               999999999999999.9,
                               0.1,
                               0.2,
                               0.3,
                               1.0 / 3};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        check_double_as_reference(specials[i]);
        check_double_as_reference(nextafter(specials[i], INFINITY));
        check_double_as_reference(nextafter(specials[i], -INFINITY));
    }
    for (int e = -30; e <= 30; e++) {
        double p = pow(10, e);
        check_double_as_reference(p);
        check_double_as_reference(-p);
        check_double_as_reference(nextafter(p, 0));
        check_double_as_reference(nextafter(p, INFINITY));
    }
    for (int64_t n = -100000; n <= 100000; n += 7)
        check_double_as_reference((double)n);
    /* Decimals of 1 to 16 digits with the point anywhere, and random bit patterns. */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 300000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d;
        if (i % 4 == 0) {
            memcpy(&d, &x, 8);
            if (!isfinite(d)) continue;
        } else {
            static const double p10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7, 1e8,
                                         1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
            int digits = 1 + (int)(x >> 60) % 16, point = (int)(x >> 54) % 17;
            uint64_t m = (x >> 4) % (uint64_t)p10[digits];
            d = (double)m / p10[point];
            if (x & 8) d = -d;
        }
        check_double_as_reference(d);
    }
}

static bool val_is(const struct json_decoder *d, int f, const char *want) {
    return d->vals[f].s.len == strlen(want) &&
           memcmp(d->vals[f].s.ptr, want, d->vals[f].s.len) == 0;
}

static void test_held_chunk_strings_stay_in_place(void) {
    struct json_decoder d;
    const char body[] =
        "{\"Address\":{\"Name\":\"Venue 7\",\"Line1\":\"a\\\"b\",\"City\":\"Lyon\"}}";
    arena_reset(&arena);
    json_decoder_begin(&d, &record_address, &arena, 255, depth_max);
    CHECK_EQ_INT(json_decoder_feed_held(&d, body, strlen(body)), 0);
    CHECK_EQ_INT(json_decoder_finish(&d), 0);
    json_decoder_end(&d);
    /* Strings without escapes point into the held chunk; a decoded one was copied. */
    CHECK(val_is(&d, ADDR_NAME, "Venue 7") && val_is(&d, ADDR_CITY, "Lyon"));
    CHECK(d.vals[ADDR_NAME].s.ptr > body && d.vals[ADDR_NAME].s.ptr < body + sizeof body);
    CHECK(d.vals[ADDR_CITY].s.ptr > body && d.vals[ADDR_CITY].s.ptr < body + sizeof body);
    CHECK(val_is(&d, ADDR_LINE1, "a\"b"));
    CHECK(!(d.vals[ADDR_LINE1].s.ptr >= body && d.vals[ADDR_LINE1].s.ptr < body + sizeof body));
}

static void test_held_last_chunk_after_any_split(void) {
    struct json_decoder d;
    const char *body = "{\"Address\":{\"Name\":\"Venue 7\",\"Line1\":\"17 Market Street\","
                       "\"City\":\"Lyon\",\"Lat\":45.7570,\"Status\":\"draft\"}}";
    size_t n = strlen(body);
    char first[256], last[256];
    /* The body split at every byte: the first piece is gone (overwritten) once fed, as a
     * read buffer's bytes may be; strings from it, or split across the two, were copied. */
    for (size_t at = 1; at < n; at++) {
        arena_reset(&arena);
        json_decoder_begin(&d, &record_address, &arena, 255, depth_max);
        memcpy(first, body, at);
        memcpy(last, body + at, n - at);
        CHECK_EQ_INT(json_decoder_feed(&d, first, at), 0);
        memset(first, 'X', sizeof first);
        CHECK_EQ_INT(json_decoder_feed_held(&d, last, n - at), 0);
        CHECK_EQ_INT(json_decoder_finish(&d), 0);
        json_decoder_end(&d);
        CHECK(val_is(&d, ADDR_NAME, "Venue 7") && val_is(&d, ADDR_LINE1, "17 Market Street") &&
              val_is(&d, ADDR_CITY, "Lyon") && val_is(&d, ADDR_STATUS, "draft"));
        CHECK(d.vals[ADDR_LAT].d == 45.757);
    }
}

/* An address built from d's values is written the same from the decoder as from the record. */
static void check_written_the_same(const struct json_decoder *d) {
    struct record *r = record_build(&record_address, 5, 6, d->vals);
    struct buf a = BUF_INIT, b = BUF_INIT;
    json_write_record(&a, r, false);
    json_write_record_decoded(&b, r, false, d);
    CHECK_EQ_UINT(a.len, b.len);
    CHECK(memcmp(a.ptr, b.ptr, a.len) == 0);
    buf_destroy(&a);
    buf_destroy(&b);
    record_free(r);
}

/* The strings a body gave without escapes are plain, and its short decimals are kept as
 * digits: a record of them is written the same from the decoder (without looking at the
 * strings, without searching for the decimals); a string with an escape decoded, or split
 * across chunks, is not plain. */
static void test_written_from_the_decoder(void) {
    struct json_decoder d;
    const char *body = "{\"Address\":{\"Name\":\"Venue 7\",\"Line1\":\"a\\\"b\\\\c\\u0001\","
                       "\"City\":\"Lyon \xc3\xa9\",\"Post\":\"69002\",\"State\":\"AR\","
                       "\"Line2\":\"a line longer than sixteen\",\"Country\":\"FR-ARA-69\"}}";
    for (size_t step = 1; step <= strlen(body); step++) {
        CHECK_EQ_INT(decode(&d, &record_address, body, step), 0);
        CHECK(!(d.plain & (UINT64_C(1) << ADDR_LINE1)));
        if (step == strlen(body))
            CHECK(d.plain == ((UINT64_C(1) << ADDR_NAME) | (UINT64_C(1) << ADDR_CITY) |
                              (UINT64_C(1) << ADDR_POST) | (UINT64_C(1) << ADDR_STATE) |
                              (UINT64_C(1) << ADDR_LINE2) | (UINT64_C(1) << ADDR_COUNTRY)));
        check_written_the_same(&d);
    }
    /* Decimals: trailing and leading zeros, signs, zeros, strings, exponents, long ones. */
    static const char *const nums[] = {
        "45.7570",    "-0.1276", "007.50", "\"007.50\"", "\"51.5072\"", "0.000",
        "-0.0",       "1e2",     "180",    "-179.999",   "0.000001",    "123456789.123456",
        "\"-12.30\"", "1.5e-3",  "100.00", "-90",        "0.1",         "89.99999999999999"};
    int tested = 0;
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char num_body[128];
        snprintf(num_body, sizeof num_body, "{\"Address\":{\"Lon\":%s,\"Lat\":-1.250}}", nums[i]);
        if (decode(&d, &record_address, num_body, strlen(num_body)) != 0) continue; /* range */
        tested++;
        check_written_the_same(&d);
    }
    CHECK_EQ_INT(tested, 16); /* all but 007.50 (no JSON number) and the one out of range */
    CHECK_EQ_INT(decode(&d, &record_address, "{\"Lon\":4.8427,\"Lat\":0.0}", 64), 0);
    CHECK(d.decimals == UINT32_C(1) << ADDR_LON); /* not for a zero */
}

/* A skipped value (an output-only field) nested deep costs memory in proportion
 * to its depth, not to the square of it: yajl grows its state stack 128 bytes at
 * a time, and the arena keeps every block until the request ends (review,
 * 2026-11-29: a Logo of 400,000 '[' took 600 MB, a 1 MiB body of them 4 GB). */
/* A body nesting past --max-json-depth, skipped values included, is refused at
 * the level that goes past it, before yajl stacks that level: a skipped Logo of
 * 1 MiB of '[' held about 2 MiB per connection while its body came (review,
 * 2026-11-29: 100 such connections of one account, 201 MiB). */
static void test_a_deep_skipped_value_costs_its_depth(void) {
    enum { DEPTH = 200000 };
    static char body[2 * DEPTH + 64];
    int n = snprintf(body, sizeof body, "{\"Theme\":{\"Logo\":");
    memset(body + n, '[', DEPTH);
    memset(body + n + DEPTH, ']', DEPTH);
    snprintf(body + n + 2 * DEPTH, sizeof body - (size_t)n - 2 * DEPTH, ",\"Name\":\"x\"}}");
    struct json_decoder d;
    arena_reset(&arena);
    size_t before = arena_size(&arena);
    json_decoder_begin(&d, &record_theme, &arena, 255, depth_max);
    size_t off = 0;
    while (off < strlen(body) && json_decoder_feed(&d, body + off, 4096) == 0)
        off += 4096;
    CHECK_EQ_INT(off, 0); /* refused within the first chunk */
    CHECK_EQ_INT(d.err, ERR_INVALID_JSON);
    CHECK(strstr(d.err_msg, "deeper than 64 levels at byte 79 (--max-json-depth)") != NULL);
    /* yajl's stack of 64 levels fits in the decoder's own room: the arena gave nothing. */
    CHECK_EQ_UINT(arena_size(&arena), before);
    json_decoder_end(&d);
}

/* The depth counts every map and array, the body's own object as 1: 64 levels
 * in all are taken, a 65th is refused at its byte however the body is split. */
static void test_nesting_up_to_the_depth_limit(void) {
    static char body[512];
    for (int extra = 0; extra <= 1; extra++) {
        int levels = 62 + extra; /* under {"Theme":{ ... */
        int n = snprintf(body, sizeof body, "{\"Theme\":{\"Name\":\"x\",\"Logo\":");
        for (int i = 0; i < levels; i++) /* {"a":[{"a":[... */
            n += snprintf(body + n, sizeof body - (size_t)n, "%s", i % 2 ? "[" : "{\"a\":");
        for (int i = levels - 1; i >= 0; i--)
            body[n++] = i % 2 ? ']' : '}';
        snprintf(body + n, sizeof body - (size_t)n, "}}");
        for (size_t step = 1; step <= strlen(body); step *= 3) {
            struct json_decoder d;
            int rc = decode(&d, &record_theme, body, step);
            CHECK_EQ_INT(rc, extra ? -1 : 0);
            if (!extra) {
                CHECK_EQ_STR(d.vals[THEME_NAME].s.ptr, "x");
                continue;
            }
            CHECK_EQ_INT(d.err, ERR_INVALID_JSON);
            CHECK(strstr(d.err_msg, "deeper than 64 levels") != NULL);
        }
    }
}

/* A token a chunk leaves open is refused once longer than any value may be
 * written (json_tokens), before yajl buffers it whole; up to that, nothing
 * changes (review, 2026-11-29: a 1 MiB string held 2 MiB per connection). */
static void test_a_long_open_token_is_refused_before_the_body_ends(void) {
    struct json_decoder d;
    static char body[40000];
    /* A 30,000-byte Name, fed 1,000 bytes at a time: refused at the chunk that
     * takes the open string past 6 x 255 + 2 bytes, naming the field. */
    int n = snprintf(body, sizeof body, "{\"Theme\":{\"Name\":\"");
    memset(body + n, 'a', 30000);
    snprintf(body + n + 30000, sizeof body - (size_t)n - 30000, "\"}}");
    arena_reset(&arena);
    json_decoder_begin(&d, &record_theme, &arena, 255, depth_max);
    size_t off = 0, len = strlen(body);
    while (off < len && json_decoder_feed(&d, body + off, 1000) == 0)
        off += 1000;
    CHECK(off <= 2000); /* the second chunk's open string is 1,982 bytes */
    CHECK_EQ_INT(d.err, ERR_INVALID_FIELD);
    CHECK_EQ_STR(d.err_field, "Name");
    CHECK(strstr(d.err_msg, "--max-string-bytes") != NULL);
    json_decoder_end(&d);
    /* The longest a 255-byte value can be written, byte by byte: accepted. */
    n = snprintf(body, sizeof body, "{\"Theme\":{\"Name\":\"");
    for (int i = 0; i < 255; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "\\u0041");
    snprintf(body + n, sizeof body - (size_t)n, "\"}}");
    CHECK_EQ_INT(decode(&d, &record_theme, body, 1), 0);
    CHECK_EQ_INT(d.vals[THEME_NAME].s.len, 255);
    /* A long key or number: no field to name. */
    n = snprintf(body, sizeof body, "{\"Theme\":{\"");
    memset(body + n, 'k', 3000);
    snprintf(body + n + 3000, sizeof body - (size_t)n - 3000, "\":1}}");
    CHECK_EQ_INT(decode(&d, &record_theme, body, 512), -1);
    CHECK_EQ_INT(d.err, ERR_INVALID_JSON);
    n = snprintf(body, sizeof body, "{\"Address\":{\"Lat\":1.");
    memset(body + n, '0', 3000);
    snprintf(body + n + 3000, sizeof body - (size_t)n - 3000, "}}");
    CHECK_EQ_INT(decode(&d, &record_address, body, 512), -1);
    CHECK_EQ_INT(d.err, ERR_INVALID_FIELD); /* a member's value: Lat is named */
    CHECK_EQ_STR(d.err_field, "Lat");
    /* ... as a number too long, not a string past --max-string-bytes */
    CHECK_EQ_STR(d.err_msg, "Lat: a number of over 1532 bytes");
}

static void test_tokens_scan(void) {
    struct json_tokens t = {0};
    CHECK_EQ_INT(json_tokens_scan(&t, "{\"a\":\"xy", 8, 10), -1);
    CHECK_EQ_UINT(t.len, 3);
    CHECK_EQ_INT(t.opener, ':');
    CHECK_EQ_INT(json_tokens_scan(&t, "z\\\"w", 4, 10), -1); /* an escaped quote stays inside */
    CHECK_EQ_UINT(t.len, 7);
    CHECK_EQ_INT(json_tokens_scan(&t, "\", 12", 5, 10), -1); /* closed; a number opens */
    CHECK_EQ_UINT(t.len, 2);
    CHECK_EQ_INT(t.opener, ',');
    CHECK_EQ_INT(json_tokens_scan(&t, "3}", 2, 10), -1);
    /* The byte that makes a token 11 bytes long, and the same across a split. */
    struct json_tokens u = {0};
    CHECK_EQ_INT(json_tokens_scan(&u, "[\"0123456789abc", 15, 10), 11);
    memset(&u, 0, sizeof u);
    CHECK_EQ_INT(json_tokens_scan(&u, "[\"01234", 7, 10), -1);
    CHECK_EQ_INT(json_tokens_scan(&u, "56789abc", 8, 10), 4);
}

/* A key's answer kept as a snapshot (record.h, IDEM_SNAPSHOT_MARK) is rendered only for
 * a kind a keyed create makes: a damaged or hand-made log could name a user, whose
 * record was rendered as the answer. A theme's snapshot renders. */
static bool key_answer_of(const struct record *r, struct buf *out) {
    struct buf snap = BUF_INIT;
    uint8_t head[2] = {IDEM_SNAPSHOT_MARK, r->type};
    buf_append(&snap, (const char *)head, sizeof head);
    record_encode(r, &snap);
    union value v[RECORD_MAX_FIELDS];
    test_idem_vals(v, "k1", 1764000000, r->id, snap.ptr, snap.len);
    struct record *k = record_build(&record_idem, r->id + 1, 1, v);
    bool ok = json_write_key_answer(out, NULL, k);
    record_free(k);
    buf_destroy(&snap);
    return ok;
}

static void test_a_key_answer_renders_only_the_kinds_a_keyed_create_makes(void) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    v[THEME_NAME].s.ptr = "kept";
    v[THEME_NAME].s.len = 4;
    struct record *theme = record_build(&record_theme, 10, 1, v);
    struct buf b = BUF_INIT;
    CHECK(key_answer_of(theme, &b));
    CHECK(b.len > 0 && memmem(b.ptr, b.len, "\"kept\"", 6) != NULL);
    record_free(theme);
    buf_reset(&b);
    struct record *user = test_user(10, "alice", "the-key-hash");
    CHECK(!key_answer_of(user, &b));
    CHECK_EQ_UINT(b.len, 0);
    record_free(user);
    buf_destroy(&b);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_a_long_open_token_is_refused_before_the_body_ends),
    CHECK_CASE(test_a_deep_skipped_value_costs_its_depth),
    CHECK_CASE(test_nesting_up_to_the_depth_limit),
    CHECK_CASE(test_tokens_scan),
    CHECK_CASE(test_a_key_answer_renders_only_the_kinds_a_keyed_create_makes),
    CHECK_CASE(test_every_chunk_size),
    CHECK_CASE(test_bare_object),
    CHECK_CASE(test_address_types),
    CHECK_CASE(test_show_map_truthy),
    CHECK_CASE(test_show_map_falsy),
    CHECK_CASE(test_errors_name_the_field),
    CHECK_CASE(test_unpaired_surrogate_escapes_are_refused),
    CHECK_CASE(test_unknown_keys_are_echoed_as_text),
    CHECK_CASE(test_a_second_wrapper_is_a_duplicate),
    CHECK_CASE(test_error_offset_independent_of_chunks),
    CHECK_CASE(test_end_of_body_as_yajl),
    CHECK_CASE(test_length_limit_in_bytes),
    CHECK_CASE(test_null_and_ignored_fields),
    CHECK_CASE(test_numbers_read_as_strtod),
    CHECK_CASE(test_plain_values_any_shape),
    CHECK_CASE(test_subnormals_and_underflow),
    CHECK_CASE(test_writer_escapes),
    CHECK_CASE(test_writer_strings_word_paths),
    CHECK_CASE(test_writer_shortest_forms),
    CHECK_CASE(test_writer_numbers_round_trip),
    CHECK_CASE(test_writer_doubles_as_reference),
    CHECK_CASE(test_held_chunk_strings_stay_in_place),
    CHECK_CASE(test_held_last_chunk_after_any_split),
    CHECK_CASE(test_written_from_the_decoder),
};

int main(int argc, char **argv) {
    arena_init(&arena, 1024);
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
