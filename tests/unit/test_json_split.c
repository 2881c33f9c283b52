/*
 * The body decoder's answer does not depend on how the body came: for a
 * corpus of valid and invalid bodies of every kind (multi-byte UTF-8,
 * escapes, surrogate pairs, numbers at their limits, nesting at the depth
 * limit and one over, strings at the byte limit and one over, wrappers,
 * duplicates, garbage), decoding the body whole, held, byte by byte and in
 * random splits (each piece overwritten once fed, as a read buffer's bytes
 * are) gives the same record, or the same error: code, field and message.
 * Bounded: a few hundred bodies, each decoded about twenty ways.
 */
#include "check.h"
#include "core/json.h"

enum { MAX_STRING = 255, MAX_DEPTH = 64, BODY_MAX = 4096 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_of(uint64_t *r) {
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    return *r;
}

static uint64_t next(void) {
    return next_of(&rng);
}

/* What a decoding gave, in a form that compares with memcmp-free equality. */
struct outcome {
    int rc;
    enum err err;
    char field[80];
    char msg[200];
    uint64_t present;
    bool has_id, id_invalid;
    uint64_t id;
    uint32_t size;
    struct buf written; /* the record built from the values, as the create answers it */
};

static void outcome_destroy(struct outcome *o) {
    buf_destroy(&o->written);
}

static void take_outcome(struct outcome *o, struct json_decoder *d, int rc) {
    memset(o, 0, sizeof *o);
    o->rc = rc;
    o->err = d->err;
    snprintf(o->field, sizeof o->field, "%s", d->err_field ? d->err_field : "(none)");
    snprintf(o->msg, sizeof o->msg, "%s", d->err_msg);
    o->present = d->present;
    o->has_id = d->has_id;
    o->id_invalid = d->id_invalid;
    o->id = d->id;
    buf_init(&o->written, 256);
    if (rc != 0) return;
    o->size = json_decoder_record_size(d);
    struct record *r = record_build(d->kind, 7, 9, d->vals);
    json_write_record_decoded(&o->written, r, false, d);
    /* The writer's shortcuts (plain strings, kept decimals) say what the plain writer says. */
    struct buf plain = BUF_INIT;
    json_write_record(&plain, r, false);
    CHECK_EQ_UINT(plain.len, o->written.len);
    CHECK(memcmp(plain.ptr, o->written.ptr, plain.len) == 0);
    buf_destroy(&plain);
    record_free(r);
}

enum mode { WHOLE, WHOLE_HELD, BYTES, RANDOM, RANDOM_HELD_LAST };

/* Decodes body as mode says; every piece is a copy overwritten once fed. */
static void decode(struct arena *a, const struct kind_desc *k, const char *body, size_t n,
                   enum mode mode, struct outcome *o) {
    static char piece[BODY_MAX];
    struct json_decoder d;
    arena_reset(a);
    json_decoder_begin(&d, k, a, MAX_STRING, MAX_DEPTH);
    int rc = 0;
    if (mode == WHOLE_HELD) {
        memcpy(piece, body, n);
        rc = json_decoder_feed_held(&d, piece, n);
    }
    for (size_t off = 0; mode != WHOLE_HELD && off < n && rc == 0;) {
        size_t step = mode == WHOLE ? n : mode == BYTES ? 1 : 1 + next() % (next() % 2 ? 4 : 40);
        if (step > n - off) step = n - off;
        memcpy(piece, body + off, step);
        if (mode == RANDOM_HELD_LAST && off + step == n) {
            rc = json_decoder_feed_held(&d, piece, step);
        } else {
            rc = json_decoder_feed(&d, piece, step);
            memset(piece, 'X', step);
        }
        off += step;
    }
    if (rc == 0) rc = json_decoder_finish(&d);
    take_outcome(o, &d, rc);
    json_decoder_end(&d);
}

static bool same(const struct outcome *a, const struct outcome *b) {
    return a->rc == b->rc && a->err == b->err && strcmp(a->field, b->field) == 0 &&
           strcmp(a->msg, b->msg) == 0 && a->present == b->present && a->has_id == b->has_id &&
           a->id_invalid == b->id_invalid && a->id == b->id && a->size == b->size &&
           a->written.len == b->written.len &&
           (a->written.len == 0 || memcmp(a->written.ptr, b->written.ptr, a->written.len) == 0);
}

static void report(const char *body, size_t n, const char *how, const struct outcome *a,
                   const struct outcome *b) {
    fprintf(stderr, "body (%zu bytes) %.*s\n  whole: rc %d err %d field %s msg %s\n    %.*s\n", n,
            n > 300 ? 300 : (int)n, body, a->rc, a->err, a->field, a->msg, (int)a->written.len,
            a->written.ptr ? a->written.ptr : "");
    fprintf(stderr, "  %s: rc %d err %d field %s msg %s\n    %.*s\n", how, b->rc, b->err, b->field,
            b->msg, (int)b->written.len, b->written.ptr ? b->written.ptr : "");
}

static struct { int bodies, accepted, differences, bare_after_value; } tally;

/*
 * A number or literal yajl refuses after a member's value ("{\"a\":01}", the 1
 * after the 0) is the one error whose offset still depends on the split: when it
 * began in an earlier piece yajl reports the piece's first byte, and only yajl
 * knows where such a token began in a run of bare bytes (json.c, error_offset).
 * Its code and message are the same; its offset is pinned by the xfail case below.
 */
static bool bare_after_value(const struct outcome *o, const char *body, size_t n) {
    unsigned long long at;
    if (o->err != ERR_INVALID_JSON || !strstr(o->msg, "after key and value") ||
        sscanf(o->msg, "malformed JSON at byte %llu", &at) != 1 || at >= n)
        return false;
    char c = body[at];
    return (c >= '0' && c <= '9') || c == '-' || (c >= 'a' && c <= 'z');
}

static void check_body(struct arena *a, const struct kind_desc *k, const char *body, size_t n) {
    static const char *const names[] = {"whole", "whole held", "byte by byte", "random",
                                        "random, last piece held"};
    struct outcome whole, other;
    decode(a, k, body, n, WHOLE, &whole);
    tally.bodies++;
    tally.accepted += whole.rc == 0;
    for (int run = 0; run < 20; run++) {
        enum mode m = run < 3 ? (enum mode)(run + 1) : run % 2 ? RANDOM : RANDOM_HELD_LAST;
        decode(a, k, body, n, m, &other);
        bool ok = same(&whole, &other);
        if (!ok && bare_after_value(&whole, body, n) && other.err == whole.err &&
            strcmp(strchr(other.msg, ':'), strchr(whole.msg, ':')) == 0)
            ok = true, tally.bare_after_value++;
        if (!ok && tally.differences++ < 100) report(body, n, names[m], &whole, &other);
        outcome_destroy(&other);
        if (!ok) break;
    }
    outcome_destroy(&whole);
}

/* ---- the corpus ---- */

static char body[BODY_MAX];

/* A body of `prefix`, then `count` times `unit`, then `suffix`. */
static size_t repeat(const char *prefix, const char *unit, int count, const char *suffix) {
    size_t n = (size_t)snprintf(body, sizeof body, "%s", prefix);
    for (int i = 0; i < count; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s", unit);
    n += (size_t)snprintf(body + n, sizeof body - n, "%s", suffix);
    return n;
}

/* The value v given to field `field` of kind k, wrapped, bare, and among others. */
static void with_value(struct arena *a, const struct kind_desc *k, const char *field,
                       const char *v) {
    size_t n = (size_t)snprintf(body, sizeof body, "{\"%s\":{\"%s\":%s}}", k->name, field, v);
    check_body(a, k, body, n);
    n = (size_t)snprintf(body, sizeof body, "{\"%s\":%s}", field, v);
    check_body(a, k, body, n);
    n = (size_t)snprintf(body, sizeof body,
                         "{\"%s\":{\"Name\":\"n\\u00e9\",\"%s\":%s,\"Status\":"
                         "\"draft\"}}",
                         k->name, field, v);
    check_body(a, k, body, n);
}

static const char *const values[] = {
    /* text */
    "\"\"",
    "\"plain\"",
    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
    "\"\\u00e9\\u20ac\\ud83d\\ude00\"",
    "\"\\u0000\"",
    "\"a\\ud800b\"",
    "\"\\udc00\"",
    "\"\\ud800\\u0041\"",
    "\"\\uD83D\\uDE00x\"",
    "\"\\u12\"",
    "\"\\x41\"",
    "\"tab\there\"",
    "\"\xc0\xaf\"",
    "\"\xe0\x80\xaf\"",
    "\"\xed\xa0\x80\"",
    "\"\xf4\x90\x80\x80\"",
    "\"\xff\"",
    "\"\xc3\"",
    "\"\xc3(\"",
    "\"\xf0\x9f\x98\"",
    "\"\xef\xbb\xbf"
    "bom\"",
    "\"unterminated",
    /* colours */
    "\"D0CBCB\"",
    "\"d0cbcb\"",
    "\"#D0CBCB\"",
    "\"D0CBC\"",
    "\"D0CBCBA\"",
    "\"G0CBCB\"",
    "\"\\u0044\\u0030CBCB\"",
    /* numbers */
    "0",
    "-0",
    "180",
    "-180",
    "180.0000000000001",
    "-180.00000000000003",
    "90",
    "90.5",
    "-90",
    "45.757",
    "0.1",
    "1e2",
    "1E2",
    "1e-310",
    "-1e-400",
    "1e400",
    "4.9e-324",
    "123456789012345678",
    "89.999999999999999999999",
    "1.5e+1",
    "01",
    "1.",
    ".5",
    "-",
    "1e",
    "+1",
    "\"45.757\"",
    "\"-0\"",
    "\"1e-400\"",
    "\"007.50\"",
    "\".5\"",
    "\"5.\"",
    "\"inf\"",
    "\"nan\"",
    "\"0x10\"",
    "\" 1\"",
    "\"+1\"",
    "\"\"",
    "9007199254740993",
    "18446744073709551616",
    "-1",
    /* other types */
    "true",
    "false",
    "null",
    "[]",
    "{}",
    "[1,{\"a\":null}]",
    "{\"a\":[\"b\"]}",
    "\"true\"",
    "\"YES\"",
    "\"no\"",
    "\"1\"",
    "\"0\"",
    "\"maybe\"",
    "tru",
    "nul",
    "[",
    "{",
};

static void corpus_values(struct arena *a) {
    static const struct {
        const struct kind_desc *k;
        const char *field;
    } fields[] = {
        {&record_theme, "Name"},      {&record_theme, "PageBackgroundRGB"},
        {&record_theme, "Status"},    {&record_theme, "Logo"},
        {&record_theme, "ID"},        {&record_theme, "UserID"},
        {&record_address, "Lon"},     {&record_address, "Lat"},
        {&record_address, "ShowMap"}, {&record_address, "Line1"},
        {&record_address, "Type"},    {&record_address, "EventID"},
        {&record_event, "ThemeID"},   {&record_event, "AddressID"},
    };
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++)
            with_value(a, fields[f].k, fields[f].field, values[v]);
}

static void corpus_shapes(struct arena *a) {
    static const char *const shapes[] = {
        "",
        " ",
        "\n",
        "{}",
        " {} ",
        "{}\n",
        "{} x",
        "{}{}",
        "{},",
        "[]",
        "null",
        "1",
        "\"x\"",
        "{",
        "{\"Theme\"",
        "{\"Theme\":",
        "{\"Theme\":{",
        "{\"Theme\":{}",
        "{\"Theme\":{}}",
        "{\"Theme\":{}} ",
        "{\"Theme\":{}}}",
        "{\"Theme\":{}}x",
        "{\"Theme\":{}}\x00",
        "\xef\xbb\xbf{\"Theme\":{}}",
        "{\"Theme\":{},\"Theme\":{}}",
        "{\"Theme\":{},\"x\":1}",
        "{\"x\":1,\"Theme\":{}}",
        "{\"Name\":\"a\",\"Theme\":{}}",
        "{\"theme\":{}}",
        "{\"Themes\":{}}",
        "{\"Theme\":{\"Theme\":{}}}",
        "{\"Theme\":{\"Name\":\"a\",\"Name\":\"b\"}}",
        "{\"Theme\":{\"Name\":null,\"Name\":\"b\"}}",
        "{\"Theme\":{\"ID\":1,\"ID\":2}}",
        "{\"Theme\":{\"ID\":1,\"id\":2}}",
        "{\"Theme\":{\"Logo\":1,\"Logo\":2}}",
        "{\"Theme\":{\"\":1}}",
        "{\"Theme\":{\"nAME\":\"a\"}}",
        "{\"Theme\":{\"N\\u0061me\":\"a\"}}",
        "{\"Theme\":{\"Name\\u0000\":\"a\"}}",
        "{\"Theme\":{\"\xff\":1}}",
        "{\"Theme\":{\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\":1}}",
        "{\"Theme\":{\"Name\":\"a\"},}",
        "{\"Theme\":{\"Name\":\"a\",}}",
        "{\"Theme\":{\"Name\"}}",
        "{\"Theme\":{\"Name\":\"a\" \"b\"}}",
        "{\"Theme\":{'Name':\"a\"}}",
        "{\"Theme\":{\"Name\":\"a\"}} /* c */",
        "{\"Theme\":{\"Name\":\"a\"}}\r\n\t ",
        "{\"Theme\"\n:\n{\n\"Name\"\n:\n\"a\"\n}\n}",
        "{\"Theme\":{\"Status\":\"\"}}",
        "{\"Theme\":{\"Name\":\"a\",\"Status\":\"active\",\"PageBackgroundRGB\":\"ABCDEF\","
        "\"HeaderBackgroundRGB\":\"abcdef\",\"HeaderTextRGB\":\"012345\",\"TextHeadingsRGB\":"
        "\"6789aB\",\"SmallHeadingRGB\":\"cDeF01\",\"Logo\":\"l\",\"BackgroundImage\":[],"
        "\"SecondaryImage\":{},\"ID\":12,\"UserID\":\"u\",\"EventID\":null}}",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t n = strlen(shapes[i]);
        if (strcmp(shapes[i], "{\"Theme\":{}}") == 0) n++; /* ...and a NUL after it */
        check_body(a, &record_theme, shapes[i], n);
    }
    check_body(a, &record_theme, "{\"Theme\":{}}\0", 13);
    check_body(a, &record_theme, "{\"Theme\":{\"Name\":\"a\0b\"}}", 24);
    static const char address[] =
        "{\"Address\":{\"Name\":\"Venue\",\"Line1\":\"1 Rue\",\"Line2\":\"\",\"Line3\":"
        "\"c/o \\\"X\\\"\",\"Line4\":\"ignored\",\"City\":\"Lyon\",\"State\":\"ARA\","
        "\"Country\":\"FR\",\"Post\":\"69002\",\"Lon\":4.8357,\"Lat\":\"45.764\","
        "\"ShowMap\":\"Yes\",\"Type\":\"home\",\"Status\":\"draft\"}}";
    check_body(a, &record_address, address, sizeof address - 1);
}

/* Strings at the byte limit and one over, plain, multi-byte and escaped; tokens at
 * the longest a value can be written and one over; nesting at the depth limit and
 * one over, in the wrapper and bare. */
static void corpus_limits(struct arena *a) {
    static const char *const units[] = {"a", "\xc3\xa9", "\xe2\x82\xac", "\\u0041", "\\\""};
    static const int bytes[] = {1, 2, 3, 1, 1};
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        for (int over = -1; over <= 1; over++) {
            int count = MAX_STRING / bytes[u] + over;
            size_t n = repeat("{\"Theme\":{\"Name\":\"", units[u], count, "\"}}");
            check_body(a, &record_theme, body, n);
            n = repeat("{\"Theme\":{\"Logo\":\"", units[u], count, "\"}}");
            check_body(a, &record_theme, body, n);
        }
    }
    /* Longest tokens: 6 x 255 + 2 bytes, and one more. */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = repeat("{\"Theme\":{\"Name\":\"", "\\u0041", MAX_STRING, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"}}", extra ? "a" : "");
        check_body(a, &record_theme, body, n);
        n = repeat("{\"Theme\":{\"Logo\":[\"", "\\u0041", MAX_STRING, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"]}}", extra ? "a" : "");
        check_body(a, &record_theme, body, n);
        n = repeat("{\"Address\":{\"Lat\":1.", "0", 6 * MAX_STRING, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s}}", extra ? "0" : "");
        check_body(a, &record_address, body, n);
        n = repeat("{\"Address\":{\"Lat\":\"1.", "0", 6 * MAX_STRING - 3, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"}}", extra ? "0" : "");
        check_body(a, &record_address, body, n);
        n = repeat("{\"Theme\":{\"", "k", 6 * MAX_STRING, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\":1}}", extra ? "k" : "");
        check_body(a, &record_theme, body, n);
    }
    /* Depth: the body's object is 1, the wrapper's 2. */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = repeat("{\"Theme\":{\"Name\":\"x\",\"Logo\":", "[", MAX_DEPTH - 2 + extra, "");
        n += (size_t)snprintf(body + n, sizeof body - n, "%s", "");
        for (int i = 0; i < MAX_DEPTH - 2 + extra; i++)
            body[n++] = ']';
        n += (size_t)snprintf(body + n, sizeof body - n, "}}");
        check_body(a, &record_theme, body, n);
        n = repeat("{\"Logo\":", "{\"a\":", MAX_DEPTH - 1 + extra, "1");
        for (int i = 0; i < MAX_DEPTH - 1 + extra; i++)
            body[n++] = '}';
        body[n++] = '}';
        check_body(a, &record_theme, body, n);
        n = repeat("", "[", MAX_DEPTH + extra, "");
        check_body(a, &record_theme, body, n);
    }
}

