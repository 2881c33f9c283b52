/*
 * test_db: the data layer's promises, with a real store in a temp dir and a
 * uv loop: a failed batch in "always" mode undoes exactly the lost changes
 * (links included) and reports the right LSN; the db stays unwritable until
 * an attempt succeeds; in "interval" mode a failed write or sync loses
 * nothing; ids are never handed out twice, across a clean close or a crash.
 * Every case ends with every handle closed and uv_loop_close() == 0.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/log.h"
#include "common/varint.h"
#include "records.h"
#include "scratch_dir.h"
#include "storage/db.h"

/* ---- helpers ---- */

/* Copies dir's log into a new directory: what a crash at this moment would leave on disk
 * (the page cache included, which a process crash keeps). */
static char *copy_log(const char *dir) {
    char *to = tmpdir("db");
    char from_path[1024], to_path[1024];
    snprintf(from_path, sizeof from_path, "%s/%s", dir, STORE_LOG_NAME);
    snprintf(to_path, sizeof to_path, "%s/%s", to, STORE_LOG_NAME);
    int in = open(from_path, O_RDONLY), out = open(to_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(in >= 0 && out >= 0);
    char b[65536];
    ssize_t n;
    while ((n = read(in, b, sizeof b)) > 0)
        CHECK_EQ_INT(write(out, b, (size_t)n), n);
    CHECK_EQ_INT(n, 0);
    close(in);
    close(out);
    return to;
}

static struct {
    uint64_t calls, errors;
    uint64_t last_lsn, err_lsn;
    int last_status, err_status;
} acks;

static void on_ack(void *ctx, uint64_t lsn, int status) {
    (void)ctx;
    acks.calls++;
    acks.last_lsn = lsn;
    acks.last_status = status;
    if (status < 0) {
        acks.errors++;
        acks.err_lsn = lsn;
        acks.err_status = status;
    }
}

/*
 * The store's retry timer does not keep a loop alive (so a failing store
 * alone does not hold a CLI up): a ticking timer of ours does, while a case
 * waits. Each case's loop owns one, closed with the loop.
 */
static uv_timer_t tick;

static void on_tick(uv_timer_t *t) {
    (void)t;
}

/* Runs the loop until cond (free of side effects) holds, at most 2000 turns of about a ms. */
#define RUN_UNTIL(loop, cond)                                                                      \
    do {                                                                                           \
        uv_timer_start(&tick, on_tick, 1, 1);                                                      \
        for (int turn_ = 0; turn_ < 2000 && !(cond); turn_++)                                      \
            uv_run((loop), UV_RUN_ONCE);                                                           \
        uv_timer_stop(&tick);                                                                      \
        CHECK(cond);                                                                               \
    } while (0)

static const struct store_opts always = {.fsync = STORE_FSYNC_ALWAYS,
                                         .fsync_interval_ms = 1000,
                                         .loop_sync_max_us = STORE_LOOP_SYNC_MAX_US};
static const struct store_opts interval = {
    .fsync = STORE_FSYNC_INTERVAL, .fsync_interval_ms = 20, .retry_ms = 10};

/* The node id and key lifetime open_db opens with (the node and key cases change them). */
static uint32_t open_node;
static uint32_t open_idem_ttl = DB_IDEM_TTL_S;

static void open_db(struct db *db, uv_loop_t *loop, const char *dir, const struct store_opts *o) {
    char msg[512] = "";
    CHECK_EQ_INT(uv_loop_init(loop), 0);
    struct db_settings set = {.store_opts = *o, .node_id = open_node, .idem_ttl_s = open_idem_ttl};
    int rc = db_open(db, loop, dir, &set, msg, sizeof msg);
    if (rc != 0) fprintf(stderr, "db_open: %s\n", msg);
    CHECK_EQ_INT(rc, 0);
    memset(&acks, 0, sizeof acks);
    db_on_ack(db, on_ack, NULL);
    CHECK_EQ_INT(uv_timer_init(loop, &tick), 0);
}

static void close_db(struct db *db, uv_loop_t *loop) {
    CHECK_EQ_INT(db_close(db), 0);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(loop), 0);
}

static uint64_t take_id(struct db *db) {
    uint64_t id = 0;
    CHECK_EQ_INT(db_take_id(db, &id), 0);
    CHECK(id > 0);
    return id;
}

static struct record *theme(uint64_t id, const char *name) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    v[THEME_NAME].s.ptr = name;
    v[THEME_NAME].s.len = (uint32_t)strlen(name);
    return record_build(&record_theme, id, 1, v);
}

static struct record *address(uint64_t id, const char *city) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_address, v);
    v[ADDR_CITY].s.ptr = city;
    v[ADDR_CITY].s.len = (uint32_t)strlen(city);
    return record_build(&record_address, id, 1, v);
}

static struct record *event(uint64_t id, uint64_t theme_id, uint64_t address_id) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_event, v);
    v[EVENT_THEME_ID].i = theme_id;
    v[EVENT_ADDRESS_ID].i = address_id;
    return record_build(&record_event, id, 1, v);
}

static uint64_t put_theme(struct db *db, const char *name) {
    uint64_t id = take_id(db);
    db_put(db, theme(id, name));
    return id;
}

static void check_name(const struct db *db, uint64_t id, const char *name) {
    const struct record *r = db_get(db, id);
    CHECK(r != NULL);
    CHECK_EQ_MEM(record_get(r, THEME_NAME).s.ptr, record_get(r, THEME_NAME).s.len, name);
}

static uint64_t link_of(const struct db *db, uint64_t id) {
    const struct record *r = db_get(db, id);
    CHECK(r != NULL);
    return r->event_id;
}

static void fault(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    store_faults_rearm();
}

/* From now on data syncs fail (EIO), quietly: the errors are the test's. Returns
 * the log threshold that syncs_recover gives back. */
static enum log_level syncs_fail(void) {
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    return saved;
}

/* The failed batch has been reported; the disk recovers and the store writes
 * again (what was pending is on disk). */
static void syncs_recover(struct db *db, uv_loop_t *loop, enum log_level saved) {
    RUN_UNTIL(loop, acks.errors > 0);
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&db->store), 0);
    log_threshold = saved;
}

/* ---- "always": a failed batch is undone exactly ---- */

struct fixture {
    uint64_t t_upd, t_del, t_link, t_other, addr, ev, user;
};

/* Records of every kind, acknowledged: the state a failed batch must come back to. */
static void populate(struct db *db, uv_loop_t *loop, struct fixture *f) {
    f->user = take_id(db);
    db_put_user(db, f->user, "alice", "key");
    f->t_upd = put_theme(db, "to update");
    f->t_del = put_theme(db, "to delete");
    f->t_link = put_theme(db, "linked");
    f->t_other = put_theme(db, "other");
    f->addr = take_id(db);
    db_put(db, address(f->addr, "Lyon"));
    f->ev = take_id(db);
    uint64_t lsn = db_put(db, event(f->ev, f->t_link, f->addr));
    RUN_UNTIL(loop, store_is_acked(&db->store, lsn));
    CHECK_EQ_UINT(acks.errors, 0);
    CHECK_EQ_UINT(acks.last_lsn, lsn);
    CHECK_EQ_UINT(link_of(db, f->t_link), f->ev);
    CHECK_EQ_UINT(link_of(db, f->addr), f->ev);
}

static void check_populated(const struct db *db, const struct fixture *f) {
    check_name(db, f->t_upd, "to update");
    check_name(db, f->t_del, "to delete");
    check_name(db, f->t_link, "linked");
    check_name(db, f->t_other, "other");
    const struct record *e = db_get(db, f->ev);
    CHECK(e != NULL);
    CHECK_EQ_UINT(record_ref(e, EVENT_THEME_ID), f->t_link);
    CHECK_EQ_UINT(record_ref(e, EVENT_ADDRESS_ID), f->addr);
    CHECK_EQ_UINT(link_of(db, f->t_link), f->ev);
    CHECK_EQ_UINT(link_of(db, f->addr), f->ev);
    CHECK_EQ_UINT(link_of(db, f->t_other), 0);
    CHECK(index_user_by_name(&db->index, "alice", 5) != NULL);
    CHECK_EQ_UINT(index_owned(&db->index, 1, REC_THEME)->len, 4);
}

/*
 * The failed batch: on a populated db in "always", with every fsync failing
 * from then on, one batch of a create, an update, a delete, the event moved
 * to another theme and off its address, a new event and a user renamed.
 */
struct failed_batch {
    char *dir;
    uv_loop_t loop;
    struct db db;
    struct fixture f;
    uint64_t good;    /* the last acknowledged LSN before the batch */
    uint64_t count;   /* records in the index before the batch */
    uint64_t created; /* the theme the batch creates */
    uint64_t ev2;     /* the event the batch creates */
    uint64_t last;    /* the batch's last LSN */
    enum log_level saved;
};

static void batch_begin(struct failed_batch *x) {
    x->dir = tmpdir("db");
    open_db(&x->db, &x->loop, x->dir, &always);
    populate(&x->db, &x->loop, &x->f);
    x->good = acks.last_lsn;
    x->count = x->db.index.count;
    x->saved = log_threshold;
    log_threshold = LOG_OFF; /* the expected error is noise here */
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    struct db *db = &x->db;
    x->created = put_theme(db, "created");
    db_put(db, theme(x->f.t_upd, "updated"));
    db_delete(db, x->f.t_del);
    db_put(db, event(x->f.ev, x->f.t_other, 0));
    x->ev2 = take_id(db);
    db_put(db, event(x->ev2, x->created, x->f.addr));
    db_put_user(db, x->f.user, "alice2", "key2");
    x->last = db_put(db, theme(x->f.t_upd, "updated twice"));
}

/* Runs the loop until the batch's sync has failed. */
static void batch_fail(struct failed_batch *x) {
    RUN_UNTIL(&x->loop, acks.errors > 0);
}

/* The disk recovers: one successful attempt. */
static void batch_recover(struct failed_batch *x) {
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&x->db.store), 0);
}

/* Writes after the recovery: a new theme (returned) and an update of t_other, acknowledged. */
static uint64_t batch_write_after(struct failed_batch *x) {
    uint64_t after = put_theme(&x->db, "after");
    uint64_t lsn = db_put(&x->db, theme(x->f.t_other, "other v2"));
    RUN_UNTIL(&x->loop, store_is_acked(&x->db.store, lsn));
    CHECK_EQ_INT(acks.last_status, 0);
    return after;
}

static void batch_end(struct failed_batch *x) {
    batch_recover(x);
    log_threshold = x->saved;
    close_db(&x->db, &x->loop);
    rmrf(x->dir);
}

static void test_always_batch_is_visible_before_its_ack(void) {
    struct failed_batch x;
    batch_begin(&x);
    check_name(&x.db, x.created, "created");
    check_name(&x.db, x.f.t_upd, "updated twice");
    CHECK(db_get(&x.db, x.f.t_del) == NULL);
    CHECK_EQ_UINT(link_of(&x.db, x.f.t_other), x.f.ev);
    CHECK_EQ_UINT(link_of(&x.db, x.f.t_link), 0);
    CHECK_EQ_UINT(link_of(&x.db, x.f.addr), x.ev2);
    CHECK_EQ_UINT(db_visible_lsn(&x.db), x.last);
    CHECK(!store_is_acked(&x.db.store, x.last));
    batch_fail(&x);
    batch_end(&x);
}

