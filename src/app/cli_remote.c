/*
 * cli_remote: the user and admin commands on a running server, through
 * the admin API on its Unix socket (DATA/admin.sock). A short blocking
 * exchange (this is a command-line tool, not the server): one request,
 * Connection: close, the answer read to its end within a timeout, and the
 * few members the output needs picked from the JSON answer with yajl's
 * callbacks. The output is the offline commands' own (cli.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>

#include "app/app.h"
#include "app/cli.h"
#include "storage/auth.h"

#define ANSWER_MAX (1u << 30) /* a user list of millions of names; past it: an error, not a cut */
#define TIMEOUT_S 30

/* The members the commands print, in the order the answer gives them. */
struct picked {
    char key[32];
    char value[128];
};

struct picker {
    char last_key[32];
    struct picked *items;
    size_t n, cap;
};

static int pick(struct picker *p, const char *v, size_t len) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = realloc(p->items, p->cap * sizeof *p->items);
        if (!p->items) return 0;
    }
    struct picked *it = &p->items[p->n++];
    snprintf(it->key, sizeof it->key, "%s", p->last_key);
    snprintf(it->value, sizeof it->value, "%.*s", (int)len, v);
    return 1;
}

static int on_key(void *ctx, const unsigned char *s, size_t len) {
    struct picker *p = ctx;
    snprintf(p->last_key, sizeof p->last_key, "%.*s", (int)len, (const char *)s);
    return 1;
}
static int on_string(void *ctx, const unsigned char *s, size_t len) {
    return pick(ctx, (const char *)s, len);
}
static int on_number(void *ctx, const char *s, size_t len) {
    return pick(ctx, s, len);
}
static int on_null(void *ctx) {
    return pick(ctx, "null", 4);
}

static const yajl_callbacks callbacks = {on_null, NULL,   NULL, NULL, on_number, on_string,
                                         NULL,    on_key, NULL, NULL, NULL};

/* The first picked value of key, or NULL. */
static const char *get(const struct picker *p, const char *key) {
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->items[i].key, key)) return p->items[i].value;
    return NULL;
}

static int connect_socket(const char *dir) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", dir, APP_ADMIN_SOCKET) >=
        sizeof sa.sun_path)
        return -ENAMETOOLONG;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct timeval tv = {.tv_sec = TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

bool cli_server_running(const char *dir) {
    int fd = connect_socket(dir);
    if (fd < 0) return false;
    close(fd);
    return true;
}

/*
 * One exchange, with a JSON body unless json is NULL; returns the status
 * (or -1 after a message) and the picked members.
 */
static int call(const char *dir, const char *method, const char *path, const char *json,
                struct picker *out) {
    int fd = connect_socket(dir);
    if (fd < 0) {
        fprintf(stderr, "eventd: cannot reach the server through %s/%s: %s\n", dir,
                APP_ADMIN_SOCKET, strerror(-fd));
        return -1;
    }
    char req[768];
    if (!json) json = "";
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n%s",
                     method, path, strlen(json), *json ? "Content-Type: application/json\r\n" : "",
                     json);
    char *ans = NULL;
    size_t len = 0;
    int status = -1;
    if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) goto io_error;
    /* The whole answer (the server closes after it), however long: a list cut short
     * would be a wrong answer, so past ANSWER_MAX, or short of its Content-Length, or
     * not JSON, it is an error. Until 2026-11-28 it stopped at 8 MiB and printed what
     * it had (45,899 of 50,000 users), which "Adding a shard" relies on. */
    size_t cap = 65536;
    ans = malloc(cap + 1);
    if (!ans) goto io_error;
    for (;;) {
        if (len == cap) {
            char *bigger = cap < ANSWER_MAX ? realloc(ans, 2 * cap + 1) : NULL;
            if (!bigger) {
                errno = EFBIG;
                goto io_error;
            }
            ans = bigger;
            cap *= 2;
        }
        ssize_t got = read(fd, ans + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) goto io_error;
        if (got == 0) break;
        len += (size_t)got;
    }
    ans[len] = 0;
    errno = 0;
    char *body = strstr(ans, "\r\n\r\n");
    if (len < 12 || strncmp(ans, "HTTP/1.1 ", 9) != 0 || !body) goto io_error;
    status = atoi(ans + 9);
    const char *cl = strstr(ans, "\r\nContent-Length: ");
    body += 4;
    size_t body_len = len - (size_t)(body - ans);
    if (status == 204 || status == 304) { /* no body, and no Content-Length (RFC 9110) */
        if (body_len) goto io_error;
        free(ans);
        close(fd);
        return status;
    }
    if (!cl || cl > body || strtoull(cl + 18, NULL, 10) != body_len) goto io_error;
    yajl_handle y = yajl_alloc(&callbacks, NULL, out);
    bool parsed = yajl_parse(y, (const unsigned char *)body, body_len) == yajl_status_ok &&
                  yajl_complete_parse(y) == yajl_status_ok;
    yajl_free(y);
    if (!parsed) goto io_error;
    free(ans);
    close(fd);
    return status;
io_error:
    fprintf(stderr, "eventd: no answer from the server through %s/%s: %s\n", dir, APP_ADMIN_SOCKET,
            errno ? strerror(errno) : "malformed answer");
    free(ans);
    close(fd);
    return -1;
}

/* The server's error message, for the user. */
static void print_error(const struct picker *p, int status) {
    const char *m = get(p, "Message");
    fprintf(stderr, "eventd: the server answered %d: %s\n", status, m ? m : "(no message)");
}

