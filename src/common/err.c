/* err: tables generated from ERR_MAP, and HTTP reason phrases. */
#include "common/err.h"

static const struct {
    const char *code;
    int status;
    const char *message;
} table[] = {[ERR_NONE] = {"ok", 200, "ok"},
#define X(e, c, s, m) [ERR_##e] = {c, s, m},
             ERR_MAP(X)
#undef X
};

const char *err_code(enum err e) {
    return table[e].code;
}

int err_status(enum err e) {
    return table[e].status;
}

const char *err_message(enum err e) {
    return table[e].message;
}

const char *http_reason(int status) {
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 303:
        return "See Other";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Content Too Large";
    case 412:
        return "Precondition Failed";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    case 507:
        return "Insufficient Storage";
    default:
        return "Unknown";
    }
}