static void test_always_failed_batch_reports_eio_at_the_last_good_lsn(void) {
    struct failed_batch x;
    batch_begin(&x);
    batch_fail(&x);
    CHECK_EQ_UINT(acks.errors, 1);
    CHECK_EQ_INT(acks.err_status, -EIO);
    CHECK_EQ_UINT(acks.err_lsn, x.good); /* everything after it was lost */
    batch_end(&x);
}

static void test_always_failed_batch_is_undone_exactly(void) {
    struct failed_batch x;
    batch_begin(&x);
    batch_fail(&x);
    CHECK(db_get(&x.db, x.created) == NULL);
    CHECK(db_get(&x.db, x.ev2) == NULL);
    check_populated(&x.db, &x.f);
    CHECK(index_user_by_name(&x.db.index, "alice2", 6) == NULL);
    CHECK_EQ_UINT(x.db.index.count, x.count);
    CHECK_EQ_UINT(db_visible_lsn(&x.db), x.good);
    batch_end(&x);
}

static void test_always_db_is_unwritable_until_an_attempt_succeeds(void) {
    struct failed_batch x;
    batch_begin(&x);
    batch_fail(&x);
    CHECK(db_writable(&x.db) < 0);
    /* Still failing: a second attempt fails the same, and the db stays unwritable. */
    CHECK_EQ_INT(store_flush_sync(&x.db.store), -EIO);
    CHECK(db_writable(&x.db) < 0);
    /* The disk recovers: one successful attempt ends it. */
    batch_recover(&x);
    CHECK_EQ_INT(db_writable(&x.db), 0);
    batch_end(&x);
}

static void test_always_writes_after_recovery_take_new_ids(void) {
    struct failed_batch x;
    batch_begin(&x);
    batch_fail(&x);
    batch_recover(&x);
    /* Writes work again; the created record's id is not handed out again. */
    uint64_t after = batch_write_after(&x);
    CHECK(after > x.ev2);
    batch_end(&x);
}

static void test_always_undone_batch_never_replays(void) {
    struct failed_batch x;
    batch_begin(&x);
    batch_fail(&x);
    batch_recover(&x);
    uint64_t after = batch_write_after(&x);
    log_threshold = x.saved;
    close_db(&x.db, &x.loop);

    /* The log agrees with memory: what was undone never comes back. */
    struct db db;
    uv_loop_t loop;
    open_db(&db, &loop, x.dir, &always);
    CHECK(db_get(&db, x.created) == NULL);
    CHECK(db_get(&db, x.ev2) == NULL);
    check_name(&db, x.f.t_upd, "to update");
    check_name(&db, x.f.t_del, "to delete");
    check_name(&db, after, "after");
    check_name(&db, x.f.t_other, "other v2");
    CHECK_EQ_UINT(link_of(&db, x.f.t_link), x.f.ev);
    CHECK_EQ_UINT(link_of(&db, x.f.addr), x.f.ev);
    CHECK(index_user_by_name(&db.index, "alice", 5) != NULL);
    close_db(&db, &loop);
    rmrf(x.dir);
}

/* Changes acknowledged before the failed batch are kept; only the batch is undone. */
static void test_always_undo_stops_at_the_acked_lsn(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    uint64_t lsn_a = db_put(&db, theme(a, "a2"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn_a));
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    db_put(&db, theme(a, "a3"));
    db_delete(&db, a);
    RUN_UNTIL(&loop, acks.errors > 0);
    CHECK_EQ_UINT(acks.err_lsn, lsn_a);
    check_name(&db, a, "a2"); /* not "a", not "a3", not gone */
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&db.store), 0);
    log_threshold = saved;
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, a, "a2");
    close_db(&db, &loop);
    rmrf(dir);
}

/* ---- "interval": a failed write or sync loses nothing ---- */

/*
 * A failing batch in "interval": on a db holding "kept" and "deleted
 * later", durable, a create, an update and a delete; the fault (a failed
 * write, or a failed sync once the batch is written) holds from then on.
 */
struct interval_batch {
    char *dir;
    uv_loop_t loop;
    struct db db;
    const char *fault_var;
    uint64_t kept, del, created, last;
    enum log_level saved;
};

static void interval_begin(struct interval_batch *x, const char *fault_var, bool written_first) {
    x->dir = tmpdir("db");
    x->fault_var = fault_var;
    struct db *db = &x->db;
    open_db(db, &x->loop, x->dir, &interval);
    x->kept = put_theme(db, "kept");
    x->del = put_theme(db, "deleted later");
    RUN_UNTIL(&x->loop, db->store.durable_lsn == db->store.appended_lsn);

    x->saved = log_threshold;
    log_threshold = LOG_OFF;
    if (!written_first) fault(fault_var, "0");
    x->created = put_theme(db, "created");
    db_put(db, theme(x->kept, "kept v2"));
    x->last = db_delete(db, x->del);
    if (written_first) {
        /* Written to the file but not yet synced when the sync fails. */
        RUN_UNTIL(&x->loop, db->store.written_lsn == x->last);
        CHECK(db->store.durable_lsn < x->last);
        fault(fault_var, "0");
    }
}

static void interval_fail(struct interval_batch *x) {
    RUN_UNTIL(&x->loop, acks.errors > 0);
}

static void interval_recover(struct interval_batch *x) {
    fault(x->fault_var, NULL);
    CHECK_EQ_INT(store_flush_sync(&x->db.store), 0);
}

static void interval_end(struct interval_batch *x) {
    interval_recover(x);
    log_threshold = x->saved;
    close_db(&x->db, &x->loop);
    rmrf(x->dir);
}

static void check_interval_batch(const struct db *db, const struct interval_batch *x) {
    check_name(db, x->created, "created");
    check_name(db, x->kept, "kept v2");
    CHECK(db_get(db, x->del) == NULL);
}

static void interval_acked_at_once(const char *fault_var, bool written_first) {
    struct interval_batch x;
    interval_begin(&x, fault_var, written_first);
    CHECK(store_is_acked(&x.db.store, x.last)); /* acknowledged at once in this mode */
    CHECK_EQ_UINT(acks.errors, 0);
    interval_fail(&x);
    CHECK_EQ_UINT(acks.err_lsn, x.last); /* nothing lost: every LSN stays acknowledged */
    interval_end(&x);
}

static void interval_nothing_undone(const char *fault_var, bool written_first) {
    struct interval_batch x;
    interval_begin(&x, fault_var, written_first);
    interval_fail(&x);
    check_interval_batch(&x.db, &x);
    /* Retries keep failing while the fault holds; the records stay. */
    uint64_t errors = acks.errors;
    RUN_UNTIL(&x.loop, acks.errors > errors);
    check_name(&x.db, x.created, "created");
    interval_end(&x);
}

static void interval_unwritable_until_recovered(const char *fault_var, bool written_first) {
    struct interval_batch x;
    interval_begin(&x, fault_var, written_first);
    interval_fail(&x);
    CHECK(db_writable(&x.db) < 0);
    interval_recover(&x);
    CHECK_EQ_INT(db_writable(&x.db), 0);
    CHECK_EQ_UINT(x.db.store.durable_lsn, x.db.store.appended_lsn);
    interval_end(&x);
}

static void interval_on_disk_after_recovery(const char *fault_var, bool written_first) {
    struct interval_batch x;
    interval_begin(&x, fault_var, written_first);
    interval_fail(&x);
    interval_recover(&x);
    log_threshold = x.saved;
    /* On disk now, before any close: a crash copy has them. */
    char *crash = copy_log(x.dir);
    close_db(&x.db, &x.loop);

    const char *dirs[] = {x.dir, crash};
    for (int i = 0; i < 2; i++) {
        struct db db;
        uv_loop_t loop;
        open_db(&db, &loop, dirs[i], &interval);
        check_interval_batch(&db, &x);
        close_db(&db, &loop);
    }
    rmrf(crash);
    rmrf(x.dir);
}

#define WRITE_FAULT "EVENTD_FAULT_WRITE_AFTER", false
#define SYNC_FAULT "EVENTD_FAULT_FSYNC_AFTER", true

static void test_interval_failed_write_acks_at_once(void) {
    interval_acked_at_once(WRITE_FAULT);
}
static void test_interval_failed_write_undoes_nothing(void) {
    interval_nothing_undone(WRITE_FAULT);
}
static void test_interval_failed_write_unwritable_until_recovered(void) {
    interval_unwritable_until_recovered(WRITE_FAULT);
}
static void test_interval_failed_write_on_disk_after_recovery(void) {
    interval_on_disk_after_recovery(WRITE_FAULT);
}
static void test_interval_failed_sync_acks_at_once(void) {
    interval_acked_at_once(SYNC_FAULT);
}
static void test_interval_failed_sync_undoes_nothing(void) {
    interval_nothing_undone(SYNC_FAULT);
}
static void test_interval_failed_sync_unwritable_until_recovered(void) {
    interval_unwritable_until_recovered(SYNC_FAULT);
}
static void test_interval_failed_sync_on_disk_after_recovery(void) {
    interval_on_disk_after_recovery(SYNC_FAULT);
}

/* ---- ids ---- */

static void test_ids_clean_close_gives_back_the_block(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t last = 0;
    for (int i = 0; i < 10; i++)
        last = put_theme(&db, "t");
    uint64_t unused = take_id(&db); /* taken, never used: still never handed out again */
    CHECK_EQ_UINT(unused, last + 1);
    close_db(&db, &loop);

    for (int round = 0; round < 3; round++) {
        open_db(&db, &loop, dir, &always);
        uint64_t next = take_id(&db);
        CHECK_EQ_UINT(next, unused + 1); /* the next one, not one a block further */
        unused = next;
        close_db(&db, &loop);
    }
    rmrf(dir);
}

static void crash_run(const struct store_opts *o) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, o);
    uint64_t max = 0;
    for (int i = 0; i < 10; i++)
        max = put_theme(&db, "t");
    /* Crash now: in "interval" the records may not even be written yet. */
    char *crash = copy_log(dir);
    close_db(&db, &loop);

    open_db(&db, &loop, crash, o);
    uint64_t next = take_id(&db);
    CHECK(next > max);
    CHECK(db_get(&db, next) == NULL);
    /* And again after a crash of the reopened one, before it wrote anything. */
    char *crash2 = copy_log(crash);
    close_db(&db, &loop);
    open_db(&db, &loop, crash2, o);
    CHECK(take_id(&db) > next);
    close_db(&db, &loop);
    rmrf(crash2);
    rmrf(crash);
    rmrf(dir);
}

static void test_ids_never_twice_after_crash_always(void) {
    crash_run(&always);
}

static void test_ids_never_twice_after_crash_interval(void) {
    crash_run(&interval);
}

