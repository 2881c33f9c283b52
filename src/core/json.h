/*
 * json: the yajl streaming adapter that decodes request bodies straight into
 * a record draft, driven by the record field tables, and the
 * record writer (the text primitives are common/json_write.h).
 *
 * The decoder is fed each body chunk as it arrives; yajl keeps only the
 * token in progress, the decoder keeps only the typed field values (strings
 * copied once into the request arena, or, from a chunk the caller keeps
 * until the end, left where they stand). Nothing holds the whole body. Only
 * this module knows yajl's convention (callbacks return nonzero to go on).
 *
 * Types are converted here; every value is then checked by record.c
 * (record_check_value), the one place where values are validated.
 *
 * Accepted shapes: {"Theme": {fields}} (the wrapper named by the kind) or a
 * bare {fields}. Output-only fields and ID/UserID/EventID are skipped
 * (ID is captured for the update check). null means "not given".
 */
#ifndef EVENTD_JSON_H
#define EVENTD_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <yajl/yajl_parse.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/json_write.h"
#include "storage/record.h"

/*
 * The \u escapes of a JSON text fed in chunks. yajl decodes a high surrogate
 * escape that no low one follows as '?', and pairs it with whatever \u
 * escape follows: "a\ud800b" would be stored as "a?b", "\ud800\u0041" as
 * U+10041. Such text is refused before yajl sees it.
 */
struct json_escapes {
    uint8_t state;  /* where in an escape the last chunk ended (json.c) */
    uint8_t digits; /* hex digits of the \uXXXX being read */
    bool want_low;  /* a high surrogate was read: its low one must follow at once */
    uint16_t cp;
};
/* Scans the next n bytes: the offset of the byte that shows an unpaired surrogate escape
 * (or a lone low one), or -1. */
long json_escapes_scan(struct json_escapes *e, const char *p, size_t n);

/*
 * The token (a string, with its quotes, or a number or literal) a JSON text
 * fed in chunks ends inside: yajl keeps such a token whole in a buffer of
 * its own until its end comes, so without a check one string could hold as
 * much as --max-body-bytes per connection (review, 2026-11-29). Its length
 * is checked before yajl is given the chunk.
 */
enum json_token_state { JSON_TOK_NONE, JSON_TOK_STR, JSON_TOK_STR_ESC, JSON_TOK_BARE };
struct json_tokens {
    uint8_t state;  /* enum json_token_state: outside a token, in a string, after its
                     * backslash, in a bare token */
    uint8_t last;   /* the last byte outside a token that was not white space */
    uint8_t opener; /* that byte when the token began: ':' for a member's value */
    uint32_t len;   /* bytes of the token so far (saturating) */
};
/* Scans the next n bytes: the offset of the byte at which a token grows past
 * max bytes (the scan stops there), or -1. */
long json_tokens_scan(struct json_tokens *t, const char *p, size_t n, uint32_t max);
/* The longest token a value of at most max_string bytes can be written as
 * (each byte a 6-byte \u escape, and the quotes); numbers are held to it too. */
#define JSON_TOKEN_MAX(max_string) (6u * (max_string) + 2u)

