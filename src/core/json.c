/*
 * json: see json.h.
 *
 * yajl is given allocation functions over a little room in the decoder, then
 * the request arena, so creating a parser per request costs no heap traffic
 * (and, for most bodies, not even an arena call); realloc needs the size of
 * a block, kept in a small header.
 */
#include "core/json.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { JF_ID = -2, JF_IGNORED = -3, JF_WRAPPER = -4 };
enum { SEEN_ID = 1, SEEN_USER_ID = 2, SEEN_EVENT_ID = 4 };

/* ---- arena allocation for yajl ---- */

static void *a_malloc(void *ctx, size_t n) {
    struct json_decoder *d = ctx;
    size_t need = (n + 16 + 15) & ~(size_t)15;
    size_t *p;
    /* yajl's handle, lexer and state stack fit in the decoder's own room. */
    if (need <= sizeof d->yajl_room - d->yajl_used) {
        p = (size_t *)(void *)(d->yajl_room + d->yajl_used);
        d->yajl_used += (uint32_t)need;
    } else {
        p = arena_alloc(d->arena, n + 16);
    }
    p[0] = n;
    return (char *)p + 16;
}

static void *a_realloc(void *ctx, void *old, size_t n) {
    if (!old) return a_malloc(ctx, n);
    size_t had = *(size_t *)((char *)old - 16);
    if (n <= had) return old;
    /* The arena frees nothing before the request ends, so a block grows at least
     * twofold: yajl grows its state stack 128 bytes at a time, and growing it by
     * what was asked kept every old copy, the square of the nesting over 256 in
     * all (a skipped field of 400,000 '[' took 600 MB). Doubling keeps a block's
     * copies under its final size. */
    if (n < 2 * had) n = 2 * had;
    void *p = a_malloc(ctx, n);
    memcpy(p, old, had);
    return p;
}

static void a_free(void *ctx, void *p) {
    (void)ctx;
    (void)p; /* released with the arena */
}

/* ---- errors ---- */

static int fail(struct json_decoder *d, enum err e, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct json_decoder *d, enum err e, const char *field, const char *fmt, ...) {
    if (d->err != ERR_NONE) return 0;
    d->err = e;
    d->err_field = field;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err_msg, sizeof d->err_msg, fmt, ap);
    va_end(ap);
    return 0; /* yajl: stop */
}

static const char *type_word(uint8_t t) {
    switch (t) {
    case FT_COLOR:
        return "a string of six hex digits";
    case FT_REF:
        return "an integer id (0 for none)";
    case FT_DOUBLE:
        return "a number";
    case FT_BOOL:
        return "a boolean or one of \"true\", \"false\", \"1\", \"0\", \"yes\", \"no\", \"\"";
    default:
        return "a string";
    }
}

/* ID holding anything but a positive integer: the handler answers it (a
 * create ignores ID whatever it holds; an update refuses it, invalid_field). */
static int id_not_an_id(struct json_decoder *d) {
    d->has_id = true;
    d->id_invalid = true;
    return 1;
}

static int wrong_type(struct json_decoder *d) {
    if (d->field == JF_ID) return id_not_an_id(d);
    const struct field *f = &d->kind->fields[d->field];
    return fail(d, ERR_INVALID_FIELD, f->name, "%s must be %s", f->name, type_word(f->type));
}

/* ---- value handling ---- */

/* Called before every value: handles structure. Returns 1 to go on, 0 on error,
 * 2 if the value is to be skipped (ignored field or inside one). */
static int before_value(struct json_decoder *d, bool is_container) {
    if (d->skip_depth) return 2;
    if (d->depth == 0) {
        if (!is_container || d->done_top)
            return fail(d, ERR_INVALID_JSON, NULL, "the body must be a JSON object");
        return 1;
    }
    if (d->field == JF_IGNORED) return 2;
    if (d->field == JF_ID && is_container) return id_not_an_id(d) + 1; /* skipped */
    return 1;
}

/* The wrapper ({"Theme": ...}) holding anything but an object: a field of
 * the wrong type, answered as every other one (invalid_field naming it). */
static int wrapper_not_object(struct json_decoder *d) {
    return fail(d, ERR_INVALID_FIELD, d->kind->name, "%s must be an object", d->kind->name);
}

