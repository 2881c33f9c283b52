/*
 * err: every error the service can answer with, in one X-macro list.
 *
 * Each entry generates the enum value, the JSON "Code" string, the HTTP
 * status and the default message, so the README table, the response writer
 * and the tests all read from the same place.
 */
#ifndef EVENTD_ERR_H
#define EVENTD_ERR_H

/* X(enum name, JSON code, HTTP status, default message) */
#define ERR_MAP(X)                                                                                 \
    X(BAD_REQUEST, "bad_request", 400, "malformed HTTP request")                                   \
    X(INVALID_JSON, "invalid_json", 400, "request body is not valid JSON")                         \
    X(INVALID_FIELD, "invalid_field", 400, "a field has an invalid value")                         \
    X(UNKNOWN_FIELD, "unknown_field", 400, "the body names a field this resource does not have")   \
    X(DUPLICATE_FIELD, "duplicate_field", 400, "a field appears twice in the body")                \
    X(ID_MISMATCH, "id_mismatch", 400, "the ID in the body differs from the ID in the path")       \
    X(INVALID_QUERY, "invalid_query", 400, "a query parameter has an invalid value")               \
    X(INVALID_HEADER, "invalid_header", 400, "a request header has an invalid value")              \
    X(UNAUTHORIZED, "unauthorized", 401, "missing or invalid credentials")                         \
    X(CSRF, "csrf", 403, "the form's CSRF token is missing or wrong; reload the page")             \
    X(QUOTA, "quota_exceeded", 403, "the user's quota does not allow this; delete records first")  \
    X(NOT_FOUND, "not_found", 404, "no such resource")                                             \
    X(METHOD_NOT_ALLOWED, "method_not_allowed", 405, "method not allowed on this path")            \
    X(TIMEOUT, "request_timeout", 408, "the request was not received in time")                     \
    X(CONFLICT, "conflict", 409, "the request conflicts with the current state")                   \
    X(CURSOR_EXPIRED, "cursor_expired", 410,                                                       \
      "the cursor is older than the log's last compaction; list, then follow the list's cursor")   \
    X(PRECONDITION_FAILED, "precondition_failed", 412,                                             \
      "the record's current ETag does not match If-Match (or matches If-None-Match)")              \
    X(BODY_TOO_LARGE, "body_too_large", 413, "request body exceeds the size limit")                \
    X(MEDIA_TYPE, "unsupported_media_type", 415, "send a form or JSON body")                       \
    X(IDEMPOTENCY_KEY_REUSED, "idempotency_key_reused", 422,                                       \
      "this Idempotency-Key was used with another request")                                        \
    X(TOO_MANY, "too_many_requests", 429, "too many failed attempts; retry later")                 \
    X(HEADERS_TOO_LARGE, "headers_too_large", 431, "request line and headers exceed the limit")    \
    X(INTERNAL, "internal", 500, "internal error")                                                 \
    X(UNAVAILABLE, "unavailable", 503, "the service cannot take this request now")                 \
    X(DRAINING, "draining", 503, "this instance is stopping; send new requests elsewhere")         \
    X(STORAGE, "storage_error", 503, "the write could not be made durable; it was not saved")      \
    X(NO_ROOM, "insufficient_storage", 507, "the server is short of memory or disk for new data")  \
    X(VERSION, "http_version_not_supported", 505, "HTTP version not supported")

enum err {
    ERR_NONE = 0,
#define X(e, code, status, msg) ERR_##e,
    ERR_MAP(X)
#undef X
};

/* The strings below are static: valid forever. */
/* The JSON "Code" of an error, e.g. "not_found". */
const char *err_code(enum err e);
/* The HTTP status of an error, e.g. 404. */
int err_status(enum err e);
/* The default human-readable message of an error. */
const char *err_message(enum err e);
/* The reason phrase of an HTTP status code, e.g. "Not Found". */
const char *http_reason(int status);

#endif
