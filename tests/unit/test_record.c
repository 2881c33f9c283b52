/* Record building, payload round trips, validators (the index has test_index.c). */
#include "check.h"
#include "record.h"

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
                CHECK_EQ_INT(back->v[i].s.len, r->v[i].s.len);
                CHECK(memcmp(back->v[i].s.ptr, r->v[i].s.ptr, r->v[i].s.len) == 0);
                break;
            case FT_DOUBLE:
                CHECK(back->v[i].d == r->v[i].d);
                break;
            case FT_BOOL:
                CHECK(back->v[i].b == r->v[i].b);
                break;
            case FT_REF:
                CHECK(back->v[i].i == r->v[i].i);
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

static void test_check_color(void) {
    CHECK(record_check_color("D0cbcB", 6) == NULL);
    CHECK(record_check_color("#D0CBC", 6) != NULL);
    CHECK(record_check_color("D0CBCB0", 7) != NULL);
}

static void test_utf8_valid(void) {
    CHECK(record_utf8_valid("h\xc3\xa9", 3));
    CHECK(!record_utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!record_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!record_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!record_utf8_valid("\xe2\x82", 2));         /* cut short */
}

static const struct check_case cases[] = {
    CHECK_CASE(test_payload_round_trip), CHECK_CASE(test_decode_unknown_type),
    CHECK_CASE(test_field_index),        CHECK_CASE(test_defaults),
    CHECK_CASE(test_check_color),        CHECK_CASE(test_utf8_valid),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
