/* cli: see cli.h. */
#include "app/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/pwhash.h"
#include "common/varint.h"
#include "core/json.h"
#include "storage/auth.h"
#include "storage/logfile.h"
#include "storage/store.h"

static int save(struct db *db) {
    int rc = db_sync_now(db);
    if (rc < 0) fprintf(stderr, "eventd: could not write the log: %s\n", strerror(-rc));
    return rc;
}

/* A new key for user name (created with a new id unless it exists). Returns 0 or -errno. */
static int set_key(struct db *db, const char *name, char key[AUTH_KEY_CHARS + 1]) {
    const struct record *old = db_user_by_name(db, name, strlen(name));
    uint64_t id = old ? old->id : 0;
    if (!id) {
        int rc = db_take_id(db, &id);
        if (rc < 0) {
            fprintf(stderr, "eventd: no id for a new user: %s\n", strerror(-rc));
            return rc;
        }
    }
    auth_new_key(key);
    db_put_user(db, id, name, key);
    return save(db);
}

static void list_users(const struct db *db) {
    const struct id_list *l = db_owned(db, DB_SYSTEM, REC_USER);
    printf("%-8s %s\n", "ID", "NAME");
    for (uint32_t i = 0; i < l->len; i++) {
        const struct record *u = db_get(db, l->ids[i]);
        printf("%-8llu %s\n", (unsigned long long)u->id, record_get(u, USER_NAME).s.ptr);
    }
}

/* The kinds a user owns, in the order export writes them: events after what they link,
 * sessions too (a moved user stays signed in), and its idempotency keys (a moved user's
 * retries still find them). */
static const uint8_t owned_kinds[] = {REC_THEME, REC_ADDRESS, REC_EVENT, REC_SESSION, REC_IDEM};

/* Deletes every record user uid owns (events first, so links go with them). Returns the count. */
static size_t purge_records(struct db *db, uint64_t uid) {
    size_t n = 0;
    for (int k = (int)sizeof owned_kinds - 1; k >= 0; k--) {
        /* Each delete shrinks the list (asked for again each time): take from its end, at
         * most its first length of times. */
        uint32_t left = db_count(db, uid, owned_kinds[k]);
        for (; left > 0; left--, n++) {
            const struct id_list *l = db_owned(db, uid, owned_kinds[k]);
            if (!l->len) break;
            db_delete(db, l->ids[l->len - 1]);
        }
    }
    return n;
}

int cli_user(struct db *db, int npos, const char **pos) {
    const char *verb = npos > 0 ? pos[0] : "";
    if (!strcmp(verb, "list") && npos == 1) {
        list_users(db);
        return 0;
    }
    if (npos != 2 || (strcmp(verb, "add") && strcmp(verb, "rotate") && strcmp(verb, "remove") &&
                      strcmp(verb, "purge"))) {
        fprintf(stderr,
                "eventd: usage: eventd user add|rotate|remove|purge NAME, or eventd user list\n");
        return 2;
    }
    const char *name = pos[1];
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad username '%s': %s\n", name, why);
        return 2;
    }
    const struct record *u = db_user_by_name(db, name, strlen(name));
    if (!strcmp(verb, "add") && u) {
        fprintf(stderr, "eventd: user '%s' exists already (use 'eventd user rotate')\n", name);
        return 1;
    }
    if (strcmp(verb, "add") && !u) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
        return 1;
    }
    if (!strcmp(verb, "purge")) {
        uint64_t uid = u->id;
        size_t n = purge_records(db, uid);
        db_delete(db, uid);
        if (save(db) < 0) return 1;
        printf("removed user %s and %zu records\n", name, n);
        return 0;
    }
    if (!strcmp(verb, "remove")) {
        /* Its site sessions and idempotency keys go with it. */
        uint64_t uid = u->id;
        static const uint8_t gone[] = {REC_SESSION, REC_IDEM};
        for (size_t k = 0; k < sizeof gone; k++) {
            const struct id_list *l = db_owned(db, uid, gone[k]);
            while (l->len) {
                db_delete(db, l->ids[l->len - 1]);
                l = db_owned(db, uid, gone[k]);
            }
        }
        db_delete(db, uid);
        if (save(db) < 0) return 1;
        printf("removed user %s\n", name);
        return 0;
    }
    char key[AUTH_KEY_CHARS + 1];
    if (set_key(db, name, key) < 0) return 1;
    printf("%s user %s; API key (shown only once):\n%s\n",
           !strcmp(verb, "add") ? "created" : "new key for", name, key);
    return 0;
}