/* Before a scalar value: 1 to take it, 2 to skip it, 0 on error (yajl: stop). */
static int scalar_start(struct json_decoder *d) {
    int b = before_value(d, false);
    if (b != 1) return b;
    if (d->field == JF_WRAPPER) return wrapper_not_object(d);
    return 1;
}

/* A string taken where it stands in the chunk, copied when the chunk is done
 * (keep_chunk_strings), unless the chunk is held (json_decoder_feed_held). */
static inline void in_chunk(struct json_decoder *d, uint64_t bit, const char *s, uint32_t n) {
    if (d->chunk_held) return;
    if (!d->in_chunk) d->chunk_lo = s;
    d->chunk_hi = s + n;
    d->in_chunk |= bit;
}

/*
 * A value converted to the field's type: record.c checks it (the one place
 * where values are validated), then it is kept, strings copied to the arena.
 * Inlined: it runs for every value of every body; t is the field's type,
 * a constant at each call, so the common checks need no call.
 */
static inline __attribute__((always_inline)) int take(struct json_decoder *d, union value v,
                                                      uint8_t t) {
    const struct field *f = &d->kind->fields[d->field];
    if (!record_value_plainly_fine(f, t, &v, d->max_string)) {
        const char *why = record_check_value(d->kind, d->field, &v, d->max_string);
        if (why) return fail(d, ERR_INVALID_FIELD, f->name, "%s", why);
    }
    uint64_t bit = UINT64_C(1) << d->field;
    if (t == FT_STR || t == FT_COLOR) {
        /* vals holds the default still: a field given twice is refused at its key. */
        d->str_delta += (int64_t)v.s.len - d->vals[d->field].s.len;
        /* A span of the chunk is copied with the others when the chunk is done
         * (keep_chunk_strings); one in yajl's buffers (escapes decoded, or a
         * string that spanned two chunks) now, as yajl reuses them. */
        if ((uintptr_t)v.s.ptr - (uintptr_t)d->chunk < d->chunk_len) {
            in_chunk(d, bit, v.s.ptr, v.s.len);
            d->plain |= bit;
        } else
            v.s.ptr = arena_strndup(d->arena, v.s.ptr, v.s.len);
    }
    d->vals[d->field] = v;
    d->present |= bit;
    return 1;
}

/*
 * "-51.5072" style numbers with at most 15 significant digits: the integer m
 * and 10^k are exact doubles, so m / 10^k is the correctly rounded value,
 * the same strtod gives (Clinger's fast path). Returns false for anything
 * else (exponents, more digits), which strtod then handles.
 *
 * *dec: m and k without trailing zeros, as json_decoder's dec keeps them (0
 * for a zero). Decimals of at most 15 significant digits read as distinct
 * doubles, so no shorter one reads as this value: it is the shortest, the
 * one json_put_double would find, and the writer need not search for it.
 */
static bool parse_short_decimal(const char *s, size_t n, double *out, uint64_t *dec) {
    static const double pow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    /* At most 18 bytes: m cannot overflow; it is then exact below 10^15. */
    if (n > 18) return false;
    size_t i = n > 0 && s[0] == '-';
    size_t int_start = i;
    uint64_t m = 0;
    for (; i < n && (unsigned)(s[i] - '0') < 10; i++)
        m = m * 10 + (uint64_t)(s[i] - '0');
    if (i == int_start) return false; /* "", "-", ".5" */
    size_t frac = 0;
    if (i < n) {
        if (s[i] != '.') return false;
        size_t frac_start = ++i;
        for (; i < n && (unsigned)(s[i] - '0') < 10; i++)
            m = m * 10 + (uint64_t)(s[i] - '0');
        frac = i - frac_start;
        if (frac == 0 || i != n) return false; /* "5.", exponents */
    }
    if (m >= UINT64_C(1000000000000000) || frac > 15) return false;
    double v = (double)m / pow10[frac];
    *out = s[0] == '-' ? -v : v;
    for (; frac && m % 10 == 0; frac--)
        m /= 10;
    *dec = m << 4 | frac;
    return true;
}

/*
 * The syntax of a number: JSON's, with leading zeros and a bare "5." or ".5"
 * let through (a numeric string is read as strtod would), but no "inf",
 * "nan", hex, leading '+' or spaces, which strtod would also take.
 */
static bool number_syntax(const char *s, size_t n) {
    size_t i = 0, digits = 0;
    if (i < n && s[i] == '-') i++;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            digits++;
    if (digits == 0) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            exp++;
        if (exp == 0) return false;
    }
    return i == n;
}

