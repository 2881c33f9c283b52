/*
 * eventd: parse the command line, then one of
 *   serve (default)            replay the log, listen, run the loop, shut down
 *   user add|rotate|remove|list   manage accounts in a stopped server's data directory
 *   compact                    rewrite a stopped server's log to its live records
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "app.h"
#include "auth.h"
#include "config.h"

static void usage(FILE *out) {
    fprintf(
        out,
        "eventd %s: the event theme and address service (HTTP/JSON API under /v2)\n\n"
        "Usage:\n"
        "  eventd [serve] [settings]           serve the API (the default)\n"
        "  eventd user add NAME [--data DIR]    create a user; prints its API key last\n"
        "  eventd user rotate NAME [--data DIR] give a user a new key; the old one stops working\n"
        "  eventd user remove NAME [--data DIR] remove a user\n"
        "  eventd user list [--data DIR]        list users\n"
        "  eventd compact [--data DIR]          rewrite the log to its live records\n"
        "  eventd --help | --version\n\n"
        "The user and compact commands work on the data directory of a stopped server.\n\n",
        EVENTD_VERSION);
    config_usage(out);
}

static int user_store(struct app *a, const char *name, const char *key) {
    const struct record *old = index_user_by_name(&a->index, name, strlen(name));
    app_put_user(a, old ? old->id : index_take_id(&a->index), name, key);
    return store_flush_sync(&a->store);
}

static int cmd_user(struct app *a, int npos, const char **pos) {
    const char *verb = npos > 0 ? pos[0] : "";
    if (!strcmp(verb, "list") && npos == 1) {
        const struct id_list *l = index_owned(&a->index, UINT64_MAX, REC_USER);
        printf("%-8s %s\n", "ID", "NAME");
        for (uint32_t i = 0; i < l->len; i++) {
            const struct record *u = index_get(&a->index, l->ids[i]);
            printf("%-8llu %s\n", (unsigned long long)u->id, u->v[USER_NAME].s.ptr);
        }
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
    const struct record *u = index_user_by_name(&a->index, name, strlen(name));
    if (!strcmp(verb, "add") && u) {
        fprintf(stderr, "eventd: user '%s' exists already (use 'eventd user rotate')\n", name);
        return 1;
    }
    if (strcmp(verb, "add") && !u) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
        return 1;
    }
    if (!strcmp(verb, "remove")) {
        app_delete(a, u->id);
        int rc = store_flush_sync(&a->store);
        if (rc < 0) {
            fprintf(stderr, "eventd: could not write the log: %s\n", strerror(-rc));
            return 1;
        }
        printf("removed user %s\n", name);
        return 0;
    }
    char key[AUTH_KEY_CHARS + 1];
    auth_new_key(key);
    int rc = user_store(a, name, key);
    if (rc < 0) {
        fprintf(stderr, "eventd: could not write the log: %s\n", strerror(-rc));
        return 1;
    }
    printf("%s user %s; API key (shown only once):\n%s\n",
           !strcmp(verb, "add") ? "created" : "new key for", name, key);
    return 0;
}

int main(int argc, char **argv) {
    int first = 1;
    const char *cmd = "serve";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("eventd %s\n", EVENTD_VERSION);
            return 0;
        }
    }
    if (argc > 1 && argv[1][0] != '-') {
        cmd = argv[1];
        first = 2;
    }
    if (strcmp(cmd, "serve") && strcmp(cmd, "user") && strcmp(cmd, "compact")) {
        fprintf(stderr, "eventd: unknown command '%s' (see --help)\n", cmd);
        return 2;
    }

    struct config cfg;
    const char *pos[4];
    int npos;
    int rc =
        config_parse(&cfg, argc - first, argv + first, pos, !strcmp(cmd, "user") ? 3 : 0, &npos);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc < 0) return 2;
    if (!strcmp(cmd, "user") && (npos == 0 || (strcmp(pos[0], "list") && npos < 2))) {
        fprintf(stderr, "eventd: usage: eventd user add|rotate|remove NAME, or eventd user list\n");
        return 2;
    }

    /* A peer that closes early must cost an EPIPE on that socket, not the process. */
    signal(SIGPIPE, SIG_IGN);
    /* The CLI commands speak for themselves on stdout; replay chatter is for servers. */
    if (strcmp(cmd, "serve") && cfg.log_level == LOG_INFO) cfg.log_level = LOG_WARN;

    uv_loop_t loop;
    uv_loop_init(&loop);
    struct app app;
    int status = 0;
    if (app_open(&app, &loop, &cfg) < 0) {
        status = 1;
    } else if (!strcmp(cmd, "serve")) {
        status = app_serve(&app);
    } else if (!strcmp(cmd, "user")) {
        status = cmd_user(&app, npos, pos);
    } else {
        uint64_t before = app.store.file_size;
        rc = app_compact_now(&app);
        if (rc < 0 || app.compact_status < 0) {
            fprintf(stderr, "eventd: compaction failed: %s\n",
                    strerror(rc < 0 ? -rc : -app.compact_status));
            status = 1;
        } else {
            printf("compacted %s/%s: %llu -> %llu bytes\n", cfg.data_dir, STORE_LOG_NAME,
                   (unsigned long long)before, (unsigned long long)app.store.file_size);
        }
    }
    app_close(&app);
    if (uv_loop_close(&loop) != 0) fprintf(stderr, "eventd: warning: handles left open at exit\n");
    return status;
}
