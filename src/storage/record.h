/*
 * record: the record kinds (users, themes, addresses, events), their field
 * tables, defaults, validation and the compact binary payload used in the
 * log. Pure: no I/O, no JSON.
 *
 * A record is one immutable allocation: the header, one value per field of
 * its kind, then the bytes of its strings. An update builds a new record and
 * swaps it into the index, so a record can be read (or snapshotted by a
 * compaction) without locks or copies. Only event_id, derived from the events
 * that link a theme or address, is changed in place by the index.
 *
 * Log payload of a record: varint id, varint user_id, varint field count,
 * then each field in table order (string/colour/bytes: varint length + bytes;
 * int: varint; double: 8 bytes IEEE-754 little-endian; bool: 1 byte). A
 * reader fills fields beyond the stored count with defaults, so fields can be
 * appended to a kind without breaking old logs.
 */
#ifndef EVENTD_RECORD_H
#define EVENTD_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"

/* Log frame types. 1..4 carry a whole record of that kind (insert or replace). */
enum rec_type {
    REC_USER = 1,
    REC_THEME = 2,
    REC_ADDRESS = 3,
    REC_EVENT = 4,
    REC_SESSION = 5,  /* a signed-in browser session of the account site */
    REC_ADMIN = 6,    /* an admin API token */
    REC_IDEM = 7,     /* an Idempotency-Key of a create and its first answer (see below) */
    REC_DELETE = 16,  /* payload: varint id */
    REC_NEXT_ID = 17, /* payload: varint next id (written by compaction) */
    REC_NODE = 18,    /* payload: varint node id (1..RECORD_NODE_MAX); see below */
    REC_KEYED = 19,   /* a create and its REC_IDEM key in one frame: see record_keyed_open */
    REC_REV = 20,     /* a change frame with its revision: see record_rev_split */
    REC_REVS = 21,    /* payload: varint rev counter, varint horizon (written by compaction) */
    REC_REV_FLOOR =
        22, /* payload: varint: revs up to it may have been handed out; the last holds */
    REC_EXPORT_END = 23, /* an export's last frame (never in a log): varint records before it */
};
#define REC_KIND_MAX 7

/*
 * Revisions (docs/STORAGE.md "Revisions"): every change frame the server
 * appends (a record image of types 1..REC_KIND_MAX, REC_DELETE, REC_KEYED)
 * gets the next value of one server-wide counter, its rev, and is written
 * wrapped in a REC_REV frame: varint rev, one byte of the inner frame's
 * type, then the inner frame's payload. Replay gives every record the rev
 * of the frame that wrote it, so revs survive restarts and compactions. A
 * change frame of an older log, not wrapped, takes the counter's next
 * value at replay (its implicit rev). REC_REVS, compaction's, states the
 * counter and the horizon: every change with a rev above the horizon is in
 * the log as it was made; those at or below it only as their result.
 */
static inline bool record_type_is_change(uint8_t type) {
    return (type >= REC_USER && type <= REC_KIND_MAX) || type == REC_DELETE || type == REC_KEYED;
}
/* Appends the head of a REC_REV payload (rev, inner type) to out; the inner payload follows. */
void record_rev_head(uint64_t rev, uint8_t type, struct buf *out);
/* Splits a REC_REV payload: 0 with its parts set, or -1 when malformed (an inner type that
 * is not a change, or a rev of 0). */
int record_rev_split(const uint8_t *p, size_t len, uint64_t *rev, uint8_t *type,
                     const uint8_t **inner, size_t *inner_len);

/* Users and admin tokens belong to no user (user_id 0); every other record to one. */
static inline bool record_type_is_system(uint8_t type) {
    return type == REC_USER || type == REC_ADMIN;
}

/* The kinds a user's quota counts (docs/ACCOUNTS.md): its data, not its sessions. */
static inline bool record_type_in_quota(uint8_t type) {
    return type == REC_THEME || type == REC_ADDRESS || type == REC_EVENT;
}

/* Largest id handed out: ids must stay exact in a JavaScript number. */
#define RECORD_ID_MAX ((UINT64_C(1) << 53) - 1)

/*
 * Shards (--node-id): node N in 1..RECORD_NODE_MAX hands out ids
 * N * 2^43 .. (N + 1) * 2^43 - 1 only: 10 bits of node above 43 bits of
 * sequence (8.8e12 ids per node), so ids stay unique across shards and
 * below 2^53. Node 0 is the unsharded server: ids 1..RECORD_ID_MAX, as
 * before node ids existed. A data directory of node N > 0 starts with a
 * REC_NODE frame; one without it is node 0's.
 */
