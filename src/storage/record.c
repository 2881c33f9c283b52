/*
 * record: field tables and the payload codec. The tables are the single
 * source of truth for field names, types, defaults and which fields a client
 * may set; the JSON decoder, the JSON writer and the log codec all walk them.
 */
#include "storage/record.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/slab.h"
#include "common/varint.h"

static const struct field user_fields[] = {
    [USER_NAME] = {"Name", FT_STR, 0, 64, "", 0, 0},
    [USER_KEY_HASH] = {"KeyHash", FT_BYTES, 0, 0, "", 0, 0},
    /* crypto_pwhash_str's text; empty: the account has no password (made by an operator) */
    [USER_PASSWORD_HASH] = {"PasswordHash", FT_BYTES, 0, 0, "", 0, 0},
    /* The user's own quota limits (record.h, record_user_limit); 0: the server's default.
     * Appended fields: a user of an older log reads them as 0. */
    [USER_MAX_RECORDS] = {"MaxRecords", FT_INT, 0, 0, NULL, 0, 0},
    [USER_MAX_BYTES] = {"MaxBytes", FT_INT, 0, 0, NULL, 0, 0},
};

static const struct field session_fields[] = {
    [SESSION_TOKEN_HASH] = {"TokenHash", FT_BYTES, 0, 0, "", 0, 0},
    [SESSION_EXPIRES] = {"Expires", FT_INT, 0, 0, NULL, 0, 0}, /* Unix time, seconds */
    [SESSION_CSRF] = {"Csrf", FT_BYTES, 0, 0, "", 0, 0},       /* the forms' token */
};

static const struct field admin_fields[] = {
    [ADMIN_NAME] = {"Name", FT_STR, 0, 64, "", 0, 0},
    [ADMIN_TOKEN_HASH] = {"TokenHash", FT_BYTES, 0, 0, "", 0, 0},
};

static const struct field idem_fields[] = {
    [IDEM_KEY] = {"Key", FT_BYTES, 0, 0, "", 0, 0},
    [IDEM_REQUEST_HASH] = {"RequestHash", FT_BYTES, 0, 0, "", 0, 0},
    [IDEM_CREATED] = {"Created", FT_INT, 0, 0, NULL, 0, 0}, /* Unix time, seconds */
    [IDEM_STATUS] = {"Status", FT_INT, 0, 0, NULL, 0, 0},   /* of the first answer */
    [IDEM_ANSWER] = {"Answer", FT_BYTES, 0, 0, "", 0, 0},   /* its body */
    [IDEM_RECORD_ID] = {"RecordID", FT_INT, 0, 0, NULL, 0, 0},
};

