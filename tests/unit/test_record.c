/* Record building, payload round trips, validators (the index has test_index.c). */
#include <math.h>

#include "check.h"
#include "storage/record.h"

static const struct kind_desc *const kinds[] = {&record_user, &record_theme, &record_address,
                                                &record_event};

static void test_payload_round_trip(void) {
    struct buf b = BUF_INIT;
    for (int k = 0; k < 4; k++) {
        union value v[RECORD_MAX_FIELDS];
        record_defaults(kinds[k], v);
        for (int i = 0; i < kinds[k]->nfields; i++) {
            switch (kinds[k]->fields[i].type) {
            case FT_STR:
                v[i].s.ptr = "h\xc3\xa9llo";
                v[i].s.len = 6;
                break;
            case FT_DOUBLE:
                v[i].d = -12.345678901234567;
                break;
            case FT_BOOL:
                v[i].b = true;
                break;
            case FT_REF:
                v[i].i = 77;
                break;
            default:
                break;
            }
        }
        uint64_t owner = kinds[k]->type == REC_USER ? 0 : 42; /* users belong to nobody */
        struct record *r = record_build(kinds[k], 123456789, owner, v);
        buf_reset(&b);
        record_encode(r, &b);
        struct record *back = record_decode(kinds[k]->type, (const uint8_t *)b.ptr, b.len);
        CHECK(back != NULL);
        CHECK(back->id == 123456789 && back->user_id == owner && back->type == kinds[k]->type);
        for (int i = 0; i < kinds[k]->nfields; i++) {
            switch (kinds[k]->fields[i].type) {
            case FT_STR:
            case FT_COLOR:
            case FT_BYTES:
                CHECK_EQ_INT(record_get(back, i).s.len, record_get(r, i).s.len);
                CHECK(memcmp(record_get(back, i).s.ptr, record_get(r, i).s.ptr,
                             record_get(r, i).s.len) == 0);
                break;
            case FT_DOUBLE:
                CHECK(record_get(back, i).d == record_get(r, i).d);
                break;
            case FT_BOOL:
                CHECK(record_get(back, i).b == record_get(r, i).b);
                break;
            case FT_REF:
                CHECK(record_ref(back, i) == record_ref(r, i));
                break;
            }
        }
        /* Every truncation of the payload is rejected, never misread. */
        for (size_t n = 0; n < b.len; n++)
            CHECK(record_decode(kinds[k]->type, (const uint8_t *)b.ptr, n) == NULL);
        record_free(back);
        record_free(r);
    }
    buf_destroy(&b);
}

static void test_decode_unknown_type(void) {
    CHECK(record_decode(99, (const uint8_t *)"", 0) == NULL);
}

static void test_field_index(void) {
    /* Field lookup by name: every name finds its own index, near misses find none. */
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < kinds[k]->nfields; i++) {
            const char *n = kinds[k]->fields[i].name;
            CHECK_EQ_INT(record_field_index(kinds[k], n, strlen(n)), i);
            CHECK_EQ_INT(record_field_index(kinds[k], n, strlen(n) - 1), -1);
        }
        CHECK_EQ_INT(record_field_index(kinds[k], "name", 4), -1);
        CHECK_EQ_INT(record_field_index(kinds[k], "", 0), -1);
        CHECK_EQ_INT(record_field_index(kinds[k], "Name\0x", 6), -1);
    }
}

static void test_defaults(void) {
    /* Defaults from the spec. */
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    CHECK_EQ_STR(v[THEME_PAGE_BG].s.ptr, "D0CBCB");
    CHECK_EQ_STR(v[THEME_HEADER_BG].s.ptr, "f9f9f9");
    CHECK_EQ_STR(v[THEME_HEADER_TEXT].s.ptr, "575757");
    CHECK_EQ_STR(v[THEME_TEXT_HEADINGS].s.ptr, "666666");
    CHECK_EQ_STR(v[THEME_SMALL_HEADING].s.ptr, "575757");
    CHECK_EQ_STR(v[THEME_STATUS].s.ptr, "active");
    record_defaults(&record_address, v);
    CHECK_EQ_STR(v[ADDR_TYPE].s.ptr, "venue");
    CHECK(v[ADDR_LON].d == 0 && v[ADDR_LAT].d == 0 && !v[ADDR_SHOW_MAP].b);
}