/* ---- quota limits ---- */

int cli_parse_limit(const char *flag, const char *v, uint64_t *stored) {
    uint64_t n = 0;
    if (!strcmp(v, "default")) {
        *stored = 0;
        return 0;
    }
    if (strcmp(v, "0") && u64_parse(v, strlen(v), RECORD_LIMIT_MAX, &n) < 0) {
        fprintf(stderr,
                "eventd: %s %s: must be 'default' (the server's) or a whole number from 0 (no "
                "limit) to %llu\n",
                flag, v, (unsigned long long)RECORD_LIMIT_MAX);
        return -1;
    }
    *stored = n + 1;
    return 0;
}

/* "5" or "no limit" */
static const char *limit_text(uint64_t v, char *buf, size_t n) {
    if (!v) return "no limit";
    snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

void cli_print_quota(const char *name, uint64_t records, uint64_t max_records, bool own_records,
                     uint64_t bytes, uint64_t max_bytes, bool own_bytes) {
    char a[24], b[24];
    printf("user %s: %llu records (limit: %s, %s), %llu bytes (limit: %s, %s)\n", name,
           (unsigned long long)records, limit_text(max_records, a, sizeof a),
           own_records ? "its own" : "the server's default", (unsigned long long)bytes,
           limit_text(max_bytes, b, sizeof b), own_bytes ? "its own" : "the server's default");
}

/* The user of that name, or NULL after saying why on stderr (*rc: 2 bad name, 1 none). */
static const struct record *existing_user(struct db *db, const char *name, int *rc) {
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad username '%s': %s\n", name, why);
        *rc = 2;
        return NULL;
    }
    const struct record *u = db_user_by_name(db, name, strlen(name));
    if (!u) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
        *rc = 1;
    }
    return u;
}

int cli_user_limits(struct db *db, const struct config *cfg, const char *name,
                    const char *max_records, const char *max_bytes) {
    int rc;
    const struct record *u = existing_user(db, name, &rc);
    if (!u) return rc;
    uint64_t stored[2] = {record_get(u, USER_MAX_RECORDS).i, record_get(u, USER_MAX_BYTES).i};
    if ((max_records && cli_parse_limit("--max-records", max_records, &stored[0]) < 0) ||
        (max_bytes && cli_parse_limit("--max-bytes", max_bytes, &stored[1]) < 0))
        return 2;
    uint64_t uid = u->id;
    if (max_records || max_bytes) {
        db_put_user_limits(db, uid, stored[0], stored[1]);
        if (save(db) < 0) return 1;
        u = db_get(db, uid);
    }
    struct index_usage use = db_usage(db, uid);
    cli_print_quota(name, use.records,
                    record_user_limit(u, USER_MAX_RECORDS, cfg->max_records_per_user),
                    stored[0] != 0, use.bytes,
                    record_user_limit(u, USER_MAX_BYTES, cfg->max_bytes_per_user), stored[1] != 0);
    return 0;
}

