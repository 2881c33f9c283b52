/*
 * form: a streaming application/x-www-form-urlencoded decoder for the
 * account site's form posts. The body is fed in chunks as it arrives; a
 * pair may be split anywhere, inside a %XX escape included.
 *
 * The caller declares the fields it wants (name and the most decoded bytes
 * it takes); values of those fields are percent-decoded, '+' read as a
 * space, into storage inside struct form (no heap). Names are decoded the
 * same way before they are compared. Other names are ignored, their values
 * skipped unstored; an empty pair ("&&") is skipped; a pair without '='
 * ("name") gives the empty value.
 *
 * The first error wins and sticks: a value longer than its field's limit
 * (reported as soon as it is passed), a '%' not followed by two hex digits
 * (anywhere in the body: the body is malformed), a wanted field given
 * twice, a value that is not strict UTF-8, a NUL byte in a value, or a ';'
 * not percent-encoded (anywhere: HAProxy's req.body_param, which places a
 * registration by its username, reads ';' as '&', and a browser encodes it
 * as %3B). The total body limit is the caller's.
 *
 * Pure: no I/O, no allocation.
 */
#ifndef EVENTD_FORM_H
#define EVENTD_FORM_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define FORM_MAX_FIELDS 8  /* wanted fields per form */
#define FORM_MAX_VALUE 256 /* decoded bytes of a value, the largest limit a field may declare */
#define FORM_MAX_NAME 32   /* decoded bytes of a wanted field's name */
#define FORM_ERROR_LEN 96  /* bytes of the error message, with its NUL */

/* A wanted field; the caller's table must outlive the struct form. */
struct form_field {
    const char *name; /* NUL-terminated, 1..FORM_MAX_NAME bytes */
    size_t max;       /* most decoded bytes of the value, 1..FORM_MAX_VALUE */
};

enum form_err {
    FORM_OK = 0,
    FORM_TOO_LONG,   /* a value over its field's limit */
    FORM_BAD_ESCAPE, /* '%' not followed by two hex digits */
    FORM_DUPLICATE,  /* a wanted field given twice */
    FORM_NOT_UTF8,   /* a value that is not strict UTF-8 */
    FORM_NUL,        /* a NUL byte in a value */
    FORM_UNKNOWN,    /* strict: a field the table does not have */
    FORM_SEMICOLON,  /* a ';' not percent-encoded */
};

struct form {
    const struct form_field *fields;
    size_t nfields;
    /* Decoding state. */
    bool in_value;            /* past the '=' of the current pair */
    bool pair_started;        /* the current pair has a byte or an '=' */
    unsigned char esc;        /* 0, or 1/2 after '%' / '%X' */
    unsigned char esc_hi;     /* the value of that X */
    char name[FORM_MAX_NAME]; /* the current pair's decoded name so far */
    size_t name_len;          /* bytes; FORM_MAX_NAME + 1 once too long to be wanted */
    int cur;                  /* wanted field of the current value, or -1 */
    /* Results. */
    char values[FORM_MAX_FIELDS][FORM_MAX_VALUE + 1]; /* decoded, NUL-terminated */
    size_t lens[FORM_MAX_FIELDS];                     /* bytes */
    bool present[FORM_MAX_FIELDS];
    bool strict; /* a field not in the table is an error (set after form_begin) */
    char unknown[FORM_MAX_NAME + 1]; /* FORM_UNKNOWN: its name when it is a plain word, or "" */
    enum form_err err;
    int err_field; /* the field the error is about, or -1 */
    char err_msg[FORM_ERROR_LEN];
};

/*
 * Starts decoding a body for the nfields (at most FORM_MAX_FIELDS) fields
 * of the table fields, which f keeps a pointer to. Resets f completely, so
 * one struct form may be reused for body after body.
 */
void form_begin(struct form *f, const struct form_field *fields, size_t nfields);

/* Decodes the next len bytes of the body. Returns 0, or -1 once an error is
 * known (form_error says which); after an error further chunks are ignored. */
int form_feed(struct form *f, const char *ptr, size_t len);

/* Ends the body (completing its last pair). Returns 0, or -1 as form_feed. */
int form_finish(struct form *f);

/*
 * After form_finish returned 0: whether field idx was in the body, and its
 * decoded value in *out (NUL-terminated, valid until the next form_begin on
 * f). A field absent from the body gives false and the empty value.
 */
bool form_get(const struct form *f, size_t idx, struct slice *out);

/* Records the error FORM_UNKNOWN for the field name[0..len) (form.c; the JSON
 * variant of account_body.c says it too). Returns -1. */
int form_unknown(struct form *f, const char *name, size_t len);

/* The first error, or FORM_OK. */
static inline enum form_err form_error(const struct form *f) {
    return f->err;
}

/*
 * The first error as a sentence naming the field and, for a value too long,
 * the limit ("password: at most 256 bytes"); "" when there is none. Valid
 * until the next form_begin on f.
 */
static inline const char *form_error_message(const struct form *f) {
    return f->err_msg;
}

#endif