/* The ASCII shortcut (whole words, the last overlapping) sees a byte above 0x7F at
 * every position of every length up to 40, valid or not. */
static void test_utf8_every_position(void) {
    char s[48];
    for (size_t n = 1; n <= 40; n++) {
        for (size_t at = 0; at < n; at++) {
            memset(s, 'a', n);
            s[at] = (char)0xff; /* never valid */
            CHECK(!record_utf8_valid(s, n));
            s[at] = (char)0x80; /* a lone continuation byte */
            CHECK(!record_utf8_valid(s, n));
            if (at + 1 < n) {
                s[at] = (char)0xc3, s[at + 1] = (char)0xa9; /* é */
                CHECK(record_utf8_valid(s, n));
            }
        }
        memset(s, 'a', n);
        CHECK(record_utf8_valid(s, n));
    }
}

static void test_utf8_valid(void) {
    CHECK(record_utf8_valid("h\xc3\xa9", 3));
    CHECK(!record_utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!record_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!record_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!record_utf8_valid("\xe2\x82", 2));         /* cut short */
}

static int parse_id(const char *s, uint64_t *out) {
    return record_parse_id(s, strlen(s), out);
}

/* The one id parser: 1..2^53-1, digits only, no sign, no leading zero. */
static void test_parse_id(void) {
    uint64_t v = 0;
    CHECK_EQ_INT(parse_id("1", &v), 0);
    CHECK_EQ_UINT(v, 1);
    CHECK_EQ_INT(parse_id("9007199254740991", &v), 0);
    CHECK_EQ_UINT(v, RECORD_ID_MAX);
    v = 5;
    const char *bad[] = {"",
                         "0",
                         "01",
                         "+1",
                         "-1",
                         " 1",
                         "1 ",
                         "1a",
                         "1.0",
                         "1e3",
                         "9007199254740992",
                         "18446744073709551616",
                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse_id(bad[i], &v) != -1) CHECK_FAIL_("record_parse_id(\"%s\") accepted", bad[i]);
        CHECK_EQ_UINT(v, 5); /* untouched */
    }
}

/* The general form behind it (?limit): the bound is the caller's. */
static void test_u64_parse_bound(void) {
    uint64_t v = 0;
    CHECK_EQ_INT(u64_parse("100", 3, 100, &v), 0);
    CHECK_EQ_UINT(v, 100);
    CHECK_EQ_INT(u64_parse("101", 3, 100, &v), -1);
    CHECK_EQ_INT(u64_parse("18446744073709551615", 20, UINT64_MAX, &v), 0);
    CHECK_EQ_UINT(v, UINT64_MAX);
    CHECK_EQ_INT(u64_parse("18446744073709551616", 20, UINT64_MAX, &v), -1);
    CHECK_EQ_INT(u64_parse("7", 1, 5, &v), -1);
    CHECK_EQ_INT(u64_parse("1", 1, 0, &v), -1);
}

static const char *check_str(const struct kind_desc *k, int i, const char *s, uint32_t max) {
    union value v = {.s = {s, (uint32_t)strlen(s)}};
    return record_check_value(k, i, &v, max);
}

static const char *check_double(const struct kind_desc *k, int i, double d) {
    union value v = {.d = d};
    return record_check_value(k, i, &v, 255);
}

