/* cli: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"

static int save(struct db *db) {
    int rc = store_flush_sync(&db->store);
    if (rc < 0) fprintf(stderr, "eventd: could not write the log: %s\n", strerror(-rc));
    return rc;
}

/* A new key for user name (created with a new id unless it exists). Returns 0 or -errno. */
static int set_key(struct db *db, const char *name, char key[AUTH_KEY_CHARS + 1]) {
    const struct record *old = index_user_by_name(&db->index, name, strlen(name));
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
    const struct id_list *l = index_owned(&db->index, UINT64_MAX, REC_USER);
    printf("%-8s %s\n", "ID", "NAME");
    for (uint32_t i = 0; i < l->len; i++) {
        const struct record *u = db_get(db, l->ids[i]);
        printf("%-8llu %s\n", (unsigned long long)u->id, u->v[USER_NAME].s.ptr);
    }
}

int cli_user(struct db *db, int npos, const char **pos) {
    const char *verb = npos > 0 ? pos[0] : "";
    if (!strcmp(verb, "list") && npos == 1) {
        list_users(db);
        return 0;
    }
    if (npos != 2 || (strcmp(verb, "add") && strcmp(verb, "rotate") && strcmp(verb, "remove"))) {
        fprintf(stderr, "eventd: usage: eventd user add|rotate|remove NAME, or eventd user list\n");
        return 2;
    }
    const char *name = pos[1];
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad username '%s': %s\n", name, why);
        return 2;
    }
    const struct record *u = index_user_by_name(&db->index, name, strlen(name));
    if (!strcmp(verb, "add") && u) {
        fprintf(stderr, "eventd: user '%s' exists already (use 'eventd user rotate')\n", name);
        return 1;
    }
    if (strcmp(verb, "add") && !u) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
        return 1;
    }
    if (!strcmp(verb, "remove")) {
        /* Its site sessions go with it. */
        uint64_t uid = u->id;
        const struct id_list *l = index_owned(&db->index, uid, REC_SESSION);
        while (l->len) {
            db_delete(db, l->ids[l->len - 1]);
            l = index_owned(&db->index, uid, REC_SESSION);
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

int cli_admin_token(struct db *db, const char *name) {
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad token name '%s': %s\n", name, why);
        return 2;
    }
    uint64_t id;
    int rc = db_take_id(db, &id);
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
    printf("created admin token %s (shown only once):\n%s\n", name, token);
    return 0;
}

int cli_compact(struct db *db, const struct config *cfg) {
    uint64_t before = db->store.file_size;
    int rc = db_compact_now(db);
    if (rc < 0) {
        fprintf(stderr, "eventd: compaction failed: %s\n", strerror(-rc));
        return 1;
    }
    printf("compacted %s/%s: %llu -> %llu bytes\n", cfg->data_dir, STORE_LOG_NAME,
           (unsigned long long)before, (unsigned long long)db->store.file_size);
    return 0;
}

/* Writes the key to DATA/demo-user.key, readable by this user only. Returns 0 or -errno. */
static int write_key_file(const char *path, const char *key) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    char line[AUTH_KEY_CHARS + 2];
    int n = snprintf(line, sizeof line, "%s\n", key);
    int err = write(fd, line, (size_t)n) == n ? 0 : -EIO;
    if (!err && fsync(fd) < 0) err = -errno;
    close(fd);
    return err;
}

void cli_demo_user(struct db *db, const struct config *cfg, const char *bound) {
    const struct id_list *users = index_owned(&db->index, UINT64_MAX, REC_USER);
    if (users->len) return;
    char key[AUTH_KEY_CHARS + 1];
    if (set_key(db, "demo", key) < 0) return;
    /* A wildcard address is reached as localhost. */
    const char *port = strrchr(bound, ':');
    bool wildcard = !strncmp(bound, "0.0.0.0:", 8) || !strncmp(bound, "[::]:", 5);
    const char *host = wildcard ? "localhost" : "";
    const char *hostport = wildcard ? port : bound;
    if (isatty(STDOUT_FILENO)) {
        printf(
            "Created user \"demo\" (no users existed). Its API key, shown only this once:\n"
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
            printf("Created user \"demo\" (no users existed). Its API key is in %s (mode 0600).\n"
                   "Try it:\n"
                   "  curl -u demo:$(cat %s) -H 'Cache-Control: no-cache' "
                   "-d '{\"Theme\":{\"Name\":\"first\"}}' http://%s%s%s/theme\n"
                   "(start with --no-demo-user to skip this)\n",
                   path, path, host, hostport, cfg->base_path);
        }
    }
    fflush(stdout);
}