/* Past the first block: the next reservation must be on disk before its ids go out. */
static void test_ids_across_blocks(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &interval);
    uint64_t first = take_id(&db), id = first, max = first;
    int rc = 0;
    /* Without running the loop, no new reservation can reach the disk. */
    for (uint64_t i = 1; i <= DB_ID_BLOCK && rc == 0; i++) {
        rc = db_take_id(&db, &id);
        if (rc == 0) max = id;
    }
    CHECK_EQ_INT(rc, -EAGAIN);
    CHECK_EQ_UINT(max, first + DB_ID_BLOCK - 1); /* exactly the block reserved at open */
    /* Once the loop has synced the next reservation, ids flow again. */
    uv_timer_start(&tick, on_tick, 1, 1);
    for (int turn = 0; turn < 2000 && rc == -EAGAIN; turn++) {
        uv_run(&loop, UV_RUN_ONCE);
        rc = db_take_id(&db, &id);
    }
    uv_timer_stop(&tick);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_UINT(id, max + 1);
    max = id;
    for (int i = 0; i < 1000; i++)
        max = take_id(&db);
    char *crash = copy_log(dir);
    close_db(&db, &loop);
    open_db(&db, &loop, crash, &interval);
    CHECK(take_id(&db) > max);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &interval);
    CHECK_EQ_UINT(take_id(&db), max + 1); /* clean close: the rest was given back */
    close_db(&db, &loop);
    rmrf(crash);
    rmrf(dir);
}

