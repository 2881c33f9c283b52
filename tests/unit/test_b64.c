/* test_b64: the constant-time decoder accepts exactly what libsodium's
 * sodium_base642bin (VARIANT_ORIGINAL, nothing ignored, all input consumed) accepts, bytes
 * outside ASCII aside (same_as_sodium), and gives the same bytes: on known vectors, on every valid
 * encoding of random data, and on a million random strings over the alphabet, "=" and a few other
 * characters. */
#include <sodium.h>
#include <string.h>

#include "check.h"
#include "common/b64.h"

/* libsodium's verdict, as storage/auth.c used it: the decoded length, or -1. */
static long sodium_decode(unsigned char *out, size_t out_max, const char *in, size_t len) {
    size_t n;
    const char *end;
    if (sodium_base642bin(out, out_max, in, len, NULL, &n, &end, sodium_base64_VARIANT_ORIGINAL) !=
            0 ||
        end != in + len)
        return -1;
    return (long)n;
}

/* The same verdict and bytes as libsodium's, but for bytes outside ASCII: libsodium 1.0.18
 * reads each of them as '/' (so "B/2\xff" decodes); this decoder refuses them. */
static void same_as_sodium(const char *in, size_t len, size_t out_max) {
    unsigned char a[300], b[300];
    long x = b64_decode(a, out_max, in, len), y = sodium_decode(b, out_max, in, len);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)in[i] >= 0x80) y = -1;
    if (x != y || (x > 0 && memcmp(a, b, (size_t)x) != 0)) {
        fprintf(stderr, "   \"%.*s\" (max %zu): ours %ld, sodium %ld\n", (int)len, in, out_max, x,
                y);
        CHECK(0);
    }
}

static void test_vectors(void) {
    unsigned char out[16];
    CHECK_EQ_INT(b64_decode(out, sizeof out, "", 0), 0);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zg==", 4), 1);
    CHECK(out[0] == 'f');
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zm9vYmFy", 8), 6);
    CHECK(memcmp(out, "foobar", 6) == 0);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zm9vYg==", 8), 4);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zm9vYmE=", 8), 5);
    CHECK(memcmp(out, "fooba", 5) == 0);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "+/+/", 4), 3);
    CHECK(out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf);
    /* Refused: no padding, extra padding, unused bits set, a character outside, too long. */
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zg", 2), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zg===", 5), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zh==", 4), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zm9v-mFy", 8), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zm9v YmFy", 9), -1);
    CHECK_EQ_INT(b64_decode(out, 5, "Zm9vYmFy", 8), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "Zg==Zg==", 8), -1);
    CHECK_EQ_INT(b64_decode(out, sizeof out, "====", 4), -1);
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Every byte string of 0..200 bytes, encoded by libsodium, decodes to itself. */
static void test_round_trips(void) {
    unsigned char data[200], out[256];
    char enc[300];
    for (int t = 0; t < 20000; t++) {
        size_t n = next() % sizeof data;
        for (size_t i = 0; i < n; i++)
            data[i] = (unsigned char)next();
        sodium_bin2base64(enc, sizeof enc, data, n, sodium_base64_VARIANT_ORIGINAL);
        long got = b64_decode(out, sizeof out, enc, strlen(enc));
        CHECK_EQ_INT(got, (long)n);
        CHECK(memcmp(out, data, n) == 0);
        same_as_sodium(enc, strlen(enc), sizeof out);
    }
}

/* Random strings, mostly of the alphabet with "=" weighted up: the same verdicts and bytes.
 * Each output size from 0 to 12, so that "does not fit" is compared too. */
static void test_random_strings_agree(void) {
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                                "=====-_ .\n\x80\xff";
    char in[24];
    for (int t = 0; t < 1000000; t++) {
        size_t len = next() % 17;
        for (size_t i = 0; i < len; i++)
            in[i] = chars[next() % (sizeof chars - 1)];
        /* Half of them: the first len - 2 characters from the alphabet only, so that valid
         * strings and near misses come up often. */
        if (t & 1)
            for (size_t i = 0; i + 2 < len; i++)
                in[i] = chars[next() % 64];
        same_as_sodium(in, len, next() % 13);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_vectors),
    CHECK_CASE(test_round_trips),
    CHECK_CASE(test_random_strings_agree),
};

int main(int argc, char **argv) {
    if (sodium_init() < 0) return 1;
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
