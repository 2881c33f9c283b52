/*
 * account_body: an account form (registration, sign-in, password change)
 * read from a form post or from the JSON variant, fed chunk by chunk; used
 * by the account site and the admin API.
 */
#ifndef EVENTD_CORE_ACCOUNT_BODY_H
#define EVENTD_CORE_ACCOUNT_BODY_H

#include <stdbool.h>
#include <stddef.h>
#include <yajl/yajl_parse.h>

#include "core/form.h"
#include "core/json.h"
#include "http/http.h"

/* An account form, from a form post or the JSON variant (site.c, admin.c). */
struct account_body {
    uint8_t kind; /* BODY_NONE, BODY_FORM, BODY_JSON */
    struct form form;
    yajl_handle yh; /* JSON variant: a flat object of strings into form's fields */
    int json_depth;
    int json_field; /* the field the next JSON value is for, -1 for an unknown key */
    bool json_error;
    bool json_any; /* a byte of JSON came: an empty body is an empty object */
    struct json_escapes esc;
    struct json_tokens tok; /* a token left open by the last chunk (json.h) */
    bool numbers; /* JSON: only numbers (taken as their text) and null (as ""); set after begin */
};
enum { BODY_NONE, BODY_FORM, BODY_JSON };

/* Starts reading a form or JSON body with these fields; false after answering 415. */
bool account_body_begin(struct account_body *b, struct http_request *req, struct http_response *r,
                        const struct form_field *fields, size_t nfields);
void account_body_feed(struct account_body *b, const char *ptr, size_t len);
/* Ends the body; false after answering 400 (naming the field). */
bool account_body_finish(struct account_body *b, struct http_response *r);
void account_body_end(struct account_body *b);

#endif
