/*
 * eventd: parse the command line, then one of
 *   serve (default)            replay the log, listen, run the loop, shut down
 *   user add|rotate|remove|list   manage accounts (offline, or through a running
 *                              server's admin socket)
 *   admin token|revoke NAME    make (or replace) / revoke an admin API token
 *   compact                    rewrite a stopped server's log to its live records
 *   export --user NAME, import move a user's records between shards' data directories
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "app/app.h"
#include "app/cli.h"
#include "common/config.h"

static void usage(FILE *out) {
    fprintf(
        out,
        "eventd %s: the event theme and address service (HTTP/JSON API under /v2)\n\n"
        "Usage:\n"
        "  eventd [serve] [settings]           serve the API (the default)\n"
        "  eventd user add NAME [--data DIR]    create a user; prints its API key last\n"
        "  eventd user rotate NAME [--data DIR] give a user a new key; the old one stops working\n"
        "  eventd user remove NAME [--data DIR] remove a user (its records stay)\n"
        "  eventd user purge NAME [--data DIR]  remove a user and every record it owns\n"
        "  eventd user list [--data DIR]        list users\n"
        "  eventd user limits NAME [--max-records N|default] [--max-bytes N|default] [--data DIR]\n"
        "                                       set a user's own quota (0: no limit), show its "
        "use\n"
        "  eventd admin token NAME [--data DIR] make an admin API token (replacing one of\n"
        "                                       that name); prints it once\n"
        "  eventd admin revoke NAME [--data DIR] the admin token stops working\n"
        "  eventd compact [--data DIR]          rewrite the log to its live records\n"
        "  eventd export --user NAME [--data DIR] > FILE   a user and its records, to stdout\n"
        "  eventd import [--data DIR] < FILE    add an exported user and its records\n"
        "  eventd backup FILE [--data DIR]      copy the log to FILE (new), consistent while a\n"
        "                                       server writes it; start on it as DIR/eventd.log\n"
        "  eventd --help | --version\n\n"
        "The user, admin, export and import commands work on a stopped server's data\n"
        "directory under its --node-id (user and admin also through a running server's\n"
        "admin socket, DATA/admin.sock). compact needs a stopped server (a running one\n"
        "compacts online: kill -USR1). backup works with the server running or not.\n\n",
        EVENTD_VERSION);
    config_usage(out);
}

/*
 * Removes "--name VALUE" or "--name=VALUE" from argv[first..argc) and
 * returns VALUE (pointing into argv), or NULL when absent or without a value.
 */
static const char *take_flag(int *argc, char **argv, int first, const char *name) {
    size_t n = strlen(name);
    for (int i = first; i < *argc; i++) {
        if (strncmp(argv[i], name, n) != 0 || (argv[i][n] != '\0' && argv[i][n] != '=')) continue;
        int used = argv[i][n] == '=' ? 1 : 2;
        if (i + used > *argc) return NULL;
        const char *v = used == 1 ? argv[i] + n + 1 : argv[i + 1];
        memmove(argv + i, argv + i + used, (size_t)(*argc - i - used) * sizeof *argv);
        *argc -= used;
        return *v ? v : NULL;
    }
    return NULL;
}

/* Runs command cmd on the opened app; returns the exit status. */
/* eventd user limits: the command's own flags (not settings), taken out of argv first. */
static const char *limit_records, *limit_bytes;

static int run(struct app *app, const char *cmd, int npos, const char **pos,
               const char *export_user) {
    if (!strcmp(cmd, "serve")) return app_serve(app);
    if (!strcmp(cmd, "user") && !strcmp(pos[0], "limits"))
        return cli_user_limits(&app->db, &app->cfg, pos[1], limit_records, limit_bytes);
    if (!strcmp(cmd, "user")) return cli_user(&app->db, npos, pos);
    if (!strcmp(cmd, "export")) return cli_export(&app->db, export_user);
    if (!strcmp(cmd, "import")) return cli_import(&app->db);
    if (!strcmp(cmd, "admin")) return cli_admin_token(&app->db, pos[0], pos[1]);
    return cli_compact(&app->db, &app->cfg);
}

