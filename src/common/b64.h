/*
 * b64: base64 (RFC 4648's standard alphabet, padded) decoded in constant time.
 *
 * The API key travels base64-encoded in the Authorization header, so its
 * decoding must not leak the key's bytes through timing: no table lookups
 * indexed by them, no branches on them. libsodium's sodium_base642bin is
 * constant-time too, but it spent ~5,000 instructions on a 60-character
 * header, most of a wrong key's cost (docs/BENCHMARKS.md, issue 18); this
 * decoder maps each character with a few masks (the approach of Steve
 * Thomas's constant-time base64) and takes about a fifth of that.
 *
 * It accepts exactly what sodium_base642bin accepts with
 * sodium_base64_VARIANT_ORIGINAL, no characters to ignore, and the whole
 * input consumed (tests/unit/test_b64.c checks that against libsodium),
 * except bytes outside ASCII, which libsodium 1.0.18 reads as '/' and this
 * decoder refuses, as RFC 4648 does:
 * groups of four characters, the last one ending in "=" or "==" when the
 * data's length asks for it, and the unused bits before the padding zero.
 * Only the length of the input and where its padding starts (both public,
 * as the header's length is) decide the branches taken.
 */
#ifndef EVENTD_B64_H
#define EVENTD_B64_H

#include <stddef.h>

/* Decodes in[0, len) into out (at most out_max bytes); returns the decoded length, or -1
 * when in is not valid padded base64 or does not fit. out may hold partial output then. */
long b64_decode(unsigned char *out, size_t out_max, const char *in, size_t len);

#endif