/*
 * Every finite number is read, correctly rounded (strtod). A magnitude
 * below the smallest subnormal double rounds to zero, as IEEE 754 and every
 * JSON parser do (README "Lon/Lat": a coordinate a hundred orders of
 * magnitude below a nanometre is 0); strtod's ERANGE on underflow is no
 * fault. A magnitude past the largest double becomes infinity, which the
 * field's range refuses.
 */
static int set_double(struct json_decoder *d, const char *s, size_t n) {
    double v;
    uint64_t dec = 0;
    if (!parse_short_decimal(s, n, &v, &dec)) {
        if (!number_syntax(s, n)) return wrong_type(d);
        char tmp[64];
        char *z = n < sizeof tmp ? tmp : arena_strndup(d->arena, s, n);
        if (z == tmp) {
            memcpy(tmp, s, n);
            tmp[n] = '\0';
        }
        v = strtod(z, NULL);
    }
    int i = d->field, rc = take(d, (union value){.d = v}, FT_DOUBLE);
    if (rc == 1 && dec >> 4) {
        d->dec[i] = dec;
        d->decimals |= UINT32_C(1) << i;
    }
    return rc;
}

static int on_null(void *ctx) {
    struct json_decoder *d = ctx;
    int b = scalar_start(d);
    if (b != 1) return b;
    return 1; /* null: as if the field were not given */
}

/* A boolean, every case: on_boolean's own path is the common one only. */
static __attribute__((noinline)) int boolean_value(struct json_decoder *d, int v) {
    int b = scalar_start(d);
    if (b != 1) return b;
    if (d->field < 0 || d->kind->fields[d->field].type != FT_BOOL) return wrong_type(d);
    return take(d, (union value){.b = v != 0}, FT_BOOL);
}

/* A boolean field's value, the common case, is taken here without a frame. */
static int on_boolean(void *ctx, int v) {
    struct json_decoder *d = ctx;
    int i = d->field;
    if (d->skip_depth || d->depth == 0 || i < 0 || d->kind->fields[i].type != FT_BOOL)
        return boolean_value(d, v);
    d->vals[i] = (union value){.b = v != 0};
    d->present |= UINT64_C(1) << i;
    return 1;
}

/* A number, every case: on_number's own path is the common one only. */
static __attribute__((noinline)) int number_value(struct json_decoder *d, const char *s, size_t n) {
    int b = scalar_start(d);
    if (b != 1) return b;
    if (d->field == JF_ID) {
        d->has_id = true;
        if (record_parse_id(s, n, &d->id) < 0) d->id_invalid = true;
        return 1;
    }
    const struct field *f = &d->kind->fields[d->field];
    if (f->type == FT_DOUBLE) return set_double(d, s, n);
    if (f->type == FT_REF) {
        /* 0 unlinks; anything else must be an id. */
        union value v = {.i = 0};
        if (!(n == 1 && s[0] == '0') && record_parse_id(s, n, &v.i) < 0) return wrong_type(d);
        return take(d, v, FT_REF);
    }
    return wrong_type(d);
}

/*
 * A number field's short decimal within its range, the common case, is
 * taken here without a frame: what set_double and take() do for it.
 * Everything else goes to number_value.
 */
static int on_number(void *ctx, const char *s, size_t n) {
    struct json_decoder *d = ctx;
    int i = d->field;
    if (d->skip_depth || d->depth == 0 || i < 0) return number_value(d, s, n);
    const struct field *f = &d->kind->fields[i];
    union value v;
    uint64_t dec;
    if (f->type != FT_DOUBLE || !parse_short_decimal(s, n, &v.d, &dec) ||
        !record_value_plainly_fine(f, FT_DOUBLE, &v, d->max_string))
        return number_value(d, s, n);
    uint64_t bit = UINT64_C(1) << i;
    d->vals[i] = v;
    d->present |= bit;
    d->dec[i] = dec;
    d->decimals |= (uint32_t)(dec >> 4 != 0) << i; /* not for a zero (json_put_double's "0") */
    return 1;
}

static bool word_is(const char *s, size_t n, const char *w) {
    return strlen(w) == n && strncasecmp(s, w, n) == 0;
}

