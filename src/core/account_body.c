/*
 * account_body: the body of an account form post (site.c, admin.c): an
 * application/x-www-form-urlencoded form through the streaming decoder of
 * form.h, or, for the JSON variant, a flat JSON object of strings that
 * yajl's callbacks write into the same form fields. Either way the body is
 * consumed chunk by chunk as it arrives and the handler reads the fields
 * with form_get.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/account_body.h"
#include "core/reply.h"
#include "storage/record.h"

static int j_value(void *ctx, const unsigned char *s, size_t n);
static int j_bad(void *ctx);

static int j_null(void *ctx) {
    struct account_body *b = ctx;
    if (b->json_depth != 1) return j_bad(ctx);
    if (!b->json_error && b->numbers && b->json_field >= 0)
        return j_value(ctx, (const unsigned char *)"", 0); /* null: the empty value */
    return !b->json_error;
}

static int j_bad(void *ctx) {
    struct account_body *b = ctx;
    b->json_error = true;
    snprintf(b->form.err_msg, sizeof b->form.err_msg, "%s",
             b->json_depth < 1 ? (b->numbers ? "the body must be a JSON object"
                                             : "the body must be a JSON object of strings")
             : b->numbers      ? "every member must be null or an integer"
                               : "every member must be a string");
    b->form.err_field = b->json_field;
    return 0;
}
static int j_bool(void *ctx, int v) {
    (void)v;
    return j_bad(ctx);
}
static int j_num(void *ctx, const char *s, size_t n) {
    struct account_body *b = ctx;
    if (b->numbers) return j_value(ctx, (const unsigned char *)s, n); /* as its text */
    return j_bad(ctx);
}

/* A JSON string: numbers-only bodies take none (null is how to say "none"). */
static int j_string(void *ctx, const unsigned char *s, size_t n) {
    struct account_body *b = ctx;
    if (b->numbers && b->json_field >= 0) return j_bad(ctx);
    return j_value(ctx, s, n);
}

static int j_value(void *ctx, const unsigned char *s, size_t n) {
    struct account_body *b = ctx;
    if (b->json_depth != 1) return j_bad(ctx);
    int f = b->json_field;
    if (f < 0) return 1; /* a member we do not use */
    struct form *fm = &b->form;
    if (fm->present[f]) {
        snprintf(fm->err_msg, sizeof fm->err_msg, "%s: given twice", fm->fields[f].name);
        fm->err_field = f;
        b->json_error = true;
        return 0;
    }
    if (n > fm->fields[f].max) {
        snprintf(fm->err_msg, sizeof fm->err_msg, "%s: at most %zu bytes", fm->fields[f].name,
                 fm->fields[f].max);
        fm->err_field = f;
        b->json_error = true;
        return 0;
    }
    if (memchr(s, 0, n)) {
        snprintf(fm->err_msg, sizeof fm->err_msg, "%s: must not contain NUL", fm->fields[f].name);
        fm->err_field = f;
        b->json_error = true;
        return 0;
    }
    /* As the form's decoder: a value is valid UTF-8 (yajl lets overlongs through). */
    if (!record_utf8_valid((const char *)s, n)) {
        snprintf(fm->err_msg, sizeof fm->err_msg, "%s: not valid UTF-8", fm->fields[f].name);
        fm->err_field = f;
        b->json_error = true;
        return 0;
    }
    memcpy(fm->values[f], s, n);
    fm->values[f][n] = 0;
    fm->lens[f] = n;
    fm->present[f] = true;
    return 1;
}

static int j_map_key(void *ctx, const unsigned char *s, size_t n) {
    struct account_body *b = ctx;
    b->json_field = -1;
    for (size_t i = 0; i < b->form.nfields; i++)
        if (strlen(b->form.fields[i].name) == n && memcmp(b->form.fields[i].name, s, n) == 0)
            b->json_field = (int)i;
    if (b->json_field < 0 && b->form.strict && b->json_depth == 1) {
        form_unknown(&b->form, (const char *)s, n);
        b->json_error = true;
        return 0;
    }
    return 1;
}

static int j_start_map(void *ctx) {
    struct account_body *b = ctx;
    if (++b->json_depth > 1) return j_bad(ctx);
    return 1;
}
static int j_end_map(void *ctx) {
    struct account_body *b = ctx;
    b->json_depth--;
    return 1;
}
static int j_start_array(void *ctx) {
    return j_bad(ctx);
}
static int j_end_array(void *ctx) {
    return j_bad(ctx);
}

static const yajl_callbacks jcb = {j_null,    j_bool,        NULL,        NULL,
                                   j_num,     j_string,      j_start_map, j_map_key,
                                   j_end_map, j_start_array, j_end_array};

