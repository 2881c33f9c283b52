/* The settings table: defaults, flags, environment, precedence, rejects. */
#include <stdlib.h>

#include "check.h"
#include "common/config.h"

static int parse(struct config *c, int argc, char **argv) {
    const char *pos[2];
    int npos;
    return config_parse(c, argc, argv, pos, 2, &npos);
}

static void test_defaults(void) {
    struct config c;
    char *none[] = {NULL};
    CHECK_EQ_INT(parse(&c, 0, none), 0);
    CHECK_EQ_STR(c.listen, "0.0.0.0:8080");
    CHECK_EQ_STR(c.base_path, "/v2");
    CHECK_EQ_INT((int)c.max_body_bytes, 1048576);
    CHECK_EQ_INT((int)c.fsync, CONFIG_FSYNC_ALWAYS);
    CHECK_EQ_INT((int)c.loop_sync_max_us, 2000);
    CHECK_EQ_INT((int)c.fsync_max_unsynced_bytes, 32 << 20);
    CHECK_EQ_INT((int)c.idle_sweep_ms, 1000);
    CHECK(c.demo_user);
}

static void test_flags(void) {
    struct config c;
    char *flags[] = {"--listen",        "127.0.0.1:0", "--max-body-bytes=10",
                     "--fsync",         "interval",    "--no-demo-user",
                     "--compact-ratio", "2.5",         "--repair"};
    CHECK_EQ_INT(parse(&c, 9, flags), 0);
    CHECK_EQ_STR(c.listen, "127.0.0.1:0");
    CHECK_EQ_INT((int)c.max_body_bytes, 10);
    CHECK_EQ_INT((int)c.fsync, CONFIG_FSYNC_INTERVAL);
    CHECK(!c.demo_user && c.repair && c.compact_ratio == 2.5);
}

/* The environment fills in, a flag wins over it. */
static void test_env_and_precedence(void) {
    struct config c;
    char *none[] = {NULL};
    setenv("EVENTD_MAX_PIPELINE", "7", 1);
    setenv("EVENTD_LISTEN", "bad", 1);
    char *over[] = {"--listen", "[::1]:9000"};
    CHECK_EQ_INT(parse(&c, 2, over), 0);
    CHECK_EQ_INT((int)c.max_pipeline, 7);
    CHECK_EQ_STR(c.listen, "[::1]:9000");
    CHECK_EQ_INT(parse(&c, 0, none), -1); /* the bad variable alone is refused */
    unsetenv("EVENTD_LISTEN");
    unsetenv("EVENTD_MAX_PIPELINE");
}

static void test_rejects(void) {
    struct config c;
    char *bad[][2] = {{"--bogus", "1"},
                      {"--listen", "nohost"},
                      {"--listen", "h:70000"},
                      {"--listen", "localhost:8080"},
                      {"--listen", "999.1.1.1:8080"},
                      {"--listen", "[eventd]:8080"},
                      {"--max-body-bytes", "-5"},
                      {"--max-pipeline", "0"},
                      {"--fsync", "sometimes"},
                      {"--base-path", "v2"},
                      {"--base-path", "/v2/"},
                      {"--compact-ratio", "x"},
                      {"--log-level", "loud"},
                      {"--repair=maybe", NULL},
                      {"--loop-sync-max-us", "10000001"},
                      {"--idle-sweep-ms", "0"},
                      {"--compact-ratio", "1"},
                      {"--compact-ratio", "0.001"},
                      {"--compact-ratio", "1.49"},
                      {"--fsync-max-unsynced-bytes", "65535"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ_INT(parse(&c, bad[i][1] ? 2 : 1, bad[i]), -1);
    /* 0 (never) and 1.5 are fine: below 1.5 compaction ran in a loop. */
    char *never[] = {"--compact-ratio", "0"}, *least[] = {"--compact-ratio", "1.5"};
    CHECK_EQ_INT(parse(&c, 2, never), 0);
    CHECK_EQ_INT(parse(&c, 2, least), 0);
    char *missing[] = {"--data"};
    CHECK_EQ_INT(parse(&c, 1, missing), -1);
}

static void test_help(void) {
    struct config c;
    char *help[] = {"--help"};
    CHECK_EQ_INT(parse(&c, 1, help), 1);
}

static void test_split_listen(void) {
    char host[64];
    int port;
    CHECK_EQ_INT(config_split_listen("[::1]:80", host, sizeof host, &port), 0);
    CHECK_EQ_STR(host, "::1");
    CHECK_EQ_INT(port, 80);
}

/* The quota and guard settings: defaults, 64-bit values up to 2^53 - 1, nothing above. */
static void test_quota_settings(void) {
    struct config c;
    char *none[] = {NULL};
    CHECK_EQ_INT(parse(&c, 0, none), 0);
    CHECK_EQ_UINT(c.max_records_per_user, 100000);
    CHECK_EQ_UINT(c.max_bytes_per_user, 64u << 20);
    CHECK_EQ_UINT(c.min_free_disk_bytes, 64u << 20);
    CHECK_EQ_UINT(c.max_live_bytes, 0);
    char *big[] = {"--min-free-disk-bytes", "9007199254740991", "--max-live-bytes=5000000000"};
    CHECK_EQ_INT(parse(&c, 3, big), 0);
    CHECK_EQ_UINT(c.min_free_disk_bytes, UINT64_C(9007199254740991));
    CHECK_EQ_UINT(c.max_live_bytes, UINT64_C(5000000000));
    char *over[] = {"--max-bytes-per-user", "9007199254740992"};
    CHECK_EQ_INT(parse(&c, 2, over), -1);
    char *neg[] = {"--max-bytes-per-user", "-1"};
    CHECK_EQ_INT(parse(&c, 2, neg), -1);
    setenv("EVENTD_MAX_RECORDS_PER_USER", "3", 1);
    CHECK_EQ_INT(parse(&c, 0, none), 0);
    CHECK_EQ_UINT(c.max_records_per_user, 3);
    unsetenv("EVENTD_MAX_RECORDS_PER_USER");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_quota_settings),     CHECK_CASE(test_defaults), CHECK_CASE(test_flags),
    CHECK_CASE(test_env_and_precedence), CHECK_CASE(test_rejects),  CHECK_CASE(test_help),
    CHECK_CASE(test_split_listen),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