/* A string, every case: on_string's own path is the common one only. */
static __attribute__((noinline)) int string_value(struct json_decoder *d, const char *s, size_t n) {
    int b = scalar_start(d);
    if (b != 1) return b;
    if (d->field == JF_ID) return id_not_an_id(d); /* an integer, not a string of digits */
    const struct field *f = &d->kind->fields[d->field];
    switch (f->type) {
    case FT_STR: {
        /* A string is shorter than the body, whose limit is a uint32_t. */
        union value v = {.s = {s, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n}};
        return take(d, v, FT_STR);
    }
    case FT_COLOR: {
        union value v = {.s = {s, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n}};
        return take(d, v, FT_COLOR);
    }
    case FT_BOOL:
        if (n == 0 || word_is(s, n, "false") || word_is(s, n, "0") || word_is(s, n, "no"))
            return take(d, (union value){.b = false}, FT_BOOL);
        if (word_is(s, n, "true") || word_is(s, n, "1") || word_is(s, n, "yes"))
            return take(d, (union value){.b = true}, FT_BOOL);
        return wrong_type(d);
    case FT_DOUBLE:
        return set_double(d, s, n);
    default:
        return wrong_type(d);
    }
}

/*
 * A text field's plain value (ASCII, within its limit) in the chunk, the
 * common case, is taken here without a frame: what take() does for it.
 * Everything else goes to string_value.
 */
static int on_string(void *ctx, const unsigned char *us, size_t n) {
    struct json_decoder *d = ctx;
    const char *s = (const char *)us;
    int i = d->field;
    if (d->skip_depth || d->depth == 0 || i < 0) return string_value(d, s, n);
    const struct field *f = &d->kind->fields[i];
    union value v = {.s = {s, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n}};
    if (f->type != FT_STR || (uintptr_t)s - (uintptr_t)d->chunk >= d->chunk_len ||
        !record_value_plainly_fine(f, FT_STR, &v, d->max_string))
        return string_value(d, s, n);
    uint64_t bit = UINT64_C(1) << i;
    in_chunk(d, bit, v.s.ptr, v.s.len);
    d->str_delta += (int64_t)v.s.len - d->vals[i].s.len; /* as take() */
    d->vals[i] = v;
    d->present |= bit;
    d->plain |= bit; /* it stands in the chunk */
    return 1;
}

/* A map or array one level past max_depth: yajl calls back before it stacks
 * the level, so a body's parse holds at most max_depth levels, whatever it
 * skips (review, 2026-11-29: a skipped Logo of 1 MiB of '[' held 2 MiB per
 * connection while its body came). The offset is the byte that opens it. */
static __attribute__((noinline, cold)) int too_deep(struct json_decoder *d) {
    return fail(d, ERR_INVALID_JSON, NULL,
                "arrays and objects nested deeper than %u levels at byte %llu "
                "(--max-json-depth)",
                d->max_depth, (unsigned long long)(d->fed + yajl_get_bytes_consumed(d->h) - 1));
}

/* A map or array opens: 1 to look at it, 2 when it is skipped, 0 on error. */
static int open_container(struct json_decoder *d) {
    if ((uint32_t)d->depth >= d->max_depth) return too_deep(d);
    int b = before_value(d, true);
    d->depth++;
    if (b == 2) d->skip_depth++;
    return b;
}

static int on_start_map(void *ctx) {
    struct json_decoder *d = ctx;
    int b = open_container(d);
    if (b != 1) return b != 0;
    if (d->depth == 1) {
        d->fields_depth = 1;
        return 1;
    }
    if (d->field == JF_WRAPPER) {
        d->wrapped = true;
        d->fields_depth = 2;
        return 1;
    }
    return wrong_type(d);
}

static int on_start_array(void *ctx) {
    struct json_decoder *d = ctx;
    int b = open_container(d);
    if (b != 1) return b != 0;
    if (d->depth == 1) return fail(d, ERR_INVALID_JSON, NULL, "the body must be a JSON object");
    if (d->field == JF_WRAPPER) return wrapper_not_object(d);
    return wrong_type(d);
}

static int on_end(void *ctx) {
    struct json_decoder *d = ctx;
    d->depth--;
    if (d->skip_depth) d->skip_depth--;
    if (d->depth == 0) {
        d->done_top = true;
        /* During a callback yajl has consumed the chunk up to the end of the token. */
        d->top_end = d->fed + yajl_get_bytes_consumed(d->h);
    }
    return 1;
}

/* How much of a key an error message echoes: at most 64 bytes, cut on a character
 * boundary; 0 when that is not text (invalid UTF-8 or a NUL), which is not echoed. */