int cli_user_remote(const char *dir, int npos, const char **pos) {
    struct picker p = {0};
    const char *verb = pos[0];
    char path[160];
    int status, rc = 1;
    if (!strcmp(verb, "list")) {
        status = call(dir, "GET", "/admin/users", NULL, &p);
        if (status == 200) {
            printf("%-8s %s\n", "ID", "NAME");
            const char *name = NULL;
            for (size_t i = 0; i < p.n; i++) {
                if (!strcmp(p.items[i].key, "Username")) name = p.items[i].value;
                if (!strcmp(p.items[i].key, "UserID") && name)
                    printf("%-8s %s\n", p.items[i].value, name);
            }
            rc = 0;
        } else if (status > 0) {
            print_error(&p, status);
        }
        free(p.items);
        return rc;
    }
    const char *name = pos[1];
    (void)npos;
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad username '%s': %s\n", name, why);
        return 2;
    }
    if (!strcmp(verb, "add")) {
        snprintf(path, sizeof path, "/admin/users/%s", name);
        status = call(dir, "PUT", path, NULL, &p);
    } else if (!strcmp(verb, "rotate")) {
        snprintf(path, sizeof path, "/admin/users/%s/key", name);
        status = call(dir, "POST", path, NULL, &p);
    } else if (!strcmp(verb, "remove")) {
        snprintf(path, sizeof path, "/admin/users/%s", name);
        status = call(dir, "DELETE", path, NULL, &p);
    } else {
        /* Never a removal by default: a mistyped verb must not delete anyone. */
        fprintf(stderr, "eventd: usage: eventd user add|rotate|remove|purge|limits NAME, or "
                        "eventd user list\n");
        return 2;
    }
    const char *key = get(&p, "APIKey");
    if ((status == 201 || status == 200) && key) {
        printf("%s user %s; API key (shown only once):\n%s\n",
               !strcmp(verb, "add") ? "created" : "new key for", name, key);
        rc = 0;
    } else if (status == 204) {
        printf("removed user %s\n", name);
        rc = 0;
    } else if (status == 409) {
        fprintf(stderr, "eventd: user '%s' exists already (use 'eventd user rotate')\n", name);
    } else if (status == 404) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
    } else if (status > 0) {
        print_error(&p, status);
    }
    free(p.items);
    return rc;
}

int cli_admin_token_remote(const char *dir, const char *verb, const char *name) {
    struct picker p = {0};
    char path[160];
    snprintf(path, sizeof path, "/admin/tokens/%s", name);
    bool revoke = !strcmp(verb, "revoke");
    int status = call(dir, revoke ? "DELETE" : "PUT", path, NULL, &p), rc = 1;
    const char *token = get(&p, "Token");
    if (!revoke && (status == 201 || status == 200) && token) {
        printf("%s admin token %s (shown only once):\n%s\n", status == 200 ? "new" : "created",
               name, token);
        rc = 0;
    } else if (revoke && status == 204) {
        printf("revoked admin token %s\n", name);
        rc = 0;
    } else if (revoke && status == 404) {
        fprintf(stderr, "eventd: no admin token '%s'\n", name);
    } else if (status > 0) {
        print_error(&p, status);
    }
    free(p.items);
    return rc;
}

/* A picked number, or 0. */
static uint64_t number(const struct picker *p, const char *key) {
    const char *v = get(p, key);
    return v ? strtoull(v, NULL, 10) : 0;
}

int cli_user_limits_remote(const char *dir, const char *name, const char *max_records,
                           const char *max_bytes) {
    const char *why = auth_check_username(name);
    if (why) {
        fprintf(stderr, "eventd: bad username '%s': %s\n", name, why);
        return 2;
    }
    /* Values are checked here as offline, then sent as JSON: null for "default". */
    const char *flags[2] = {"--max-records", "--max-bytes"}, *vals[2] = {max_records, max_bytes};
    const char *keys[2] = {"MaxRecords", "MaxBytes"};
    char body[160] = "{", path[160];
    for (int i = 0; i < 2; i++) {
        uint64_t stored;
        if (!vals[i]) continue;
        if (cli_parse_limit(flags[i], vals[i], &stored) < 0) return 2;
        size_t at = strlen(body);
        snprintf(body + at, sizeof body - at, "%s\"%s\":%s", at > 1 ? "," : "", keys[i],
                 stored ? vals[i] : "null");
    }
    strcat(body, "}");
    struct picker p = {0};
    int status, rc = 1;
    if (max_records || max_bytes) {
        snprintf(path, sizeof path, "/admin/users/%s/limits", name);
        status = call(dir, "PUT", path, body, &p);
    } else {
        snprintf(path, sizeof path, "/admin/users/%s", name);
        status = call(dir, "GET", path, NULL, &p);
    }
    const char *own_r = get(&p, "OwnMaxRecords"), *own_b = get(&p, "OwnMaxBytes");
    if (status == 200 && own_r && own_b) {
        cli_print_quota(name, number(&p, "Records"), number(&p, "MaxRecords"),
                        strcmp(own_r, "null") != 0, number(&p, "Bytes"), number(&p, "MaxBytes"),
                        strcmp(own_b, "null") != 0);
        rc = 0;
    } else if (status == 404) {
        fprintf(stderr, "eventd: no user '%s'\n", name);
    } else if (status > 0) {
        print_error(&p, status);
    }
    free(p.items);
    return rc;
}
