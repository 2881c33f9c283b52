/*
 * test_form: the streaming form decoder: decoding (%XX, '+', names encoded
 * too), the same result for every split of a body into two and three
 * chunks, unknown and absent fields, empty pairs, and each error with the
 * field it names: too long (at once, not at the end), bad escape, given
 * twice, invalid UTF-8, NUL; errors stick; a struct form is reusable.
 */
#include "core/form.h"

#include "check.h"

enum { F_USERNAME, F_PASSWORD, F_CONFIRM, F_CSRF };

static const struct form_field fields[] = {
    [F_USERNAME] = {"username", 64},
    [F_PASSWORD] = {"password", 16},
    [F_CONFIRM] = {"password_confirm", 16},
    [F_CSRF] = {"csrf", 8},
};
#define NFIELDS CHECK_COUNT(fields)

static struct form form;

/* Decodes the whole body in one chunk; returns what form_finish returned. */
static int decode(const char *body) {
    form_begin(&form, fields, NFIELDS);
    if (form_feed(&form, body, strlen(body)) < 0) return -1;
    return form_finish(&form);
}

static void check_value(size_t idx, const char *want) {
    struct slice v;
    CHECK(form_get(&form, idx, &v));
    CHECK_EQ_MEM(v.ptr, v.len, want);
    CHECK_EQ_INT(v.ptr[v.len], '\0');
}

static void check_absent(size_t idx) {
    struct slice v;
    CHECK(!form_get(&form, idx, &v));
    CHECK_EQ_UINT(v.len, 0);
}

static const char sample[] = "username=al%C3%A9x+B&junk=%7E%7e&password=p%40ss%3D%26w+d"
                             "&password_confirm=p%40ss%3D%26w+d&csrf=a%2Bb%2fc";

static void check_sample(void) {
    check_value(F_USERNAME, "al\xC3\xA9x B");
    check_value(F_PASSWORD, "p@ss=&w d");
    check_value(F_CONFIRM, "p@ss=&w d");
    check_value(F_CSRF, "a+b/c");
}

static void test_decode(void) {
    CHECK_EQ_INT(decode(sample), 0);
    CHECK_EQ_INT(form_error(&form), FORM_OK);
    CHECK_EQ_STR(form_error_message(&form), "");
    check_sample();
}

static void test_every_split(void) {
    size_t n = strlen(sample);
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = i; j <= n; j++) {
            form_begin(&form, fields, NFIELDS);
            CHECK_EQ_INT(form_feed(&form, sample, i), 0);
            CHECK_EQ_INT(form_feed(&form, sample + i, j - i), 0);
            CHECK_EQ_INT(form_feed(&form, sample + j, n - j), 0);
            CHECK_EQ_INT(form_finish(&form), 0);
            check_sample();
        }
    }
}

static void test_byte_by_byte(void) {
    form_begin(&form, fields, NFIELDS);
    for (size_t i = 0; sample[i]; i++)
        CHECK_EQ_INT(form_feed(&form, &sample[i], 1), 0);
    CHECK_EQ_INT(form_finish(&form), 0);
    check_sample();
}

static void test_every_split_of_an_error(void) {
    /* The bad escape is found wherever the body is cut, inside it included. */
    const char *body = "username=ab&password=x%4G";
    size_t n = strlen(body);
    for (size_t i = 0; i <= n; i++) {
        form_begin(&form, fields, NFIELDS);
        int rc = form_feed(&form, body, i);
        if (rc == 0) rc = form_feed(&form, body + i, n - i);
        if (rc == 0) rc = form_finish(&form);
        CHECK_EQ_INT(rc, -1);
        CHECK_EQ_INT(form_error(&form), FORM_BAD_ESCAPE);
        CHECK_EQ_STR(form_error_message(&form), "password: a '%' not followed by two hex digits");
    }
}

static void test_names_are_decoded(void) {
    CHECK_EQ_INT(decode("user%6Eame=bob&pass%77ord=x&password+confirm=y"), 0);
    check_value(F_USERNAME, "bob");
    check_value(F_PASSWORD, "x");
    check_absent(F_CONFIRM); /* "password confirm" is another name */
}

static void test_unknown_and_absent(void) {
    /* Unknown fields are skipped whatever their length, name or value. */
    static char body[4096];
    size_t n = 0;
    memcpy(body, "u=", 2), n += 2;
    memset(body + n, 'x', 2000), n += 2000;
    body[n++] = '&';
    memset(body + n, 'x', 1000), n += 1000; /* a name far over FORM_MAX_NAME */
    body[n++] = '=';
    memset(body + n, 'y', 500), n += 500;
    memcpy(body + n, "&username=ok", 13);
    CHECK_EQ_INT(decode(body), 0);
    check_value(F_USERNAME, "ok");
    CHECK_EQ_INT(decode("a=1&username=ok&b=%FF%00&c&csrf2=x"), 0);
    check_value(F_USERNAME, "ok");
    check_absent(F_PASSWORD);
    check_absent(F_CONFIRM);
    check_absent(F_CSRF);
    CHECK_EQ_INT(decode(""), 0);
    check_absent(F_USERNAME);
}