static size_t echo_len(const char *k, size_t n) {
    size_t cut = n > 64 ? 64 : n;
    while (cut < n && cut > 0 && ((unsigned char)k[cut] & 0xC0) == 0x80)
        cut--;
    return record_utf8_valid(k, cut) && !memchr(k, 0, cut) ? cut : 0;
}

/* A key, every case: on_map_key's own path is the common one only. */
static __attribute__((noinline)) int map_key(struct json_decoder *d, const char *k, size_t n) {
    if (d->skip_depth) return 1;
    if (d->depth == 1 && d->wrapped) {
        if (n == d->name_len && memcmp(k, d->kind->name, n) == 0)
            return fail(d, ERR_DUPLICATE_FIELD, d->kind->name, "%s appears twice", d->kind->name);
        size_t shown = echo_len(k, n);
        /* Named in Field too, as any unknown field (README); not when it is no text,
         * nor the empty key (Field is a non-empty name: docs/openapi.json FieldName). */
        const char *name = shown ? arena_strndup(d->arena, k, shown) : NULL;
        return fail(d, ERR_UNKNOWN_FIELD, name,
                    "only the %s object may stand at the top level; found \"%.*s\"%s",
                    d->kind->name, (int)shown, k, shown < n ? " (cut)" : "");
    }
    if (d->depth == 1 && !d->seen_keys && !d->seen_special && n == d->name_len &&
        memcmp(k, d->kind->name, n) == 0) {
        d->field = JF_WRAPPER;
        return 1;
    }
    /* A field key, at depth 1 (bare object) or 2 (inside the wrapper). */
    int i = record_field_find(d->names, k, n);
    if (i >= 0) {
        uint64_t bit = UINT64_C(1) << i;
        if (d->seen_keys & bit)
            return fail(d, ERR_DUPLICATE_FIELD, d->kind->fields[i].name, "%s appears twice",
                        d->kind->fields[i].name);
        d->seen_keys |= bit;
        d->field = (d->kind->fields[i].flags & FF_INPUT) ? i : JF_IGNORED;
        return 1;
    }
    static const char *const specials[] = {"ID", "UserID", "EventID"};
    for (int s = 0; s < 3; s++) {
        if (word_is(k, n, specials[s]) && strncmp(k, specials[s], n) == 0) {
            if (d->seen_special & (1u << s))
                return fail(d, ERR_DUPLICATE_FIELD, specials[s], "%s appears twice", specials[s]);
            d->seen_special |= 1u << s;
            d->field = s == 0 ? JF_ID : JF_IGNORED;
            return 1;
        }
    }
    size_t shown = echo_len(k, n);
    if (!shown && n)
        return fail(d, ERR_UNKNOWN_FIELD, NULL,
                    "%s has no such field (a key of %zu bytes that is not UTF-8 text without NUL)",
                    d->kind->name, n);
    /* The empty key is echoed in the message only: Field is a non-empty name. */
    const char *name = shown ? arena_strndup(d->arena, k, shown) : NULL;
    /* Another kind's wrapper, or this one's in another case ({"Address":{...}} sent to
     * /v2/theme, {"theme":{...}}): say which wrapper the call takes. */
    char hint[48] = "";
    if (d->depth == 1 &&
        (word_is(k, n, "Theme") || word_is(k, n, "Address") || word_is(k, n, "Event")))
        snprintf(hint, sizeof hint, "; send the fields in {\"%s\":{...}}", d->kind->name);
    return fail(d, ERR_UNKNOWN_FIELD, name, "%s has no field \"%.*s\"%s%s", d->kind->name,
                (int)shown, k, shown < n ? " (cut)" : "", hint);
}

/* A field's key seen for the first time inside the wrapper (the common
 * case) is settled here without a frame; everything else goes to map_key. */