bool account_body_begin(struct account_body *b, struct http_request *req, struct http_response *r,
                        const struct form_field *ff, size_t nfields) {
    struct slice ct = http_request_field(req, HF_CONTENT_TYPE);
    form_begin(&b->form, ff, nfields);
    b->numbers = false;
    b->json_error = false;
    b->json_any = false;
    memset(&b->esc, 0, sizeof b->esc);
    memset(&b->tok, 0, sizeof b->tok);
    b->json_depth = 0;
    b->json_field = -1;
    /* One media type: a list (one line naming two, or two lines, which the
     * parser joins with ", ") is refused. A balancer that places a
     * registration by its username may read the body by another type of the
     * list than this first one (HAProxy's req.hdr takes a list's items one by
     * one): a form read here, a JSON "username" read there, and the name
     * would be created on a shard that is not its own (review, 2026-11-29). */
    if (memchr(ct.ptr, ',', ct.len)) {
        http_response_error(r, ERR_MEDIA_TYPE, NULL,
                            "send one Content-Type: application/x-www-form-urlencoded or "
                            "application/json");
        b->kind = BODY_NONE;
        return false;
    }
    if (ct.len >= 33 && strncasecmp(ct.ptr, "application/x-www-form-urlencoded", 33) == 0) {
        b->kind = BODY_FORM;
        return true;
    }
    if (ct.len >= 16 && strncasecmp(ct.ptr, "application/json", 16) == 0) {
        b->kind = BODY_JSON;
        b->yh = yajl_alloc(&jcb, NULL, b);
        return true;
    }
    if (ct.len == 0 && !req->has_body) {
        b->kind = BODY_FORM; /* an empty post: every field absent */
        return true;
    }
    http_response_error(r, ERR_MEDIA_TYPE, NULL,
                        "send application/x-www-form-urlencoded or application/json");
    b->kind = BODY_NONE;
    return false;
}

void account_body_feed(struct account_body *b, const char *ptr, size_t len) {
    if (b->kind == BODY_FORM) {
        form_feed(&b->form, ptr, len);
    } else if (b->kind == BODY_JSON && !b->json_error) {
        if (len) b->json_any = true;
        /* As json.c: the bytes before a bad escape are parsed first. */
        long bad = json_escapes_scan(&b->esc, ptr, len);
        size_t n = bad >= 0 ? (size_t)bad : len;
        /* As json.c: a token (which yajl would buffer whole when a chunk ends
         * inside it) longer than any value or name of a form can be is refused
         * at the byte that makes it so. */
        long over = json_tokens_scan(&b->tok, ptr, n, JSON_TOKEN_MAX(FORM_MAX_VALUE));
        if (over >= 0) n = (size_t)over;
        yajl_status st = yajl_parse(b->yh, (const unsigned char *)ptr, n);
        if (b->json_error) return; /* a callback said why */
        if (st == yajl_status_ok && over >= 0) {
            b->json_error = true;
            int f = b->tok.opener == ':' ? b->json_field : -1;
            b->form.err_field = f;
            if (f >= 0)
                snprintf(b->form.err_msg, sizeof b->form.err_msg, "%s: at most %zu bytes",
                         b->form.fields[f].name, b->form.fields[f].max);
            else
                snprintf(b->form.err_msg, sizeof b->form.err_msg,
                         "a JSON string or number of over %u bytes",
                         JSON_TOKEN_MAX(FORM_MAX_VALUE));
            return;
        }
        if (st != yajl_status_ok || bad >= 0) {
            b->json_error = true;
            b->form.err_field = -1;
            snprintf(b->form.err_msg, sizeof b->form.err_msg, "%s",
                     st != yajl_status_ok
                         ? "the body is not valid JSON"
                         : "the body is not valid JSON: a \\u escape of half a UTF-16 surrogate "
                           "pair");
        }
    }
}

bool account_body_finish(struct account_body *b, struct http_response *r) {
    if (b->kind == BODY_FORM && form_finish(&b->form) == 0) return true;
    if (b->form.err == FORM_UNKNOWN) { /* strict, form or JSON */
        http_response_error(r, ERR_UNKNOWN_FIELD, b->form.unknown[0] ? b->form.unknown : NULL,
                            b->form.err_msg);
        return false;
    }
    if (b->kind == BODY_FORM) {
        const struct form *f = &b->form;
        http_response_error(r, ERR_INVALID_FIELD,
                            f->err_field >= 0 ? f->fields[f->err_field].name : NULL,
                            form_error_message(f));
        return false;
    }
    if (!b->json_error && b->json_any && yajl_complete_parse(b->yh) != yajl_status_ok) {
        b->json_error = true;
        b->form.err_field = -1;
        snprintf(b->form.err_msg, sizeof b->form.err_msg, "the body is not a complete JSON object");
    }
    if (!b->json_error) return true;
    http_response_error(r, b->form.err_field >= 0 ? ERR_INVALID_FIELD : ERR_INVALID_JSON,
                        b->form.err_field >= 0 ? b->form.fields[b->form.err_field].name : NULL,
                        b->form.err_msg);
    return false;
}

void account_body_end(struct account_body *b) {
    if (b->kind == BODY_JSON && b->yh) yajl_free(b->yh);
    b->yh = NULL;
    b->kind = BODY_NONE;
}
