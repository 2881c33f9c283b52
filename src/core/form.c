/*
 * form: the x-www-form-urlencoded decoder (see form.h).
 *
 * One byte at a time through a small state machine, so a chunk boundary can
 * fall anywhere without any carry-over buffer beyond the escape state. Form
 * posts are a few hundred bytes, so the byte loop costs nothing that shows.
 * Values are checked (UTF-8, NUL) when their pair ends, over the at most
 * FORM_MAX_VALUE bytes stored; a value too long is refused as soon as it
 * passes the limit, so a huge value is never read to its end.
 *
 * Error messages name the field from the caller's table, never bytes of
 * the body, so a message can be shown to the user as it is.
 */
#include "core/form.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "storage/record.h"

void form_begin(struct form *f, const struct form_field *fields, size_t nfields) {
    assert(nfields <= FORM_MAX_FIELDS);
    for (size_t i = 0; i < nfields; i++) {
        assert(strlen(fields[i].name) >= 1 && strlen(fields[i].name) <= FORM_MAX_NAME);
        assert(fields[i].max >= 1 && fields[i].max <= FORM_MAX_VALUE);
    }
    f->fields = fields;
    f->nfields = nfields;
    f->in_value = false;
    f->pair_started = false;
    f->esc = 0;
    f->name_len = 0;
    f->cur = -1;
    for (size_t i = 0; i < FORM_MAX_FIELDS; i++) {
        f->values[i][0] = '\0';
        f->lens[i] = 0;
        f->present[i] = false;
    }
    f->strict = false;
    f->unknown[0] = '\0';
    f->err = FORM_OK;
    f->err_field = -1;
    f->err_msg[0] = '\0';
}

/* Strict: a name the table lacks. It is kept, for the answer's Field, only
 * when it is a plain word (letters, digits, '_', '-', '.'): a body's bytes
 * are never echoed otherwise. */
int form_unknown(struct form *f, const char *name, size_t len) {
    bool word = len >= 1 && len <= FORM_MAX_NAME;
    for (size_t i = 0; word && i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    }
    if (word) memcpy(f->unknown, name, len);
    f->unknown[word ? len : 0] = '\0';
    f->err = FORM_UNKNOWN;
    f->err_field = -1;
    if (word)
        snprintf(f->err_msg, sizeof f->err_msg, "%s: no such field", f->unknown);
    else
        snprintf(f->err_msg, sizeof f->err_msg, "a field this body may not have");
    return -1;
}

static int fail(struct form *f, enum form_err err, int field) {
    f->err = err;
    f->err_field = field;
    const char *name = field >= 0 ? f->fields[field].name : NULL;
    switch (err) {
    case FORM_TOO_LONG:
        snprintf(f->err_msg, sizeof f->err_msg, "%s: at most %zu bytes", name,
                 f->fields[field].max);
        break;
    case FORM_BAD_ESCAPE:
        if (name)
            snprintf(f->err_msg, sizeof f->err_msg, "%s: a '%%' not followed by two hex digits",
                     name);
        else
            snprintf(f->err_msg, sizeof f->err_msg,
                     "the form holds a '%%' not followed by two hex digits");
        break;
    case FORM_DUPLICATE:
        snprintf(f->err_msg, sizeof f->err_msg, "%s: given twice", name);
        break;
    case FORM_NOT_UTF8:
        snprintf(f->err_msg, sizeof f->err_msg, "%s: not valid UTF-8", name);
        break;
    case FORM_NUL:
        snprintf(f->err_msg, sizeof f->err_msg, "%s: holds a NUL byte", name);
        break;
    case FORM_SEMICOLON:
        snprintf(f->err_msg, sizeof f->err_msg, "the form holds a ';' (send it as %%3B)");
        break;
    case FORM_UNKNOWN: /* form_unknown */
    case FORM_OK:
        break;
    }
    return -1;
}

/* The name is complete: pick the wanted field it names, if any. */
static int end_name(struct form *f) {
    f->in_value = true;
    f->cur = -1;
    if (f->name_len > FORM_MAX_NAME) return f->strict ? form_unknown(f, f->name, 0) : 0;
    for (size_t i = 0; i < f->nfields; i++) {
        const char *want = f->fields[i].name;
        if (strlen(want) == f->name_len && memcmp(want, f->name, f->name_len) == 0) {
            if (f->present[i]) return fail(f, FORM_DUPLICATE, (int)i);
            f->present[i] = true;
            f->cur = (int)i;
            return 0;
        }
    }
    return f->strict ? form_unknown(f, f->name, f->name_len) : 0;
}

/* The pair is complete (at '&' or the end of the body). */
static int end_pair(struct form *f) {
    if (!f->pair_started) return 0; /* "&&": nothing */
    if (!f->in_value && end_name(f) < 0) return -1;
    int cur = f->cur;
    f->in_value = false;
    f->pair_started = false;
    f->name_len = 0;
    f->cur = -1;
    if (cur < 0) return 0;
    if (memchr(f->values[cur], '\0', f->lens[cur])) return fail(f, FORM_NUL, cur);
    if (!record_utf8_valid(f->values[cur], f->lens[cur])) return fail(f, FORM_NOT_UTF8, cur);
    return 0;
}

/* One decoded byte of the current name or value. */
static int put(struct form *f, char c) {
    if (!f->in_value) {
        if (f->name_len < FORM_MAX_NAME)
            f->name[f->name_len++] = c;
        else
            f->name_len = FORM_MAX_NAME + 1; /* too long for any wanted name */
        return 0;
    }
    if (f->cur < 0) return 0;
    size_t i = (size_t)f->cur;
    if (f->lens[i] >= f->fields[i].max) return fail(f, FORM_TOO_LONG, f->cur);
    f->values[i][f->lens[i]++] = c;
    f->values[i][f->lens[i]] = '\0';
    return 0;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int byte(struct form *f, unsigned char c) {
    if (f->esc) {
        int v = hexval(c);
        if (v < 0) return fail(f, FORM_BAD_ESCAPE, f->in_value ? f->cur : -1);
        if (f->esc == 1) {
            f->esc_hi = (unsigned char)v;
            f->esc = 2;
            return 0;
        }
        f->esc = 0;
        return put(f, (char)(f->esc_hi << 4 | v));
    }
    if (c == '&') return end_pair(f);
    /* A balancer may read a raw ';' as '&' (HAProxy's req.body_param does):
     * "x=1;username=a&username=b" was a's there and b's here, and b was
     * created on a's shard (review, 2026-11-29). */
    if (c == ';') return fail(f, FORM_SEMICOLON, -1);
    f->pair_started = true;
    if (c == '%') {
        f->esc = 1;
        return 0;
    }
    if (c == '=' && !f->in_value) return end_name(f);
    return put(f, c == '+' ? ' ' : (char)c);
}

int form_feed(struct form *f, const char *ptr, size_t len) {
    if (f->err) return -1;
    for (size_t i = 0; i < len; i++)
        if (byte(f, (unsigned char)ptr[i]) < 0) return -1;
    return 0;
}

int form_finish(struct form *f) {
    if (f->err) return -1;
    if (f->esc) return fail(f, FORM_BAD_ESCAPE, f->in_value ? f->cur : -1);
    return end_pair(f);
}

bool form_get(const struct form *f, size_t idx, struct slice *out) {
    assert(idx < f->nfields);
    out->ptr = f->values[idx];
    out->len = f->lens[idx];
    return f->present[idx];
}