static int on_map_key(void *ctx, const unsigned char *uk, size_t n) {
    struct json_decoder *d = ctx;
    const char *k = (const char *)uk;
    if (d->skip_depth || d->depth == 1) return map_key(d, k, n);
    int i = record_field_find(d->names, k, n);
    if (i < 0) return map_key(d, k, n);
    uint64_t bit = UINT64_C(1) << i;
    if (d->seen_keys & bit) return map_key(d, k, n); /* it says so */
    d->seen_keys |= bit;
    d->field = d->names->input >> i & 1 ? i : JF_IGNORED;
    return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

void json_decoder_begin(struct json_decoder *d, const struct kind_desc *k, struct arena *arena,
                        uint32_t max_string, uint32_t max_depth) {
    memset(d, 0, offsetof(struct json_decoder, vals));
    d->arena = arena;
    d->kind = k;
    d->max_string = max_string;
    d->max_depth = max_depth;
    d->has_id = d->id_invalid = false;
    d->id = 0;
    d->err = ERR_NONE;
    d->err_field = NULL;
    d->err_msg[0] = '\0';
    d->name_len = (uint8_t)strlen(k->name);
    record_defaults(k, d->vals);
    d->names = record_field_lookup(k);
    static yajl_alloc_funcs afs = {a_malloc, a_realloc, a_free, NULL};
    yajl_alloc_funcs mine = afs;
    mine.ctx = d;
    d->yajl_used = 0;
    d->h = yajl_alloc(&callbacks, &mine, d);
}

/*
 * A syntax error, where yajl stopped or at the start of the string it stopped in:
 * for a token refused after a member's value yajl gives its end less its length,
 * clamped at the chunk's start (a key cut by a read was put at the next chunk's
 * first byte, in one piece two bytes into it). t, the scan's state as the chunk
 * began, replayed up to there, says the same however the body was split.
 */
static void syntax_error(struct json_decoder *d, const char *ptr, size_t len,
                         struct json_tokens t) {
    size_t at = yajl_get_bytes_consumed(d->h);
    unsigned char *msg = yajl_get_error(d->h, 0, (const unsigned char *)ptr, len);
    bool parse = strncmp((const char *)msg, "lexical", 7) != 0;
    if (parse) json_tokens_scan(&t, ptr, at, UINT32_MAX);
    bool in_string = parse && (t.state == JSON_TOK_STR || t.state == JSON_TOK_STR_ESC);
    uint64_t where = d->fed + at - (in_string ? t.len : 0);
    /* yajl's message is "parse error: <what>\n"; keep the <what>. */
    const char *what = (const char *)msg;
    const char *colon = strchr(what, ':');
    if (colon) what = colon + 2;
    size_t wl = strcspn(what, "\n");
    fail(d, ERR_INVALID_JSON, NULL, "malformed JSON at byte %llu: %.*s", (unsigned long long)where,
         (int)wl, what);
    yajl_free_error(d->h, msg);
}

/*
 * The strings taken from the chunk that was just parsed, copied into the
 * arena before the chunk goes: the bytes from the first to the end of the
 * last, in one copy, each string then NUL-terminated in the copy (the byte
 * after a string in the chunk is its closing quote, part of no other).
 */
static void keep_chunk_strings(struct json_decoder *d) {
    uint64_t m = d->in_chunk;
    if (!m) return;
    const char *lo = d->chunk_lo, *hi = d->chunk_hi;
    char *copy = arena_alloc(d->arena, (size_t)(hi - lo) + 1);
    memcpy(copy, lo, (size_t)(hi - lo));
    for (uint64_t b = m; b; b &= b - 1) {
        union value *v = &d->vals[__builtin_ctzll(b)];
        v->s.ptr = copy + (v->s.ptr - lo);
        copy[v->s.ptr - copy + v->s.len] = '\0';
    }
    d->in_chunk = 0;
}

/* A token reached JSON_TOKEN_MAX + 1 bytes at byte `at` of the chunk (yajl has
 * parsed every byte before it). The same answer however the body was split. */
static __attribute__((noinline, cold)) int token_too_long(struct json_decoder *d, long at) {
    if (d->tok.opener == ':' && d->field >= 0) { /* a member's value: its key was parsed */
        const char *name = d->kind->fields[d->field].name;
        if (d->tok.state == JSON_TOK_BARE) /* a number (or a literal) no value can be */
            return fail(d, ERR_INVALID_FIELD, name, "%s: a number of over %u bytes", name,
                        JSON_TOKEN_MAX(d->max_string));
        return fail(d, ERR_INVALID_FIELD, name, "%s: longer than %u bytes (--max-string-bytes)",
                    name, d->max_string);
    }
    return fail(d, ERR_INVALID_JSON, NULL,
                "a JSON string or number of over %u bytes at byte %llu: no value here can be "
                "that long",
                JSON_TOKEN_MAX(d->max_string), (unsigned long long)(d->fed + (uint64_t)at));
}

static __attribute__((noinline, cold)) int surrogate_error(struct json_decoder *d, long at) {
    return fail(d, ERR_INVALID_JSON, NULL,
                "malformed JSON at byte %llu: a \\u escape of half a UTF-16 surrogate pair "
                "(a high one, \\uD800 to \\uDBFF, must be followed by a low one, \\uDC00 to "
                "\\uDFFF)",
                (unsigned long long)(d->fed + (uint64_t)at));
}

/* json_escapes_scan, from the chunk's first backslash: most chunks hold none. */
static long scan_escapes(struct json_escapes *e, const char *ptr, size_t len) {
    const char *from = ptr;
    if (!e->state && !e->want_low) {
        from = memchr(ptr, '\\', len);
        if (!from) return -1;
    }
    long at = json_escapes_scan(e, from, len - (size_t)(from - ptr));
    return at < 0 ? at : at + (from - ptr);
}

static int feed(struct json_decoder *d, const char *ptr, size_t len, bool held) {
    if (d->err != ERR_NONE) return -1;
    if (len) d->any = true;
    struct json_tokens at_start = d->tok; /* for a syntax error's offset */
    /* A bad escape at byte `bad`: yajl parses the bytes before it first, so that an
     * error there comes first, however the body was split. */
    long bad = scan_escapes(&d->esc, ptr, len);
    size_t n = bad >= 0 ? (size_t)bad : len;
    /* A token (string, number) longer than any value may be is refused at its
     * byte JSON_TOKEN_MAX + 1, yajl having parsed every byte before it: a
     * chunk that ends inside a token would otherwise have yajl buffer it whole.
     * The rule holds however the body is split. The body's last chunk needs no
     * scan when no token in it can be that long (a body in one read, nearly
     * all): it is parsed in place, nothing left open. */
    long over = -1;
    uint32_t max = JSON_TOKEN_MAX(d->max_string);
    if (!held || (uint64_t)d->tok.len + n > max) {
        over = json_tokens_scan(&d->tok, ptr, n, max);
        if (over >= 0) n = (size_t)over;
    }
    d->chunk = ptr;
    d->chunk_len = n;
    d->chunk_held = held;
    yajl_status st = yajl_parse(d->h, (const unsigned char *)ptr, n);
    keep_chunk_strings(d);
    d->chunk = NULL;
    d->chunk_len = 0;
    d->chunk_held = false;
    if (st == yajl_status_error) syntax_error(d, ptr, n, at_start);
    if (over >= 0 && d->err == ERR_NONE) token_too_long(d, over);
    if (bad >= 0 && d->err == ERR_NONE) surrogate_error(d, bad);
    d->fed += n;
    return d->err == ERR_NONE ? 0 : -1;
}

int json_decoder_feed(struct json_decoder *d, const char *ptr, size_t len) {
    return feed(d, ptr, len, false);
}

int json_decoder_feed_held(struct json_decoder *d, const char *ptr, size_t len) {
    return feed(d, ptr, len, true);
}

int json_decoder_finish(struct json_decoder *d) {
    if (d->err != ERR_NONE) return -1;
    if (!d->any) {
        fail(d, ERR_INVALID_JSON, NULL, "the body is empty; send {\"%s\": {...}}", d->kind->name);
        return -1;
    }
    /* A top-level value that ended with the body's last byte is complete:
     * yajl_complete_parse (which parses one more space to flush its lexer)
     * could only say so. Anything after it, even a space, goes through yajl. */
    yajl_status st =
        d->done_top && d->top_end == d->fed ? yajl_status_ok : yajl_complete_parse(d->h);
    if (st == yajl_status_error && d->err == ERR_NONE)
        fail(d, ERR_INVALID_JSON, NULL, "malformed JSON: the body ends at byte %llu inside a value",
             (unsigned long long)d->fed);
    if (d->err == ERR_NONE && d->wrapped == false && d->fields_depth == 0)
        fail(d, ERR_INVALID_JSON, NULL, "the body must be a JSON object");
    return d->err == ERR_NONE ? 0 : -1;
}

uint32_t json_decoder_record_size(const struct json_decoder *d) {
    return (uint32_t)((int64_t)record_size_of_defaults(d->kind) + d->str_delta);
}

void json_decoder_end(struct json_decoder *d) {
    /* Every block yajl holds is d's room or the arena's, and a_free frees
     * nothing: yajl_free would only call it once per block. The handle is
     * simply dropped, its memory going with d and the arena. */
    d->h = NULL;
}
