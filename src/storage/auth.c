/* auth: see auth.h. */
#include "storage/auth.h"

#include <sodium.h>
#include <string.h>
#include <strings.h>

#include "common/b64.h"

int auth_init(void) {
    return sodium_init() < 0 ? -1 : 0;
}

void auth_new_key(char out[AUTH_KEY_CHARS + 1]) {
    unsigned char raw[32];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2base64(out, AUTH_KEY_CHARS + 1, raw, sizeof raw,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof raw);
}

void auth_hash_key(const char *ptr, size_t len, uint8_t out[AUTH_HASH_BYTES]) {
    crypto_generichash(out, AUTH_HASH_BYTES, (const unsigned char *)ptr, len, NULL, 0);
}

const char *auth_check_username(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 64) return "a username has 1 to 64 characters";
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return "a username may hold only letters, digits, '.', '_' and '-'";
    }
    return NULL;
}

bool auth_credentials(struct slice h, const char *scheme, struct slice *out) {
    /* The scheme is case-insensitive; then one or more spaces and the token.
     * llhttp drops the whitespace before a header value but keeps the one
     * after it. */
    size_t n = strlen(scheme);
    if (h.len < n + 2 || strncasecmp(h.ptr, scheme, n) != 0 || h.ptr[n] != ' ') return false;
    const char *t = h.ptr + n + 1, *end = h.ptr + h.len;
    while (t < end && *t == ' ')
        t++;
    while (end > t && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (t == end) return false;
    *out = (struct slice){t, (size_t)(end - t)};
    return true;
}

const struct record *auth_decoy_user(const struct index *ix, const char *name, size_t len) {
    const struct id_list *users = index_owned(ix, UINT64_MAX, REC_USER);
    if (!users->len) return NULL;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 16777619u;
    return index_get(ix, users->ids[h % users->len]);
}

const struct record *auth_check(const struct index *ix, struct slice h) {
    struct slice cred;
    if (!auth_credentials(h, "Basic", &cred)) return NULL;
    const char *b64 = cred.ptr, *end = cred.ptr + cred.len;
    unsigned char raw[256];
    /* common/b64.c, constant-time as libsodium's decoder, a fifth of its cost. */
    long n = (size_t)(end - b64) > 340 ? -1 : b64_decode(raw, sizeof raw, b64, (size_t)(end - b64));
    unsigned char *colon = n > 0 ? memchr(raw, ':', (size_t)n) : NULL;
    if (!colon) {
        sodium_memzero(raw, sizeof raw);
        return NULL;
    }
    size_t raw_len = (size_t)n;
    size_t name_len = (size_t)(colon - raw);
    const char *key = (const char *)colon + 1;
    size_t key_len = raw_len - name_len - 1;

    const struct record *u = index_user_by_name(ix, (const char *)raw, name_len);
    if (u && record_get(u, USER_KEY_HASH).s.len != AUTH_HASH_BYTES) u = NULL; /* no usable key */
    /* An unknown name does the work of a known one: fetch a user record (a
     * decoy chosen by the name, as cold in cache as a real one), compare its
     * name and its key hash, and throw the result away. Without it a wrong
     * key for a real user takes ~160 ns longer (tests/bench/bench_auth). */
    const struct record *against = u ? u : auth_decoy_user(ix, (const char *)raw, name_len);
    static const uint8_t dummy[AUTH_HASH_BYTES];
    const uint8_t *want = dummy;
    if (against && record_get(against, USER_KEY_HASH).s.len == AUTH_HASH_BYTES) {
        want = (const uint8_t *)record_get(against, USER_KEY_HASH).s.ptr;
        size_t n = record_get(against, USER_NAME).s.len;
        volatile int same =
            n == name_len && memcmp(record_get(against, USER_NAME).s.ptr, raw, n) == 0;
        (void)same;
    }
    uint8_t got[AUTH_HASH_BYTES];
    auth_hash_key(key, key_len, got);
    int differ = sodium_memcmp(got, want, AUTH_HASH_BYTES);
    sodium_memzero(raw, sizeof raw);
    return u && differ == 0 ? u : NULL;
}