static void test_plainly_fine_agrees(void) {
    /* record_value_plainly_fine never passes what record_check_value refuses,
     * and passes the common cases: every byte at every place of a colour,
     * text at and past its limits, numbers at and past their range. */
    const struct field *color = &record_theme.fields[THEME_PAGE_BG];
    for (int at = 0; at < 6; at++)
        for (int c = 0; c < 256; c++) {
            char s[7] = "a0B9cF";
            s[at] = (char)c;
            union value v = {.s = {s, 6}};
            bool fine = record_check_value(&record_theme, THEME_PAGE_BG, &v, 255) == NULL;
            CHECK_EQ_INT(record_value_plainly_fine(color, FT_COLOR, &v, 255), fine);
        }
    union value v = {.s = {"a0B9c", 5}};
    CHECK(!record_value_plainly_fine(color, FT_COLOR, &v, 255));
    const struct field *name = &record_theme.fields[THEME_NAME];
    const char *texts[] = {"", "x", "abc", "abcd", "abcdefgh", "abcdefghi", "h\xc3\xa9llo"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (uint32_t max = 0; max < 10; max++) {
            union value t = {.s = {texts[i], (uint32_t)strlen(texts[i])}};
            bool fine = record_check_value(&record_theme, THEME_NAME, &t, max) == NULL;
            bool plain = record_value_plainly_fine(name, FT_STR, &t, max);
            CHECK(!plain || fine);
            CHECK_EQ_INT(plain, fine && texts[i][0] != 'h');
        }
    const struct field *lat = &record_address.fields[ADDR_LAT];
    const double ds[] = {-90.0000001, -90, 0, -0.0, 51.5, 90, 90.0000001, NAN, INFINITY};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
        union value d = {.d = ds[i]};
        CHECK_EQ_INT(record_value_plainly_fine(lat, FT_DOUBLE, &d, 255),
                     record_check_value(&record_address, ADDR_LAT, &d, 255) == NULL);
    }
}

static void test_check_color(void) {
    CHECK(check_str(&record_theme, THEME_PAGE_BG, "D0cbcB", 255) == NULL);
    CHECK_EQ_STR(check_str(&record_theme, THEME_PAGE_BG, "#D0CBC", 255),
                 "PageBackgroundRGB must be six hexadecimal digits without '#', e.g. D0CBCB");
    CHECK(check_str(&record_theme, THEME_PAGE_BG, "D0CBCB0", 255) != NULL);
    CHECK(check_str(&record_theme, THEME_PAGE_BG, "D0CBCG", 255) != NULL);
}

static void test_check_range(void) {
    CHECK(check_double(&record_address, ADDR_LAT, -90) == NULL);
    CHECK(check_double(&record_address, ADDR_LAT, 90) == NULL);
    CHECK_EQ_STR(check_double(&record_address, ADDR_LAT, 90.5), "Lat must be within [-90, 90]");
    CHECK_EQ_STR(check_double(&record_address, ADDR_LON, -181), "Lon must be within [-180, 180]");
    CHECK(check_double(&record_address, ADDR_LON, NAN) != NULL);
}

static void test_check_text(void) {
    CHECK(check_str(&record_theme, THEME_NAME, "h\xc3\xa9", 255) == NULL);
    CHECK_EQ_STR(check_str(&record_theme, THEME_NAME, "\xc0\xaf", 255), "Name is not valid UTF-8");
    CHECK_EQ_STR(check_str(&record_theme, THEME_STATUS, "", 255), "Status must not be empty");
    CHECK(check_str(&record_theme, THEME_NAME, "", 255) == NULL);
}

/* The configured limit is named, and follows the limit asked for. */
static void test_check_length(void) {
    CHECK(check_str(&record_event, EVENT_NAME, "abcd", 4) == NULL);
    CHECK_EQ_STR(check_str(&record_event, EVENT_NAME, "abcde", 4), "Name is longer than 4 bytes");
    CHECK_EQ_STR(check_str(&record_event, EVENT_NAME, "abcde", 3), "Name is longer than 3 bytes");
    CHECK(check_str(&record_event, EVENT_NAME, "abcde", 5) == NULL);
    /* A field's own limit wins over the configured one. */
    char name[66];
    memset(name, 'a', 65);
    name[65] = '\0';
    CHECK_EQ_STR(check_str(&record_user, USER_NAME, name, 255), "Name is longer than 64 bytes");
}

