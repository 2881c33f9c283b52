/*
 * test_auth: API keys (format, hash), HTTP Basic checking against the users
 * of an index (right key, wrong key, unknown user, unusable stored hash,
 * malformed headers) and the username rule.
 */
#include <sodium.h>

#include "check.h"
#include "storage/auth.h"
#include "storage/index.h"

/* ---- helpers ---- */

#define KEY "correct-horse-battery-staple-0123456789abcd" /* 43 characters, like a real key */

static struct record *user(uint64_t id, const char *name, const void *hash, size_t hash_len) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_user, v);
    v[USER_NAME].s.ptr = name;
    v[USER_NAME].s.len = (uint32_t)strlen(name);
    v[USER_KEY_HASH].s.ptr = hash;
    v[USER_KEY_HASH].s.len = (uint32_t)hash_len;
    return record_build(&record_user, id, 0, v);
}

/* An index with alice (key KEY), bob (another key) and carol (a 3-byte hash). */
static void users(struct index *ix) {
    uint8_t h[AUTH_HASH_BYTES];
    index_init(ix);
    auth_hash_key(KEY, strlen(KEY), h);
    index_put(ix, user(1, "alice", h, sizeof h));
    auth_hash_key("bobs-key", 8, h);
    index_put(ix, user(2, "bob", h, sizeof h));
    index_put(ix, user(3, "carol", "abc", 3));
}