#define RECORD_NODE_SHIFT 43
#define RECORD_NODE_MAX 1023u
/* The first and last id node hands out. */
static inline uint64_t record_node_id_min(uint32_t node) {
    return node ? (uint64_t)node << RECORD_NODE_SHIFT : 1;
}
static inline uint64_t record_node_id_max(uint32_t node) {
    return node ? ((uint64_t)(node + 1) << RECORD_NODE_SHIFT) - 1 : RECORD_ID_MAX;
}

/*
 * The one id parser (path ids, list cursors, ids in bodies): decimal, no
 * sign or leading zero, 1..RECORD_ID_MAX. Returns 0 with *out set, or -1.
 */
int record_parse_id(const char *ptr, size_t len, uint64_t *out);

enum field_type {
    FT_STR,    /* UTF-8 text, limited to the configured length */
    FT_COLOR,  /* six hex digits, no '#', case kept */
    FT_REF,    /* id of another record (0: none) */
    FT_DOUBLE, /* finite number within [min, max] */
    FT_BOOL,
    FT_BYTES, /* binary, never shown (a user's key hash) */
    FT_INT,   /* unsigned integer, never taken from JSON (a session's expiry) */
};

enum field_flags {
    FF_INPUT = 1,    /* settable by create and update */
    FF_OUTPUT = 2,   /* shown in responses */
    FF_NONEMPTY = 4, /* FT_STR: "" is refused */
};

struct field {
    const char *name;
    uint8_t type;     /* enum field_type */
    uint8_t flags;    /* enum field_flags */
    uint16_t max_len; /* FT_STR: a tighter limit than the configured one, 0 for none */
    const char *def;  /* FT_STR, FT_COLOR default */
    double min, max;  /* FT_DOUBLE range */
};

#define RECORD_MAX_FIELDS 32

struct kind_desc {
    const char *name; /* JSON wrapper key: "Theme" */
    const char *path; /* path segment: "theme"; NULL for kinds the API does not serve */
    uint8_t type;     /* enum rec_type */
    uint8_t nfields;
    bool has_event; /* responses show EventID */
    const struct field *fields;
};

union value {
    struct {
        const char *ptr;
        uint32_t len;
    } s;
    uint64_t i;
    double d;
    bool b;
};

/*
 * A record: the header, then one 8-byte cell for each field whose value is
 * not the field's default (in table order; `set` says which), then the bytes
 * of its strings. A field at its default takes no space at all: a record of
 * defaults is its header only, and strings that are the default point at the
 * static one. Read the fields with record_get (or record_ref for an id):
 * the cells are a compact encoding, not union values.
 */
struct record {
    uint64_t id;
    uint64_t user_id;
    uint64_t event_id;  /* themes, addresses: the event that links it, 0 if none (derived) */
    uint64_t rev;       /* the rev of the change that wrote it (see REC_REV); 0 until stored */
    uint32_t set;       /* bit i: field i has a cell (is not its default) */
    uint8_t type;       /* enum rec_type */
    uint8_t slab_class; /* the allocator's (slab.h): what record_free gives back */
    uint16_t size16;    /* record_size when below 0xFFFF (it is computed otherwise) */
    uint64_t cell[];    /* one per bit of set, in field order; string bytes follow */
};

/* Field i of r (of r's kind), as a value: strings point into r or at static
 * defaults, NUL-terminated, valid as long as r. */
union value record_get(const struct record *r, int i);
/*
 * The value in cell c of r, for a field of type t: how record_get reads a
 * cell. For writers that walk every set field in order: the cells are
 * r->cell[0], r->cell[1], ... one per set bit of r->set, in field order.
 */