/* "always": a reservation frame lost with a failed batch does not count; the next one does. */
static void test_ids_lost_reservation_always(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t durable = db.ids.durable, max = 0;
    for (int i = 0; i < (int)DB_ID_BLOCK && !db.ids.frame_lsn; i++)
        max = take_id(&db);
    CHECK(db.ids.frame_lsn != 0); /* half the block is used: the next reservation is pending */
    CHECK(db.ids.reserved > durable);
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    db_put(&db, theme(max, "lost"));
    RUN_UNTIL(&loop, acks.errors > 0);
    CHECK_EQ_UINT(db.ids.reserved, durable); /* only what is on disk holds */
    CHECK(db_get(&db, max) == NULL);
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&db.store), 0);
    log_threshold = saved;
    /* Ids go on from where they were (the lost record's id is not reused)... */
    uint64_t next = put_theme(&db, "kept");
    CHECK_EQ_UINT(next, max + 1);
    /* ...past the end of the first block, once a new reservation is synced. */
    for (uint64_t i = 0; i < DB_ID_BLOCK; i++) {
        next = take_id(&db);
        if (i % 4096 == 0) {
            uint64_t lsn = db_put(&db, theme(next, "t"));
            RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
        }
    }
    CHECK(next > durable);
    uint64_t lsn = db_put(&db, theme(next, "last"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    char *crash = copy_log(dir);
    close_db(&db, &loop);
    open_db(&db, &loop, crash, &always);
    check_name(&db, next, "last");
    CHECK(take_id(&db) > next);
    close_db(&db, &loop);
    rmrf(crash);
    rmrf(dir);
}

/* ---- node ids (shards) ---- */

/* db_open as node, expected to fail: msg must name want; nothing is written. */
static void open_refused(const char *dir, uint32_t node, const char *want) {
    uv_loop_t loop;
    struct db db;
    char msg[512] = "";
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    struct db_settings set = {.store_opts = always, .node_id = node, .idem_ttl_s = DB_IDEM_TTL_S};
    CHECK_EQ_INT(db_open(&db, &loop, dir, &set, msg, sizeof msg), -1);
    log_threshold = saved;
    if (!strstr(msg, want)) fprintf(stderr, "message: %s\n", msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK_EQ_INT(db_close(&db), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

static off_t log_size(const char *dir) {
    struct stat st;
    CHECK_EQ_INT(stat(path_of(dir, STORE_LOG_NAME), &st), 0);
    return st.st_size;
}

static void test_node_ids_carry_the_node(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_node = 5;
    open_db(&db, &loop, dir, &always);
    uint64_t first = put_theme(&db, "a");
    CHECK_EQ_UINT(first, UINT64_C(5) << 43);
    CHECK_EQ_UINT(first >> RECORD_NODE_SHIFT, 5);
    uint64_t second = put_theme(&db, "b");
    CHECK_EQ_UINT(second, first + 1);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, first, "a");
    CHECK_EQ_UINT(take_id(&db), second + 1);
    close_db(&db, &loop);
    open_node = 0;
    rmrf(dir);
}

/* The last id of the highest node is the last id below 2^53. */
static void test_node_ranges_end_below_2_53(void) {
    CHECK_EQ_UINT(record_node_id_max(RECORD_NODE_MAX), RECORD_ID_MAX);
    CHECK_EQ_UINT(record_node_id_min(1), UINT64_C(1) << 43);
    CHECK_EQ_UINT(record_node_id_max(1) + 1, record_node_id_min(2));
    CHECK_EQ_UINT(record_node_id_min(0), 1);
    CHECK_EQ_UINT(record_node_id_max(0), RECORD_ID_MAX);
}

static void test_node_other_id_refused(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_node = 5;
    open_db(&db, &loop, dir, &always);
    put_theme(&db, "a");
    close_db(&db, &loop);
    off_t size = log_size(dir);
    open_refused(dir, 6, "belongs to node 5, not to --node-id 6");
    open_refused(dir, 0, "belongs to node 5, not to --node-id 0");
    CHECK_EQ_INT(log_size(dir), size);
    open_db(&db, &loop, dir, &always); /* still node 5's */
    close_db(&db, &loop);
    open_node = 0;
    rmrf(dir);
}

/* A directory without a node frame that holds data is node 0's; an empty one may become a shard. */
static void test_node_zero_data_refused_as_shard(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t id = put_theme(&db, "legacy");
    CHECK_EQ_UINT(id, 1);
    close_db(&db, &loop);
    open_refused(dir, 3, "without a node id (node 0, unsharded), not by --node-id 3");
    open_db(&db, &loop, dir, &always);
    check_name(&db, id, "legacy");
    close_db(&db, &loop);
    rmrf(dir);
}

static void test_node_empty_directory_becomes_shard(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always); /* node 0, nothing written but id reservations */
    take_id(&db);
    close_db(&db, &loop);
    open_node = 3;
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(put_theme(&db, "a"), UINT64_C(3) << 43);
    close_db(&db, &loop);
    open_node = 0;
    open_refused(dir, 0, "belongs to node 3");
    rmrf(dir);
}

/* Compaction keeps the node frame (ids go on after it) and the records of other nodes. */
static void test_node_survives_compaction(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_node = 4;
    open_db(&db, &loop, dir, &always);
    uint64_t id = 0;
    for (int i = 0; i < 5; i++)
        id = put_theme(&db, "t");
    uint64_t foreign = (UINT64_C(9) << 43) + 1, unsharded = 77;
    db_put(&db, theme(foreign, "nine"));
    db_put(&db, theme(unsharded, "zero"));
    CHECK_EQ_INT(store_flush_sync(&db.store), 0);
    CHECK_EQ_INT(db_compact_now(&db), 0);
    close_db(&db, &loop);
    open_refused(dir, 5, "belongs to node 4");
    open_db(&db, &loop, dir, &always);
    check_name(&db, id, "t");
    check_name(&db, foreign, "nine");
    check_name(&db, unsharded, "zero");
    CHECK_EQ_UINT(db.index.foreign.len, 2);
    CHECK_EQ_UINT(take_id(&db), id + 1);
    close_db(&db, &loop);
    open_node = 0;
    rmrf(dir);
}

/* Records of another node (an import) keep their ids and never move this node's next id. */
static void test_node_foreign_ids_keep_next_id(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_node = 2;
    open_db(&db, &loop, dir, &always);
    uint64_t mine = put_theme(&db, "mine");
    uint64_t foreign = (UINT64_C(7) << 43) + 12345;
    db_put(&db, theme(foreign, "foreign"));
    CHECK_EQ_UINT(take_id(&db), mine + 1);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, foreign, "foreign");
    CHECK_EQ_UINT(take_id(&db), mine + 2);
    close_db(&db, &loop);
    open_node = 0;
    rmrf(dir);
}

/* ---- idempotency keys ---- */

/* A key record of user 1 made at Unix time created, for the record rid, answering answer. */
static void idem_vals(union value *v, const char *key, uint64_t created, uint64_t rid,
                      const char *answer) {
    test_idem_vals(v, key, (int64_t)created, rid, answer, strlen(answer));
}

static struct record *idem_key(uint64_t id, const char *key, uint64_t created, uint64_t rid,
                               const char *answer) {
    union value v[RECORD_MAX_FIELDS];
    idem_vals(v, key, created, rid, answer);
    return record_build(&record_idem, id, 1, v);
}

/* A theme named name created with key (the API's keyed create): db_keyed_begin, _end. */
static uint64_t put_keyed(struct db *db, uint64_t id, const char *name, uint64_t key_id,
                          const char *key, uint64_t created, const char *answer) {
    union value v[RECORD_MAX_FIELDS], kv[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    v[THEME_NAME].s.ptr = name;
    v[THEME_NAME].s.len = (uint32_t)strlen(name);
    const struct record *r = db_keyed_begin(db, &record_theme, id, 1, v, UINT32_C(1) << THEME_NAME);
    CHECK_EQ_UINT(r->id, id);
    idem_vals(kv, key, created, id, answer);
    return db_keyed_end(db, key_id, kv);
}

static void check_key(const struct db *db, const char *key, const char *answer) {
    const struct record *k = index_idem_get(&db->index, 1, key, strlen(key));
    CHECK(k != NULL);
    CHECK_EQ_MEM(record_get(k, IDEM_ANSWER).s.ptr, record_get(k, IDEM_ANSWER).s.len, answer);
}

/* A keyed create is one frame: after a reopen both the record and its key are back. */
static void test_keyed_put_survives_reopen(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t id = take_id(&db), kid = take_id(&db);
    uint64_t lsn = put_keyed(&db, id, "keyed", kid, "k1", 1, "{answer}");
    CHECK(db_unacked(&db, kid));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK(!db_unacked(&db, kid));
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, id, "keyed");
    check_key(&db, "k1", "{answer}");
    CHECK(index_idem_get(&db.index, 2, "k1", 2) == NULL); /* another user's k1 */
    close_db(&db, &loop);
    rmrf(dir);
}

/* A keyed create torn anywhere at the log's tail (a crash mid-write) leaves neither the record
 * nor its key: one frame, one checksum. */
static void test_keyed_put_torn_leaves_neither(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t before = put_theme(&db, "before");
    RUN_UNTIL(&loop, store_is_acked(&db.store, db_visible_lsn(&db)));
    uint64_t id = take_id(&db), kid = take_id(&db);
    RUN_UNTIL(&loop, store_is_acked(&db.store, db_visible_lsn(&db))); /* the id reservation */
    uint64_t start = db.store.file_size;
    uint64_t lsn = put_keyed(&db, id, "keyed", kid, "k1", 1, "{answer}");
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    uint64_t end = db.store.file_size;
    CHECK(end > start + 20);
    close_db(&db, &loop);
    enum log_level saved = log_threshold;
    log_threshold = LOG_ERROR; /* each cut is logged */
    for (uint64_t cut = start + 1; cut < end; cut++) {
        char *copy = copy_log(dir);
        char cpath[1024];
        snprintf(cpath, sizeof cpath, "%s/%s", copy, STORE_LOG_NAME);
        CHECK_EQ_INT(truncate(cpath, (off_t)cut), 0);
        open_db(&db, &loop, copy, &always);
        check_name(&db, before, "before");
        CHECK(db_get(&db, id) == NULL);
        CHECK(index_idem_get(&db.index, 1, "k1", 2) == NULL);
        close_db(&db, &loop);
        rmrf(copy);
    }
    log_threshold = saved;
    rmrf(dir);
}

/* A failed batch takes back the record and its key together. */
static void test_keyed_put_failed_batch_undoes_both(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t good = put_theme(&db, "good");
    RUN_UNTIL(&loop, acks.last_lsn >= db_visible_lsn(&db));
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    uint64_t id = take_id(&db), kid = take_id(&db);
    put_keyed(&db, id, "keyed", kid, "k1", 1, "{answer}");
    check_key(&db, "k1", "{answer}");
    RUN_UNTIL(&loop, acks.errors > 0);
    CHECK(db_get(&db, id) == NULL);
    CHECK(db_get(&db, kid) == NULL);
    CHECK(index_idem_get(&db.index, 1, "k1", 2) == NULL);
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&db.store), 0);
    log_threshold = saved;
    check_name(&db, good, "good");
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK(db_get(&db, id) == NULL);
    CHECK(index_idem_get(&db.index, 1, "k1", 2) == NULL);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * The name of the theme a key by reference answers with (record.h, IDEM_ANSWER's forms):
 * the record as created, kept in the key or referred to at the key's rev. "" when the
 * key has neither (its answer would be lost).
 */
static void key_answer_name(const struct db *db, const char *key, char *out, size_t n) {
    const struct record *k = index_idem_get(&db->index, 1, key, strlen(key));
    union value a = k ? record_get(k, IDEM_ANSWER) : (union value){0};
    out[0] = '\0';
    if (a.s.len > 2 && (uint8_t)a.s.ptr[0] == IDEM_SNAPSHOT_MARK) {
        struct record *r =
            record_decode((uint8_t)a.s.ptr[1], (const uint8_t *)a.s.ptr + 2, a.s.len - 2);
        if (r) snprintf(out, n, "%s", record_get(r, THEME_NAME).s.ptr);
        record_free(r);
    } else if (k && idem_by_ref(k, k->id - 1)) {
        const struct record *r = db_get(db, k->id - 1);
        if (r && r->rev == k->rev) snprintf(out, n, "%s", record_get(r, THEME_NAME).s.ptr);
    }
}

/*
 * A key by reference and a failed batch that changed its record: the change is
 * taken back, the key answers with the record as created, now, after a later
 * change that succeeds, and after a reopen (whose replay never sees the failed
 * change). A failed deletion likewise.
 */
static void test_a_key_by_reference_survives_failed_changes_of_its_record(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t now = (uint64_t)time(NULL), lsn;
    uint64_t a = take_id(&db), ka = take_id(&db), b = take_id(&db), kb = take_id(&db);
    put_keyed(&db, a, "created", ka, "ka", now, "\x01\x40");
    lsn = put_keyed(&db, b, "kept", kb, "kb", now, "\x01\x40");
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    char name[64];
    enum log_level saved = syncs_fail();
    db_put(&db, theme(a, "lost"));
    db_delete(&db, b);
    syncs_recover(&db, &loop, saved);
    check_name(&db, a, "created");
    check_name(&db, b, "kept");
    key_answer_name(&db, "ka", name, sizeof name);
    CHECK_EQ_STR(name, "created");
    key_answer_name(&db, "kb", name, sizeof name);
    CHECK_EQ_STR(name, "kept");
    lsn = db_put(&db, theme(a, "later"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    key_answer_name(&db, "ka", name, sizeof name);
    CHECK_EQ_STR(name, "created");
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, a, "later");
    key_answer_name(&db, "ka", name, sizeof name);
    CHECK_EQ_STR(name, "created");
    key_answer_name(&db, "kb", name, sizeof name);
    CHECK_EQ_STR(name, "kept");
    CHECK(idem_by_ref(index_idem_get(&db.index, 1, "kb", 2), b)); /* nothing changed it */
    close_db(&db, &loop);
    rmrf(dir);
}

/* Compaction leaves expired keys out of the log and memory, and keeps the live ones. */
static void test_compaction_drops_expired_keys(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_idem_ttl = 60;
    open_db(&db, &loop, dir, &always);
    uint64_t now = (uint64_t)time(NULL);
    uint64_t a = take_id(&db), ka = take_id(&db), b = take_id(&db), kb = take_id(&db);
    put_keyed(&db, a, "old", ka, "old", now - 61, "{old}");
    uint64_t lsn = put_keyed(&db, b, "new", kb, "new", now, "{new}");
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK(db_idem_expired(&db, db_get(&db, ka), now));
    CHECK(!db_idem_expired(&db, db_get(&db, kb), now));
    CHECK_EQ_INT(db_compact_now(&db), 0);
    CHECK(db_get(&db, ka) == NULL);
    check_key(&db, "new", "{new}");
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, a, "old"); /* the record stays: only its key is forgotten */
    CHECK(index_idem_get(&db.index, 1, "old", 3) == NULL);
    check_key(&db, "new", "{new}");
    close_db(&db, &loop);
    rmrf(dir);
    open_idem_ttl = DB_IDEM_TTL_S;
}

/* Imported (foreign) ids: an expired key among them is left out, and nothing after it is. */
static void test_compaction_of_foreign_expired_keys_keeps_the_rest(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_node = 2;
    open_idem_ttl = 60;
    open_db(&db, &loop, dir, &always);
    uint64_t now = (uint64_t)time(NULL), f = (UINT64_C(7) << 43) + 10;
    db_put(&db, idem_key(f, "old", now - 61, f - 1, "{old}"));
    db_put(&db, theme(f + 1, "after the key"));
    uint64_t lsn = db_put(&db, theme(f + 2, "and this"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK_EQ_INT(db_compact_now(&db), 0);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK(db_get(&db, f) == NULL);
    check_name(&db, f + 1, "after the key");
    check_name(&db, f + 2, "and this");
    close_db(&db, &loop);
    open_node = 0;
    open_idem_ttl = DB_IDEM_TTL_S;
    rmrf(dir);
}

/* ---- revs (docs/STORAGE.md "Revisions") ---- */

static uint64_t rev_of(const struct db *db, uint64_t id) {
    const struct record *r = db_get(db, id);
    CHECK(r != NULL);
    return r->rev;
}

/* Every change takes the next rev; a reopen gives every record the rev it had. */
static void test_revs_survive_reopen(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b"), c = put_theme(&db, "c");
    CHECK_EQ_UINT(rev_of(&db, a), 1);
    CHECK_EQ_UINT(rev_of(&db, b), 2);
    db_put(&db, theme(a, "a2"));
    db_delete(&db, c); /* rev 5 */
    uint64_t kid = take_id(&db), d = take_id(&db);
    put_keyed(&db, d, "keyed", kid, "k", 1, "{}");
    CHECK_EQ_UINT(rev_of(&db, a), 4);
    CHECK_EQ_UINT(rev_of(&db, d), 6);
    CHECK_EQ_UINT(rev_of(&db, kid), 6);
    CHECK_EQ_UINT(db.index.rev, 6);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(rev_of(&db, a), 4);
    CHECK_EQ_UINT(rev_of(&db, b), 2);
    CHECK_EQ_UINT(rev_of(&db, d), 6);
    CHECK_EQ_UINT(rev_of(&db, kid), 6);
    CHECK_EQ_UINT(db.index.rev, 6);
    CHECK_EQ_UINT(db.index.rev_horizon, 0);
    CHECK_EQ_UINT(rev_of(&db, put_theme(&db, "e")), 7);
    close_db(&db, &loop);
    rmrf(dir);
}

/* Compaction writes each record with its rev, and the counter and horizon: the counter goes
 * on after the deletions it dropped, and changes made during it keep theirs. */
static void test_revs_survive_compaction(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b");
    db_put(&db, theme(a, "a2"));      /* 3 */
    uint64_t lsn = db_delete(&db, b); /* 4: the last change, dropped by compaction */
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0);
    uint64_t c = put_theme(&db, "during"); /* 5: reaches the new log by its tail */
    RUN_UNTIL(&loop, !db.compacting);
    CHECK_EQ_INT(db.compact_status, 0);
    CHECK_EQ_UINT(db.index.rev_horizon, 4);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(rev_of(&db, a), 3);
    CHECK_EQ_UINT(rev_of(&db, c), 5);
    CHECK_EQ_UINT(db.index.rev, 5);
    CHECK_EQ_UINT(db.index.rev_horizon, 4);
    CHECK_EQ_INT(db_compact_now(&db), 0);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(rev_of(&db, a), 3);
    CHECK_EQ_UINT(rev_of(&db, c), 5);
    CHECK_EQ_UINT(db.index.rev_horizon, 5);
    CHECK_EQ_UINT(rev_of(&db, put_theme(&db, "next")), 6);
    close_db(&db, &loop);
    rmrf(dir);
}

/* A failed batch's revs are never handed out again in this process: a gap, no reuse. */
static void test_revs_after_a_failed_batch(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    RUN_UNTIL(&loop, acks.last_lsn >= db_visible_lsn(&db));
    enum log_level saved = syncs_fail();
    db_put(&db, theme(a, "lost")); /* 2, undone */
    syncs_recover(&db, &loop, saved);
    check_name(&db, a, "a");
    CHECK_EQ_UINT(rev_of(&db, a), 1);
    db_put(&db, theme(a, "kept"));
    CHECK_EQ_UINT(rev_of(&db, a), 3);
    uint64_t lsn = db_visible_lsn(&db);
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    check_name(&db, a, "kept");
    CHECK_EQ_UINT(rev_of(&db, a), 3);
    close_db(&db, &loop);
    rmrf(dir);
}

/* The revs of an undone batch were handed out (a cursor, an ETag, in this process): after a
 * restart they are not handed out again. */
static void test_revs_of_a_failed_batch_never_again_after_a_restart(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    RUN_UNTIL(&loop, acks.last_lsn >= db_visible_lsn(&db));
    enum log_level saved = syncs_fail();
    db_put(&db, theme(a, "lost"));
    db_put(&db, theme(a, "lost too"));
    syncs_recover(&db, &loop, saved);
    uint64_t shown = db_rev(&db); /* a cursor handed out now */
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK(db_rev(&db) >= shown);
    db_put(&db, theme(a, "next"));
    CHECK(rev_of(&db, a) > shown);
    close_db(&db, &loop);
    rmrf(dir);
}

/* In interval mode a crash loses acknowledged changes, and their revs were handed out: the
 * log's rev floor, on disk since the start, keeps the next process above them. */
static void test_revs_lost_in_a_crash_never_again(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &interval);
    uint64_t a = put_theme(&db, "a");
    put_theme(&db, "b");
    uint64_t shown = db_rev(&db);
    char *crash = copy_log(dir); /* before the batch was written */
    close_db(&db, &loop);
    open_db(&db, &loop, crash, &interval);
    CHECK(db_get(&db, a) == NULL);
    CHECK(db_rev(&db) >= shown);
    uint64_t c = put_theme(&db, "c");
    CHECK(rev_of(&db, c) > shown);
    close_db(&db, &loop);
    /* A clean close gives back what was not used: the next start goes on from there. */
    open_db(&db, &loop, crash, &interval);
    CHECK_EQ_UINT(db_rev(&db), rev_of(&db, c));
    close_db(&db, &loop);
    rmrf(dir);
    rmrf(crash);
}

/* A log of an older eventd (change frames not wrapped) replays with implicit revs, one per
 * change frame, and the server goes on from there. */
static void test_revs_implicit_in_an_old_log(void) {
    struct index ix;
    index_init(&ix);
    struct buf b = BUF_INIT;
    struct record *t1 = theme(1, "one"), *t2 = theme(2, "two"), *t1b = theme(1, "one again");
    uint8_t p[VARINT_MAX];
    record_encode(t1, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), 0);
    CHECK_EQ_INT(index_apply(&ix, REC_NEXT_ID, p, varint_put(p, 100)), 0); /* not a change */
    buf_reset(&b);
    record_encode(t2, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), 0);
    CHECK_EQ_INT(index_apply(&ix, REC_DELETE, p, varint_put(p, 2)), 0);
    buf_reset(&b);
    record_encode(t1b, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), 0);
    CHECK_EQ_UINT(index_get(&ix, 1)->rev, 4);
    CHECK_EQ_UINT(ix.rev, 4);
    /* Then a wrapped frame, as this version appends them. */
    buf_reset(&b);
    record_rev_head(9, REC_THEME, &b);
    record_encode(t2, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_REV, (const uint8_t *)b.ptr, b.len), 0);
    CHECK_EQ_UINT(index_get(&ix, 2)->rev, 9);
    CHECK_EQ_UINT(ix.rev, 9);
    /* Malformed: rev 0, an inner frame that is not a change, a horizon above the counter. */
    uint8_t bad[] = {0, REC_THEME, 1};
    CHECK_EQ_INT(index_apply(&ix, REC_REV, bad, sizeof bad), -1);
    uint8_t nested[] = {5, REC_REV, 1, REC_THEME};
    CHECK_EQ_INT(index_apply(&ix, REC_REV, nested, sizeof nested), -1);
    uint8_t revs[] = {3, 4};
    CHECK_EQ_INT(index_apply(&ix, REC_REVS, revs, sizeof revs), -1);
    record_free(t1);
    record_free(t2);
    record_free(t1b);
    buf_destroy(&b);
    index_destroy(&ix);
}