/* "Basic " + base64(credentials), written to out. */
static const char *basic(char *out, size_t cap, const char *prefix, const void *cred, size_t len) {
    size_t n = strlen(prefix);
    CHECK(n + sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL) <= cap);
    memcpy(out, prefix, n);
    sodium_bin2base64(out + n, cap - n, cred, len, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

static const struct record *check_header(const struct index *ix, const char *h) {
    return auth_check(ix, (struct slice){h, strlen(h)});
}

static const struct record *check_cred(const struct index *ix, const char *cred) {
    char h[1024];
    return check_header(ix, basic(h, sizeof h, "Basic ", cred, strlen(cred)));
}

/* ---- keys ---- */

static void test_key_format(void) {
    char a[AUTH_KEY_CHARS + 1], b[AUTH_KEY_CHARS + 1];
    memset(a, 'x', sizeof a);
    auth_new_key(a);
    auth_new_key(b);
    CHECK_EQ_UINT(strlen(a), 43);
    CHECK_EQ_UINT(strlen(b), 43);
    for (size_t i = 0; i < AUTH_KEY_CHARS; i++) {
        char c = a[i];
        CHECK((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_');
    }
    CHECK(strcmp(a, b) != 0);
    /* Unpadded base64url of 256 bits. */
    unsigned char raw[64];
    size_t raw_len = 0;
    CHECK_EQ_INT(sodium_base642bin(raw, sizeof raw, a, strlen(a), NULL, &raw_len, NULL,
                                   sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                 0);
    CHECK_EQ_UINT(raw_len, 32);
}

static void test_keys_differ(void) {
    char seen[64][AUTH_KEY_CHARS + 1];
    for (int i = 0; i < 64; i++) {
        auth_new_key(seen[i]);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(seen[i], seen[j]) != 0);
    }
}

/* The stored hashes must stay readable by every later version: the algorithm is pinned. */
static void test_hash_stable(void) {
    uint8_t h1[AUTH_HASH_BYTES], h2[AUTH_HASH_BYTES];
    auth_hash_key(KEY, strlen(KEY), h1);
    auth_hash_key(KEY, strlen(KEY), h2);
    CHECK(memcmp(h1, h2, sizeof h1) == 0);
    auth_hash_key(KEY, strlen(KEY) - 1, h2);
    CHECK(memcmp(h1, h2, sizeof h1) != 0);
    /* BLAKE2b-256 of the empty string (RFC 7693's algorithm, 32-byte output, no key). */
    static const uint8_t empty[AUTH_HASH_BYTES] = {0x0e, 0x57, 0x51, 0xc0, 0x26, 0xe5, 0x43, 0xb2,
                                                   0xe8, 0xab, 0x2e, 0xb0, 0x60, 0x99, 0xda, 0xa1,
                                                   0xd1, 0xe5, 0xdf, 0x47, 0x77, 0x8f, 0x77, 0x87,
                                                   0xfa, 0xab, 0x45, 0xcd, 0xf1, 0x2f, 0xe3, 0xa8};
    auth_hash_key("", 0, h1);
    CHECK(memcmp(h1, empty, sizeof h1) == 0);
}

/* ---- auth_check ---- */

static void test_right_key(void) {
    struct index ix;
    users(&ix);
    const struct record *u = check_cred(&ix, "alice:" KEY);
    CHECK(u != NULL);
    CHECK_EQ_UINT(u->id, 1);
    u = check_cred(&ix, "bob:bobs-key");
    CHECK(u != NULL && u->id == 2);
    index_destroy(&ix);
}

static void test_wrong_key(void) {
    struct index ix;
    users(&ix);
    CHECK(check_cred(&ix, "alice:bobs-key") == NULL);
    CHECK(check_cred(&ix, "bob:" KEY) == NULL);
    CHECK(check_cred(&ix, "alice:") == NULL);
    CHECK(check_cred(&ix, "alice:" KEY "x") == NULL);
    CHECK(check_cred(&ix, "alice:" KEY ":") == NULL);
    CHECK(check_cred(&ix, "Alice:" KEY) == NULL); /* names are case-sensitive */
    index_destroy(&ix);
}

static void test_unknown_user(void) {
    struct index ix;
    users(&ix);
    CHECK(check_cred(&ix, "mallory:" KEY) == NULL);
    CHECK(check_cred(&ix, ":" KEY) == NULL);
    CHECK(check_cred(&ix, "alic:" KEY) == NULL);
    index_destroy(&ix);
    /* And with no users at all (no decoy to compare against). */
    struct index empty;
    index_init(&empty);
    CHECK(check_cred(&empty, "alice:" KEY) == NULL);
    index_destroy(&empty);
}

/* A stored hash of the wrong size is no key: nothing logs in as that user. */
static void test_unusable_stored_hash(void) {
    struct index ix;
    users(&ix);
    CHECK(check_cred(&ix, "carol:abc") == NULL);
    CHECK(check_cred(&ix, "carol:") == NULL);
    /* 31 bytes of a real hash are refused too. */
    uint8_t h[AUTH_HASH_BYTES];
    auth_hash_key(KEY, strlen(KEY), h);
    index_put(&ix, user(4, "dave", h, sizeof h - 1));
    CHECK(check_cred(&ix, "dave:" KEY) == NULL);
    index_destroy(&ix);
}

static void test_malformed_headers(void) {
    struct index ix;
    users(&ix);
    char h[1024];
    const char *cred = "alice:" KEY;
    size_t n = strlen(cred);
    CHECK(check_header(&ix, "") == NULL);
    CHECK(check_header(&ix, "Basic") == NULL);
    CHECK(check_header(&ix, "Basic ") == NULL);
    CHECK(check_header(&ix, "Basic   ") == NULL);
    /* No "Basic": the bare token, another scheme, no space after it. */
    CHECK(check_header(&ix, basic(h, sizeof h, "", cred, n)) == NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "Bearer ", cred, n)) == NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "Basic", cred, n)) == NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "Basic\t", cred, n)) == NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "Basics ", cred, n)) == NULL);
    /* Bad base64: a character outside the alphabet, the URL-safe alphabet, cut short. */
    basic(h, sizeof h, "Basic ", cred, n);
    h[10] = '!';
    CHECK(check_header(&ix, h) == NULL);
    basic(h, sizeof h, "Basic ", "alice:>>>?", 10); /* encodes with '+' and '/' */
    CHECK(strpbrk(h + 6, "+/") != NULL);
    for (char *p = h + 6; *p; p++)
        *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
    CHECK(check_header(&ix, h) == NULL);
    basic(h, sizeof h, "Basic ", cred, n);
    h[strlen(h) - 1] = '\0';
    CHECK(check_header(&ix, h) == NULL);
    /* Something after the token. */
    basic(h, sizeof h, "Basic ", cred, n);
    strcat(h, " x");
    CHECK(check_header(&ix, h) == NULL);
    /* No colon. */
    CHECK(check_cred(&ix, "alice" KEY) == NULL);
    /* Over-long: 255 bytes of credentials (340 characters) are read, 256 are not. */
    char longkey[300], longcred[320];
    memset(longkey, 'k', sizeof longkey);
    longkey[249] = '\0';
    uint8_t kh[AUTH_HASH_BYTES];
    auth_hash_key(longkey, strlen(longkey), kh);
    index_put(&ix, user(5, "zelda", kh, sizeof kh));
    snprintf(longcred, sizeof longcred, "zelda:%s", longkey);
    CHECK_EQ_UINT(strlen(longcred), 255);
    basic(h, sizeof h, "Basic ", longcred, 255);
    CHECK_EQ_UINT(strlen(h), 6 + 340);
    CHECK(check_header(&ix, h) != NULL);
    longkey[249] = 'k';
    longkey[250] = '\0';
    auth_hash_key(longkey, strlen(longkey), kh);
    index_put(&ix, user(5, "zelda", kh, sizeof kh));
    snprintf(longcred, sizeof longcred, "zelda:%s", longkey);
    basic(h, sizeof h, "Basic ", longcred, 256);
    CHECK(check_header(&ix, h) == NULL);
    index_destroy(&ix);
}