/* Types without a check take any value. */
static void test_check_unchecked_types(void) {
    union value v = {.i = 12345};
    CHECK(record_check_value(&record_event, EVENT_THEME_ID, &v, 255) == NULL);
    v.b = true;
    CHECK(record_check_value(&record_address, ADDR_SHOW_MAP, &v, 255) == NULL);
}

/* Fields at their default take no cell; defaults are read back from the tables. */
static void test_defaults_take_no_space(void) {
    size_t live = record_live();
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    struct record *a = record_build(&record_theme, 1, 7, v);
    struct record *b = record_build(&record_theme, 2, 7, v);
    CHECK_EQ_UINT(a->set, 0);
    CHECK_EQ_UINT(record_live(), live + 2);
    union value s1 = record_get(a, THEME_STATUS), s2 = record_get(b, THEME_STATUS);
    CHECK_EQ_MEM(s1.s.ptr, s1.s.len, "active");
    CHECK(s1.s.ptr == s2.s.ptr); /* the static default, shared */
    CHECK_EQ_MEM(record_get(a, THEME_PAGE_BG).s.ptr, 6, "D0CBCB");
    CHECK_EQ_UINT(record_get(a, THEME_PAGE_BG).s.ptr[6], 0); /* NUL-terminated */

    /* Non-default values: an empty Status (its default is not empty), -0.0, a ref. */
    v[THEME_STATUS].s.ptr = "";
    v[THEME_STATUS].s.len = 0;
    v[THEME_NAME].s.ptr = "Gala";
    v[THEME_NAME].s.len = 4;
    struct record *c = record_build(&record_theme, 3, 7, v);
    CHECK_EQ_UINT(c->set, (1u << THEME_STATUS) | (1u << THEME_NAME));
    CHECK_EQ_MEM(record_get(c, THEME_STATUS).s.ptr, 0, "");
    CHECK_EQ_UINT(record_get(c, THEME_STATUS).s.ptr[0], 0);
    CHECK_EQ_MEM(record_get(c, THEME_NAME).s.ptr, 4, "Gala");
    CHECK_EQ_MEM(record_get(c, THEME_HEADER_BG).s.ptr, 6, "f9f9f9");
    union value all[RECORD_MAX_FIELDS];
    record_values(c, all); /* the same values, in one walk */
    for (int i = 0; i < record_theme.nfields; i++) {
        union value one = record_get(c, i);
        CHECK(all[i].s.ptr == one.s.ptr && all[i].s.len == one.s.len);
    }

    union value av[RECORD_MAX_FIELDS];
    record_defaults(&record_address, av);
    av[ADDR_LAT].d = -0.0;
    struct record *d = record_build(&record_address, 4, 7, av);
    CHECK_EQ_UINT(d->set, 1u << ADDR_LAT);
    CHECK(signbit(record_get(d, ADDR_LAT).d));
    CHECK(record_get(d, ADDR_LON).d == 0 && !record_get(d, ADDR_SHOW_MAP).b);

    union value ev[RECORD_MAX_FIELDS];
    record_defaults(&record_event, ev);
    ev[EVENT_ADDRESS_ID].i = 99;
    struct record *e = record_build(&record_event, 5, 7, ev);
    CHECK_EQ_UINT(record_ref(e, EVENT_THEME_ID), 0);
    CHECK_EQ_UINT(record_ref(e, EVENT_ADDRESS_ID), 99);

    record_free(a);
    record_free(b);
    record_free(c);
    record_free(d);
    record_free(e);
    CHECK_EQ_UINT(record_live(), live);
}

/* record_size: kept in the header when small, computed for a big record; the same rule. */
static void test_record_size(void) {
    static char big[70000];
    memset(big, 'a', sizeof big);
    for (int t = 0; t < 2; t++) {
        union value v[RECORD_MAX_FIELDS];
        record_defaults(&record_theme, v);
        v[THEME_NAME].s.ptr = big;
        v[THEME_NAME].s.len = t ? sizeof big : 10;
        size_t want = 30;
        for (int i = 0; i < record_theme.nfields; i++)
            want += record_theme.fields[i].type == FT_STR || record_theme.fields[i].type == FT_COLOR
                        ? v[i].s.len + 2
                        : 8;
        struct record *r = record_build(&record_theme, 1, 7, v);
        CHECK_EQ_UINT(record_size(r), want);
        CHECK_EQ_UINT(r->size16, t ? UINT16_MAX : want);
        record_free(r);
    }
}