struct json_decoder {
    yajl_handle h;
    struct arena *arena; /* request-scoped: strings and what yajl_room cannot hold */
    const struct kind_desc *kind;
    const struct field_lookup *names; /* kind's */
    uint32_t max_string;              /* bytes */
    uint32_t max_depth;               /* deepest nesting of maps and arrays (--max-json-depth) */
    uint64_t fed;                     /* body bytes fed before the current chunk */
    int depth;                        /* nesting of maps and arrays */
    int fields_depth;                 /* depth of the map holding the fields, 0 until known */
    int skip_depth;                   /* > 0: inside a skipped value */
    int field;             /* field the next value is for: >= 0 table index, or one of JF_* */
    bool wrapped;          /* saw {"Theme": ...} */
    bool done_top;         /* top-level value complete */
    uint64_t top_end;      /* when done_top: body bytes up to the end of that value */
    bool any;              /* any byte fed */
    uint64_t seen_keys;    /* bit i: field i's key was seen */
    uint64_t present;      /* bit i: field i was given a value (not null) */
    uint32_t seen_special; /* ID, UserID, EventID given */
    uint8_t name_len;      /* of kind->name */
    const char *chunk;     /* the chunk being parsed, NULL between feeds */
    size_t chunk_len;      /* bytes */
    bool chunk_held;       /* the chunk stays valid until json_decoder_end: strings stay in it */
    uint64_t in_chunk;     /* bit i: vals[i] is a string still pointing into chunk */
    int64_t str_delta;     /* bytes: the strings taken, less the defaults they replaced */
    /* bit i: vals[i] is a string taken as it stood in the body, no escape
     * decoded: yajl lets no '"', '\\' or byte below 0x20 stand there, so
     * none of its bytes needs escaping when it is written out again. */
    uint64_t plain;
    /* bit i: vals[i] is a double read from a short decimal (not 0): dec[i]
     * holds its digits and decimals without trailing zeros (m << 4 | k), the
     * shortest form that reads back as it, which json_put_double writes. */
    uint32_t decimals;
    struct json_escapes esc;
    struct json_tokens tok; /* a token left open by a chunk not ending the body */
    /* When in_chunk: the start of the first of those strings, the end of the
     * last (they are taken in the chunk's order). */
    const char *chunk_lo, *chunk_hi;
    union value vals[RECORD_MAX_FIELDS]; /* the decoded values, defaults where not present */
    uint64_t dec[RECORD_MAX_FIELDS];     /* where decimals says: see there */
    bool has_id;
    uint64_t id; /* "ID" in the body, when has_id */
    bool id_invalid;
    enum err err;          /* ERR_NONE while fine */
    const char *err_field; /* static or in the arena: valid until the arena is reset */
    char err_msg[200];
    uint32_t yajl_used;               /* bytes of yajl_room given to yajl */
    _Alignas(16) char yajl_room[640]; /* yajl's first allocations (a_malloc) */
};

/*
 * Starts decoding a body for kind k; allocations come from d itself and
 * arena. k and arena are stored: they must stay valid, and d must not move
 * (yajl keeps pointers into it), until json_decoder_end. The decoded
 * strings (vals: ptr and len, not NUL-terminated) live in arena, the static
 * field tables, or a chunk given to json_decoder_feed_held: valid until the
 * arena is reset, or for the last, as long as that chunk. err_field lives in
 * arena or the tables.
 *
 * Maps and arrays nest at most max_depth deep (the body's own object is depth
 * 1; at least 2), skipped values included: yajl stacks each level, so without
 * a bound a body of '[' held twice its size per connection until it ended.
 * One level more is refused (ERR_INVALID_JSON) at its opening byte.
 */
void json_decoder_begin(struct json_decoder *d, const struct kind_desc *k, struct arena *arena,
                        uint32_t max_string, uint32_t max_depth);
/* Feeds one chunk (not kept after the call). Returns 0, or -1 once an error
 * is known (d->err etc.). */
int json_decoder_feed(struct json_decoder *d, const char *ptr, size_t len);
/* json_decoder_feed for a chunk that the caller keeps valid, unchanged, until
 * it is done with vals (json_decoder_end at the latest): the strings read
 * from it are not copied; vals point into ptr. Typically the body's last
 * chunk, when the request is completed before its bytes go. */
int json_decoder_feed_held(struct json_decoder *d, const char *ptr, size_t len);
/* Ends the body. Returns 0 when a complete, valid object was read, else -1. */
int json_decoder_finish(struct json_decoder *d);
/* record_size_of(kind, vals), kept as the values come (no pass over the fields): a
 * create's size for its quota check. */
uint32_t json_decoder_record_size(const struct json_decoder *d);
/* Drops the yajl handle (its memory is d's and the arena's, reclaimed with them). */
void json_decoder_end(struct json_decoder *d);

/* ---- writer ---- */

/*
 * Appends a record as a JSON object: ID, UserID, EventID (themes and
 * addresses), then every output field in table order. With open = true the
 * closing brace is left off so the caller can add members.
 */
void json_write_record(struct buf *b, const struct record *r, bool open);
/*
 * json_write_record of a record built from d's values (those of the fields d
 * marks, unchanged), the same bytes with less work: the strings d took as
 * they stood (plain) are copied without a look, the short decimals
 * (decimals) written from their digits without a search. d is read during
 * the call only.
 */
void json_write_record_decoded(struct buf *b, const struct record *r, bool open,
                               const struct json_decoder *d);

struct db;
/*
 * The body of idempotency key k's first answer (record.h: IDEM_ANSWER's three
 * forms), appended to b: kept as it was, or the record rendered as it was
 * created, from db by reference or from the payload the key holds. false
 * when there is none to give: a key by reference whose record is gone, or a
 * payload that does not decode (damage a replay or an import let through).
 */
bool json_write_key_answer(struct buf *b, const struct db *db, const struct record *k);

#endif