/*
 * What the header parser tolerates, as RFC 7617/7235 allow: the scheme in
 * any case, several spaces before the token, and trailing spaces or tabs
 * (optional whitespace around a field value).
 */
static void test_tolerated_header_forms(void) {
    struct index ix;
    users(&ix);
    char h[1024];
    const char *cred = "alice:" KEY;
    size_t n = strlen(cred);
    CHECK(check_header(&ix, basic(h, sizeof h, "basic ", cred, n)) != NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "BASIC ", cred, n)) != NULL);
    CHECK(check_header(&ix, basic(h, sizeof h, "Basic   ", cred, n)) != NULL);
    basic(h, sizeof h, "Basic ", cred, n);
    strcat(h, " \t ");
    CHECK(check_header(&ix, h) != NULL);
    basic(h, sizeof h, "Basic ", cred, n);
    strcat(h, "\t");
    CHECK(check_header(&ix, h) != NULL);
    index_destroy(&ix);
}

/* A header is a <ptr, len> slice: bytes after len are not part of it. */
static void test_header_is_a_slice(void) {
    struct index ix;
    users(&ix);
    char h[1024];
    basic(h, sizeof h, "Basic ", "alice:" KEY, strlen("alice:" KEY));
    size_t n = strlen(h);
    strcat(h, "garbage");
    CHECK(auth_check(&ix, (struct slice){h, n}) != NULL);
    CHECK(auth_check(&ix, (struct slice){h, n - 4}) == NULL);
    index_destroy(&ix);
}

/* The one whitespace rule of Basic and Bearer: the scheme in any case, spaces before the
 * credentials, spaces and tabs after them; nothing else is trimmed. */
static void test_credentials_rule(void) {
    struct slice c;
    CHECK(auth_credentials(SLICE_LIT("Bearer tok"), "Bearer", &c));
    CHECK_EQ_MEM(c.ptr, c.len, "tok");
    CHECK(auth_credentials(SLICE_LIT("bearer   tok \t "), "Bearer", &c));
    CHECK_EQ_MEM(c.ptr, c.len, "tok");
    CHECK(auth_credentials(SLICE_LIT("BASIC a b\t"), "Basic", &c));
    CHECK_EQ_MEM(c.ptr, c.len, "a b");
    CHECK(!auth_credentials(SLICE_LIT("Bearer"), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Bearer "), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Bearer  \t"), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Bearer\ttok"), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Bearertok"), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Basic tok"), "Bearer", &c));
    CHECK(!auth_credentials(SLICE_LIT("Bearer tok"), "Basic", &c));
}

/* ---- usernames ---- */

static void test_username_lengths(void) {
    char name[80];
    CHECK(auth_check_username("") != NULL);
    CHECK(auth_check_username("a") == NULL);
    memset(name, 'a', 64);
    name[64] = '\0';
    CHECK(auth_check_username(name) == NULL);
    name[64] = 'a';
    name[65] = '\0';
    CHECK(auth_check_username(name) != NULL);
}

static void test_username_characters(void) {
    CHECK(auth_check_username("Alice.Smith_2-x") == NULL);
    CHECK(auth_check_username("0") == NULL);
    CHECK(auth_check_username("._-") == NULL);
    const char *bad[] = {"a b",  "a:b", "a/b",      "a@b", "a+b",      "a\tb",
                         "a\nb", "é",   "user\x7f", "a%b", "\xff\xfe", "a\"b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (auth_check_username(bad[i]) == NULL) fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK(auth_check_username(bad[i]) != NULL);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_key_format),
    CHECK_CASE(test_keys_differ),
    CHECK_CASE(test_hash_stable),
    CHECK_CASE(test_right_key),
    CHECK_CASE(test_wrong_key),
    CHECK_CASE(test_unknown_user),
    CHECK_CASE(test_unusable_stored_hash),
    CHECK_CASE(test_malformed_headers),
    CHECK_CASE(test_tolerated_header_forms),
    CHECK_CASE(test_header_is_a_slice),
    CHECK_CASE(test_credentials_rule),
    CHECK_CASE(test_username_lengths),
    CHECK_CASE(test_username_characters),
};

int main(int argc, char **argv) {
    CHECK_EQ_INT(auth_init(), 0);
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