/* Mutations of the corpus's valid bodies: a byte changed, cut, or doubled. */
static void corpus_mutations(struct arena *a) {
    static const char *const seeds[] = {
        "{\"Address\":{\"Name\":\"V\\u00e9nue \xe2\x82\xac\",\"Lon\":-0.1276,\"Lat\":\"51.5\","
        "\"ShowMap\":true,\"Line4\":[1,{\"x\":\"\\ud83d\\ude00\"}],\"ID\":3,\"Post\":\"E1\"}}",
        "{\"Theme\":{\"Name\":\"Gala\",\"PageBackgroundRGB\":\"aBc123\",\"Status\":\"draft\","
        "\"Logo\":null,\"UserID\":4}}",
    };
    static const char bytes[] = "{}[]\":,\\u0e.-\xff\xc3\x80 ";
    uint64_t mr = 0x2545F4914F6CDD1Dull; /* the corpus does not depend on the splits drawn */
    for (int i = 0; i < 400; i++) {
        const char *s = seeds[i % 2];
        size_t n = strlen(s);
        memcpy(body, s, n);
        size_t at = next_of(&mr) % n;
        switch (next_of(&mr) % 3) {
        case 0:
            body[at] = bytes[next_of(&mr) % (sizeof bytes - 1)];
            break;
        case 1:
            n = at;
            break;
        default:
            memmove(body + at + 1, body + at, n - at);
            n++;
        }
        check_body(a, i % 2 ? &record_theme : &record_address, body, n);
    }
}