static inline union value record_cell_value(const struct record *r, uint8_t t, uint64_t c) {
    /* Set whole: with the hardening flags gcc 12 -O3 warned (maybe-uninitialized) of the
     * bytes a bool or an integer leaves unset in the returned union. */
    union value v = {.s = {NULL, 0}};
    switch (t) {
    case FT_STR:
    case FT_COLOR:
    case FT_BYTES:
        v.s.len = (uint32_t)c;
        v.s.ptr = v.s.len ? (const char *)r + (c >> 32) : "";
        return v;
    case FT_DOUBLE:
        memcpy(&v.d, &c, sizeof v.d);
        return v;
    case FT_BOOL:
        v.b = c != 0;
        return v;
    default:
        v.i = c;
        return v;
    }
}
/* Every field of r, as record_get gives them, into vals[0 .. nfields). */
void record_values(const struct record *r, union value *vals);
/* Field i of r, known to be an FT_REF: the id (0, the default, when unset). */
static inline uint64_t record_ref(const struct record *r, int i) {
    return r->set >> i & 1 ? record_get(r, i).i : 0;
}
/* Bytes of r's log payload (an estimate within a few bytes), for compaction accounting. */
uint32_t record_size(const struct record *r);
/* record_size of the record that record_build(k, any id, any user, vals) would give. */
uint32_t record_size_of(const struct kind_desc *k, const union value *vals);
/* record_size_of(k, vals) for vals at k's defaults (record_defaults): a constant. */
uint32_t record_size_of_defaults(const struct kind_desc *k);
/*
 * record_size_of(k, to) from what is known of from, whose record_size_of is
 * from_size: to is from but in the fields of changed. A pass over those
 * fields only.
 */
uint32_t record_size_of_changed(const struct kind_desc *k, const union value *from,
                                uint32_t from_size, const union value *to, uint64_t changed);

/* The descriptor of a record type, or NULL if the type is not a record kind.
 * Descriptors and field tables are static: valid forever. */
const struct kind_desc *record_kind(uint8_t type);
/* The descriptor whose path segment is ptr/len ("theme"), or NULL. */
const struct kind_desc *record_kind_by_path(const char *ptr, size_t len);
/* Index of a field by its JSON name, or -1. */
int record_field_index(const struct kind_desc *k, const char *ptr, size_t len);

/* Derived once per kind from the tables: name lengths, the JSON member
 * prefix ,"Name": of each field, and the default values. */
struct field_meta {
    uint8_t name_len;
    uint8_t key_len; /* of key */
    char key[44];    /* ,"Name": */
};
/* The metadata of k's fields, in table order: static, valid forever. */
const struct field_meta *record_field_meta(const struct kind_desc *k);

/*
 * The names of a kind's fields as a perfect hash: a name's slot comes from
 * its length, first and last bytes and a multiplier chosen once per kind so
 * that no two of its names share one; a lookup is one probe and one compare.
 * Inline, for the JSON decoder's every key.
 */
#define RECORD_LOOKUP_SIZE 64 /* power of two, well above RECORD_MAX_FIELDS */
struct field_lookup {
    uint8_t mul;                     /* the kind's multiplier */
    uint32_t input;                  /* bit i: field i is FF_INPUT (settable by a body) */
    int8_t slot[RECORD_LOOKUP_SIZE]; /* field index by record_name_hash, -1 for none */
    const struct field_meta *fields; /* the kind's, for the names */
};
/* k's lookup: static, valid forever. */
const struct field_lookup *record_field_lookup(const struct kind_desc *k);

static inline unsigned record_name_hash(const char *p, size_t n, unsigned mul) {
    return ((unsigned)n * mul + (unsigned char)p[0] * 7u + (unsigned char)p[n - 1]) %
           RECORD_LOOKUP_SIZE;
}

/* ptr[0 .. n) == name[0 .. n) with a few loads, no call (neither is read past n). */
static inline bool record_name_eq(const char *ptr, const char *name, size_t n) {
    if (n >= 8) {
        uint64_t a, b;
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&a, ptr + i, 8);
            memcpy(&b, name + i, 8);
            if (a != b) return false;
        }
        memcpy(&a, ptr + n - 8, 8);
        memcpy(&b, name + n - 8, 8);
        return a == b;
    }
    if (n >= 4) {
        uint32_t a, b, c, d;
        memcpy(&a, ptr, 4);
        memcpy(&b, name, 4);
        memcpy(&c, ptr + n - 4, 4);
        memcpy(&d, name + n - 4, 4);
        return a == b && c == d;
    }
    for (size_t i = 0; i < n; i++)
        if (ptr[i] != name[i]) return false;
    return true;
}

/* Index of the field named ptr/len in l, or -1. */
static inline int record_field_find(const struct field_lookup *l, const char *ptr, size_t len) {
    if (len == 0) return -1;
    int i = l->slot[record_name_hash(ptr, len, l->mul)];
    if (i < 0) return -1;
    const struct field_meta *m = &l->fields[i];
    return m->name_len == len && record_name_eq(ptr, m->key + 2, len) ? i : -1;
}

/* Fills vals with the defaults of every field of k (strings are static). */
void record_defaults(const struct kind_desc *k, union value *vals);