int cli_admin_token(struct db *db, const char *verb, const char *name) {
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad token name '%s': %s\n", name, why);
        return 2;
    }
    uint64_t id = db_admin_token(db, name);
    if (!strcmp(verb, "revoke")) {
        if (!id) {
            fprintf(stderr, "eventd: no admin token '%s'\n", name);
            return 1;
        }
        db_delete(db, id);
        if (save(db) < 0) return 1;
        printf("revoked admin token %s\n", name);
        return 0;
    }
    bool replaced = id != 0;
    int rc = replaced ? 0 : db_take_id(db, &id);
    if (rc < 0) {
        fprintf(stderr, "eventd: no id for a new token: %s\n", strerror(-rc));
        return 1;
    }
    char token[AUTH_KEY_CHARS + 1];
    auth_new_key(token);
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(token, strlen(token), hash);
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_admin, v);
    v[ADMIN_NAME].s.ptr = name;
    v[ADMIN_NAME].s.len = (uint32_t)strlen(name);
    v[ADMIN_TOKEN_HASH].s.ptr = (const char *)hash;
    v[ADMIN_TOKEN_HASH].s.len = AUTH_HASH_BYTES;
    db_put(db, record_build(&record_admin, id, 0, v));
    if (save(db) < 0) return 1;
    printf("%s admin token %s (shown only once):\n%s\n", replaced ? "new" : "created", name, token);
    return 0;
}

int cli_compact(struct db *db, const struct config *cfg) {
    struct db_stats before, after;
    db_stats(db, &before);
    int rc = db_compact_now(db);
    if (rc < 0) {
        fprintf(stderr, "eventd: compaction failed: %s\n", strerror(-rc));
        return 1;
    }
    db_stats(db, &after);
    printf("compacted %s/%s: %llu -> %llu bytes\n", cfg->data_dir, STORE_LOG_NAME,
           (unsigned long long)before.log_bytes, (unsigned long long)after.log_bytes);
    return 0;
}

int cli_backup(const char *dir, const char *out) {
    struct store_copy_stats st;
    int rc = store_copy_log(dir, out, &st);
    if (rc == -EEXIST) {
        fprintf(stderr, "eventd: %s exists: a backup goes to a new file\n", out);
        return 1;
    }
    if (rc == -EBADMSG) {
        fprintf(stderr,
                "eventd: %s/%s has intact frames after offset %llu, where the copy would end: "
                "damage, or the unsynced tail of a crash; a start of the server on it says which "
                "(and --repair if it refuses), or copy the file as it is (no backup written)\n",
                dir, STORE_LOG_NAME, (unsigned long long)st.bytes);
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "eventd: backup of %s/%s to %s failed: %s\n", dir, STORE_LOG_NAME, out,
                rc == -EINVAL            ? "not an eventd log"
                : rc == -EPROTONOSUPPORT ? "a newer log format than this eventd reads"
                                         : strerror(-rc));
        return 1;
    }
    printf("backed up %s/%s to %s: %llu bytes, %llu frames (start a server on a directory "
           "holding it as %s)\n",
           dir, STORE_LOG_NAME, out, (unsigned long long)st.bytes, (unsigned long long)st.frames,
           STORE_LOG_NAME);
    return 0;
}

/* Writes the key to DATA/demo-user.key, readable by this user only: a new file (mode
 * 0600, never through a symlink) renamed over the name, so neither a file already
 * there (keeping its mode) nor a symlink planted there (to a file the server may
 * write) receives the key (review, 2026-11-28). Returns 0 or -errno. */
static int write_key_file(const char *path, const char *key) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    char line[AUTH_KEY_CHARS + 2];
    int n = snprintf(line, sizeof line, "%s\n", key);
    int err = write(fd, line, (size_t)n) == n ? 0 : -EIO;
    if (!err && fsync(fd) < 0) err = -errno;
    close(fd);
    if (!err && rename(tmp, path) < 0) err = -errno;
    if (err) unlink(tmp);
    return err;
}