/* A user frame written before the quota fields existed (3 fields) replays with the
 * server's default limits: fields beyond the stored count take their defaults. */
static void test_user_of_an_old_log_has_default_limits(void) {
    static const uint8_t old[] = {7, 0, 3, 5, 'a', 'l', 'i', 'c', 'e', 2, 'k', 'h', 0};
    struct record *u = record_decode(REC_USER, old, sizeof old);
    CHECK(u != NULL);
    CHECK_EQ_MEM(record_get(u, USER_NAME).s.ptr, record_get(u, USER_NAME).s.len, "alice");
    CHECK_EQ_UINT(record_get(u, USER_MAX_RECORDS).i, 0);
    CHECK_EQ_UINT(record_user_limit(u, USER_MAX_RECORDS, 100000), 100000);
    CHECK_EQ_UINT(record_user_limit(u, USER_MAX_BYTES, 64), 64);
    record_free(u);
}

/* Own limits are stored as limit + 1: 1 is "no limit" (0), 0 the server's default. */
static void test_user_own_limits(void) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_user, v);
    v[USER_MAX_RECORDS].i = 1;
    v[USER_MAX_BYTES].i = 5001;
    struct record *u = record_build(&record_user, 7, 0, v);
    CHECK_EQ_UINT(record_user_limit(u, USER_MAX_RECORDS, 100000), 0);
    CHECK_EQ_UINT(record_user_limit(u, USER_MAX_BYTES, 64), 5000);
    record_free(u);
}

/* The size a quota check computes before building is the built record's. */
static void test_record_size_of_matches_build(void) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_address, v);
    v[ADDR_NAME].s.ptr = "somewhere";
    v[ADDR_NAME].s.len = 9;
    v[ADDR_LAT].d = 51.5;
    struct record *r = record_build(&record_address, 9, 1, v);
    CHECK_EQ_UINT(record_size_of(&record_address, v), record_size(r));
    record_free(r);
}

/* Values of every type, off their defaults where variant says so (0: the defaults,
 * 1: every field set, 2: empty strings, -0.0, false, 0, 3: a string past 0xFFFF bytes). */
static void some_values(const struct kind_desc *k, int variant, union value *v) {
    static char big[70000];
    memset(big, 'b', sizeof big);
    record_defaults(k, v);
    if (variant == 0) return;
    for (int i = 0; i < k->nfields; i++) {
        switch (k->fields[i].type) {
        case FT_STR:
        case FT_BYTES:
            v[i].s.ptr = variant == 1 ? "h\xc3\xa9llo" : variant == 3 ? big : "";
            v[i].s.len = variant == 1 ? 6 : variant == 3 ? sizeof big : 0;
            break;
        case FT_COLOR:
            v[i].s.ptr = variant == 2 ? "" : "0a0B0c";
            v[i].s.len = variant == 2 ? 0 : 6;
            break;
        case FT_DOUBLE:
            v[i].d = variant == 2 ? -0.0 : -12.345678901234567;
            break;
        case FT_BOOL:
            v[i].b = variant != 2;
            break;
        default:
            v[i].i = variant == 2 ? 0 : 77 + (uint64_t)i * 1000;
            break;
        }
    }
}

/* record_build_encode is record_build and record_encode in one pass: the same record and,
 * appended to what the buffer held, the same payload; given every field, or only those
 * that are not at their defaults (every other one here). */