/*
 * Builds a record in one allocation, copying every string of vals that is
 * not the field's default. The caller owns the result (free with
 * record_free, or hand it to the index). Records come from one slab
 * (slab.h): build and free them on one thread, the loop's.
 */
struct record *record_build(const struct kind_desc *k, uint64_t id, uint64_t user_id,
                            const union value *vals);
void record_free(struct record *r);
/* Records built and not freed, and bytes mapped for them (for the tests). */
size_t record_live(void);
size_t record_mapped(void);

/* Appends the log payload of r to out. */
void record_encode(const struct record *r, struct buf *out);
/*
 * record_build, and record_encode of the result to out, in one pass. given:
 * the fields whose values may differ from k's defaults (bit i: field i); the
 * others must hold their defaults in vals, and are not looked at.
 */
struct record *record_build_encode(const struct kind_desc *k, uint64_t id, uint64_t user_id,
                                   const union value *vals, uint32_t given, struct buf *out);
/* Every field of k, as a given mask. */
static inline uint32_t record_all_fields(const struct kind_desc *k) {
    return k->nfields >= 32 ? UINT32_MAX : (UINT32_C(1) << k->nfields) - 1;
}
/* Decodes a payload of the given type into a new record (the caller's; its
 * strings are copied, p is not kept); NULL when it is malformed. */
struct record *record_decode(uint8_t type, const uint8_t *p, size_t len);

/*
 * Checks v as a value of field i of kind k: the one place where a field's
 * value is validated (the JSON decoder converts types and calls this for
 * every field it keeps). max_string is the limit of text fields that have
 * none of their own (--max-string-bytes). Returns NULL when fine, else a
 * static reason naming the field, e.g. "Lat must be within [-90, 90]", for
 * the JSON error message: valid until a check with another max_string.
 */
const char *record_check_value(const struct kind_desc *k, int i, const union value *v,
                               uint32_t max_string);
/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
bool record_utf8_valid(const char *ptr, size_t len);

/* Is ptr[0 .. len) ASCII? Whole words, the last one overlapping, no byte loop
 * but for strings of under four bytes. */
static inline bool record_ascii(const char *ptr, size_t len) {
    if (len >= 8) {
        uint64_t w, acc = 0;
        for (size_t i = 0; i + 8 < len; i += 8) {
            memcpy(&w, ptr + i, 8);
            acc |= w;
        }
        memcpy(&w, ptr + len - 8, 8);
        return !((acc | w) & UINT64_C(0x8080808080808080));
    }
    if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, ptr, 4);
        memcpy(&b, ptr + len - 4, 4);
        return !((a | b) & 0x80808080u);
    }
    unsigned acc = 0;
    for (size_t i = 0; i < len; i++)
        acc |= (unsigned char)ptr[i];
    return acc < 0x80;
}

/*
 * record_check_value's common case without a call, for a caller that knows
 * the field's type t (a constant where it is inlined, so the switch folds):
 * true when the value is surely fine (record_check_value would return NULL);
 * false when record_check_value must say (it may still find it fine).
 */
static inline bool record_value_plainly_fine(const struct field *f, uint8_t t, const union value *v,
                                             uint32_t max_string) {
    switch (t) {
    case FT_STR: {
        uint32_t max = f->max_len ? f->max_len : max_string;
        return v->s.len <= max && (v->s.len || !(f->flags & FF_NONEMPTY)) &&
               record_ascii(v->s.ptr, v->s.len);
    }
    case FT_DOUBLE:
        return v->d >= f->min && v->d <= f->max; /* NaN: false */
    case FT_COLOR: {
        if (v->s.len != 6) return false;
        for (int j = 0; j < 6; j++) {
            unsigned c = (unsigned char)v->s.ptr[j];
            /* c | 0x20 is in 'a' .. 'f' for 'a' .. 'f' and 'A' .. 'F' only. */
            if (c - '0' >= 10 && (c | 0x20) - 'a' >= 6) return false;
        }
        return true;
    }
    default:
        return true;
    }
}

/* Field ids used by handlers (indexes into the tables). */
enum { USER_NAME, USER_KEY_HASH, USER_PASSWORD_HASH, USER_MAX_RECORDS, USER_MAX_BYTES };
/*
 * A user's own quota limit (USER_MAX_RECORDS, USER_MAX_BYTES) is stored as
 * limit + 1, so that the field's default, 0, means "the server's default"
 * (and users of logs older than these fields have it); a limit of 0 means
 * no limit, as for the server-wide settings.
 */