void cli_demo_user(struct db *db, const struct config *cfg, const char *bound) {
    /* Only in a new data directory: a demo user removed stays removed (review). */
    const struct id_list *users = db_owned(db, DB_SYSTEM, REC_USER);
    if (users->len || !db_opened_empty(db)) return;
    char key[AUTH_KEY_CHARS + 1];
    if (set_key(db, "demo", key) < 0) return;
    /* A wildcard address is reached as localhost. */
    const char *port = strrchr(bound, ':');
    bool wildcard = !strncmp(bound, "0.0.0.0:", 8) || !strncmp(bound, "[::]:", 5);
    const char *host = wildcard ? "localhost" : "";
    const char *hostport = wildcard ? port : bound;
    if (isatty(STDOUT_FILENO)) {
        printf(
            "Created user \"demo\" (a new data directory). Its API key, shown only this once:\n"
            "  %s\n"
            "Try it:\n"
            "  curl -u demo:%s -H 'Cache-Control: no-cache' -d '{\"Theme\":{\"Name\":\"first\"}}' "
            "http://%s%s%s/theme\n"
            "(start with --no-demo-user to skip this)\n",
            key, key, host, hostport, cfg->base_path);
    } else {
        /* Not a terminal (a container, a service manager): logs are no place for a key. */
        char path[4096];
        snprintf(path, sizeof path, "%s/demo-user.key", cfg->data_dir);
        int rc = write_key_file(path, key);
        if (rc < 0) {
            LOG(LOG_ERROR,
                "created user \"demo\" but could not write its key to %s: %s; "
                "give it a new one with 'eventd user rotate demo'",
                path, strerror(-rc));
        } else {
            printf(
                "Created user \"demo\" (a new data directory). Its API key is in %s (mode 0600).\n"
                "Try it:\n"
                "  curl -u demo:$(cat %s) -H 'Cache-Control: no-cache' "
                "-d '{\"Theme\":{\"Name\":\"first\"}}' http://%s%s%s/theme\n"
                "(start with --no-demo-user to skip this)\n",
                path, path, host, hostport, cfg->base_path);
        }
    }
    fflush(stdout);
}

/* ---- export and import ---- */

/* Appends one frame holding r to out. */
static void put_frame(struct buf *out, struct buf *scratch, uint32_t key, const struct record *r) {
    buf_reset(scratch);
    record_encode(r, scratch);
    uint8_t *p = (uint8_t *)buf_reserve(out, STORE_FRAME_HEADER_SIZE + scratch->len);
    logfile_frame_put(p, key, r->type, scratch->ptr, scratch->len);
    buf_commit(out, STORE_FRAME_HEADER_SIZE + scratch->len);
}

/*
 * An export carries every key's answer as its body (record.h, IDEM_ANSWER's
 * first form), so that an eventd of format 2 or 3 imports it too, and so that
 * the answer does not depend on the ids the import keeps. Returns the key to
 * write: k, or a copy with its answer rendered (*owned, the caller's to free),
 * or NULL when the answer is lost (damage: the key is left out).
 */
static const struct record *key_for_export(const struct db *db, const struct record *k,
                                           struct record **owned) {
    *owned = NULL;
    union value a = record_get(k, IDEM_ANSWER);
    if (a.s.len && (uint8_t)a.s.ptr[0] == '{') return k;
    struct buf body = BUF_INIT;
    if (json_write_key_answer(&body, db, k)) {
        union value v[RECORD_MAX_FIELDS];
        record_values(k, v);
        v[IDEM_ANSWER].s.ptr = body.ptr;
        v[IDEM_ANSWER].s.len = (uint32_t)body.len;
        *owned = record_build(&record_idem, k->id, k->user_id, v);
    } else {
        fprintf(stderr, "eventd: Idempotency-Key id %llu left out: its answer is lost\n",
                (unsigned long long)k->id);
    }
    buf_destroy(&body);
    return *owned;
}

