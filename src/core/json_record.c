/*
 * json_record: writing a record as JSON (json.h, json_write_record), from
 * each kind's members rendered once at their defaults.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "storage/db.h"

/*
 * What the record writer needs of each kind, rendered once from the tables:
 * the member of every output field at its default (",\"Logo\":\"\""), back
 * to back in field order, so that a run of fields at their defaults (most
 * of a record, often) is one copy. Fields not shown render as nothing.
 * Static: built on first use, on the loop's thread, like the tables' meta.
 */
struct out_field {
    uint32_t key_end;           /* the end of the field's key in text: its value follows */
    uint32_t next;              /* the start of the next field's member */
    uint8_t type;               /* enum field_type */
    bool shown;                 /* false: renders nothing (not an output field, or bytes) */
} __attribute__((aligned(16))); /* 16 bytes: a field's entry is one shift away */
static struct {
    char *text;
    uint32_t off[RECORD_MAX_FIELDS + 1]; /* field i's default member: text[off[i] .. off[i + 1]) */
    struct out_field field[RECORD_MAX_FIELDS];
    uint32_t nfields;
    bool has_event;
} defaults_text[REC_KIND_MAX + 1];
static bool defaults_ready;

/* Room for the longest text of a value that is not a string. */
#define VALUE_MAX 32
/* Bytes a run copy may read and write past its end: the defaults' text is
 * padded by as much, and the writer's reservation has that room. */
#define RUN_SLACK 16

/* Writes v, a value of type t, at o; returns the end. o must have room for
 * VALUE_MAX bytes or a string value escaped. */
static inline char *put_value(char *o, uint8_t t, union value v) {
    switch (t) {
    case FT_STR:
    case FT_COLOR:
        return json_put_string(o, v.s.ptr, v.s.len);
    case FT_REF:
    case FT_INT:
        return o + u64_digits(v.i, o);
    case FT_DOUBLE:
        return o + json_put_double(o, v.d);
    case FT_BOOL:
        memcpy(o, v.b ? "true" : "false", 5);
        return o + (v.b ? 4 : 5);
    default:
        return o;
    }
}

/* Copies n bytes of the defaults' text in 16-byte steps (no call; most runs
 * are short): reads and writes up to RUN_SLACK - 1 bytes past n. */
static inline char *copy_run(char *o, const char *src, size_t n) {
    for (size_t i = 0; i < n; i += 16)
        memcpy(o + i, src + i, 16);
    return o + n;
}

static void defaults_init(void) {
    for (uint8_t t = 1; t <= REC_KIND_MAX; t++) {
        const struct kind_desc *k = record_kind(t);
        const struct field_meta *m = record_field_meta(k);
        union value vals[RECORD_MAX_FIELDS];
        record_defaults(k, vals);
        struct buf b;
        buf_init(&b, 256);
        for (int i = 0; i < k->nfields; i++) {
            defaults_text[t].off[i] = (uint32_t)b.len;
            const struct field *f = &k->fields[i];
            if (!(f->flags & FF_OUTPUT) || f->type == FT_BYTES) continue;
            bool text = f->type == FT_STR || f->type == FT_COLOR;
            size_t room = m[i].key_len + VALUE_MAX + (text ? 6 * (size_t)vals[i].s.len : 0);
            char *o = buf_reserve(&b, room);
            memcpy(o, m[i].key, m[i].key_len);
            buf_commit(&b, (size_t)(put_value(o + m[i].key_len, f->type, vals[i]) - o));
        }
        defaults_text[t].off[k->nfields] = (uint32_t)b.len;
        for (int i = 0; i < k->nfields; i++) {
            const struct field *f = &k->fields[i];
            defaults_text[t].field[i] = (struct out_field){
                .key_end = defaults_text[t].off[i] + m[i].key_len,
                .next = defaults_text[t].off[i + 1],
                .type = f->type,
                .shown = (f->flags & FF_OUTPUT) && f->type != FT_BYTES,
            };
        }
        defaults_text[t].nfields = (uint32_t)k->nfields;
        defaults_text[t].has_event = k->has_event;
        memset(buf_reserve(&b, RUN_SLACK), 0, RUN_SLACK); /* copy_run's padding, uncommitted */
        defaults_text[t].text = b.ptr;                    /* kept for the life of the process */
    }
    defaults_ready = true;
}

/*
 * One reservation covers the whole record: a member's text is at most six
 * bytes per byte of a string value plus its quotes, or VALUE_MAX for any
 * other value, and the key; record_size counts at least the string's bytes
 * plus 2, or 8 for other values (so 6 * record_size + VALUE_MAX per field
 * bounds the values), and the keys are within the defaults' text.
 *
 * The defaults' text holds every output field's key followed by its default
 * value, so a field with a value of its own costs one copy (the defaults
 * before it, up to and including its key) and its value.
 */