/*
 * SIGTERM or SIGINT before the server's own handlers exist (replay, which can
 * take seconds on a large log, and the steps up to listening). Without a
 * handler, the process would end at once, except as PID 1, a container's
 * process, which the kernel gives no default action: `podman stop` then
 * waited its whole grace period and sent SIGKILL. The same end as any other
 * process's, said: nothing is acknowledged yet, and replay is safe to stop
 * at any point (kill -9 included: docs/RELIABILITY.md).
 */
static void stop_before_serving(int signum) {
    static const char msg[] = "eventd: stopped by a signal before serving (during startup)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(0);
}

/* Replaced by the server's handlers once it listens (app_serve). */
static void catch_stop_before_serving(void) {
    struct sigaction sa = {.sa_handler = stop_before_serving};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/*
 * A server's start up to opening its data directory: the settings that need
 * nothing opened are checked first, so that a mistyped one neither creates a
 * directory nor waits for a replay; then stop signals are caught. -1 after
 * saying why.
 */
static int prepare_serve(const struct config *cfg) {
    char msg[512];
    if (app_check_settings(cfg, msg, sizeof msg) < 0) {
        fprintf(stderr, "eventd: %s\n", msg);
        return -1;
    }
    catch_stop_before_serving();
    return 0;
}

/* The words of the user and admin commands; false after printing the usage. */
static bool usage_ok(const char *cmd, int npos, const char **pos) {
    if (!strcmp(cmd, "user") && (npos == 0 || (strcmp(pos[0], "list") && npos < 2))) {
        fprintf(stderr, "eventd: usage: eventd user add|rotate|remove|purge|limits NAME, or "
                        "eventd user list\n");
        return false;
    }
    if ((limit_records || limit_bytes) && strcmp(pos[0], "limits")) {
        fprintf(stderr, "eventd: --max-records and --max-bytes go with eventd user limits NAME\n");
        return false;
    }
    if (!strcmp(cmd, "backup") && npos != 1) {
        fprintf(stderr, "eventd: usage: eventd backup FILE [--data DIR]\n");
        return false;
    }
    if (!strcmp(cmd, "admin") &&
        (npos != 2 || (strcmp(pos[0], "token") && strcmp(pos[0], "revoke")))) {
        fprintf(stderr, "eventd: usage: eventd admin token|revoke NAME\n");
        return false;
    }
    return true;
}

static bool known_command(const char *cmd) {
    static const char *const cmds[] = {"serve",  "user",   "compact", "admin",
                                       "export", "import", "backup"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(cmd, cmds[i])) return true;
    return false;
}

/* The words a command takes after its name (user add NAME, backup FILE). */
static int max_words(const char *cmd) {
    if (!strcmp(cmd, "user") || !strcmp(cmd, "admin")) return 3;
    return !strcmp(cmd, "backup") ? 1 : 0;
}

/* Only serve, import, "user add" and "admin token" start a data directory; the
 * others read one (a revoke has nothing to revoke in a new one), and a mistyped
 * --data must not leave an empty directory behind. */
static bool creates_data_dir(const char *cmd, const char **pos) {
    return !strcmp(cmd, "serve") || !strcmp(cmd, "import") ||
           (!strcmp(cmd, "admin") && !strcmp(pos[0], "token")) ||
           (!strcmp(cmd, "user") && !strcmp(pos[0], "add"));
}

/* The settings of a command run once on a stopped server's directory. */
static void one_shot_settings(struct config *cfg) {
    /* It speaks for itself on stdout; replay chatter is for servers. */
    if (cfg->log_level == LOG_INFO) cfg->log_level = LOG_WARN;
    /* Its exit status says whether its change is on disk: it writes in always mode,
     * whatever --fsync (a shard's EVENTD_FSYNC) says. In interval and never modes a
     * refused write stays in memory for the retries, so the command said "could not
     * write the log", exit 1, and its close then wrote it all (review, 2026-11-29). */
    cfg->fsync = CONFIG_FSYNC_ALWAYS;
}

int main(int argc, char **argv) {
    /* Standard descriptors a caller closed (`eventd export >&-`) are reopened on
     * /dev/null: else the next descriptor opened (a socket, libuv's own) would take
     * their number, and libuv aborts at exit on closing one that low (review). */
    for (int fd = 0; fd <= STDERR_FILENO; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) < 0) return 2;
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
    if (!known_command(cmd)) {
        fprintf(stderr, "eventd: unknown command '%s' (see --help)\n", cmd);
        return 2;
    }
    /* export's --user is the command's own, not a setting: take it out before the settings. */
    const char *export_user = NULL;
    if (!strcmp(cmd, "export")) {
        export_user = take_flag(&argc, argv, first, "--user");
        if (!export_user) {
            fprintf(stderr, "eventd: usage: eventd export --user NAME [--data DIR] > FILE\n");
            return 2;
        }
    }
    if (!strcmp(cmd, "user")) {
        limit_records = take_flag(&argc, argv, first, "--max-records");
        limit_bytes = take_flag(&argc, argv, first, "--max-bytes");
    }

    struct config cfg;
    const char *pos[4];
    int npos;
    int rc = config_parse(&cfg, argc - first, argv + first, pos, max_words(cmd), &npos);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc < 0) return 2;
    if (!usage_ok(cmd, npos, pos)) return 2;

    struct stat st;
    if (!creates_data_dir(cmd, pos) && stat(cfg.data_dir, &st) < 0 && errno == ENOENT) {
        fprintf(stderr, "eventd: no data directory %s (nothing was created)\n", cfg.data_dir);
        return 1;
    }

    /* backup only reads the log: no lock, a running server keeps writing it. */
    if (!strcmp(cmd, "backup")) return cli_backup(cfg.data_dir, pos[0]);
    /* A peer that closes early must cost an EPIPE on that socket, not the process. */
    signal(SIGPIPE, SIG_IGN);
    /* SIGUSR1 asks a server to compact; before its handler exists (replay) and after
     * it is gone (shutdown), it must not end the process (review, 2026-11-28). */
    signal(SIGUSR1, SIG_IGN);
    /* A running server owns the directory: ask it. Its admin API has no purge: that one
     * is for a stopped server only (moving a user between shards, docs/SCALING.md). */
    bool running =
        (!strcmp(cmd, "user") || !strcmp(cmd, "admin")) && cli_server_running(cfg.data_dir);
    if (running && !strcmp(cmd, "user") && !strcmp(pos[0], "purge")) {
        fprintf(stderr,
                "eventd: user purge works on a stopped server's data directory only; "
                "%s is in use by a running eventd\n",
                cfg.data_dir);
        return 1;
    }
    if (running && !strcmp(cmd, "user") && !strcmp(pos[0], "limits"))
        return cli_user_limits_remote(cfg.data_dir, pos[1], limit_records, limit_bytes);
    if (running)
        return !strcmp(cmd, "user") ? cli_user_remote(cfg.data_dir, npos, pos)
                                    : cli_admin_token_remote(cfg.data_dir, pos[0], pos[1]);
    if (!strcmp(cmd, "serve") && prepare_serve(&cfg) < 0) return 2;
    if (strcmp(cmd, "serve")) one_shot_settings(&cfg);

    uv_loop_t loop;
    uv_loop_init(&loop);
    struct app app;
    int status = 0;
    if (app_open(&app, &loop, &cfg) < 0) {
        status = 1;
    } else {
        /* Test hooks count from here; a server's from when it listens (app_serve). */
        if (strcmp(cmd, "serve")) store_faults_rearm();
        status = run(&app, cmd, npos, pos, export_user);
    }
    /* Records that could not be written at the end make the exit status say so. */
    if (app_close(&app) < 0 && status == 0) status = 1;
    if (uv_loop_close(&loop) != 0) fprintf(stderr, "eventd: warning: handles left open at exit\n");
    return status;
}