int cli_export(struct db *db, const char *name) {
    int rc;
    const struct record *u = existing_user(db, name, &rc);
    if (!u) return rc;
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "eventd: the export is binary: redirect stdout to a file\n");
        return 2;
    }
    struct buf out = BUF_INIT, scratch = BUF_INIT;
    uint8_t head[STORE_HEADER_SIZE];
    uint32_t key = logfile_new_key();
    logfile_header_put(head, STORE_VERSION_KEYED, key);
    buf_append(&out, head, sizeof head);
    put_frame(&out, &scratch, key, u);
    size_t count = 0;
    for (size_t k = 0; k < sizeof owned_kinds; k++) {
        const struct id_list *l = db_owned(db, u->id, owned_kinds[k]);
        for (uint32_t i = 0; i < l->len; i++) {
            const struct record *r = db_get(db, l->ids[i]);
            struct record *owned = NULL;
            if (r->type == REC_IDEM && !(r = key_for_export(db, r, &owned))) continue;
            put_frame(&out, &scratch, key, r);
            record_free(owned);
            count++;
        }
    }
    /* The end mark: an export cut at a frame's end is refused, not imported short. */
    uint8_t end[VARINT_MAX];
    size_t n = varint_put(end, count + 1);
    uint8_t *p = (uint8_t *)buf_reserve(&out, STORE_FRAME_HEADER_SIZE + n);
    logfile_frame_put(p, key, REC_EXPORT_END, end, n);
    buf_commit(&out, STORE_FRAME_HEADER_SIZE + n);
    rc = logfile_write_all(STDOUT_FILENO, out.ptr, out.len);
    buf_destroy(&out);
    buf_destroy(&scratch);
    if (rc < 0) {
        fprintf(stderr, "eventd: writing the export: %s\n", strerror(-rc));
        return 1;
    }
    fprintf(stderr, "exported user %s (id %llu) and %zu records\n", name, (unsigned long long)u->id,
            count);
    return 0;
}

#define IMPORT_MAX_BYTES (1u << 30) /* an export is one user's records: far below this */

/* Reads all of stdin into b. Returns 0, -EFBIG past IMPORT_MAX_BYTES, or -errno. */
static int read_stdin(struct buf *b) {
    for (;;) {
        if (b->len > IMPORT_MAX_BYTES) return -EFBIG;
        char *p = buf_reserve(b, 65536);
        ssize_t n = read(STDIN_FILENO, p, 65536);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return 0;
        buf_commit(b, (size_t)n);
    }
}

/*
 * Decodes an export into recs (records[0] the user). Returns NULL when
 * fine, else the reason. Checks framing, checksums, the end mark and
 * ownership; check_import the rest.
 */
static const char *parse_export(const struct buf *in, struct record ***recs, size_t *n) {
    const uint8_t *p = (const uint8_t *)in->ptr, *end = p + in->len;
    uint32_t key;
    if (in->len < STORE_HEADER_SIZE || memcmp(p, STORE_MAGIC, 8) || !logfile_header_key(p, &key))
        return "is not an eventd export (bad header)";
    size_t cap = 0;
    for (p += STORE_HEADER_SIZE; p < end;) {
        if ((size_t)(end - p) < STORE_FRAME_HEADER_SIZE) return "is cut short (a partial frame)";
        uint32_t len = logfile_get_le32(p + 4);
        if (len > STORE_MAX_PAYLOAD || (size_t)(end - p) - STORE_FRAME_HEADER_SIZE < len)
            return "is cut short (a partial frame)";
        if (logfile_frame_check(key, p, len) != logfile_get_le32(p)) return "is damaged (checksum)";
        uint8_t type = p[8];
        uint64_t count = UINT64_MAX;
        if (type == REC_EXPORT_END) {
            if (varint_get(p + 9, len, &count) != len || count != *n)
                return "is damaged (its end mark counts other records)";
            if ((size_t)(end - p) != STORE_FRAME_HEADER_SIZE + len)
                return "holds frames after its end mark";
            return *n ? NULL : "holds no user";
        }
        struct record *r = record_kind(type) ? record_decode(type, p + 9, len) : NULL;
        if (!r) return "holds a frame that is not a record";
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            *recs = xrealloc(*recs, cap * sizeof **recs);
        }
        (*recs)[(*n)++] = r;
        if ((*n == 1) != (type == REC_USER)) return "does not start with its one user";
        if (*n > 1 && r->user_id != (*recs)[0]->id) return "holds a record of another user";
        p += STORE_FRAME_HEADER_SIZE + len;
    }
    /* An unkeyed (version 1) export predates the end mark. */
    if (!key) return *n ? NULL : "holds no user";
    return "is cut short (no end mark; an export written before the end mark existed, "
           "2026-11-29, must be written again)";
}