#define RECORD_LIMIT_MAX RECORD_ID_MAX /* largest own limit: exact in a JavaScript number */
/* The limit in effect for field i of user u, given the server's default. */
static inline uint64_t record_user_limit(const struct record *u, int i, uint64_t server_default) {
    uint64_t own = record_get(u, i).i;
    return own ? own - 1 : server_default;
}
enum { SESSION_TOKEN_HASH, SESSION_EXPIRES, SESSION_CSRF };
enum { ADMIN_NAME, ADMIN_TOKEN_HASH };
/*
 * An Idempotency-Key (docs/STORAGE.md "Idempotency keys"): a record of kind
 * REC_IDEM owned by the user that sent it, with an id of its own. It holds
 * the key, a hash of what was asked (the path's kind and the body), when it
 * was made, and the first answer (status and body), replayed byte for byte.
 * The answer's body (IDEM_ANSWER) is kept in one of three forms:
 *   - the body itself (it starts with '{'): a log of format 3 or older, an
 *     export, or a key whose id does not follow its record's;
 *   - "by reference": IDEM_REF_MARK, then a varint, the record_size of the
 *     record as created: the body is the record RecordID rendered as it was
 *     created (EventID 0), that record unchanged since (its rev the key's),
 *     its id the key's id - 1 (idem_by_ref). The size is what the key may
 *     come to hold, and counts towards the user's key bytes from the start
 *     (index.c). Format 4 (logfile.h);
 *   - IDEM_SNAPSHOT_MARK, the record's type, then its payload as it was
 *     created (record_encode): what the index keeps when a record that a key
 *     refers to is replaced or removed (index.c, idem_hold).
 */
enum { IDEM_KEY, IDEM_REQUEST_HASH, IDEM_CREATED, IDEM_STATUS, IDEM_ANSWER, IDEM_RECORD_ID };
#define IDEM_KEY_MAX 255     /* bytes of a key: printable ASCII, no space */
#define IDEM_HASH_BYTES 16   /* BLAKE2b-128 of the request */
#define IDEM_SNAPSHOT_MARK 0 /* the first byte of an answer kept as its record's payload */
#define IDEM_REF_MARK 1      /* the first byte of an answer by reference */
/* Whether key k refers to record_id's version as created for its answer. */
static inline bool idem_by_ref(const struct record *k, uint64_t record_id) {
    if (k->type != REC_IDEM || k->id != record_id + 1) return false; /* the fields are a key's */
    union value a = record_get(k, IDEM_ANSWER);
    return record_get(k, IDEM_RECORD_ID).i == record_id && a.s.len >= 2 &&
           (uint8_t)a.s.ptr[0] == IDEM_REF_MARK;
}

/*
 * A REC_KEYED payload: varint type of the created record, varint length of
 * its payload, that payload, then the key record's payload. One frame, so
 * that the key and the record it created are durable together or not at all.
 * To append one to out: record_keyed_open writes the type and returns where
 * the record starts; encode the record (record_encode, record_build_encode);
 * record_keyed_close moves it up behind its length; encode the key.
 * record_keyed_split finds the two parts of p (0, or -1 when malformed).
 */
size_t record_keyed_open(uint8_t type, struct buf *out);
void record_keyed_close(struct buf *out, size_t at);
int record_keyed_split(const uint8_t *p, size_t len, uint8_t *type, const uint8_t **rec,
                       size_t *rec_len, const uint8_t **key, size_t *key_len);
enum {
    THEME_NAME,
    THEME_LOGO,
    THEME_BACKGROUND_IMAGE,
    THEME_SECONDARY_IMAGE,
    THEME_PAGE_BG,
    THEME_HEADER_BG,
    THEME_HEADER_TEXT,
    THEME_TEXT_HEADINGS,
    THEME_SMALL_HEADING,
    THEME_STATUS
};
enum {
    ADDR_NAME,
    ADDR_LINE1,
    ADDR_LINE2,
    ADDR_LINE3,
    ADDR_LINE4,
    ADDR_CITY,
    ADDR_STATE,
    ADDR_COUNTRY,
    ADDR_POST,
    ADDR_LON,
    ADDR_LAT,
    ADDR_SHOW_MAP,
    ADDR_TYPE,
    ADDR_STATUS
};
enum { EVENT_NAME, EVENT_THEME_ID, EVENT_ADDRESS_ID, EVENT_STATUS };

extern const struct kind_desc record_user, record_theme, record_address, record_event,
    record_session, record_admin, record_idem;

#endif