/* The feed's change lists: one entry per change above the horizon, shown while current; an
 * undone change is not current and what it superseded is again; replay rebuilds them. */
static uint32_t current_changes(const struct db *db, uint64_t user, uint64_t *revs) {
    const struct index_changes *l = index_changes_of(&db->index, user);
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->len; i++)
        if (index_change_current(&db->index, &l->v[i]) != INDEX_CHANGE_STALE)
            revs[n++] = l->v[i].rev;
    return n;
}

static void test_change_lists(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t revs[16];
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b"); /* revs 1, 2 (user 1) */
    db_put(&db, theme(a, "a2"));                               /* 3 supersedes 1 */
    uint64_t lsn = db_delete(&db, b);                          /* 4 supersedes 2 */
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK_EQ_UINT(index_changes_of(&db.index, 1)->len, 4);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], 3);
    CHECK_EQ_UINT(revs[1], 4);
    CHECK_EQ_UINT(index_change_op(&index_changes_of(&db.index, 1)->v[3]), INDEX_OP_DELETE);
    CHECK_EQ_UINT(index_changes_after(index_changes_of(&db.index, 1), 3), 3);
    /* A failed batch: its update is not current, the one before it is again. */
    enum log_level saved = syncs_fail();
    db_put(&db, theme(a, "lost")); /* 5 */
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[1], 5);
    syncs_recover(&db, &loop, saved);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], 3);
    CHECK_EQ_UINT(revs[1], 4);
    close_db(&db, &loop);
    /* Replay: the same current changes; after a compaction, none at or below the horizon. */
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], 3);
    CHECK_EQ_UINT(revs[1], 4);
    CHECK_EQ_INT(db_compact_now(&db), 0);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    CHECK_EQ_UINT(index_changes_of(&db.index, 1)->len, 0);
    uint64_t c = put_theme(&db, "c");
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 1);
    CHECK_EQ_UINT(revs[0], db.index.rev);
    CHECK_EQ_UINT(index_change_id(&index_changes_of(&db.index, 1)->v[0]), c);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * interval mode keeps a copy of what the log holds unsynced, to write it again
 * if a sync fails. A compaction's new log holds those frames already, synced:
 * after the switch the copy must be gone, or the first failed sync writes the
 * old frames again, after newer ones, and replay takes them as the last word
 * (an acknowledged deletion undone). Found by review.
 */
static void test_interval_a_failed_sync_after_a_compaction_rewrites_nothing_old(void) {
    static const struct store_opts slow = {
        .fsync = STORE_FSYNC_INTERVAL, .fsync_interval_ms = 60000, .retry_ms = 10};
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &slow);
    uint64_t a = put_theme(&db, "v1");
    RUN_UNTIL(&loop, db.store.written_lsn == db.store.appended_lsn && !db.store.job);
    CHECK(db.store.file_size > db.store.durable_size); /* written, not synced */
    CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0);
    db_delete(&db, a); /* acknowledged at once */
    RUN_UNTIL(&loop, !db.compacting);
    CHECK_EQ_INT(db.compact_status, 0);
    uint64_t b = put_theme(&db, "b");
    RUN_UNTIL(&loop, db.store.written_lsn == db.store.appended_lsn && !db.store.job);
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
    store_sync_soon(&db.store);
    RUN_UNTIL(&loop, acks.errors > 0);
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    RUN_UNTIL(&loop, !store_failing(&db.store));
    log_threshold = saved;
    CHECK(db_get(&db, a) == NULL);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &slow);
    check_name(&db, b, "b");
    CHECK(db_get(&db, a) == NULL);
    close_db(&db, &loop);
    rmrf(dir);
}

/* A record updated again and again: its superseded changes leave the list as it fills,
 * once acknowledged, so a page does not walk them (the list stays near the live count). */
static void test_superseded_changes_leave_the_list(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b");
    for (int i = 0; i < 200; i++) {
        uint64_t lsn = db_put(&db, theme(a, i % 2 ? "odd" : "even"));
        RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    }
    uint64_t revs[16];
    CHECK(index_changes_of(&db.index, 1)->len <= 8);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], rev_of(&db, b));
    CHECK_EQ_UINT(revs[1], rev_of(&db, a));
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always); /* replay drops them too */
    CHECK(index_changes_of(&db.index, 1)->len <= 8);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * The same with writes in flight, as a client that pipelines its updates (or
 * updates from several connections) makes them: each batch holds several
 * changes of the record, so when the list fills, the change before the one
 * being added is most often not acknowledged yet. The superseded changes must
 * leave the list all the same: otherwise it keeps every change until the next
 * compaction and a page walks them one by one (review, 2026-11-29: 1.28
 * million updates in 10 s from 4 pipelining connections, a page of
 * ?after=0&limit=1 29 ms instead of 0.07 ms).
 */
static void test_superseded_changes_leave_the_list_with_writes_in_flight(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b");
    for (int i = 0; i < 200; i++) {
        uint64_t lsn = 0;
        for (int j = 0; j < 4; j++) /* one batch of 4 changes of a */
            lsn = db_put(&db, theme(a, j % 2 ? "odd" : "even"));
        RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    }
    uint64_t revs[16];
    CHECK(index_changes_of(&db.index, 1)->len <= 16);
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], rev_of(&db, b));
    CHECK_EQ_UINT(revs[1], rev_of(&db, a));
    close_db(&db, &loop);
    rmrf(dir);
}

/* A change undone while other changes of its record, older and not acknowledged either,
 * went through: the record's state is theirs again, and its change is listed. */
static void test_an_undone_change_brings_back_an_earlier_unacknowledged_one(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    uint64_t lsn = 0;
    for (int i = 0; i < 40; i++) /* several fills, none acknowledged */
        lsn = db_put(&db, theme(a, "kept"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    uint64_t kept = rev_of(&db, a);
    enum log_level saved = syncs_fail();
    for (int i = 0; i < 40; i++) /* fills again, the whole batch then undone */
        db_put(&db, theme(a, "lost"));
    syncs_recover(&db, &loop, saved);
    check_name(&db, a, "kept");
    uint64_t revs[16];
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 1);
    CHECK_EQ_UINT(revs[0], kept);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * A record created and deleted in a batch that failed never existed: its
 * deletion, undone with the batch, must not be shown (docs/STORAGE.md: "one a
 * failed batch's undo took back, is never shown"). It was: a deletion is shown
 * while its record is absent, and the undone create left it absent.
 */
static void test_an_undone_create_and_delete_is_never_shown(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    uint64_t lsn = db_put(&db, theme(a, "kept"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    enum log_level saved = syncs_fail();
    uint64_t t = take_id(&db);
    db_put(&db, theme(t, "never"));
    db_delete(&db, t);
    syncs_recover(&db, &loop, saved);
    CHECK(db_get(&db, t) == NULL);
    uint64_t revs[16];
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 1);
    CHECK_EQ_UINT(revs[0], rev_of(&db, a));
    close_db(&db, &loop);
    rmrf(dir);
}

/* A deletion undone brings its record's change back, though the list filled after it. */
static void test_an_undone_deletion_brings_back_its_record_s_change(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a"), b = put_theme(&db, "b");
    uint64_t lsn = 0;
    for (int i = 0; i < 40; i++)
        lsn = db_put(&db, theme(a, "kept"));
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    uint64_t kept = rev_of(&db, a), kept_b = rev_of(&db, b);
    enum log_level saved = syncs_fail();
    db_delete(&db, a);
    for (int i = 0; i < 20; i++) /* another record's changes fill the list */
        db_put(&db, theme(b, "other"));
    syncs_recover(&db, &loop, saved);
    check_name(&db, a, "kept");
    uint64_t revs[16];
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 2);
    CHECK_EQ_UINT(revs[0], kept_b);
    CHECK_EQ_UINT(revs[1], kept);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * A compaction's horizon ends what the feed may show below it (an older cursor is
 * 410), so the changes at or below it leave every list then, and a list that
 * emptied gives its memory back. They left only when the user's list next
 * filled, so a user who stopped writing kept them until a restart: accounts that
 * each created and deleted records, then went quiet, held ~26 B of memory per
 * deletion for good (review, 2026-11-29: 10 accounts x 20,000 deletions, RSS
 * 4.2 MB -> 9.5 MB after two compactions, 4.2 MB after a restart).
 */
static void test_compaction_empties_the_lists_behind_its_horizon(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t keep = put_theme(&db, "kept"), lsn = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t t = take_id(&db);
        db_put(&db, theme(t, "gone"));
        lsn = db_delete(&db, t);
    }
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK(index_changes_of(&db.index, 1)->len >= 1000);
    CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0);
    RUN_UNTIL(&loop, !db.compacting);
    CHECK_EQ_INT(db.compact_status, 0);
    const struct index_changes *l = index_changes_of(&db.index, 1);
    CHECK_EQ_UINT(l->len, 0); /* "kept"'s change is at or below the horizon too */
    CHECK(l->cap <= 8);
    CHECK(db_get(&db, keep) != NULL);
    close_db(&db, &loop);
    rmrf(dir);
}

/* The change that fills the list is not acknowledged yet: its record's last listed change
 * stays, and when the batch fails and is undone, it is the record's current change again. */
static void test_an_undone_change_brings_back_its_record_s_listed_change(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    uint64_t a = put_theme(&db, "a");
    for (int i = 0; i < 7; i++) { /* the list's 8 entries: full */
        uint64_t lsn = db_put(&db, theme(a, "kept"));
        RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    }
    CHECK_EQ_UINT(index_changes_of(&db.index, 1)->len, 8);
    uint64_t kept = rev_of(&db, a);
    enum log_level saved = syncs_fail();
    db_put(&db, theme(a, "lost"));
    syncs_recover(&db, &loop, saved);
    check_name(&db, a, "kept");
    uint64_t revs[16];
    CHECK_EQ_UINT(current_changes(&db, 1, revs), 1);
    CHECK_EQ_UINT(revs[0], kept);
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * A compaction writes each record as it was when it began (its horizon), in
 * slices; a record changed or deleted after the start, before its slice came,
 * is written as it was before that change, and the change reaches the new log
 * by its tail, once. After a reopen the user's change list is the same as
 * before: in rev order, each change once, the deletion included.
 */
static void test_compaction_during_changes_keeps_the_change_list(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    enum { N = 12000 }; /* more than two slices */
    uint64_t first = 0, last = 0, lsn = 0;
    for (int i = 0; i < N; i++) {
        last = take_id(&db);
        if (!first) first = last;
        lsn = db_put(&db, theme(last, "t"));
    }
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0); /* no slice has run yet */
    uint64_t horizon = db.compact_horizon;
    db_put(&db, theme(last, "changed"));         /* not reached: the last slice's */
    db_delete(&db, last - 1);                    /* not reached */
    db_put(&db, theme(last - 2, "changed too")); /* not reached */
    lsn = db_put(&db, theme(first, "first"));    /* the first slice's */
    RUN_UNTIL(&loop, !db.compacting);
    CHECK_EQ_INT(db.compact_status, 0);
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    const struct index_changes *l = index_changes_of(&db.index, 1);
    uint32_t n = index_changes_after(l, horizon);
    struct index_change before[8];
    CHECK_EQ_UINT(l->len - n, 4);
    memcpy(before, l->v + n, 4 * sizeof *before);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &always);
    l = index_changes_of(&db.index, 1);
    CHECK_EQ_UINT(l->len, 4);
    for (uint32_t i = 0; i < 4; i++) {
        CHECK_EQ_UINT(l->v[i].rev, before[i].rev);
        CHECK_EQ_UINT(index_change_id(&l->v[i]), index_change_id(&before[i]));
        CHECK_EQ_UINT(index_change_op(&l->v[i]), index_change_op(&before[i]));
    }
    CHECK_EQ_UINT(index_change_op(&l->v[0]), INDEX_OP_UPDATE);
    CHECK_EQ_UINT(index_change_op(&l->v[1]), INDEX_OP_DELETE);
    CHECK(db_get(&db, last - 1) == NULL);
    check_name(&db, last, "changed");
    check_name(&db, last - 2, "changed too");
    check_name(&db, first, "first");
    check_name(&db, last - 3, "t");
    close_db(&db, &loop);
    rmrf(dir);
}

