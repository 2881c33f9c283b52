/*
 * pwhash: Argon2id password hashing and verification (libsodium's
 * crypto_pwhash_str, interactive limits) on libuv's threadpool, so the loop
 * never waits for them. At most `concurrency` run at once, leaving the
 * threadpool's other threads to the log's writes.
 *
 * Jobs wait in one of two lanes, each bounded on its own: the sign-in lane
 * (lane 0, a zeroed job's: sign-ins, and whatever checks or sets the
 * password of an existing user) and the registration lane. A thread that
 * frees takes the oldest job of the sign-in lane, and one of the
 * registration lane only when no sign-in waits. So a flood of registrations
 * fills its own lane and is refused there; it can neither take a sign-in's
 * place in the queue nor make one wait longer than for the jobs already
 * running. Beyond its lane's limit a job is refused (the caller answers 503).
 *
 * A job is the caller's memory (embed struct pwhash_job in its own struct);
 * its callback runs on the loop thread once the work is done, and the job
 * is the caller's again from then on. Threading: submit on the loop thread;
 * the threadpool touches only the job's password and hash.
 */
#ifndef EVENTD_PWHASH_H
#define EVENTD_PWHASH_H

#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define PWHASH_MAX_PASSWORD 256

struct pwhash;
struct pwhash_job;
typedef void (*pwhash_cb)(struct pwhash_job *job);

enum pwhash_lane { PWHASH_LANE_SIGNIN = 0, PWHASH_LANE_REGISTER = 1, PWHASH_LANES };

struct pwhash_job {
    uv_work_t work;
    struct pwhash *pw;
    struct pwhash_job *next;
    uint8_t lane;                           /* enum pwhash_lane */
    bool verify;                            /* verify password against hash; else hash it */
    char password[PWHASH_MAX_PASSWORD + 1]; /* NUL-terminated; wiped when done */
    char hash[crypto_pwhash_STRBYTES];      /* verify: the stored hash; hash: the result */
    int result;                             /* 0: hashed / matches; -1: failed / no match */
    pwhash_cb done;
};

struct pwhash {
    uv_loop_t *loop;
    uint32_t concurrency, running;
    uint32_t queue_max[PWHASH_LANES], queued[PWHASH_LANES];
    struct pwhash_job *head[PWHASH_LANES], *tail[PWHASH_LANES]; /* waiting, oldest first */
    uint64_t done[PWHASH_LANES]; /* jobs whose hash or check ran, by lane (/metrics) */
};

/* queue_max: jobs that may wait in the sign-in lane; register_queue_max: in the other. */
void pwhash_init(struct pwhash *pw, uv_loop_t *loop, uint32_t concurrency, uint32_t queue_max,
                 uint32_t register_queue_max);
/*
 * Queues job (password and, to verify, hash filled in; lane and done set).
 * Returns 0, or -EAGAIN when its lane is full (the job was not taken).
 */
int pwhash_submit(struct pwhash *pw, struct pwhash_job *job);
/*
 * A hash to verify against when the user is unknown, so that the answer
 * takes as long as for a known one: made with the limits new hashes get
 * (in test builds with EVENTD_TEST_PWHASH_FAST=1, the minimum ones, made
 * at the first call).
 */
const char *pwhash_decoy(void);
/*
 * A stored hash this server will verify: Argon2id with at most the limits it
 * hashes with (interactive: t=2, 64 MiB, one lane). One from elsewhere (an
 * import) may name any limits, and a sign-in would spend them.
 */
bool pwhash_str_acceptable(const char *hash);
/* Jobs running or waiting. */
static inline uint32_t pwhash_pending(const struct pwhash *pw) {
    return pw->running + pw->queued[PWHASH_LANE_SIGNIN] + pw->queued[PWHASH_LANE_REGISTER];
}

#endif