static const struct field theme_fields[] = {
    [THEME_NAME] = {"Name", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [THEME_LOGO] = {"Logo", FT_STR, FF_OUTPUT, 0, "", 0, 0},
    [THEME_BACKGROUND_IMAGE] = {"BackgroundImage", FT_STR, FF_OUTPUT, 0, "", 0, 0},
    [THEME_SECONDARY_IMAGE] = {"SecondaryImage", FT_STR, FF_OUTPUT, 0, "", 0, 0},
    [THEME_PAGE_BG] = {"PageBackgroundRGB", FT_COLOR, FF_INPUT | FF_OUTPUT, 0, "D0CBCB", 0, 0},
    [THEME_HEADER_BG] = {"HeaderBackgroundRGB", FT_COLOR, FF_INPUT | FF_OUTPUT, 0, "f9f9f9", 0, 0},
    [THEME_HEADER_TEXT] = {"HeaderTextRGB", FT_COLOR, FF_INPUT | FF_OUTPUT, 0, "575757", 0, 0},
    [THEME_TEXT_HEADINGS] = {"TextHeadingsRGB", FT_COLOR, FF_INPUT | FF_OUTPUT, 0, "666666", 0, 0},
    [THEME_SMALL_HEADING] = {"SmallHeadingRGB", FT_COLOR, FF_INPUT | FF_OUTPUT, 0, "575757", 0, 0},
    [THEME_STATUS] = {"Status", FT_STR, FF_INPUT | FF_OUTPUT | FF_NONEMPTY, 0, "active", 0, 0},
};

static const struct field address_fields[] = {
    [ADDR_NAME] = {"Name", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_LINE1] = {"Line1", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_LINE2] = {"Line2", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_LINE3] = {"Line3", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_LINE4] = {"Line4", FT_STR, FF_OUTPUT, 0, "", 0, 0},
    [ADDR_CITY] = {"City", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_STATE] = {"State", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_COUNTRY] = {"Country", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_POST] = {"Post", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [ADDR_LON] = {"Lon", FT_DOUBLE, FF_INPUT | FF_OUTPUT, 0, NULL, -180, 180},
    [ADDR_LAT] = {"Lat", FT_DOUBLE, FF_INPUT | FF_OUTPUT, 0, NULL, -90, 90},
    [ADDR_SHOW_MAP] = {"ShowMap", FT_BOOL, FF_INPUT | FF_OUTPUT, 0, NULL, 0, 0},
    [ADDR_TYPE] = {"Type", FT_STR, FF_OUTPUT, 0, "venue", 0, 0},
    [ADDR_STATUS] = {"Status", FT_STR, FF_INPUT | FF_OUTPUT | FF_NONEMPTY, 0, "active", 0, 0},
};

static const struct field event_fields[] = {
    [EVENT_NAME] = {"Name", FT_STR, FF_INPUT | FF_OUTPUT, 0, "", 0, 0},
    [EVENT_THEME_ID] = {"ThemeID", FT_REF, FF_INPUT | FF_OUTPUT, 0, NULL, 0, 0},
    [EVENT_ADDRESS_ID] = {"AddressID", FT_REF, FF_INPUT | FF_OUTPUT, 0, NULL, 0, 0},
    [EVENT_STATUS] = {"Status", FT_STR, FF_INPUT | FF_OUTPUT | FF_NONEMPTY, 0, "active", 0, 0},
};

#define COUNT(a) ((uint8_t)(sizeof(a) / sizeof((a)[0])))

const struct kind_desc record_user = {"User", "user",     REC_USER, COUNT(user_fields),
                                      false,  user_fields};
const struct kind_desc record_theme = {"Theme", "theme",     REC_THEME, COUNT(theme_fields),
                                       true,    theme_fields};
const struct kind_desc record_address = {
    "Address", "address", REC_ADDRESS, COUNT(address_fields), true, address_fields};
const struct kind_desc record_event = {"Event", "event",     REC_EVENT, COUNT(event_fields),
                                       false,   event_fields};
const struct kind_desc record_session = {
    "Session", NULL, REC_SESSION, COUNT(session_fields), false, session_fields};
const struct kind_desc record_admin = {"Admin", NULL,        REC_ADMIN, COUNT(admin_fields),
                                       false,   admin_fields};

const struct kind_desc record_idem = {"IdempotencyKey",   NULL,  REC_IDEM,
                                      COUNT(idem_fields), false, idem_fields};

static const struct kind_desc *const kinds[REC_KIND_MAX + 1] = {
    NULL,          &record_user,    &record_theme, &record_address,
    &record_event, &record_session, &record_admin, &record_idem};

const struct kind_desc *record_kind(uint8_t type) {
    return type >= 1 && type <= REC_KIND_MAX ? kinds[type] : NULL;
}

const struct kind_desc *record_kind_by_path(const char *ptr, size_t len) {
    for (int t = REC_THEME; t <= REC_KIND_MAX; t++)
        if (kinds[t]->path && strlen(kinds[t]->path) == len &&
            memcmp(kinds[t]->path, ptr, len) == 0)
            return kinds[t];
    return NULL;
}

static bool is_bytes(uint8_t t);

/* The reasons record_check_value gives for one field, each naming it. */
struct field_why {
    char *not_utf8, *empty, *format, *range; /* NULL where the type has no such check */
    char *too_long;                          /* names the limit too_long_for */
    uint32_t too_long_for;                   /* bytes */
};

static struct {
    struct field_meta fields[RECORD_MAX_FIELDS];
    struct field_why why[RECORD_MAX_FIELDS];
    union value defaults[RECORD_MAX_FIELDS];
    uint32_t bytes_mask;              /* bit i: field i is a string, colour or bytes */
    uint32_t size_base;               /* record_size without the strings' bytes */
    uint32_t size_defaults;           /* record_size of the record at the defaults */
    uint8_t types[RECORD_MAX_FIELDS]; /* each field's type, packed for the build's loops */
    char *enc;                        /* every field's payload at its default, in order, padded */
    uint32_t enc_off[RECORD_MAX_FIELDS + 1]; /* field i's: enc[enc_off[i] .. enc_off[i + 1]) */
    struct field_lookup names;
} meta[REC_KIND_MAX + 1];

static bool meta_ready;

static char *reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A reason string, allocated once and kept for the life of the process. */
static char *reason(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* The reasons a value of f is refused, written once from the tables. */
static void why_init(struct field_why *w, const struct field *f) {
    switch (f->type) {
    case FT_STR:
        w->not_utf8 = reason("%s is not valid UTF-8", f->name);
        w->empty = reason("%s must not be empty", f->name);
        break;
    case FT_COLOR:
        w->format = reason("%s must be six hexadecimal digits without '#', e.g. D0CBCB", f->name);
        break;
    case FT_DOUBLE:
        w->range = reason("%s must be within [%g, %g]", f->name, f->min, f->max);
        break;
    default:
        break;
    }
}

/* Bytes a run copy may read and write past its end: the defaults' payload
 * is padded by as much, and record_encode's reservation has that room. */
#define RUN_SLACK 16

/* Copies n bytes of a padded run in 16-byte steps (no call; runs are short):
 * reads and writes up to RUN_SLACK - 1 bytes past n. */
static inline uint8_t *copy_run(uint8_t *o, const char *src, size_t n) {
    for (size_t i = 0; i < n; i += 16)
        memcpy(o + i, src + i, 16);
    return o + n;
}

/* Copies exactly n bytes: short ones with two overlapping loads and stores. */
static inline void copy_bytes(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        memcpy(d, s, n);
    }
}

/* Writes the payload of value v of type t at p; returns the end. */
static inline uint8_t *encode_value(uint8_t *p, uint8_t t, union value v) {
    switch (t) {
    case FT_STR:
    case FT_COLOR:
    case FT_BYTES:
        p += varint_put(p, v.s.len);
        copy_bytes(p, v.s.ptr, v.s.len);
        return p + v.s.len;
    case FT_REF:
    case FT_INT:
        return p + varint_put(p, v.i);
    case FT_DOUBLE: {
        uint64_t bits;
        memcpy(&bits, &v.d, 8);
        for (int b = 0; b < 8; b++)
            p[b] = (uint8_t)(bits >> (8 * b));
        return p + 8;
    }
    case FT_BOOL:
        *p = v.b ? 1 : 0;
        return p + 1;
    default:
        return p;
    }
}

/* The tables are constant, so everything derived from them is computed once
 * and the hot paths never take a strlen. */
static void meta_init(void) {
    for (int t = 1; t <= REC_KIND_MAX; t++) {
        const struct kind_desc *k = kinds[t];
        for (unsigned mul = 1;; mul++) {
            /* The tables are constant: a multiplier below 256 exists for them (the unit
             * tests look every name up), and one that does not is a bug in the tables. */
            if (mul > UINT8_MAX) abort();
            struct field_lookup *l = &meta[t].names;
            memset(l->slot, -1, sizeof l->slot);
            int i = 0;
            for (; i < k->nfields; i++) {
                unsigned h = record_name_hash(k->fields[i].name, strlen(k->fields[i].name), mul);
                if (l->slot[h] >= 0) break;
                l->slot[h] = (int8_t)i;
            }
            if (i == k->nfields) {
                l->mul = (uint8_t)mul;
                l->input = 0;
                for (int j = 0; j < k->nfields; j++)
                    if (k->fields[j].flags & FF_INPUT) l->input |= UINT32_C(1) << j;
                l->fields = meta[t].fields;
                break;
            }
        }
        for (int i = 0; i < k->nfields; i++) {
            const struct field *f = &k->fields[i];
            struct field_meta *m = &meta[t].fields[i];
            m->name_len = (uint8_t)strlen(f->name);
            m->key_len = (uint8_t)snprintf(m->key, sizeof m->key, ",\"%s\":", f->name);
            why_init(&meta[t].why[i], f);
            union value *v = &meta[t].defaults[i];
            memset(v, 0, sizeof *v);
            if (is_bytes(f->type)) {
                v->s.ptr = f->def ? f->def : "";
                v->s.len = (uint32_t)strlen(v->s.ptr);
                meta[t].bytes_mask |= UINT32_C(1) << i;
            }
        }
        /* 30: id, user id, count varints, frame header (an estimate is enough);
         * then 2 per string (its varint length) and 8 per other value. */
        meta[t].size_base = 30;
        for (int i = 0; i < k->nfields; i++)
            meta[t].size_base += is_bytes(k->fields[i].type) ? 2 : 8;
        for (int i = 0; i < k->nfields; i++)
            meta[t].types[i] = k->fields[i].type;
        meta[t].size_defaults = meta[t].size_base;
        for (int i = 0; i < k->nfields; i++)
            if (is_bytes(k->fields[i].type)) meta[t].size_defaults += meta[t].defaults[i].s.len;
        /* The payload of each field at its default, for record_encode's runs. */
        struct buf b;
        buf_init(&b, 64);
        for (int i = 0; i < k->nfields; i++) {
            meta[t].enc_off[i] = (uint32_t)b.len;
            uint8_t *p = (uint8_t *)buf_reserve(&b, VARINT_MAX + 8 + meta[t].defaults[i].s.len);
            buf_commit(&b, (size_t)(encode_value(p, k->fields[i].type, meta[t].defaults[i]) - p));
        }
        meta[t].enc_off[k->nfields] = (uint32_t)b.len;
        memset(buf_reserve(&b, RUN_SLACK), 0, RUN_SLACK); /* copy_run's padding */
        meta[t].enc = b.ptr;                              /* kept for the life of the process */
    }
    meta_ready = true;
}

const struct field_meta *record_field_meta(const struct kind_desc *k) {
    if (!meta_ready) meta_init();
    return meta[k->type].fields;
}

const struct field_lookup *record_field_lookup(const struct kind_desc *k) {
    if (!meta_ready) meta_init();
    return &meta[k->type].names;
}

int record_field_index(const struct kind_desc *k, const char *ptr, size_t len) {
    return record_field_find(record_field_lookup(k), ptr, len);
}

int record_parse_id(const char *ptr, size_t len, uint64_t *out) {
    return u64_parse(ptr, len, RECORD_ID_MAX, out);
}

void record_defaults(const struct kind_desc *k, union value *vals) {
    if (!meta_ready) meta_init();
    memcpy(vals, meta[k->type].defaults, k->nfields * sizeof *vals);
}

static bool is_bytes(uint8_t t) {
    return t == FT_STR || t == FT_COLOR || t == FT_BYTES;
}

/* Every record lives in this slab (malloc under ASan, so that its quarantine
 * and leak checker keep watching records). */
static struct slab slab;
static bool slab_ready;

_Static_assert(RECORD_MAX_FIELDS <= 32, "struct record's set has a bit per field");

static inline uint64_t str_cell(uint32_t off, uint32_t len) {
    return (uint64_t)off << 32 | len;
}

/* a[0 .. n) == b[0 .. n), for a default's few bytes: no call. A value that is
 * the default itself (record_defaults' pointer) is not compared at all. */
static inline bool same_bytes(const char *a, const char *b, size_t n) {
    if (a == b) return true;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

uint32_t record_size_of_defaults(const struct kind_desc *k) {
    if (!meta_ready) meta_init();
    return meta[k->type].size_defaults;
}

uint32_t record_size_of_changed(const struct kind_desc *k, const union value *from,
                                uint32_t from_size, const union value *to, uint64_t changed) {
    if (!meta_ready) meta_init();
    int64_t size = from_size; /* only strings' lengths change it */
    for (uint64_t m = changed & meta[k->type].bytes_mask; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        size += (int64_t)to[i].s.len - (int64_t)from[i].s.len;
    }
    return (uint32_t)size;
}

uint32_t record_size_of(const struct kind_desc *k, const union value *vals) {
    if (!meta_ready) meta_init();
    size_t size = meta[k->type].size_base; /* as record_size */
    for (uint32_t m = meta[k->type].bytes_mask; m; m &= m - 1)
        size += vals[__builtin_ctz(m)].s.len;
    return (uint32_t)size;
}

/* What the first pass over a record's fields finds: the record's shape. */
struct shape {
    uint32_t set;   /* the fields that take a cell (record.set) */
    size_t cells;   /* how many */
    size_t strings; /* bytes of their strings, terminators included */
    size_t size;    /* record_size */
};

/* build's first pass, over the given fields (the others hold their defaults). */
static inline __attribute__((always_inline)) struct shape
shape_of(const struct kind_desc *k, const union value *vals, uint32_t given) {
    const union value *defs = meta[k->type].defaults;
    const uint8_t *types = meta[k->type].types;
    /* As record_size: the fields outside given hold their defaults. */
    struct shape sh = {0, 0, 0, meta[k->type].size_defaults};
    /* A field at its default takes no cell. */
    for (uint32_t g = given; g; g &= g - 1) {
        int i = __builtin_ctz(g);
        const union value *v = &vals[i];
        switch (types[i]) {
        case FT_STR:
        case FT_COLOR:
        case FT_BYTES:
            sh.size += (size_t)v->s.len - defs[i].s.len; /* modulo 2^64: the sum comes right */
            if (v->s.len == defs[i].s.len && same_bytes(v->s.ptr, defs[i].s.ptr, v->s.len))
                continue;
            if (v->s.len) sh.strings += v->s.len + 1;
            break;
        case FT_REF:
        case FT_INT:
            if (v->i == 0) continue;
            break;
        case FT_DOUBLE: {
            uint64_t bits;
            memcpy(&bits, &v->d, sizeof bits);
            if (bits == 0) continue; /* +0.0 only: -0.0 keeps its sign */
            break;
        }
        case FT_BOOL:
            if (!v->b) continue;
            break;
        default:
            break; /* a type without a rule here always keeps its cell */
        }
        sh.set |= UINT32_C(1) << i;
        sh.cells++;
    }
    return sh;
}

/*
 * record_build's work; with out, it also appends the record's log payload
 * (what record_encode would append) to out, written as each field is
 * copied, so that a record built to be stored costs no second pass. Inlined
 * into both callers: out is a constant NULL in record_build's.
 */
static inline __attribute__((always_inline)) struct record *build(const struct kind_desc *k,
                                                                  uint64_t id, uint64_t user_id,
                                                                  const union value *vals,
                                                                  uint32_t given, struct buf *out) {
    if (!meta_ready) meta_init();
    if (!slab_ready) {
        slab_init(&slab, slab_asan(), true);
        slab_ready = true;
    }
    const uint8_t *types = meta[k->type].types;
    struct shape sh = shape_of(k, vals, given);
    const uint32_t set = sh.set;
    const size_t size = sh.size;
    size_t head = sizeof(struct record) + sh.cells * sizeof(uint64_t);

    uint8_t cls;
    struct record *r = slab_alloc(&slab, head + sh.strings, &cls);
    r->id = id;
    r->user_id = user_id;
    r->event_id = 0;
    r->rev = 0;
    r->set = set;
    r->type = k->type;
    r->slab_class = cls;
    r->size16 = UINT16_MAX;
    char *p = (char *)r + head;
    uint64_t *cell = r->cell;
    /* The payload, as record_encode writes it: the fields at their defaults
     * are runs of the defaults' payload, the others encoded from vals. */
    const char *enc = out ? meta[k->type].enc : NULL;
    const uint32_t *off = meta[k->type].enc_off;
    uint32_t from = 0; /* the defaults' payload not yet written starts here */
    uint8_t *e = NULL, *e_start = NULL;
    if (out) {
        e = e_start = (uint8_t *)buf_reserve(out, size + 10 * (size_t)k->nfields + RUN_SLACK);
        e += varint_put(e, id);
        e += varint_put(e, user_id);
        e += varint_put(e, k->nfields);
    }
    for (uint32_t m = set; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        const union value *v = &vals[i];
        uint8_t t = types[i];
        if (out) {
            e = copy_run(e, enc + from, off[i] - from);
            from = off[i + 1];
        }
        /* encode_value with the case's type, a constant: its switch folds away. */
        switch (t) {
        case FT_STR:
        case FT_COLOR:
        case FT_BYTES:
            if (out) e = encode_value(e, FT_STR, *v); /* the same payload for the three */
            if (v->s.len) {
                copy_bytes(p, v->s.ptr, v->s.len);
                p[v->s.len] = '\0';
                *cell++ = str_cell((uint32_t)(p - (char *)r), v->s.len);
                p += v->s.len + 1;
            } else {
                *cell++ = 0; /* "" where the default is not empty */
            }
            break;
        case FT_DOUBLE:
            if (out) e = encode_value(e, FT_DOUBLE, *v);
            memcpy(cell++, &v->d, sizeof v->d);
            break;
        case FT_BOOL:
            if (out) e = encode_value(e, FT_BOOL, *v);
            *cell++ = v->b ? 1 : 0;
            break;
        default: /* FT_REF, FT_INT */
            if (out) e = encode_value(e, t, *v);
            *cell++ = v->i;
            break;
        }
    }
    if (out) {
        e = copy_run(e, enc + from, off[k->nfields] - from);
        buf_commit(out, (size_t)(e - e_start));
    }
    r->size16 = size < UINT16_MAX ? (uint16_t)size : UINT16_MAX;
    return r;
}

struct record *record_build(const struct kind_desc *k, uint64_t id, uint64_t user_id,
                            const union value *vals) {
    return build(k, id, user_id, vals, record_all_fields(k), NULL);
}

struct record *record_build_encode(const struct kind_desc *k, uint64_t id, uint64_t user_id,
                                   const union value *vals, uint32_t given, struct buf *out) {
    return build(k, id, user_id, vals, given & record_all_fields(k), out);
}

uint32_t record_size(const struct record *r) {
    if (r->size16 != UINT16_MAX) return r->size16;
    const struct kind_desc *k = kinds[r->type];
    size_t size = 30; /* id, user id, count varints, frame header: an estimate is enough */
    const uint64_t *cell = r->cell;
    for (int i = 0; i < k->nfields; i++) {
        bool set = r->set >> i & 1;
        if (is_bytes(k->fields[i].type))
            size += (set ? (uint32_t)*cell : meta[r->type].defaults[i].s.len) + 2;
        else
            size += 8;
        cell += set;
    }
    return (uint32_t)size;
}

void record_free(struct record *r) {
    if (r) slab_free(&slab, r, r->slab_class);
}

size_t record_live(void) {
    return slab.live;
}

size_t record_mapped(void) {
    return slab.mapped;
}

/* Set bits below bit i: the index of field i's cell. Portable (no popcnt
 * instruction is assumed); record_values walks the cells without it. */
static inline int cells_before(uint32_t set, int i) {
    uint32_t x = set & ((UINT32_C(1) << i) - 1);
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

union value record_get(const struct record *r, int i) {
    if (!(r->set >> i & 1)) return meta[r->type].defaults[i];
    return record_cell_value(r, kinds[r->type]->fields[i].type, r->cell[cells_before(r->set, i)]);
}

void record_values(const struct record *r, union value *vals) {
    const struct kind_desc *k = kinds[r->type];
    const union value *defs = meta[r->type].defaults;
    const uint64_t *cell = r->cell;
    for (int i = 0; i < k->nfields; i++)
        vals[i] = r->set >> i & 1 ? record_cell_value(r, k->fields[i].type, *cell++) : defs[i];
}

/*
 * The payload in one pass over the set fields: the fields at their defaults
 * between two set ones are one copy of their prepared payload. One
 * reservation: record_size counts a string's bytes plus 2 (its varint takes
 * at most 5) and 8 for any other value (a varint takes at most 10).
 */
void record_encode(const struct record *r, struct buf *out) {
    const struct kind_desc *k = record_kind(r->type);
    if (!meta_ready) meta_init();
    const char *enc = meta[r->type].enc;
    const uint32_t *off = meta[r->type].enc_off;
    uint8_t *p = (uint8_t *)buf_reserve(out, record_size(r) + 10 * (size_t)k->nfields + RUN_SLACK),
            *start = p;
    p += varint_put(p, r->id);
    p += varint_put(p, r->user_id);
    p += varint_put(p, k->nfields);
    uint32_t from = 0; /* the defaults' payload not yet written starts here */
    const uint64_t *cell = r->cell;
    for (uint32_t m = r->set; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        uint8_t t = k->fields[i].type;
        p = copy_run(p, enc + from, off[i] - from);
        from = off[i + 1];
        p = encode_value(p, t, record_cell_value(r, t, *cell++));
    }
    p = copy_run(p, enc + from, off[k->nfields] - from);
    buf_commit(out, (size_t)(p - start));
}

struct record *record_decode(uint8_t type, const uint8_t *p, size_t len) {
    const struct kind_desc *k = record_kind(type);
    if (!k) return NULL;
    uint64_t id, user_id, count;
    size_t n, off = 0;
    if (!(n = varint_get(p, len, &id))) return NULL;
    off += n;
    if (!(n = varint_get(p + off, len - off, &user_id))) return NULL;
    off += n;
    if (!(n = varint_get(p + off, len - off, &count))) return NULL;
    off += n;
    if (id == 0 || id > RECORD_ID_MAX || count > RECORD_MAX_FIELDS) return NULL;
    /* Records belong to a user (0 is the owner table's empty mark); users to nobody. */
    if (record_type_is_system(type) != (user_id == 0) || user_id > RECORD_ID_MAX) return NULL;

    union value vals[RECORD_MAX_FIELDS];
    record_defaults(k, vals);
    for (uint64_t i = 0; i < count; i++) {
        /* Fields this version does not know (written by a newer one) cannot
         * be skipped without their type, so a count above ours is damage. */
        if (i >= k->nfields) return NULL;
        union value *v = &vals[i];
        switch (k->fields[i].type) {
        case FT_STR:
        case FT_COLOR:
        case FT_BYTES: {
            uint64_t sl;
            if (!(n = varint_get(p + off, len - off, &sl))) return NULL;
            off += n;
            if (sl > len - off) return NULL;
            v->s.ptr = (const char *)p + off;
            v->s.len = (uint32_t)sl;
            off += sl;
            break;
        }
        case FT_REF:
        case FT_INT:
            if (!(n = varint_get(p + off, len - off, &v->i))) return NULL;
            off += n;
            break;
        case FT_DOUBLE: {
            if (len - off < 8) return NULL;
            uint64_t bits = 0;
            for (int b = 0; b < 8; b++)
                bits |= (uint64_t)p[off + b] << (8 * b);
            memcpy(&v->d, &bits, 8);
            off += 8;
            break;
        }
        case FT_BOOL:
            if (len - off < 1) return NULL;
            v->b = p[off++] != 0;
            break;
        }
    }
    if (off != len) return NULL;
    return record_build(k, id, user_id, vals);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static inline bool ascii(const char *ptr, size_t len) {
    return record_ascii(ptr, len);
}

static inline bool utf8_valid(const char *ptr, size_t len) {
    if (ascii(ptr, len)) return true; /* the common case */
    const unsigned char *s = (const unsigned char *)ptr, *end = s + len;
    while (s < end) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        int n;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0)
            n = 1, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            n = 2, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return false;
        if (end - s <= n) return false;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        s += n + 1;
    }
    return true;
}

static bool color_valid(const char *ptr, size_t len) {
    if (len != 6) return false;
    for (size_t i = 0; i < 6; i++)
        if (hexval(ptr[i]) < 0) return false;
    return true;
}

/* The text limit's reason names the limit: rewritten when it changes (a
 * server has one limit, so in practice it is written once per field). */
static const char *too_long(struct field_why *w, const struct field *f, uint32_t max) {
    if (!w->too_long || w->too_long_for != max) {
        free(w->too_long);
        w->too_long = reason("%s is longer than %u bytes", f->name, max);
        w->too_long_for = max;
    }
    return w->too_long;
}

/* Only a refused value looks its reason up: the common case stays a few compares. */
static struct field_why *why_of(const struct kind_desc *k, int i) {
    if (!meta_ready) meta_init();
    return &meta[k->type].why[i];
}

const char *record_check_value(const struct kind_desc *k, int i, const union value *v,
                               uint32_t max_string) {
    const struct field *f = &k->fields[i];
    switch (f->type) {
    case FT_STR: {
        uint32_t max = f->max_len ? f->max_len : max_string;
        if (!utf8_valid(v->s.ptr, v->s.len)) return why_of(k, i)->not_utf8;
        if (v->s.len > max) return too_long(why_of(k, i), f, max);
        if ((f->flags & FF_NONEMPTY) && v->s.len == 0) return why_of(k, i)->empty;
        return NULL;
    }
    case FT_COLOR:
        return color_valid(v->s.ptr, v->s.len) ? NULL : why_of(k, i)->format;
    case FT_DOUBLE:
        /* Written so that NaN is refused too. */
        return v->d >= f->min && v->d <= f->max ? NULL : why_of(k, i)->range;
    default:
        return NULL;
    }
}

bool record_utf8_valid(const char *ptr, size_t len) {
    return utf8_valid(ptr, len);
}

size_t record_keyed_open(uint8_t type, struct buf *out) {
    uint8_t *p = (uint8_t *)buf_reserve(out, 2);
    buf_commit(out, varint_put(p, type));
    return out->len;
}

void record_keyed_close(struct buf *out, size_t at) {
    size_t rec_len = out->len - at;
    uint8_t hdr[VARINT_MAX];
    size_t n = varint_put(hdr, rec_len);
    buf_reserve(out, n);
    memmove(out->ptr + at + n, out->ptr + at, rec_len);
    memcpy(out->ptr + at, hdr, n);
    buf_commit(out, n);
}

int record_keyed_split(const uint8_t *p, size_t len, uint8_t *type, const uint8_t **rec,
                       size_t *rec_len, const uint8_t **key, size_t *key_len) {
    uint64_t t, rl;
    size_t n, off = 0;
    if (!(n = varint_get(p, len, &t))) return -1;
    off += n;
    if (!(n = varint_get(p + off, len - off, &rl))) return -1;
    off += n;
    if (t == REC_IDEM || !record_kind((uint8_t)t) || t > REC_KIND_MAX || rl > len - off) return -1;
    *type = (uint8_t)t;
    *rec = p + off;
    *rec_len = (size_t)rl;
    *key = p + off + rl;
    *key_len = len - off - (size_t)rl;
    return 0;
}

void record_rev_head(uint64_t rev, uint8_t type, struct buf *out) {
    uint8_t *p = (uint8_t *)buf_reserve(out, VARINT_MAX + 1);
    size_t n = varint_put(p, rev);
    p[n++] = type;
    buf_commit(out, n);
}

int record_rev_split(const uint8_t *p, size_t len, uint64_t *rev, uint8_t *type,
                     const uint8_t **inner, size_t *inner_len) {
    size_t n = varint_get(p, len, rev);
    if (!n || n >= len || *rev == 0 || !record_type_is_change(p[n])) return -1;
    *type = p[n];
    *inner = p + n + 1;
    *inner_len = len - n - 1;
    return 0;
}