/*
 * The guard's free disk (db_room): this process's appends since the reading
 * count at once, to the byte, and the inline test gives the full check's
 * verdict (db_room_check) at every step. The loop does not run here, so
 * uv_now stands still and the reading is not taken again.
 */
static void test_guard_counts_own_appends(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    struct statvfs vfs;
    CHECK_EQ_INT(statvfs(dir, &vfs), 0);
    uint64_t free_now = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    const uint64_t margin = 1u << 20;
    CHECK(free_now > 8 * margin);
    db.guard.min_free_disk = free_now - margin; /* before the first reading */
    CHECK_EQ_INT(db_room(&db), 0);
    CHECK(db.guard.checked);
    /* What the reading leaves: other processes may have moved it a little since statvfs. */
    uint64_t spare = db.guard.free_at_check - db.guard.min_free_disk;
    static char name[4096];
    memset(name, 'x', sizeof name - 1);
    uint64_t last_ok = 0;
    int rc = 0;
    for (int i = 0; rc == 0 && i < (int)(4 * margin / sizeof name); i++) {
        last_ok = db.appended - db.guard.appended_at_check;
        db_put(&db, theme(take_id(&db), name));
        rc = db_room(&db);
        CHECK_EQ_INT(rc, db_room_check(&db));
    }
    CHECK_EQ_INT(rc, -ENOSPC);
    CHECK(last_ok <= spare);
    CHECK(db.appended - db.guard.appended_at_check > spare);
    close_db(&db, &loop);
    rmrf(dir);
}

/* ---- a log batch fails while a compaction runs ---- */
static int compacted_status;
static int compacted_calls;
static void on_compacted_count(void *ctx, int status) {
    (void)ctx;
    compacted_calls++;
    compacted_status = status;
}

static void fault_during_compaction(const struct store_opts *o, const char *var, bool at_commit) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, o);
    enum { N = 12000 };
    uint64_t first = 0, last = 0, lsn = 0;
    for (int i = 0; i < N; i++) {
        last = take_id(&db);
        if (!first) first = last;
        lsn = db_put(&db, theme(last, "t"));
    }
    /* interval: the sync's own mark too, written and synced (store.c, mark_after_sync): else
     * its writes race the commit. */
    RUN_UNTIL(&loop, db.store.durable_lsn >= lsn && !db.store.job && !db.store.pending.len &&
                         db.store.file_size == db.store.durable_size);
    compacted_calls = 0;
    CHECK_EQ_INT(db_compact_start(&db, on_compacted_count, NULL), 0);
    if (at_commit)
        RUN_UNTIL(&loop, db.store.compact_committing || !db.compacting);
    else
        RUN_UNTIL(&loop, db.store.compact_job != NULL || db.store.compact_buf.len > 0);
    enum log_level saved = log_threshold;
    log_threshold = LOG_OFF;
    fault(var, "0");
    db_put(&db, theme(first, "changed"));
    db_delete(&db, last);
    RUN_UNTIL(&loop, acks.errors > 0 || !db.compacting);
    RUN_UNTIL(&loop, !db.compacting);
    CHECK_EQ_INT(compacted_calls, 1);
    /* The compaction reports the disk's error, also when it was dropped before its commit. */
    CHECK_EQ_INT(compacted_status, strcmp(var, "EVENTD_FAULT_FSYNC_AFTER") == 0 ? -EIO : -ENOSPC);
    fault(var, NULL);
    RUN_UNTIL(&loop, !store_failing(&db.store));
    CHECK_EQ_INT(store_flush_sync(&db.store), 0);
    log_threshold = saved;
    bool kept = o->fsync != STORE_FSYNC_ALWAYS || acks.errors == 0;
    if (kept) {
        check_name(&db, first, "changed");
        CHECK(db_get(&db, last) == NULL);
    } else {
        check_name(&db, first, "t");
        check_name(&db, last, "t");
    }
    close_db(&db, &loop);
    open_db(&db, &loop, dir, o);
    if (kept) {
        check_name(&db, first, "changed");
        CHECK(db_get(&db, last) == NULL);
    } else {
        check_name(&db, first, "t");
        check_name(&db, last, "t");
    }
    check_name(&db, last - 1, "t");
    CHECK_EQ_UINT(db.index.count, (uint64_t)N - (kept ? 1 : 0));
    close_db(&db, &loop);
    rmrf(dir);
}

/* Every cell: always and interval, a failed write and a failed sync, mid-snapshot and at
 * the commit. */
static void test_a_log_batch_fails_while_a_compaction_runs(void) {
    static const struct store_opts *const modes[] = {&always, &interval};
    static const char *const faults[] = {"EVENTD_FAULT_FSYNC_AFTER", "EVENTD_FAULT_WRITE_AFTER"};
    for (int m = 0; m < 2; m++)
        for (int f = 0; f < 2; f++)
            for (int at_commit = 0; at_commit < 2; at_commit++) {
                fprintf(stderr, "   %s, %s, %s\n", m ? "interval" : "always", faults[f],
                        at_commit ? "at the commit" : "mid-snapshot");
                fault_during_compaction(modes[m], faults[f], at_commit);
            }
}

/* --fsync never, the id reservation's fdatasync fails (EIO): nothing acknowledged is
 * undone, creates are refused until the disk recovers, and a restart keeps every record. */
static void test_never_reservation_sync_fails(void) {
    static const struct store_opts never = {.fsync = STORE_FSYNC_NEVER, .retry_ms = 10};
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &never);
    enum log_level saved = syncs_fail();
    uint64_t first = 0, last = 0;
    int n = 0;
    while (acks.errors == 0 && n < (int)DB_ID_BLOCK) {
        uint64_t id;
        if (db_take_id(&db, &id) < 0) break;
        if (!first) first = id;
        last = id;
        db_put(&db, theme(id, "n"));
        n++;
        if (n % 1000 == 0) uv_run(&loop, UV_RUN_NOWAIT);
    }
    RUN_UNTIL(&loop, acks.errors > 0);
    check_name(&db, first, "n");
    check_name(&db, last, "n");
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    RUN_UNTIL(&loop, !store_failing(&db.store));
    log_threshold = saved;
    uint64_t after = take_id(&db);
    CHECK(after > last);
    close_db(&db, &loop);
    open_db(&db, &loop, dir, &never);
    check_name(&db, first, "n");
    check_name(&db, last, "n");
    CHECK(take_id(&db) > after);
    close_db(&db, &loop);
    rmrf(dir);
}

/* ---- the change feed against a model: random creates, updates, deletions and event
 * links of two users, in acknowledged and failed batches, with compactions (online,
 * some failing) and reopens; after every change and every settle, each user's list
 * must show exactly what memory holds (ascending, one current entry per record above
 * the horizon, no deletion the model does not hold). ---- */

#define FM_IDS 4096
struct fm_rec {
    uint8_t state; /* 0 never, 1 present, 2 deleted */
    uint8_t type;
    uint64_t rev, user;
};
struct fm {
    struct fm_rec m[FM_IDS], a[FM_IDS]; /* memory, acknowledged */
    uint64_t op_lsn[FM_IDS * 4];
    uint64_t lo, hi; /* ids seen */
    unsigned seed;
    struct {
        uint64_t id, lsn;
        struct fm_rec before;
    } j[4096];
    uint32_t nj;
};

static uint64_t fm_rand(struct fm *f) {
    f->seed = f->seed * 1103515245u + 12345u;
    return (f->seed >> 8) & 0xffffff;
}

static struct record *fm_build(uint8_t type, uint64_t id, uint64_t user, uint64_t link) {
    union value v[RECORD_MAX_FIELDS];
    if (type == REC_THEME) {
        record_defaults(&record_theme, v);
        v[THEME_NAME].s.ptr = "t";
        v[THEME_NAME].s.len = 1;
        return record_build(&record_theme, id, user, v);
    }
    if (type == REC_ADDRESS) {
        record_defaults(&record_address, v);
        v[ADDR_CITY].s.ptr = "c";
        v[ADDR_CITY].s.len = 1;
        return record_build(&record_address, id, user, v);
    }
    record_defaults(&record_event, v);
    v[EVENT_THEME_ID].i = link;
    v[EVENT_ADDRESS_ID].i = 0;
    return record_build(&record_event, id, user, v);
}

