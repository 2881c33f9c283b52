/*
 * etag: the strong entity tags of records and the conditional request
 * headers (RFC 9110 8.8.3, 13.1): If-Match and If-None-Match.
 *
 * A record's ETag is made of revs (docs/STORAGE.md "Revisions"), which the
 * log keeps, so it is the same after a restart or a compaction. It covers
 * everything GET shows of the record: a theme's or address's own rev and
 * the event that links it (its EventID); an event's own rev and the revs of
 * the theme and address it embeds. README "Conditional requests" has the
 * format: "R", "R-eE" (a linked theme or address), "R-tT-aA" (an event
 * with its theme's and address's revs; a part is left out when none), and
 * on a shard "-nN", its node: revs are each node's own count, and a user
 * moved to another shard (docs/SCALING.md) must not see its records' later
 * states there take the ETags their earlier states had on the old one.
 */
#ifndef EVENTD_CORE_ETAG_H
#define EVENTD_CORE_ETAG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "http/http.h"
#include "storage/db.h"

/* Bytes of the longest ETag, quotes included: three 20-digit numbers and "-t", "-a", then
 * "-n" and a node (at most 4 digits). */
#define ETAG_MAX HTTP_ETAG_MAX
_Static_assert(ETAG_MAX >= 2 + 3 * 20 + 4 + 2 + 4, "ETag room");
_Static_assert(RECORD_NODE_MAX <= 9999, "a node's 4 digits");

/* r's ETag, as numbers (http_etag_format writes it). */
void etag_of(const struct db *db, const struct record *r, struct http_etag *out);

/*
 * Whether an If-Match or If-None-Match value (a list of entity tags, or
 * "*") matches the current ETag etag (NULL: no current record). If-Match
 * compares strongly (a weak tag W/"..." never matches), If-None-Match
 * weakly (RFC 9110 8.8.3.2). Returns 1 (matches), 0 (does not) or -1 when
 * the value is not a list of entity tags.
 */
int etag_match(struct slice value, const char *etag, size_t etag_len, bool weak);

#endif