static void test_empty_pairs_and_shapes(void) {
    CHECK_EQ_INT(decode("&&username=a=b&&password&csrf=&"), 0);
    check_value(F_USERNAME, "a=b"); /* only the first '=' splits */
    check_value(F_PASSWORD, "");    /* no '=': present and empty */
    check_value(F_CSRF, "");
    check_absent(F_CONFIRM);
    CHECK_EQ_INT(decode("=x&username=y"), 0); /* an empty name is just unknown */
    check_value(F_USERNAME, "y");
}

static void test_too_long(void) {
    CHECK_EQ_INT(decode("csrf=12345678"), 0); /* exactly the limit */
    check_value(F_CSRF, "12345678");
    CHECK_EQ_INT(decode("csrf=123456789"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_TOO_LONG);
    CHECK_EQ_STR(form_error_message(&form), "csrf: at most 8 bytes");
    /* Decoded bytes count: eight escapes are eight bytes. */
    CHECK_EQ_INT(decode("csrf=%41%41%41%41%41%41%41%41"), 0);
    CHECK_EQ_INT(decode("csrf=%41%41%41%41%41%41%41%41+"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_TOO_LONG);
}

static void test_too_long_found_at_once(void) {
    /* The error comes with the chunk that passes the limit, not at the end. */
    form_begin(&form, fields, NFIELDS);
    CHECK_EQ_INT(form_feed(&form, "password=0123456789", 19), 0);
    CHECK_EQ_INT(form_feed(&form, "abcdef", 6), 0);
    CHECK_EQ_INT(form_feed(&form, "g", 1), -1);
    CHECK_EQ_STR(form_error_message(&form), "password: at most 16 bytes");
}

static void test_bad_escapes(void) {
    const char *bad[] = {"username=%",    "username=%4",  "username=%G1", "username=%4G",
                         "username=%%41", "username=%4&", "username=a%+"};
    for (size_t i = 0; i < CHECK_COUNT(bad); i++) {
        CHECK_EQ_INT(decode(bad[i]), -1);
        CHECK_EQ_INT(form_error(&form), FORM_BAD_ESCAPE);
        CHECK_EQ_STR(form_error_message(&form), "username: a '%' not followed by two hex digits");
    }
    /* In a name, or in an unknown field's value: the body itself is bad. */
    const char *anon[] = {"user%zzname=x", "other=%x1&username=a", "%"};
    for (size_t i = 0; i < CHECK_COUNT(anon); i++) {
        CHECK_EQ_INT(decode(anon[i]), -1);
        CHECK_EQ_INT(form_error(&form), FORM_BAD_ESCAPE);
        CHECK_EQ_STR(form_error_message(&form),
                     "the form holds a '%' not followed by two hex digits");
    }
}

static void test_a_raw_semicolon_is_refused(void) {
    /* HAProxy's req.body_param reads ';' as '&': the balancer placed this by
     * a's shard and the form registered b there (review, 2026-11-29). */
    const char *bad[] = {"x=1;username=a&username=b", "username=a;b", "a;b=1", ";",
                         "password=x&username=b;"};
    for (size_t i = 0; i < CHECK_COUNT(bad); i++) {
        CHECK_EQ_INT(decode(bad[i]), -1);
        CHECK_EQ_INT(form_error(&form), FORM_SEMICOLON);
        CHECK_EQ_STR(form_error_message(&form), "the form holds a ';' (send it as %3B)");
    }
    CHECK_EQ_INT(decode("username=a%3Bb"), 0); /* encoded, it is a value's byte */
    check_value(F_USERNAME, "a;b");
}

static void test_duplicate(void) {
    CHECK_EQ_INT(decode("username=a&password=b&username=a"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_DUPLICATE);
    CHECK_EQ_STR(form_error_message(&form), "username: given twice");
    CHECK_EQ_INT(decode("csrf&csrf"), -1); /* bare names count too */
    CHECK_EQ_STR(form_error_message(&form), "csrf: given twice");
    CHECK_EQ_INT(decode("other=1&other=2&csrf=x"), 0); /* unknown ones may repeat */
}

static void test_not_utf8(void) {
    const char *bad[] = {"username=%FF",       "username=a%C3",  "username=%C0%AF",
                         "username=%ED%A0%80", "username=\xC3(", "username=%F4%90%80%80"};
    for (size_t i = 0; i < CHECK_COUNT(bad); i++) {
        CHECK_EQ_INT(decode(bad[i]), -1);
        CHECK_EQ_INT(form_error(&form), FORM_NOT_UTF8);
        CHECK_EQ_STR(form_error_message(&form), "username: not valid UTF-8");
    }
    CHECK_EQ_INT(decode("username=%F0%9F%98%80\xE2\x82\xAC"), 0);
    check_value(F_USERNAME, "\xF0\x9F\x98\x80\xE2\x82\xAC");
}

static void test_nul(void) {
    CHECK_EQ_INT(decode("username=ok&password=a%00b"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_NUL);
    CHECK_EQ_STR(form_error_message(&form), "password: holds a NUL byte");
    form_begin(&form, fields, NFIELDS);
    CHECK_EQ_INT(form_feed(&form, "password=a\0b", 12), 0); /* a raw NUL byte too */
    CHECK_EQ_INT(form_finish(&form), -1);
    CHECK_EQ_INT(form_error(&form), FORM_NUL);
}

static void test_error_sticks(void) {
    form_begin(&form, fields, NFIELDS);
    CHECK_EQ_INT(form_feed(&form, "username=%zz", 12), -1);
    CHECK_EQ_INT(form_feed(&form, "&csrf=a", 7), -1);
    CHECK_EQ_INT(form_finish(&form), -1);
    CHECK_EQ_INT(form_error(&form), FORM_BAD_ESCAPE);
    /* The first error is the one kept: a later duplicate does not replace it. */
    CHECK_EQ_INT(decode("csrf=123456789&csrf=1"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_TOO_LONG);
}

static void test_reuse(void) {
    CHECK_EQ_INT(decode("username=a%"), -1);
    CHECK_EQ_INT(decode("password=b"), 0);
    CHECK_EQ_STR(form_error_message(&form), "");
    check_absent(F_USERNAME);
    check_value(F_PASSWORD, "b");
}

static void test_max_value_limit(void) {
    static const struct form_field big[] = {{"v", FORM_MAX_VALUE}};
    char body[2 + FORM_MAX_VALUE + 2];
    memcpy(body, "v=", 2);
    memset(body + 2, 'z', FORM_MAX_VALUE + 1);
    form_begin(&form, big, 1);
    CHECK_EQ_INT(form_feed(&form, body, 2 + FORM_MAX_VALUE), 0);
    CHECK_EQ_INT(form_finish(&form), 0);
    struct slice v;
    CHECK(form_get(&form, 0, &v));
    CHECK_EQ_UINT(v.len, FORM_MAX_VALUE);
    form_begin(&form, big, 1);
    CHECK_EQ_INT(form_feed(&form, body, 2 + FORM_MAX_VALUE + 1), -1);
    CHECK_EQ_STR(form_error_message(&form), "v: at most 256 bytes");
}

/* Strict: a field not in the table is an error, named only when a plain word. */
static int decode_strict(const char *body) {
    form_begin(&form, fields, NFIELDS);
    form.strict = true;
    if (form_feed(&form, body, strlen(body)) < 0) return -1;
    return form_finish(&form);
}

static void test_strict_refuses_unknown_fields(void) {
    CHECK_EQ_INT(decode("username=a&extra=1"), 0); /* not strict: ignored */
    CHECK_EQ_INT(decode_strict("username=a&csrf=x"), 0);
    CHECK_EQ_INT(decode_strict("username=a&extra=1"), -1);
    CHECK_EQ_INT(form_error(&form), FORM_UNKNOWN);
    CHECK_EQ_STR(form.unknown, "extra");
    CHECK_EQ_STR(form_error_message(&form), "extra: no such field");
    CHECK_EQ_INT(decode_strict("username=a&e%78tra2"), -1); /* the last pair, decoded name */
    CHECK_EQ_STR(form.unknown, "extra2");
    const char *odd[] = {"%3Cb%3E=1", "a+b=1", "{\"x\":1}",
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1"};
    for (size_t i = 0; i < CHECK_COUNT(odd); i++) {
        CHECK_EQ_INT(decode_strict(odd[i]), -1);
        CHECK_EQ_INT(form_error(&form), FORM_UNKNOWN);
        CHECK_EQ_STR(form.unknown, "");
        CHECK_EQ_STR(form_error_message(&form), "a field this body may not have");
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_strict_refuses_unknown_fields),
    CHECK_CASE(test_decode),
    CHECK_CASE(test_every_split),
    CHECK_CASE(test_byte_by_byte),
    CHECK_CASE(test_every_split_of_an_error),
    CHECK_CASE(test_names_are_decoded),
    CHECK_CASE(test_unknown_and_absent),
    CHECK_CASE(test_empty_pairs_and_shapes),
    CHECK_CASE(test_too_long),
    CHECK_CASE(test_too_long_found_at_once),
    CHECK_CASE(test_bad_escapes),
    CHECK_CASE(test_a_raw_semicolon_is_refused),
    CHECK_CASE(test_duplicate),
    CHECK_CASE(test_not_utf8),
    CHECK_CASE(test_nul),
    CHECK_CASE(test_error_sticks),
    CHECK_CASE(test_reuse),
    CHECK_CASE(test_max_value_limit),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