static void fm_check(struct db *db, const struct fm *f, const struct fm_rec *model,
                     const char *when) {
    uint64_t h = db->index.rev_horizon;
    for (uint64_t id = f->lo; id <= f->hi && id < FM_IDS; id++) {
        const struct fm_rec *r = &model[id];
        const struct record *g = db_get(db, id);
        if (r->state == 1) {
            if (!g || g->rev != r->rev) {
                fprintf(stderr, "%s: record %llu: db rev %llu, model %llu\n", when,
                        (unsigned long long)id, (unsigned long long)(g ? g->rev : 0),
                        (unsigned long long)r->rev);
                CHECK(0);
            }
        } else if (g) {
            fprintf(stderr, "%s: record %llu present, model state %d\n", when,
                    (unsigned long long)id, r->state);
            CHECK(0);
        }
    }
    for (uint64_t u = 1; u <= 2; u++) {
        const struct index_changes *l = index_changes_of(&db->index, u);
        static uint32_t seen[FM_IDS];
        memset(seen, 0, sizeof seen);
        for (uint32_t i = 0; i < l->len; i++) {
            const struct index_change *c = &l->v[i];
            if (i && l->v[i - 1].rev >= c->rev) {
                fprintf(stderr, "%s: user %llu list out of order at %u: %llu then %llu\n", when,
                        (unsigned long long)u, i, (unsigned long long)l->v[i - 1].rev,
                        (unsigned long long)c->rev);
                CHECK(0);
            }
            if (c->rev <= h) continue;
            if (index_change_current(&db->index, c) == INDEX_CHANGE_STALE) continue;
            uint64_t id = index_change_id(c);
            CHECK(id < FM_IDS);
            const struct fm_rec *r = &model[id];
            bool ok = r->user == u &&
                      (index_change_op(c) == INDEX_OP_DELETE ? r->state == 2 : r->state == 1) &&
                      r->rev == c->rev;
            if (!ok) {
                fprintf(stderr,
                        "%s: user %llu shows rev %llu id %llu op %d; model: state %d rev %llu "
                        "user %llu (horizon %llu)\n",
                        when, (unsigned long long)u, (unsigned long long)c->rev,
                        (unsigned long long)id, index_change_op(c), r->state,
                        (unsigned long long)r->rev, (unsigned long long)r->user,
                        (unsigned long long)h);
                CHECK(0);
            }
            seen[id]++;
        }
        for (uint64_t id = f->lo; id <= f->hi && id < FM_IDS; id++) {
            const struct fm_rec *r = &model[id];
            if (r->user != u || r->state == 0 || r->rev <= h) continue;
            if (seen[id] != 1) {
                fprintf(stderr,
                        "%s: user %llu: record %llu (state %d, rev %llu) shown %u times "
                        "(horizon %llu)\n",
                        when, (unsigned long long)u, (unsigned long long)id, r->state,
                        (unsigned long long)r->rev, seen[id], (unsigned long long)h);
                for (uint32_t i = 0; i < l->len; i++)
                    fprintf(stderr, "   [%u] rev %llu id %llu op %d\n", i,
                            (unsigned long long)l->v[i].rev,
                            (unsigned long long)index_change_id(&l->v[i]),
                            index_change_op(&l->v[i]));
                CHECK(0);
            }
        }
    }
}

/* One random change; returns its LSN. */
static uint64_t fm_op(struct db *db, struct fm *f) {
    uint64_t pick = fm_rand(f) % 100;
    /* a present record to change, if any */
    uint64_t target = 0;
    if (f->hi >= f->lo) {
        for (int tries = 0; tries < 8 && !target; tries++) {
            uint64_t id = f->lo + fm_rand(f) % (f->hi - f->lo + 1);
            if (f->m[id].state == 1) target = id;
        }
    }
    uint64_t lsn;
    uint32_t jn = f->nj < 4096 ? f->nj++ : 4095;
    if (pick < 30 || !target) {
        uint64_t id = take_id(db);
        CHECK(id < FM_IDS);
        if (!f->lo) f->lo = id;
        if (id > f->hi) f->hi = id;
        uint8_t types[3] = {REC_THEME, REC_ADDRESS, REC_EVENT};
        uint8_t t = types[fm_rand(f) % 3];
        uint64_t user = 1 + fm_rand(f) % 2;
        uint64_t link =
            target && f->m[target].type == REC_THEME && f->m[target].user == user ? target : 0;
        f->j[jn].id = id;
        f->j[jn].before = f->m[id];
        lsn = db_put(db, fm_build(t, id, user, link));
        f->m[id] = (struct fm_rec){1, t, db->index.rev, user};
    } else if (pick < 75) {
        struct fm_rec *r = &f->m[target];
        uint64_t link = 0;
        if (r->type == REC_EVENT) {
            uint64_t o = f->lo + fm_rand(f) % (f->hi - f->lo + 1);
            if (f->m[o].state == 1 && f->m[o].type == REC_THEME && f->m[o].user == r->user)
                link = o;
        }
        f->j[jn].id = target;
        f->j[jn].before = *r;
        lsn = db_put(db, fm_build(r->type, target, r->user, link));
        r->rev = db->index.rev;
    } else {
        f->j[jn].id = target;
        f->j[jn].before = f->m[target];
        lsn = db_delete(db, target);
        f->m[target].state = 2;
        f->m[target].rev = db->index.rev;
    }
    f->j[jn].lsn = lsn;
    fm_check(db, f, f->m, "after a change");
    return lsn;
}

/* The random models' settings: an integer from the environment, or dflt. */
static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v ? atoi(v) : dflt;
}

/* A model's failed batch was written with syncs failing: waits for its failure (acks.errors
 * past errs), lets the disk recover and the store write again. Returns the last LSN that
 * stayed good. */
static uint64_t model_heal(struct db *db, uv_loop_t *loop, uint64_t errs) {
    RUN_UNTIL(loop, acks.errors > errs);
    uint64_t good = acks.err_lsn;
    fault("EVENTD_FAULT_FSYNC_AFTER", NULL);
    CHECK_EQ_INT(store_flush_sync(&db->store), 0);
    RUN_UNTIL(loop, !store_failing(&db->store));
    return good;
}

static void fm_settle_ok(struct db *db, uv_loop_t *loop, struct fm *f, uint64_t lsn) {
    RUN_UNTIL(loop, store_is_acked(&db->store, lsn));
    memcpy(f->a, f->m, sizeof f->a);
    f->nj = 0;
}

static void test_change_lists_random_model(void) {
    int seeds = env_int("FM_SEEDS", 40), seed0 = env_int("FM_SEED0", 1);
    static struct fm f;
    for (int seed = seed0; seed < seed0 + seeds; seed++) {
        memset(&f, 0, sizeof f);
        f.seed = (unsigned)seed;
        char *dir = tmpdir("db");
        uv_loop_t loop;
        struct db db;
        open_db(&db, &loop, dir, &always);
        enum log_level saved0 = log_threshold;
        log_threshold = LOG_OFF;
        for (int phase = 0; phase < 60 && f.hi < FM_IDS - 200; phase++) {
            uint64_t what = fm_rand(&f) % 100;
            int n = 1 + (int)(fm_rand(&f) % 24);
            bool compacting = false;
            if (what < 12) {
                CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0);
                compacting = true;
                what = 20 + fm_rand(&f) % 80;
            }
            if (what < 18) {
                close_db(&db, &loop);
                open_db(&db, &loop, dir, &always);
                fm_check(&db, &f, f.a, "after a reopen");
                continue;
            }
            if (what < 60) { /* acknowledged */
                uint64_t lsn = 0;
                for (int i = 0; i < n; i++)
                    lsn = fm_op(&db, &f);
                fm_settle_ok(&db, &loop, &f, lsn);
                fm_check(&db, &f, f.a, "after an acknowledged batch");
            } else if (what < 75) { /* batches in flight, the first synced, the later failed */
                uint64_t errs = acks.errors;
                f.nj = 0;
                fault("EVENTD_FAULT_FSYNC_AFTER", "1");
                int batches = 2 + (int)(fm_rand(&f) % 4);
                for (int b = 0; b < batches && acks.errors == errs; b++) {
                    int m = 1 + (int)(fm_rand(&f) % 12);
                    for (int i = 0; i < m; i++)
                        fm_op(&db, &f);
                    int turns = (int)(fm_rand(&f) % 3);
                    for (int t = 0; t < turns; t++)
                        uv_run(&loop, UV_RUN_NOWAIT);
                }
                if (acks.errors == errs) {
                    fault("EVENTD_FAULT_FSYNC_AFTER", "0");
                    fm_op(&db, &f);
                }
                uint64_t good = model_heal(&db, &loop, errs);
                for (uint32_t i = f.nj; i-- > 0;)
                    if (f.j[i].lsn > good) f.m[f.j[i].id] = f.j[i].before;
                memcpy(f.a, f.m, sizeof f.a);
                f.nj = 0;
                fm_check(&db, &f, f.a, "after batches in flight, the later failed");
            } else { /* some acknowledged first, then a failed batch */
                uint64_t lsn = 0;
                int k = (int)(fm_rand(&f) % 6);
                for (int i = 0; i < k; i++)
                    lsn = fm_op(&db, &f);
                if (k) fm_settle_ok(&db, &loop, &f, lsn);
                uint64_t errs = acks.errors;
                fault("EVENTD_FAULT_FSYNC_AFTER", "0");
                for (int i = 0; i < n; i++)
                    fm_op(&db, &f);
                model_heal(&db, &loop, errs);
                memcpy(f.m, f.a, sizeof f.m);
                f.nj = 0;
                fm_check(&db, &f, f.a, "after a failed batch");
            }
            if (compacting) {
                RUN_UNTIL(&loop, !db.compacting);
                fm_check(&db, &f, f.a, "after a compaction");
            }
        }
        close_db(&db, &loop);
        open_db(&db, &loop, dir, &always);
        fm_check(&db, &f, f.a, "after the last reopen");
        close_db(&db, &loop);
        log_threshold = saved0;
        rmrf(dir);
    }
}

/* ---- keys by reference against a model: keyed creates, updates and deletions of their
 * records, failed batches, online compactions interleaved with the changes, reopens; every
 * key must answer with its record as created, and the user's key bytes must be what its
 * keys add up to (index.c, owned_bytes). KM_SEEDS, KM_SEED0. ---- */

#define KM_KEYS 512
struct km {
    unsigned seed;
    int nkeys;                                  /* keys made (in the model or undone) */
    uint64_t rid[KM_KEYS];                      /* the record each key created */
    uint8_t live[KM_KEYS], live_acked[KM_KEYS]; /* the key exists */
    uint8_t rec[KM_KEYS], rec_acked[KM_KEYS];   /* its record is present */
};

static uint64_t km_rand(struct km *f) {
    f->seed = f->seed * 1103515245u + 12345u;
    return (f->seed >> 8) & 0xffffff;
}

