/*
 * fuzz_json: the streaming body decoder of each record kind the API takes
 * (theme, address, event), fed whole and in pieces.
 *
 * Input: byte 0 picks the kind (byte 0 % 3) and the string limit (bit 7 set:
 * 16 bytes, else the default 255), byte 1 is the largest piece (0: whole,
 * then pieces of 1..7 bytes), the rest is the body.
 *
 * Properties:
 *  - the outcome (accepted or the error, and every value) does not depend on
 *    how the body was split; in pieces, each piece but the last is fed from a
 *    copy that is overwritten once fed (a read buffer's bytes go), the last
 *    is held (json_decoder_feed_held, as the API feeds a body's last piece);
 *  - json_decoder_record_size is record_size_of the values, and the built
 *    record's size;
 *  - accepted values pass the record validation (UTF-8, lengths, non-empty,
 *    colours, finite numbers in range, ids up to 2^53-1);
 *  - the record built from them, written by json_write_record, decodes to
 *    the same values, and writing that again gives the same bytes, as does
 *    writing it from the decoder (json_write_record_decoded: its plain
 *    strings copied without escaping, its short decimals from their digits);
 *  - the record's log payload decodes to the same record, and
 *    record_build_encode, given only the fields present, gives that payload
 *    and that record in one pass.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "fuzz_common.h"
#include "storage/record.h"

#define BIG_STRING 255 /* config_defaults.max_string_bytes */
#define SMALL_STRING 16

static const struct kind_desc *const kinds[3] = {&record_theme, &record_address, &record_event};
static struct arena arena1, arena2, arena3;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    arena_init(&arena1, 4096);
    arena_init(&arena2, 4096);
    arena_init(&arena3, 4096);
    return 0;
}

/* Decodes into d; pieces of at most max_piece bytes (0: one piece). Returns 0 if accepted. */
static int decode(struct json_decoder *d, struct arena *a, const struct kind_desc *k,
                  uint32_t max_string, const char *p, size_t n, size_t max_piece, uint64_t seed) {
    arena_reset(a);
    json_decoder_begin(d, k, a, max_string, 64); /* --max-json-depth's default */
    int rc = 0;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t off = 0; off < n && rc == 0;) {
        size_t step = n - off;
        if (max_piece) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t piece = 1 + (size_t)(rng % max_piece);
            if (piece < step) step = piece;
        }
        if (!max_piece) {
            rc = json_decoder_feed(d, p + off, step);
        } else if (off + step == n) {
            rc = json_decoder_feed_held(d, p + off, step); /* p outlives d's use of it */
        } else {
            static char piece[256]; /* max_piece is at most 255 */
            memcpy(piece, p + off, step);
            rc = json_decoder_feed(d, piece, step);
            memset(piece, 0xA5, step); /* nothing may point into it any more */
        }
        off += step;
    }
    if (rc == 0) rc = json_decoder_finish(d);
    json_decoder_end(d);
    return rc;
}

static bool same_value(const struct field *f, const union value *a, const union value *b) {
    switch (f->type) {
    case FT_STR:
    case FT_COLOR:
    case FT_BYTES:
        return a->s.len == b->s.len && memcmp(a->s.ptr, b->s.ptr, a->s.len) == 0;
    case FT_REF:
        return a->i == b->i;
    case FT_DOUBLE:
        return a->d == b->d; /* -0 is written as 0, which is the same number */
    case FT_BOOL:
        return a->b == b->b;
    }
    return false;
}

