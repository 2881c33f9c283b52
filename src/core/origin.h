/*
 * origin: does a request come from this origin, or from a page of another
 * site in a browser (cross-site request forgery)? The account site's form
 * posts and the API's writes ask (docs/SECURITY.md).
 */
#ifndef EVENTD_ORIGIN_H
#define EVENTD_ORIGIN_H

#include <stdbool.h>

#include "core/handlers.h"
#include "http/http.h"

/*
 * The request does not come from another site: Sec-Fetch-Site, when sent,
 * is "same-origin" or "none", and Origin, when sent, is --site-origin or,
 * without it, http(s):// and the request's Host; Origin "null" passes only
 * with such a Sec-Fetch-Site. A request with neither header (a script, a
 * client library, an old browser) passes: the site's token, or the API's
 * credentials, decide.
 */
bool origin_same(const struct handlers *h, const struct http_request *req);

#endif
