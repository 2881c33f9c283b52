/*
 * test_pwhash: which stored hashes a sign-in verifies (pwhash_str_acceptable:
 * Argon2id within the server's own limits), and that a job verifying a hash
 * that names huge limits (an imported user's, say) fails at once instead of
 * holding a hashing slot for hours.
 */
#include "common/pwhash.h"

#include "check.h"

/* libsodium's interactive limits, as crypto_pwhash_str writes them. */
#define SALT_AND_HASH "$x/VO3ay7N2w9JHi1PcMaoA$64RQAENW9o/PL/FEK1F0ZFQo5/P1WpIqCHd3oUNqbIs"

static void test_hashes_within_the_limits_are_acceptable(void) {
    CHECK(pwhash_str_acceptable("$argon2id$v=19$m=65536,t=2,p=1" SALT_AND_HASH));
    CHECK(pwhash_str_acceptable(pwhash_decoy()));
    CHECK(pwhash_str_acceptable("$argon2id$v=19$m=8,t=1,p=1" SALT_AND_HASH)); /* test builds' */
    char made[crypto_pwhash_STRBYTES];
    CHECK_EQ_INT(
        crypto_pwhash_str(made, "pw", 2, crypto_pwhash_OPSLIMIT_MIN, crypto_pwhash_MEMLIMIT_MIN),
        0);
    CHECK(pwhash_str_acceptable(made));
}

static void test_hashes_beyond_the_limits_or_of_another_kind_are_not(void) {
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=65536,t=3,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=8,t=4294967295,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=65537,t=2,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=4194304,t=1,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=65536,t=2,p=4" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=-1,t=2,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2i$v=19$m=65536,t=2,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=16$m=65536,t=2,p=1" SALT_AND_HASH));
    CHECK(!pwhash_str_acceptable("$argon2id$v=19$m=65536,t=2,p=1"));
    CHECK(!pwhash_str_acceptable(""));
}

static void on_done(struct pwhash_job *job) {
    *(bool *)job->work.loop->data = true;
}

static void on_deadline(uv_timer_t *t) {
    uv_stop(t->loop);
}

static void test_a_job_never_spends_the_limits_a_stored_hash_names(void) {
    uv_loop_t loop;
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    bool done = false;
    loop.data = &done;
    struct pwhash pw;
    pwhash_init(&pw, &loop, 1, 4, 4);
    static struct pwhash_job job;
    job.verify = true;
    job.done = on_done;
    snprintf(job.password, sizeof job.password, "any");
    /* t = 2^32 - 1 passes: hours of one core, were it verified. */
    snprintf(job.hash, sizeof job.hash, "$argon2id$v=19$m=8,t=4294967295,p=1" SALT_AND_HASH);
    CHECK_EQ_INT(pwhash_submit(&pw, &job), 0);
    uv_timer_t deadline;
    uv_timer_init(&loop, &deadline);
    uv_timer_start(&deadline, on_deadline, 10000, 0); /* bounded: a failure, not a hang */
    while (!done && uv_run(&loop, UV_RUN_ONCE))
        if (!uv_is_active((uv_handle_t *)&deadline)) break;
    CHECK(done);
    CHECK_EQ_INT(job.result, -1);
    uv_close((uv_handle_t *)&deadline, NULL);
    if (done) {
        uv_run(&loop, UV_RUN_DEFAULT);
        CHECK_EQ_INT(uv_loop_close(&loop), 0);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_hashes_within_the_limits_are_acceptable),
    CHECK_CASE(test_hashes_beyond_the_limits_or_of_another_kind_are_not),
    CHECK_CASE(test_a_job_never_spends_the_limits_a_stored_hash_names),
};

int main(int argc, char **argv) {
    CHECK_EQ_INT(sodium_init() < 0 ? -1 : 0, 0);
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
