/*
 * csprng: cryptographically secure random bytes for tokens (session and CSRF
 * tokens of the account site) without a system call for each.
 *
 * libsodium's randombytes_buf asks the kernel every time (one getrandom(2) a
 * call): GET /signin paid one for its CSRF cookie. This is a fast-key-erasure
 * generator (D. J. Bernstein, 2017; the design of OpenBSD's arc4random) on
 * libsodium's ChaCha20: a key from the kernel fills a block of output with the
 * ChaCha20 stream; the block's first 32 bytes become the next key at once, and
 * every byte handed out is wiped from the block, so what the process's memory
 * shows later reveals neither earlier output nor earlier keys. The key comes
 * from the kernel again after every CSPRNG_RESEED_BYTES of output.
 *
 * State is per thread (no lock): a thread seeds itself on its first call.
 * eventd never forks once it serves; a forked child that wants tokens must call
 * csprng_forget first, or it would repeat its parent's output.
 * API keys (auth_new_key) still come from randombytes_buf: they are rare, and
 * the kernel's generator is the one to trust for long-lived secrets.
 */
#ifndef EVENTD_CSPRNG_H
#define EVENTD_CSPRNG_H

#include <stddef.h>
#include <stdint.h>

#define CSPRNG_RESEED_BYTES (64u << 10) /* output between two keys from the kernel */

/* Fills out[0, len) with random bytes. Needs sodium_init() first. */
void csprng_bytes(void *out, size_t len);

/* Drops this thread's key and buffered output (wiped): the next call seeds anew. */
void csprng_forget(void);

/* How many times this thread has taken a key from the kernel (for tests). */
uint64_t csprng_seeds(void);

#endif