static inline __attribute__((always_inline)) void write_record(struct buf *b,
                                                               const struct record *r, bool open,
                                                               const struct json_decoder *dec,
                                                               uint64_t event_id) {
    const uint32_t plain = dec ? (uint32_t)dec->plain : 0;
    const uint32_t decimals = dec ? dec->decimals : 0;
    if (!defaults_ready) defaults_init();
    const char *dtext = defaults_text[r->type].text;
    const uint32_t end = defaults_text[r->type].off[defaults_text[r->type].nfields];
    const struct out_field *of = defaults_text[r->type].field;
    size_t room = 80 + RUN_SLACK + 6 * (size_t)record_size(r) +
                  (size_t)defaults_text[r->type].nfields * (VALUE_MAX + 44) + end;
    char *o = buf_reserve(b, room), *start = o;
    static const char id_key[] = "{\"ID\":", user_key[] = ",\"UserID\":",
                      event_key[] = ",\"EventID\":";
    memcpy(o, id_key, sizeof id_key - 1);
    o += sizeof id_key - 1;
    o += u64_digits(r->id, o);
    memcpy(o, user_key, sizeof user_key - 1);
    o += sizeof user_key - 1;
    o += u64_digits(r->user_id, o);
    if (defaults_text[r->type].has_event) {
        memcpy(o, event_key, sizeof event_key - 1);
        o += sizeof event_key - 1;
        o += u64_digits(event_id, o);
    }
    uint32_t from = 0; /* the defaults' text not yet written starts here */
    const uint64_t *cell = r->cell;
    for (uint32_t set = r->set; set; set &= set - 1) {
        int i = __builtin_ctz(set);
        const struct out_field *e = &of[i];
        uint64_t c = *cell++;
        if (!e->shown) continue; /* renders nothing */
        o = copy_run(o, dtext + from, e->key_end - from);
        from = e->next;
        /* The cell read as record_cell_value reads it, in the writer's one switch. */
        switch (e->type) {
        case FT_STR:
        case FT_COLOR: {
            uint32_t len = (uint32_t)c;
            const char *s = len ? (const char *)r + (c >> 32) : "";
            o = plain >> i & 1 ? json_put_plain_string(o, s, len) : json_put_string(o, s, len);
            break;
        }
        case FT_DOUBLE: {
            double d;
            memcpy(&d, &c, sizeof d);
            if (decimals >> i & 1)
                o = json_put_decimal(o, d < 0, dec->dec[i] >> 4, (int)(dec->dec[i] & 15));
            else
                o += json_put_double(o, d);
            break;
        }
        case FT_BOOL:
            memcpy(o, c ? "true" : "false", 5);
            o += c ? 4 : 5;
            break;
        default: /* FT_REF, FT_INT */
            o += u64_digits(c, o);
        }
    }
    o = copy_run(o, dtext + from, end - from);
    if (!open) *o++ = '}';
    buf_commit(b, (size_t)(o - start));
}

void json_write_record(struct buf *b, const struct record *r, bool open) {
    write_record(b, r, open, NULL, r->event_id);
}

void json_write_record_decoded(struct buf *b, const struct record *r, bool open,
                               const struct json_decoder *d) {
    write_record(b, r, open, d, r->event_id);
}

/* A create's answer for r as it was created: no event links a record being created. */
static void write_created(struct buf *b, const struct record *r) {
    static const char ok[] = "{\"Status\":\"ok\",\"Result\":";
    buf_append(b, ok, sizeof ok - 1);
    write_record(b, r, false, NULL, 0);
    buf_append_char(b, '}');
}

bool json_write_key_answer(struct buf *b, const struct db *db, const struct record *k) {
    union value a = record_get(k, IDEM_ANSWER);
    uint64_t record_id = record_get(k, IDEM_RECORD_ID).i;
    if (a.s.len == 0) return false; /* no form of answer: damage */
    if ((uint8_t)a.s.ptr[0] == IDEM_REF_MARK) {
        const struct record *r = db_get(db, record_id);
        /* The rev too: the record as created was filed with its key, under one rev
         * (storage/index.c, idem_hold); another is a later version, not the answer. */
        if (!r || !idem_by_ref(k, record_id) || r->user_id != k->user_id || r->rev != k->rev)
            return false;
        write_created(b, r);
        return true;
    }
    if ((uint8_t)a.s.ptr[0] != IDEM_SNAPSHOT_MARK) {
        buf_append(b, a.s.ptr, a.s.len);
        return true;
    }
    /* Only a record of the kinds a keyed create makes (a damaged file could name any). */
    uint8_t type = a.s.len > 2 ? (uint8_t)a.s.ptr[1] : 0;
    struct record *r = record_type_in_quota(type)
                           ? record_decode(type, (const uint8_t *)a.s.ptr + 2, a.s.len - 2)
                           : NULL;
    if (!r) return false;
    write_created(b, r);
    record_free(r);
    return true;
}