/* (id, type) of an imported record, sorted by id: duplicates and references. */
struct import_id {
    uint64_t id;
    uint8_t type;
};

static int by_id(const void *a, const void *b) {
    uint64_t x = ((const struct import_id *)a)->id, y = ((const struct import_id *)b)->id;
    return x < y ? -1 : x > y;
}

static int by_key(const void *a, const void *b) {
    union value x = record_get(*(struct record *const *)a, IDEM_KEY),
                y = record_get(*(struct record *const *)b, IDEM_KEY);
    int c = memcmp(x.s.ptr, y.s.ptr, x.s.len < y.s.len ? x.s.len : y.s.len);
    return c ? c : (x.s.len > y.s.len) - (x.s.len < y.s.len);
}

/* The id of an Idempotency-Key whose key another of the export's has too, or 0:
 * the API keeps one record a key (a replay could answer with either). */
static uint64_t key_twice(struct record **recs, size_t n) {
    struct record **keys = xcalloc(n, sizeof *keys);
    size_t nk = 0;
    for (size_t i = 0; i < n; i++)
        if (recs[i]->type == REC_IDEM) keys[nk++] = recs[i];
    qsort(keys, nk, sizeof *keys, by_key);
    uint64_t twice = 0;
    for (size_t i = 1; i < nk && !twice; i++)
        if (!by_key(&keys[i - 1], &keys[i])) /* the later of the two: qsort is not stable */
            twice = keys[i]->id > keys[i - 1]->id ? keys[i]->id : keys[i - 1]->id;
    free(keys);
    return twice;
}

/*
 * What the API would have refused, or what would harm this node, in a
 * decoded export: an export is checked as any other input. Returns NULL, or
 * the reason written to why.
 */
static const char *check_import(const struct db *db, struct record **recs, size_t n, char *why,
                                size_t len) {
    union value name = record_get(recs[0], USER_NAME), pw = record_get(recs[0], USER_PASSWORD_HASH);
    const char *bad = auth_check_username(name.s.ptr);
    if (bad || strlen(name.s.ptr) != name.s.len) {
        snprintf(why, len, "holds a username the server refuses (%s)", bad ? bad : "a NUL byte");
        return why;
    }
    if (pw.s.len && !pwhash_str_acceptable(pw.s.ptr)) {
        snprintf(why, len,
                 "holds a password hash that is not Argon2id within this server's "
                 "limits (t=2, 64 MiB, one lane)");
        return why;
    }
    struct import_id *ids = xcalloc(n, sizeof *ids);
    why[0] = '\0';
    for (size_t i = 0; i < n && !why[0]; i++) {
        const struct record *r = recs[i];
        const struct kind_desc *k = record_kind(r->type);
        ids[i] = (struct import_id){r->id, r->type};
        if (i && !memchr(owned_kinds, r->type, sizeof owned_kinds))
            snprintf(why, len, "holds a record (id %llu) of a kind a user does not own",
                     (unsigned long long)r->id);
        else if (db_id_unissued(db, r->id))
            snprintf(why, len,
                     "holds id %llu, of this node's own range but not handed out by "
                     "it yet: import into a node of another --node-id (docs/SCALING.md)",
                     (unsigned long long)r->id);
        else if (r->type == REC_IDEM && record_get(r, IDEM_STATUS).i != 200)
            /* Replayed byte for byte: only a create's answer (200) is ever kept. */
            snprintf(why, len, "holds an Idempotency-Key (id %llu) whose answer is not a 200",
                     (unsigned long long)r->id);
        else if (r->type == REC_IDEM && record_get(r, IDEM_ANSWER).s.ptr[0] != '{')
            /* An export carries each answer's body (key_for_export), never a reference. */
            snprintf(why, len, "holds an Idempotency-Key (id %llu) without its answer's body",
                     (unsigned long long)r->id);
        for (int f = 0; f < k->nfields && !why[0]; f++) {
            union value v = record_get(r, f);
            if ((bad = record_check_value(k, f, &v, 65535)) != NULL)
                snprintf(why, len, "holds a value the server refuses (id %llu: %s)",
                         (unsigned long long)r->id, bad);
        }
    }
    qsort(ids, n, sizeof *ids, by_id);
    for (size_t i = 1; i < n && !why[0]; i++)
        if (ids[i].id == ids[i - 1].id)
            snprintf(why, len, "holds id %llu twice", (unsigned long long)ids[i].id);
    uint64_t twice = why[0] ? 0 : key_twice(recs, n);
    if (twice)
        snprintf(why, len, "holds an Idempotency-Key (id %llu) whose key another one has too",
                 (unsigned long long)twice);
    /* An event links only records of its user, of the right kind: in the export; and,
     * as the API allows, each of them from one event at most. */
    static const struct {
        int field;
        uint8_t type;
    } refs[] = {{EVENT_THEME_ID, REC_THEME}, {EVENT_ADDRESS_ID, REC_ADDRESS}};
    struct import_id *linked = xcalloc(2 * n, sizeof *linked);
    size_t nlinked = 0;
    for (size_t i = 1; i < n && !why[0]; i++) {
        if (recs[i]->type != REC_EVENT) continue;
        for (size_t j = 0; j < sizeof refs / sizeof refs[0] && !why[0]; j++) {
            struct import_id key = {record_ref(recs[i], refs[j].field), 0};
            const struct import_id *to = key.id ? bsearch(&key, ids, n, sizeof *ids, by_id) : NULL;
            if (key.id && (!to || to->type != refs[j].type))
                snprintf(why, len, "holds event %llu linking id %llu, not a %s of its user",
                         (unsigned long long)recs[i]->id, (unsigned long long)key.id,
                         refs[j].type == REC_THEME ? "theme" : "address");
            else if (key.id)
                linked[nlinked++] = key;
        }
    }
    qsort(linked, nlinked, sizeof *linked, by_id);
    for (size_t i = 1; i < nlinked && !why[0]; i++)
        if (linked[i].id == linked[i - 1].id)
            snprintf(why, len,
                     "holds two events linking id %llu (an event's own, as the API keeps)",
                     (unsigned long long)linked[i].id);
    free(linked);
    free(ids);
    return why[0] ? why : NULL;
}