static void km_check(struct db *db, const struct km *f, const char *when) {
    char want[32], got[64];
    uint64_t bytes = 0;
    for (int i = 0; i < f->nkeys; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        const struct record *k = index_idem_get(&db->index, 1, key, strlen(key));
        if (!f->live[i]) {
            if (k) {
                fprintf(stderr, "%s: key %s present, undone in the model\n", when, key);
                CHECK(0);
            }
            continue;
        }
        if (!k) {
            fprintf(stderr, "%s: key %s missing\n", when, key);
            CHECK(0);
            continue;
        }
        snprintf(want, sizeof want, "c%d", i);
        key_answer_name(db, key, got, sizeof got);
        if (strcmp(want, got) != 0) {
            fprintf(stderr, "%s: key %s answers '%s', not '%s' (record %s)\n", when, key, got, want,
                    f->rec[i] ? "present" : "deleted");
            CHECK(0);
        }
        union value a = record_get(k, IDEM_ANSWER);
        uint64_t held = 0;
        if (a.s.len >= 2 && (uint8_t)a.s.ptr[0] == IDEM_REF_MARK)
            varint_get((const uint8_t *)a.s.ptr + 1, a.s.len - 1, &held);
        bytes += record_size(k) + held;
    }
    if (bytes != index_idem_bytes(&db->index, 1)) {
        fprintf(stderr, "%s: key bytes %llu, the keys add up to %llu\n", when,
                (unsigned long long)index_idem_bytes(&db->index, 1), (unsigned long long)bytes);
        CHECK(0);
    }
}

/* One random change; returns its LSN. */
static uint64_t km_op(struct db *db, struct km *f) {
    uint64_t pick = km_rand(f) % 100;
    int t = -1;
    if (f->nkeys)
        for (int tries = 0; tries < 8 && t < 0; tries++) {
            int i = (int)(km_rand(f) % (uint64_t)f->nkeys);
            if (f->live[i] && f->rec[i]) t = i;
        }
    char name[32];
    if (pick < 35 || t < 0) {
        CHECK(f->nkeys < KM_KEYS);
        int i = f->nkeys++;
        if (km_rand(f) % 4 == 0) /* spread the ids over the compaction's slices */
            for (int b = 0; b < 1200; b++)
                take_id(db);
        uint64_t id = take_id(db), kid = take_id(db);
        CHECK_EQ_UINT(kid, id + 1);
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        snprintf(name, sizeof name, "c%d", i);
        f->rid[i] = id;
        f->live[i] = f->rec[i] = 1;
        return put_keyed(db, id, name, kid, key, (uint64_t)time(NULL), "\x01\x40");
    }
    if (pick < 75) {
        snprintf(name, sizeof name, "u%llu", (unsigned long long)km_rand(f));
        return db_put(db, theme(f->rid[t], name));
    }
    f->rec[t] = 0;
    return db_delete(db, f->rid[t]);
}

static void km_acked(struct km *f) {
    memcpy(f->live_acked, f->live, sizeof f->live);
    memcpy(f->rec_acked, f->rec, sizeof f->rec);
}

static void km_undone(struct km *f) {
    memcpy(f->live, f->live_acked, sizeof f->live);
    memcpy(f->rec, f->rec_acked, sizeof f->rec);
}

static void test_keys_by_reference_random_model(void) {
    int seeds = env_int("KM_SEEDS", 20), seed0 = env_int("KM_SEED0", 1);
    static struct km f;
    for (int seed = seed0; seed < seed0 + seeds; seed++) {
        memset(&f, 0, sizeof f);
        f.seed = (unsigned)seed;
        char *dir = tmpdir("db");
        uv_loop_t loop;
        struct db db;
        open_db(&db, &loop, dir, &always);
        enum log_level saved0 = log_threshold;
        log_threshold = LOG_OFF;
        for (int phase = 0; phase < 50 && f.nkeys < KM_KEYS - 40; phase++) {
            uint64_t what = km_rand(&f) % 100;
            int n = 1 + (int)(km_rand(&f) % 16);
            bool compacting = false;
            if (what < 25) {
                CHECK_EQ_INT(db_compact_start(&db, NULL, NULL), 0);
                compacting = true;
                what = 20 + km_rand(&f) % 80;
            }
            if (what < 20) {
                close_db(&db, &loop);
                open_db(&db, &loop, dir, &always);
                km_check(&db, &f, "after a reopen");
                continue;
            }
            if (what < 65) { /* acknowledged, the loop turning between changes */
                uint64_t lsn = 0;
                for (int i = 0; i < n; i++) {
                    lsn = km_op(&db, &f);
                    if (km_rand(&f) % 2) uv_run(&loop, UV_RUN_NOWAIT);
                }
                RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
                km_acked(&f);
                km_check(&db, &f, "after an acknowledged batch");
            } else { /* a failed batch */
                uint64_t errs = acks.errors;
                fault("EVENTD_FAULT_FSYNC_AFTER", "0");
                for (int i = 0; i < n; i++)
                    km_op(&db, &f);
                model_heal(&db, &loop, errs);
                km_undone(&f);
                km_check(&db, &f, "after a failed batch");
            }
            if (compacting) {
                RUN_UNTIL(&loop, !db.compacting);
                km_check(&db, &f, "after a compaction");
            }
        }
        close_db(&db, &loop);
        open_db(&db, &loop, dir, &always);
        km_check(&db, &f, "at the end, reopened");
        log_threshold = saved0;
        close_db(&db, &loop);
        rmrf(dir);
    }
}

/*
 * A failed batch's undo lists each restored state again at its rev. Listed one
 * by one, each moved the list's tail: a batch updating many records whose
 * earlier changes had left the list (superseded as it filled) cost the batch
 * times the list, 80,000 updates undone in about 0.9 s on the loop, against 45
 * ms to apply them (review, 2026-11-29). Now they are merged once: the undo
 * moves about as many entries as it takes back and lists (counted, not timed).
 */
static void test_an_undone_batch_relists_in_linear_work(void) {
    char *dir = tmpdir("db");
    uv_loop_t loop;
    struct db db;
    open_db(&db, &loop, dir, &always);
    enum { N = 20000 };
    uint64_t *ids = malloc(N * sizeof *ids), *revs = malloc(N * sizeof *revs), lsn = 0;
    for (int i = 0; i < N; i++) {
        ids[i] = take_id(&db);
        lsn = db_put(&db, theme(ids[i], "a"));
        revs[i] = db_get(&db, ids[i])->rev;
        if (i % 5000 == 4999) RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    }
    RUN_UNTIL(&loop, store_is_acked(&db.store, lsn));
    enum log_level saved = syncs_fail();
    for (int i = 0; i < N; i++)
        db_put(&db, theme(ids[i], "b"));
    db.index.undo_moved = 0;
    RUN_UNTIL(&loop, acks.errors > 0);
    CHECK(db.index.undo_moved <= 4 * (uint64_t)N);
    syncs_recover(&db, &loop, saved);
    /* Every record back at its create's rev, listed once, in rev order. */
    const struct index_changes *l = index_changes_of(&db.index, 1);
    CHECK_EQ_UINT(l->len, N);
    for (uint32_t i = 0; i < l->len; i++) {
        CHECK_EQ_UINT(l->v[i].rev, revs[i]);
        CHECK_EQ_UINT(index_change_id(&l->v[i]), ids[i]);
        CHECK(index_change_current(&db.index, &l->v[i]) == db_get(&db, ids[i]));
    }
    close_db(&db, &loop);
    rmrf(dir);
    free(ids);
    free(revs);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_guard_counts_own_appends),
    CHECK_CASE(test_change_lists),
    CHECK_CASE(test_change_lists_random_model),
    CHECK_CASE(test_keys_by_reference_random_model),
    CHECK_CASE(test_an_undone_batch_relists_in_linear_work),
    CHECK_CASE(test_compaction_during_changes_keeps_the_change_list),
    CHECK_CASE(test_superseded_changes_leave_the_list),
    CHECK_CASE(test_superseded_changes_leave_the_list_with_writes_in_flight),
    CHECK_CASE(test_an_undone_change_brings_back_an_earlier_unacknowledged_one),
    CHECK_CASE(test_an_undone_deletion_brings_back_its_record_s_change),
    CHECK_CASE(test_an_undone_create_and_delete_is_never_shown),
    CHECK_CASE(test_compaction_empties_the_lists_behind_its_horizon),
    CHECK_CASE(test_interval_a_failed_sync_after_a_compaction_rewrites_nothing_old),
    CHECK_CASE(test_an_undone_change_brings_back_its_record_s_listed_change),
    CHECK_CASE(test_revs_survive_reopen),
    CHECK_CASE(test_revs_survive_compaction),
    CHECK_CASE(test_revs_after_a_failed_batch),
    CHECK_CASE(test_revs_of_a_failed_batch_never_again_after_a_restart),
    CHECK_CASE(test_revs_lost_in_a_crash_never_again),
    CHECK_CASE(test_revs_implicit_in_an_old_log),
    CHECK_CASE(test_compaction_of_foreign_expired_keys_keeps_the_rest),
    CHECK_CASE(test_keyed_put_survives_reopen),
    CHECK_CASE(test_keyed_put_torn_leaves_neither),
    CHECK_CASE(test_keyed_put_failed_batch_undoes_both),
    CHECK_CASE(test_a_key_by_reference_survives_failed_changes_of_its_record),
    CHECK_CASE(test_compaction_drops_expired_keys),
    CHECK_CASE(test_always_batch_is_visible_before_its_ack),
    CHECK_CASE(test_always_failed_batch_reports_eio_at_the_last_good_lsn),
    CHECK_CASE(test_always_failed_batch_is_undone_exactly),
    CHECK_CASE(test_always_db_is_unwritable_until_an_attempt_succeeds),
    CHECK_CASE(test_always_writes_after_recovery_take_new_ids),
    CHECK_CASE(test_always_undone_batch_never_replays),
    CHECK_CASE(test_always_undo_stops_at_the_acked_lsn),
    CHECK_CASE(test_interval_failed_write_acks_at_once),
    CHECK_CASE(test_interval_failed_write_undoes_nothing),
    CHECK_CASE(test_interval_failed_write_unwritable_until_recovered),
    CHECK_CASE(test_interval_failed_write_on_disk_after_recovery),
    CHECK_CASE(test_interval_failed_sync_acks_at_once),
    CHECK_CASE(test_interval_failed_sync_undoes_nothing),
    CHECK_CASE(test_interval_failed_sync_unwritable_until_recovered),
    CHECK_CASE(test_interval_failed_sync_on_disk_after_recovery),
    CHECK_CASE(test_ids_clean_close_gives_back_the_block),
    CHECK_CASE(test_ids_never_twice_after_crash_always),
    CHECK_CASE(test_ids_never_twice_after_crash_interval),
    CHECK_CASE(test_ids_across_blocks),
    CHECK_CASE(test_ids_lost_reservation_always),
    CHECK_CASE(test_node_ids_carry_the_node),
    CHECK_CASE(test_node_ranges_end_below_2_53),
    CHECK_CASE(test_node_other_id_refused),
    CHECK_CASE(test_node_zero_data_refused_as_shard),
    CHECK_CASE(test_node_empty_directory_becomes_shard),
    CHECK_CASE(test_node_survives_compaction),
    CHECK_CASE(test_node_foreign_ids_keep_next_id),
    CHECK_CASE(test_never_reservation_sync_fails),
    CHECK_CASE(test_a_log_batch_fails_while_a_compaction_runs),
};

int main(int argc, char **argv) {
    log_threshold = LOG_WARN;
    unsetenv("EVENTD_FAULT_FSYNC_AFTER");
    unsetenv("EVENTD_FAULT_WRITE_AFTER");
    unsetenv("EVENTD_FAULT_TIMES");
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