static void check_valid(const struct kind_desc *k, const struct json_decoder *d,
                        uint32_t max_string) {
    for (int i = 0; i < k->nfields; i++) {
        if (!(d->present & (UINT64_C(1) << i))) continue;
        const struct field *f = &k->fields[i];
        const union value *v = &d->vals[i];
        if (!(f->flags & FF_INPUT))
            fuzz_die("%s: output-only field %s was taken", k->name, f->name);
        switch (f->type) {
        case FT_STR: {
            uint32_t max = f->max_len ? f->max_len : max_string;
            if (v->s.len > max || !record_utf8_valid(v->s.ptr, v->s.len) ||
                ((f->flags & FF_NONEMPTY) && v->s.len == 0))
                fuzz_die("%s: accepted an invalid %s (%u bytes)", k->name, f->name, v->s.len);
            break;
        }
        case FT_COLOR:
            if (v->s.len != 6 || strspn(v->s.ptr, "0123456789abcdefABCDEF") < 6)
                fuzz_die("%s: accepted an invalid colour %s", k->name, f->name);
            break;
        case FT_DOUBLE:
            if (!isfinite(v->d) || v->d < f->min || v->d > f->max)
                fuzz_die("%s: accepted %s = %.17g outside [%g, %g]", k->name, f->name, v->d, f->min,
                         f->max);
            break;
        case FT_REF:
            if (v->i > RECORD_ID_MAX)
                fuzz_die("%s: accepted %s = %llu", k->name, f->name, (unsigned long long)v->i);
            break;
        default:
            break;
        }
    }
}

