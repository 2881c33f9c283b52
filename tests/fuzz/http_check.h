/*
 * http_check: what fuzz_http holds every response it receives to (see
 * README.md here): the HTTP framing, and for each kind of answer its own
 * documented shape: the API's JSON envelope, the account site's HTML pages
 * and redirects, and its cookies (docs/ACCOUNTS.md).
 */
#ifndef EVENTD_HTTP_CHECK_H
#define EVENTD_HTTP_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* The session lifetime fuzz_http configures: a session cookie's Max-Age. */
#define HTTP_CHECK_SESSION_TTL_S 3600
/* Bytes of responses a check may look at (fuzz_http keeps at most this many). */
#define HTTP_CHECK_MAX (4 << 20)

/*
 * Checks the response at buf[*pos, len) and moves *pos past it. Returns
 * NULL when it is well-formed, else what is wrong. head: 0 not a HEAD
 * request, 1 a complete one (no body), 2 a HEAD cut short by an error (no
 * body if the server saw its head complete, else a body: either is right).
 * Sets *close when it says Connection: close, *interim for a 100 Continue.
 */
const char *http_check_response(const char *buf, size_t len, size_t *pos, int head, bool *close,
                                bool *interim);

#endif
