/*
 * auth: API keys and HTTP Basic authentication.
 *
 * A key is 256 random bits shown once as 43 characters of unpadded
 * base64url. Only its BLAKE2b-256 hash (libsodium generic hash) is stored:
 * the key has full entropy, so a fast unsalted hash is enough to make the
 * data directory useless for logging in. Checking a request hashes the
 * presented key and compares with sodium_memcmp; an unknown user is compared
 * against a dummy hash, so the work does not depend on whether the user
 * exists.
 */
#ifndef EVENTD_AUTH_H
#define EVENTD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "storage/index.h"

#define AUTH_HASH_BYTES 32
#define AUTH_KEY_CHARS 43

/* Initializes libsodium; returns 0 or -1. */
int auth_init(void);
/* Writes a new printable key and its NUL to out. */
void auth_new_key(char out[AUTH_KEY_CHARS + 1]);
void auth_hash_key(const char *ptr, size_t len, uint8_t out[AUTH_HASH_BYTES]);
/* A username is 1..64 characters of [A-Za-z0-9._-]. Returns NULL or the reason. */
const char *auth_check_username(const char *name);
/*
 * The credentials in an Authorization header value of this scheme ("Basic",
 * "Bearer"; the admin token's and the API key's one rule): the scheme,
 * matched without regard to case, then one or more spaces, then the
 * credentials, with any spaces and tabs after them left out. Returns true
 * with *out pointing into header (valid as header), or false when the value
 * is of another scheme or carries nothing after it.
 */
bool auth_credentials(struct slice header, const char *scheme, struct slice *out);
/*
 * Checks an Authorization header value ("Basic <base64(user:key)>") against
 * the users in ix. Returns the user record, or NULL for missing, malformed
 * or wrong credentials. The record is the index's, valid as index_get's
 * result: until the next change of that user (a put, swap or removal of
 * its id, a db undo included), so never across loop turns: keep its id.
 */
const struct record *auth_check(const struct index *ix, struct slice header);
/*
 * Some user, picked by the bytes of name (len bytes), or NULL when there is
 * none: an unknown name's check does its work against this one, so that it
 * costs what a known name's does. Valid as auth_check's result.
 */
const struct record *auth_decoy_user(const struct index *ix, const char *name, size_t len);

#endif