/* Every field of r equals the decoded one where the decoder took a value. */
static void check_same(const char *what, const struct kind_desc *k, const union value *want,
                       const struct json_decoder *d, uint64_t must_be_present) {
    if ((d->present & must_be_present) != must_be_present)
        fuzz_die("%s: fields %llx missing, %llx present", what, (unsigned long long)must_be_present,
                 (unsigned long long)d->present);
    for (int i = 0; i < k->nfields; i++)
        if ((d->present & (UINT64_C(1) << i)) && !same_value(&k->fields[i], &want[i], &d->vals[i]))
            fuzz_die("%s: %s.%s differs", what, k->name, k->fields[i].name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return -1;
    const struct kind_desc *k = kinds[data[0] % 3];
    uint32_t max_string = (data[0] & 0x80) ? SMALL_STRING : BIG_STRING;
    size_t max_piece = data[1] ? data[1] : 1 + data[0] % 7;
    const char *body = (const char *)data + 2;
    size_t n = size - 2;

    struct json_decoder whole, split;
    int rc1 = decode(&whole, &arena1, k, max_string, body, n, 0, 0);
    int rc2 = decode(&split, &arena2, k, max_string, body, n, max_piece, data[1]);
    if (rc1 != rc2 || whole.err != split.err || whole.present != split.present ||
        whole.has_id != split.has_id || whole.id_invalid != split.id_invalid ||
        (whole.has_id && whole.id != split.id))
        fuzz_die("%s: splitting changed the outcome: rc %d/%d, err %d/%d (%s / %s)", k->name, rc1,
                 rc2, whole.err, split.err, whole.err_msg, split.err_msg);
    if (rc1 != 0) {
        if (whole.err == ERR_NONE) fuzz_die("%s: refused without an error", k->name);
        if (strcmp(whole.err_msg, split.err_msg) != 0 && whole.err != ERR_INVALID_JSON)
            fuzz_die("%s: splitting changed the message: %s / %s", k->name, whole.err_msg,
                     split.err_msg);
        return 0;
    }
    check_same("split", k, whole.vals, &split, whole.present);
    check_valid(k, &whole, max_string);

    /* Build the record a create would, write it, and read it back. */
    union value vals[RECORD_MAX_FIELDS];
    record_defaults(k, vals);
    for (int i = 0; i < k->nfields; i++)
        if (whole.present & (UINT64_C(1) << i)) vals[i] = whole.vals[i];
    struct record *r = record_build(k, 7, 3, vals);
    if (json_decoder_record_size(&whole) != record_size_of(k, vals) ||
        json_decoder_record_size(&split) != record_size(r))
        fuzz_die("%s: the decoder's record size %u/%u is not the record's %u", k->name,
                 json_decoder_record_size(&whole), json_decoder_record_size(&split),
                 record_size(r));
    uint64_t inputs = 0;
    for (int i = 0; i < k->nfields; i++)
        if ((k->fields[i].flags & (FF_INPUT | FF_OUTPUT)) == (FF_INPUT | FF_OUTPUT))
            inputs |= UINT64_C(1) << i;

    struct buf out1, out2;
    buf_init(&out1, 256);
    buf_init(&out2, 256);
    json_write_record(&out1, r, false);
    /* Written from the decoder's plain strings and short decimals: the same bytes (whole
     * or split, whichever strings each saw as plain). */
    for (int w = 0; w < 2; w++) {
        buf_reset(&out2);
        json_write_record_decoded(&out2, r, false, w ? &split : &whole);
        if (out1.len != out2.len || memcmp(out1.ptr, out2.ptr, out1.len) != 0)
            fuzz_die("%s: written from the decoder, other bytes:\n%.*s\n%.*s", k->name,
                     (int)out1.len, out1.ptr, (int)out2.len, out2.ptr);
    }
    buf_reset(&out2);
    struct json_decoder again;
    if (decode(&again, &arena3, k, max_string, out1.ptr, out1.len, 0, 0) != 0)
        fuzz_die("%s: its own output was refused (%s): %.*s", k->name, again.err_msg, (int)out1.len,
                 out1.ptr);
    if (!again.has_id || again.id_invalid || again.id != 7)
        fuzz_die("%s: ID did not read back: %.*s", k->name, (int)out1.len, out1.ptr);
    union value rv[RECORD_MAX_FIELDS];
    record_values(r, rv);
    check_same("rewritten", k, rv, &again, inputs);
    struct record *r2 = record_build(k, 7, 3, again.vals);
    json_write_record(&out2, r2, false);
    /* Output-only fields kept their defaults in both, so the bytes must match. */
    if (out1.len != out2.len || memcmp(out1.ptr, out2.ptr, out1.len) != 0)
        fuzz_die("%s: writing is not stable:\n%.*s\n%.*s", k->name, (int)out1.len, out1.ptr,
                 (int)out2.len, out2.ptr);

    /* The log payload of the record. */
    buf_reset(&out2);
    record_encode(r, &out2);
    struct record *r3 = record_decode(k->type, (const uint8_t *)out2.ptr, out2.len);
    if (!r3) fuzz_die("%s: its log payload was refused", k->name);
    if (r3->id != r->id || r3->user_id != r->user_id || r3->type != r->type)
        fuzz_die("%s: log payload changed the header", k->name);
    for (int i = 0; i < k->nfields; i++) {
        union value a = record_get(r, i), b = record_get(r3, i);
        if (!same_value(&k->fields[i], &a, &b))
            fuzz_die("%s: log payload changed %s", k->name, k->fields[i].name);
    }
    /* Built and encoded in one pass: the same payload, after what out1 held. */
    buf_reset(&out1);
    buf_append(&out1, "x", 1);
    struct record *r4 = record_build_encode(k, 7, 3, vals, (uint32_t)whole.present, &out1);
    if (out1.len != out2.len + 1 || memcmp(out1.ptr + 1, out2.ptr, out2.len) != 0)
        fuzz_die("%s: record_build_encode's payload differs from record_encode's", k->name);
    if (r4->set != r->set || record_size(r4) != record_size(r))
        fuzz_die("%s: record_build_encode's record differs from record_build's", k->name);
    for (int i = 0; i < k->nfields; i++) {
        union value a = record_get(r, i), b = record_get(r4, i);
        if (!same_value(&k->fields[i], &a, &b))
            fuzz_die("%s: record_build_encode changed %s", k->name, k->fields[i].name);
    }
    record_free(r4);

    record_free(r);
    record_free(r2);
    record_free(r3);
    buf_destroy(&out1);
    buf_destroy(&out2);
    return 0;
}