int cli_import(struct db *db) {
    struct buf in = BUF_INIT;
    struct record **recs = NULL;
    size_t n = 0, i;
    int status = 1, rc = read_stdin(&in);
    if (rc < 0) {
        fprintf(stderr, "eventd: reading the export from stdin: %s\n", strerror(-rc));
        goto done;
    }
    const char *why = parse_export(&in, &recs, &n);
    if (why) {
        fprintf(stderr, "eventd: the input %s; nothing was imported\n", why);
        goto done;
    }
    char reason[256];
    if ((why = check_import(db, recs, n, reason, sizeof reason)) != NULL) {
        fprintf(stderr, "eventd: the input %s; nothing was imported\n", why);
        goto done;
    }
    const struct record *u = recs[0];
    union value uname = record_get(u, USER_NAME);
    const char *name = uname.s.ptr;
    if (db_user_by_name(db, name, uname.s.len)) {
        fprintf(stderr, "eventd: user '%s' exists already here; nothing was imported\n", name);
        goto done;
    }
    /* Ids are kept (they carry the node that made them, so they are unique across shards):
     * any id already here means the export does not belong here. */
    for (i = 0; i < n; i++) {
        if (db_get(db, recs[i]->id)) {
            fprintf(stderr, "eventd: id %llu exists already here; nothing was imported\n",
                    (unsigned long long)recs[i]->id);
            goto done;
        }
    }
    for (i = 0; i < n; i++) {
        db_put(db, recs[i]);
        recs[i] = NULL;
    }
    if (save(db) < 0) goto done;
    printf("imported user %s (id %llu) and %zu records\n", name, (unsigned long long)u->id, n - 1);
    status = 0;
done:
    for (i = 0; i < n; i++)
        record_free(recs[i]);
    free(recs);
    buf_destroy(&in);
    return status;
}