static void test_split_never_changes_the_answer(void) {
    struct arena a;
    arena_init(&a, 4096);
    corpus_values(&a);
    corpus_shapes(&a);
    corpus_limits(&a);
    corpus_mutations(&a);
    arena_destroy(&a);
    printf("%d bodies, %d accepted, %d decoded differently when split (and %d runs of a bare "
           "token after a value at another offset)\n",
           tally.bodies, tally.accepted, tally.differences, tally.bare_after_value);
    CHECK(tally.accepted > 300);
    CHECK_EQ_INT(tally.differences, 0);
}

/* See bare_after_value: "{\"Lat\":01}" is refused at the 1 (byte 8) in one piece, at
 * the } (byte 9) when the 1 came in a piece of its own. */
static void test_a_bare_token_after_a_value_at_one_offset(void) {
    struct arena a;
    arena_init(&a, 4096);
    static const char body[] = "{\"Lat\":01}";
    struct outcome whole, split;
    decode(&a, &record_address, body, sizeof body - 1, WHOLE, &whole);
    decode(&a, &record_address, body, sizeof body - 1, BYTES, &split);
    CHECK(strstr(whole.msg, "at byte 8:") != NULL);
    CHECK_EQ_STR(split.msg, whole.msg);
    outcome_destroy(&whole);
    outcome_destroy(&split);
    arena_destroy(&a);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_split_never_changes_the_answer),
    CHECK_CASE_XFAIL(test_a_bare_token_after_a_value_at_one_offset,
                     "yajl reports a token begun in an earlier piece at the piece's start"),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
