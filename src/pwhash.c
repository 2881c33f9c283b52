/* pwhash: see pwhash.h. */
#include "pwhash.h"

#include <errno.h>
#include <string.h>

void pwhash_init(struct pwhash *pw, uv_loop_t *loop, uint32_t concurrency, uint32_t queue_max) {
    memset(pw, 0, sizeof *pw);
    pw->loop = loop;
    pw->concurrency = concurrency ? concurrency : 1;
    pw->queue_max = queue_max;
}

/* Threadpool: the slow part. */
static void work(uv_work_t *w) {
    struct pwhash_job *job = w->data;
    size_t n = strlen(job->password);
    if (job->verify) {
        job->result = crypto_pwhash_str_verify(job->hash, job->password, n) == 0 ? 0 : -1;
    } else {
        job->result =
            crypto_pwhash_str(job->hash, job->password, n, crypto_pwhash_OPSLIMIT_INTERACTIVE,
                              crypto_pwhash_MEMLIMIT_INTERACTIVE) == 0
                ? 0
                : -1;
    }
    sodium_memzero(job->password, sizeof job->password);
}

static void start(struct pwhash *pw, struct pwhash_job *job);

static void after(uv_work_t *w, int status) {
    struct pwhash_job *job = w->data;
    struct pwhash *pw = job->pw;
    pw->running--;
    if (status < 0) job->result = -1; /* cancelled: never, as nothing cancels */
    if (pw->head) {
        struct pwhash_job *next = pw->head;
        pw->head = next->next;
        if (!pw->head) pw->tail = NULL;
        pw->queued--;
        start(pw, next);
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
    job->pw = pw;
    job->next = NULL;
    job->result = -1;
    if (pw->running < pw->concurrency) {
        start(pw, job);
        return 0;
    }
    if (pw->queued >= pw->queue_max) return -EAGAIN;
    if (pw->tail)
        pw->tail->next = job;
    else
        pw->head = job;
    pw->tail = job;
    pw->queued++;
    return 0;
}