static void test_build_encode_is_build_then_encode(void) {
    struct buf one = BUF_INIT, two = BUF_INIT;
    for (int k = 0; k < 4; k++) {
        for (int variant = 0; variant < 8; variant++) {
            union value v[RECORD_MAX_FIELDS], d[RECORD_MAX_FIELDS];
            some_values(kinds[k], variant % 4, v);
            uint32_t given = record_all_fields(kinds[k]);
            if (variant >= 4) {
                record_defaults(kinds[k], d);
                for (int i = 1; i < kinds[k]->nfields; i += 2) {
                    v[i] = d[i];
                    given &= ~(UINT32_C(1) << i);
                }
            }
            uint64_t owner = kinds[k]->type == REC_USER ? 0 : 42;
            struct record *a = record_build(kinds[k], 300, owner, v);
            buf_reset(&one);
            record_encode(a, &one);
            buf_reset(&two);
            buf_append(&two, "head", 4);
            struct record *b = record_build_encode(kinds[k], 300, owner, v, given, &two);
            CHECK_EQ_UINT(two.len - 4, one.len);
            CHECK(memcmp(two.ptr, "head", 4) == 0 && memcmp(two.ptr + 4, one.ptr, one.len) == 0);
            CHECK_EQ_UINT(b->set, a->set);
            CHECK_EQ_UINT(record_size(b), record_size(a));
            CHECK(b->id == 300 && b->user_id == owner && b->type == a->type);
            for (int i = 0; i < kinds[k]->nfields; i++) {
                union value x = record_get(a, i), y = record_get(b, i);
                if (kinds[k]->fields[i].type == FT_STR || kinds[k]->fields[i].type == FT_COLOR ||
                    kinds[k]->fields[i].type == FT_BYTES)
                    CHECK_EQ_MEM(y.s.ptr, y.s.len, x.s.ptr);
                else
                    CHECK(memcmp(&x, &y, sizeof x) == 0);
            }
            record_free(a);
            record_free(b);
        }
    }
    buf_destroy(&one);
    buf_destroy(&two);
}

/* The size of a record changed in some fields, from the old size and those fields only. */
static void test_size_of_changed(void) {
    for (int k = 0; k < 4; k++) {
        for (int from = 0; from < 4; from++) {
            for (int to = 0; to < 4; to++) {
                union value a[RECORD_MAX_FIELDS], b[RECORD_MAX_FIELDS], c[RECORD_MAX_FIELDS];
                some_values(kinds[k], from, a);
                some_values(kinds[k], to, b);
                /* Every other field changed: c is a but in those. */
                uint64_t changed = 0;
                memcpy(c, a, sizeof c);
                for (int i = 0; i < kinds[k]->nfields; i += 2) {
                    changed |= UINT64_C(1) << i;
                    c[i] = b[i];
                }
                CHECK_EQ_UINT(
                    record_size_of_changed(kinds[k], a, record_size_of(kinds[k], a), b, changed),
                    record_size_of(kinds[k], c));
            }
        }
        union value d[RECORD_MAX_FIELDS];
        record_defaults(kinds[k], d);
        CHECK_EQ_UINT(record_size_of_defaults(kinds[k]), record_size_of(kinds[k], d));
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_build_encode_is_build_then_encode),
    CHECK_CASE(test_size_of_changed),
    CHECK_CASE(test_user_of_an_old_log_has_default_limits),
    CHECK_CASE(test_user_own_limits),
    CHECK_CASE(test_record_size_of_matches_build),
    CHECK_CASE(test_plainly_fine_agrees),
    CHECK_CASE(test_record_size),
    CHECK_CASE(test_defaults_take_no_space),
    CHECK_CASE(test_payload_round_trip),
    CHECK_CASE(test_decode_unknown_type),
    CHECK_CASE(test_field_index),
    CHECK_CASE(test_defaults),
    CHECK_CASE(test_utf8_valid),
    CHECK_CASE(test_utf8_every_position),
    CHECK_CASE(test_check_color),
    CHECK_CASE(test_check_range),
    CHECK_CASE(test_check_text),
    CHECK_CASE(test_check_length),
    CHECK_CASE(test_check_unchecked_types),
    CHECK_CASE(test_parse_id),
    CHECK_CASE(test_u64_parse_bound),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
