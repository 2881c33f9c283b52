/*
 * bench_logwrite: writes a log of N default themes (what POST /v2/theme with
 * an empty body stores) owned by one user, through the real store, into
 * DIR/eventd.log, for tests/bench/memory.sh to start a server on.
 *
 *   bench_logwrite DIR N
 *
 * DIR must not hold a log yet. The user is "bench" with a key nobody knows:
 * the server is only started to measure its memory and replay.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/auth.h"
#include "storage/record.h"
#include "storage/store.h"

#define FLUSH_EVERY 10000

static struct record *make_user(uint64_t id) {
    union value v[RECORD_MAX_FIELDS];
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key("not-a-key", 9, hash);
    record_defaults(&record_user, v);
    v[USER_NAME].s.ptr = "bench";
    v[USER_NAME].s.len = 5;
    v[USER_KEY_HASH].s.ptr = (const char *)hash;
    v[USER_KEY_HASH].s.len = AUTH_HASH_BYTES;
    return record_build(&record_user, id, 0, v);
}

static int append(struct store *s, struct buf *payload, struct record *r) {
    buf_reset(payload);
    record_encode(r, payload);
    store_append(s, r->type, payload->ptr, payload->len);
    record_free(r);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_logwrite DIR N\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store s;
    struct store_opts opts = {.fsync = STORE_FSYNC_NEVER, .fsync_interval_ms = 1000};
    struct store_replay_info info;
    struct buf payload = BUF_INIT;
    if (store_open(&s, &loop, argv[1], &opts, NULL) < 0) return 1;
    if (store_replay(&s, NULL, NULL, &info) != STORE_REPLAY_EMPTY) {
        fprintf(stderr, "bench_logwrite: %s/%s is not empty\n", argv[1], STORE_LOG_NAME);
        return 1;
    }
    append(&s, &payload, make_user(1));
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    for (uint64_t i = 0; i < n; i++) {
        append(&s, &payload, record_build(&record_theme, i + 2, 1, v));
        if ((i + 1) % FLUSH_EVERY == 0 && store_flush_sync(&s) < 0) return 1;
    }
    if (store_close(&s) < 0) return 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    buf_destroy(&payload);
    return uv_loop_close(&loop) == 0 ? 0 : 1;
}
