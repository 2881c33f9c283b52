/* pwhash: see pwhash.h. */
#include "common/pwhash.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Test builds only: EVENTD_TEST_PWHASH_FAST=1 hashes new passwords with
 * libsodium's minimum limits, so that the suites registering hundreds of
 * accounts do not spend minutes in Argon2 (ten times slower under the
 * sanitizers). Verification follows whatever limits a hash names. The
 * latency test and every production build use the interactive limits.
 */
#ifdef EVENTD_FAULT_HOOKS
static bool fast(void) {
    const char *v = getenv("EVENTD_TEST_PWHASH_FAST");
    return v && !strcmp(v, "1");
}
#endif

static unsigned long long ops_limit(void) {
#ifdef EVENTD_FAULT_HOOKS
    if (fast()) return crypto_pwhash_OPSLIMIT_MIN;
#endif
    return crypto_pwhash_OPSLIMIT_INTERACTIVE;
}

static size_t mem_limit(void) {
#ifdef EVENTD_FAULT_HOOKS
    if (fast()) return crypto_pwhash_MEMLIMIT_MIN;
#endif
    return crypto_pwhash_MEMLIMIT_INTERACTIVE;
}

const char *pwhash_decoy(void) {
    static const char interactive[] = "$argon2id$v=19$m=65536,t=2,p=1$x/VO3ay7N2w9JHi1PcMaoA$"
                                      "64RQAENW9o/PL/FEK1F0ZFQo5/P1WpIqCHd3oUNqbIs";
#ifdef EVENTD_FAULT_HOOKS
    /* The fast hashes verify in about a millisecond: an unknown user's sign-in must not take
     * Argon2's interactive 64 MiB instead (the loop's thread, once; a test build only). */
    static char fast_decoy[crypto_pwhash_STRBYTES];
    if (fast()) {
        if (!fast_decoy[0] &&
            crypto_pwhash_str(fast_decoy, "decoy", 5, ops_limit(), mem_limit()) != 0)
            fast_decoy[0] = 0;
        if (fast_decoy[0]) return fast_decoy;
    }
#endif
    return interactive;
}

void pwhash_init(struct pwhash *pw, uv_loop_t *loop, uint32_t concurrency, uint32_t queue_max,
                 uint32_t register_queue_max) {
    memset(pw, 0, sizeof *pw);
    pw->loop = loop;
    pw->concurrency = concurrency ? concurrency : 1;
    pw->queue_max[PWHASH_LANE_SIGNIN] = queue_max;
    pw->queue_max[PWHASH_LANE_REGISTER] = register_queue_max;
}

bool pwhash_str_acceptable(const char *hash) {
    unsigned long m, t, p;
    int end = 0;
    if (sscanf(hash, "$argon2id$v=19$m=%lu,t=%lu,p=%lu$%n", &m, &t, &p, &end) != 3 || !end)
        return false;
    return m <= crypto_pwhash_MEMLIMIT_INTERACTIVE / 1024 &&
           t <= crypto_pwhash_OPSLIMIT_INTERACTIVE && p == 1;
}

/* Threadpool: the slow part. */
static void work(uv_work_t *w) {
    struct pwhash_job *job = w->data;
    size_t n = strlen(job->password);
    if (job->verify) {
        /* A hash asking for more than this server's limits (hours of work, gigabytes)
         * never verifies: it did not come from here. */
        job->result = pwhash_str_acceptable(job->hash) &&
                              crypto_pwhash_str_verify(job->hash, job->password, n) == 0
                          ? 0
                          : -1;
    } else {
        int rc = crypto_pwhash_str(job->hash, job->password, n, ops_limit(), mem_limit());
        job->result = rc == 0 ? 0 : -1;
    }
    sodium_memzero(job->password, sizeof job->password);
}

static void start(struct pwhash *pw, struct pwhash_job *job);

static void after(uv_work_t *w, int status) {
    struct pwhash_job *job = w->data;
    struct pwhash *pw = job->pw;
    pw->running--;
    pw->done[job->lane]++;
    if (status < 0) job->result = -1; /* cancelled: never, as nothing cancels */
    /* The sign-in lane first: registrations wait while a sign-in does. */
    for (unsigned l = 0; l < PWHASH_LANES; l++) {
        struct pwhash_job *next = pw->head[l];
        if (!next) continue;
        pw->head[l] = next->next;
        if (!pw->head[l]) pw->tail[l] = NULL;
        pw->queued[l]--;
        start(pw, next);
        break;
    }
    job->done(job);
}

static void start(struct pwhash *pw, struct pwhash_job *job) {
    pw->running++;
    job->work.data = job;
    if (uv_queue_work(pw->loop, &job->work, work, after) < 0) {
        /* Only on bad arguments; treat as a failed job, on the next turn would
         * be nicer but this cannot happen with a valid loop. */
        pw->running--;
        job->result = -1;
        job->done(job);
    }
}

int pwhash_submit(struct pwhash *pw, struct pwhash_job *job) {
    unsigned l = job->lane < PWHASH_LANES ? job->lane : PWHASH_LANE_REGISTER;
    job->lane = (uint8_t)l;
    job->pw = pw;
    job->next = NULL;
    job->result = -1;
    if (pw->running < pw->concurrency) {
        start(pw, job);
        return 0;
    }
    if (pw->queued[l] >= pw->queue_max[l]) return -EAGAIN;
    if (pw->tail[l])
        pw->tail[l]->next = job;
    else
        pw->head[l] = job;
    pw->tail[l] = job;
    pw->queued[l]++;
    return 0;
}
