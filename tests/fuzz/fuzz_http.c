/*
 * fuzz_http: one connection's byte stream, through the real server running
 * in-process: accepting, reading, parsing, routing, authentication, JSON
 * decoding, the handlers, the store, the response writer and the closing
 * of the connection.
 *
 * Input: byte 0 is the largest piece the stream is sent in (0: all at once),
 * byte 1 seeds the sizes of the pieces and of the server's writes, the rest
 * is the stream. "@A1@" in the stream becomes "Basic <credentials of user
 * fuzz>", "@A2@" those of user "other", so bodies get past authentication
 * and reach the JSON decoder. The account site is on (docs/ACCOUNTS.md):
 * "@S1@" becomes the session cookie of user "web" (password
 * "fuzz-site-password"), "@C1@" that session's CSRF token, so form posts
 * reach the signed-in pages; the session, the password and the sign-in
 * throttles are restored before each input. The site secret is fixed (32
 * bytes of 0x5a), so the seeds' pre-sign-in forms carry valid CSRF tokens.
 *
 * Password hashes run on libuv's threadpool with the test builds' fast
 * limits (EVENTD_TEST_PWHASH_FAST); while one is in flight and nothing
 * else moves, the client blocks in the loop (not a counted turn), and no
 * input ends, and no restart happens, with a hash in flight.
 *
 * The connection is a socket simulated in memory (see "the socket" below):
 * the server's code is the production code, unchanged, but the handful of
 * libuv calls it makes on a connection (uv_accept, uv_read_start/stop,
 * uv_try_write, uv_write, uv_shutdown, uv_close) are linked to wrappers here
 * (ld --wrap, tests/fuzz/CMakeLists.txt) that, for the simulated connection
 * only, hand the server the client's bytes through its own alloc and read
 * callbacks, collect what it writes, and complete its write and shutdown
 * requests from the loop as libuv does (a canceled request gets
 * UV_ECANCELED before the close callback). Every other handle (the
 * listener, timers, the store's) is libuv's own. A real socket costs
 * about 4 system calls per piece; this costs none, so the fuzzer runs
 * 10-30 times faster. The send buffer is small (2 to 256 KiB, from byte 1)
 * and fills as Linux's does, so large or many responses are taken in part
 * and the rest goes through uv_write, as on a real connection.
 *
 * Each input gets a fresh connection to one server that lives across inputs
 * (starting one costs more than most inputs). The client sends the pieces,
 * each read by the server separately if it is reading, half-closes, and
 * waits until the server closes. Then every byte received must be
 * well-formed responses (http_check.c): status line, headers,
 * Content-Length equal to the body, each kind of answer in its own shape
 * (the JSON envelope, the site's HTML pages with no markup but their own,
 * its 303 redirects, its cookies), nothing after "Connection: close". The
 * server must also have closed the connection within the bound. Any breach
 * aborts, and libFuzzer keeps the input.
 *
 * The state grows with the records inputs create: the server is restarted
 * on an emptied data directory when it holds too much.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "fuzz_common.h"
#include "http/http.h"
#include "http_check.h"

/* The keys are fixed so that a saved input reproduces; both are 43 characters like real ones. */
#define KEY1 "fuzzKEY1fuzzKEY1fuzzKEY1fuzzKEY1fuzzKEY1fuz"
#define KEY2 "otherKEY2otherKEY2otherKEY2otherKEY2otherKE"

#define MAX_STREAM (256 * 1024)      /* bytes sent, after the placeholders are expanded */
#define MAX_RECV (4 << 20)           /* bytes of responses kept */
#define MAX_TURNS 100000             /* loop turns per input, once the stream is sent */
#define MAX_MS 5000                  /* wall time per input; far below the server's timeouts */
#define RESTART_RECORDS 400          /* restart the server above this many records... */
#define RESTART_LOG_BYTES (4u << 20) /* ... or this much log */
#define MAX_HEADER_BYTES 1024        /* the server's limits, small enough for inputs to cross */
#define MAX_BODY_BYTES 2048
#define MAX_REQUESTS 4096

/* ---- the server: the only code that knows the app, handlers and server APIs ---- */

#include "app/app.h"
#include "app/front.h"
#include "common/pwhash.h"
#include "http/server.h"
#include "storage/auth.h"
#include "storage/db.h"
#include "storage/record.h"

/* The account site's fixture: user "web" with a password and a session whose cookie and CSRF
 * token are fixed, so that "@S1@" and "@C1@" (see expand) get past the session checks. */
#define SITE_USER "web"
#define SITE_PASSWORD "fuzz-site-password"
#define SITE_TOKEN "fuzzSESSIONfuzzSESSIONfuzzSESSIONfuzzSESSIO"
#define SITE_CSRF "fuzzCSRFfuzzCSRFfuzzCSRFfuzzCSRFfuzzCSRFfuz"
#define SESSION_TTL_S HTTP_CHECK_SESSION_TTL_S
_Static_assert(sizeof SITE_TOKEN == 44 && sizeof SITE_CSRF == 44, "tokens have 43 characters");

static uv_loop_t loop;
static struct config cfg; /* the handlers' settings point at its strings */
static struct db db;
static struct handlers handlers;
static struct server srv;
static bool serving;
static char data_dir[256];
static bool drained;
static char site_pw_hash[crypto_pwhash_STRBYTES]; /* SITE_PASSWORD's, made once */
static uint64_t site_user_id, site_session_id;    /* 0: not written since the start */

static void on_drained(struct server *s) {
    drained = true;
}

/* What app.c wires: the data layer's acknowledgements release the responses. */
static void on_ack(void *ctx, uint64_t lsn, int status) {
    if (!serving) return;
    if (status == 0)
        server_acked(&srv, lsn);
    else
        server_fail_after(&srv, lsn);
}

static uint64_t take_id(void) {
    uint64_t id;
    if (db_take_id(&db, &id) < 0) fuzz_die("db_take_id failed");
    return id;
}

static void add_user(const char *name, const char *key) {
    db_put_user(&db, take_id(), name, key);
}

/*
 * Before each input: user "web" has its password and its session, which
 * earlier inputs may have signed out, displaced (a ninth sign-in ends the
 * oldest) or outlived, and no sign-in is throttled by earlier inputs'
 * failures (every simulated connection has the same peer).
 */
static void svc_prepare(void) {
    const struct record *u = site_user_id ? db_get(&db, site_user_id) : NULL;
    union value ph = u ? record_get(u, USER_PASSWORD_HASH) : (union value){0};
    if (!u || u->type != REC_USER || ph.s.len != strlen(site_pw_hash) ||
        memcmp(ph.s.ptr, site_pw_hash, ph.s.len) != 0) { /* gone, or its password changed */
        if (!site_user_id) site_user_id = take_id();
        db_put_account(&db, site_user_id, (struct slice){SITE_USER, strlen(SITE_USER)},
                       (struct slice){"", 0}, (struct slice){site_pw_hash, strlen(site_pw_hash)});
    }
    uint64_t now = (uint64_t)time(NULL);
    const struct record *s = site_session_id ? db_get(&db, site_session_id) : NULL;
    if (!s || s->type != REC_SESSION || record_get(s, SESSION_EXPIRES).i < now + 60) {
        if (!s || s->type != REC_SESSION) site_session_id = take_id();
        uint8_t hash[AUTH_HASH_BYTES];
        auth_hash_key(SITE_TOKEN, strlen(SITE_TOKEN), hash);
        union value v[RECORD_MAX_FIELDS];
        record_defaults(&record_session, v);
        v[SESSION_TOKEN_HASH].s.ptr = (const char *)hash;
        v[SESSION_TOKEN_HASH].s.len = AUTH_HASH_BYTES;
        v[SESSION_EXPIRES].i = now + SESSION_TTL_S;
        v[SESSION_CSRF].s.ptr = SITE_CSRF;
        v[SESSION_CSRF].s.len = strlen(SITE_CSRF);
        db_put(&db, record_build(&record_session, site_session_id, site_user_id, v));
    }
    struct throttle *t[2] = {&handlers.by_name, &handlers.by_addr};
    for (int i = 0; i < 2; i++) {
        if (!t[i]->used) continue;
        struct throttle_policy pol = t[i]->policy;
        size_t cap = t[i]->capacity;
        throttle_destroy(t[i]);
        if (throttle_init(t[i], cap, &pol) < 0) fuzz_die("throttle_init failed");
    }
}

/* Password hashes and verifications running or queued on the threadpool. */
static bool svc_hashing(void) {
    return pwhash_pending(&handlers.pw) > 0;
}

/* Starts the service on an empty data directory, as `eventd --fsync never` would serve it. */
static void svc_start(void) {
    cfg = config_defaults;
    cfg.listen = "127.0.0.1:0";
    cfg.data_dir = data_dir;
    cfg.fsync = STORE_FSYNC_NEVER;
    cfg.demo_user = false;
    cfg.log_level = LOG_OFF;
    /* Limits small enough for inputs of a few KiB to cross them. */
    cfg.max_header_bytes = MAX_HEADER_BYTES;
    cfg.max_body_bytes = MAX_BODY_BYTES;
    cfg.max_pipeline = 4;
    cfg.max_string_bytes = 64;
    cfg.list_max = 20;
    log_threshold = LOG_OFF;
    if (auth_init() < 0) fuzz_die("auth_init failed");
    struct db_settings set = {.store_opts = {.fsync = STORE_FSYNC_NEVER, .fsync_interval_ms = 1000},
                              .idem_ttl_s = DB_IDEM_TTL_S};
    char msg[512];
    if (db_open(&db, &loop, data_dir, &set, msg, sizeof msg) < 0) fuzz_die("db_open: %s", msg);
    add_user("fuzz", KEY1);
    add_user("other", KEY2);
    site_user_id = site_session_id = 0;
    /* The account site as the binary serves it by default (site_path ""): its
     * password hashes run on the threadpool, at most one at a time, fast ones
     * (EVENTD_TEST_PWHASH_FAST, set in LLVMFuzzerInitialize). */
    struct handlers_settings lim = {.base_path = cfg.base_path,
                                    .max_string_bytes = cfg.max_string_bytes,
                                    .max_json_depth = cfg.max_json_depth,
                                    .list_default = cfg.list_default,
                                    .list_max = cfg.list_max,
                                    .site = true,
                                    .site_path = "",
                                    .password_min_bytes = 10,
                                    .session_ttl_s = SESSION_TTL_S,
                                    .signin_free_failures = 5,
                                    .pwhash_concurrency = 1,
                                    .pwhash_queue = 4,
                                    .trusted_proxies = "",
                                    .throttle_entries = 4096,
                                    .register_per_address = 10,
                                    .register_per_minute = 60,
                                    .pwhash_register_queue = 4};
    struct server_handler sa;
    if (front_init(&handlers, &loop, &db, &srv, NULL, &lim, &sa, msg, sizeof msg) < 0)
        fuzz_die("front_init: %s", msg);
    /* A fixed site secret, so that seeds carry a valid pre-sign-in CSRF pair
     * (make_corpus.py computes the form token). */
    memset(handlers.site_secret, 0x5a, sizeof handlers.site_secret);
    struct server_settings ss = app_server_settings(&cfg);
    int rc = server_start(&srv, &loop, &ss, &sa);
    if (rc < 0) fuzz_die("server_start: %s", uv_strerror(rc));
    /* What app_serve does before it runs the loop. */
    serving = true;
    srv.acked_lsn = db.store.acked_lsn;
    db_on_ack(&db, on_ack, NULL);
}

/* Runs the loop until no password hash is in flight, at most MAX_MS. Returns whether it got there.
 */
static bool svc_wait_hashes(void) {
    uint64_t start = uv_hrtime();
    while (svc_hashing() && uv_hrtime() - start < (uint64_t)MAX_MS * 1000000)
        uv_run(&loop, UV_RUN_ONCE); /* blocks until the threadpool answers (or a timer) */
    return !svc_hashing();
}

/* Stops it as SIGTERM would, and closes the data layer. */
static void svc_stop(void) {
    /* A hash finishing after the shutdown would answer nobody, but its job must not outlive
     * the handlers it points to. */
    if (!svc_wait_hashes()) fuzz_die("a password hash did not finish within %d ms", MAX_MS);
    drained = false;
    server_shutdown(&srv, on_drained);
    for (int i = 0; i < MAX_TURNS && !drained; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    if (!drained) fuzz_die("server_shutdown did not drain");
    serving = false;
    db_on_ack(&db, NULL, NULL);
    server_destroy(&srv); /* tells the handlers (on_server_gone) */
    db_close(&db);
    uv_run(&loop, UV_RUN_DEFAULT);
    front_destroy(&handlers);
}

static bool svc_too_big(void) {
    return db.index.count > RESTART_RECORDS || db.store.file_size > RESTART_LOG_BYTES;
}

static unsigned svc_connections(void) {
    return srv.nconns;
}

/* ---- the client ---- */

static char auth1[128], auth2[128];
static bool verbose;         /* FUZZ_VERBOSE set: print what the server answered */
static bool allow_head_body; /* FUZZ_ALLOW_HEAD_BODY set: do not check HEAD responses */
static char *stream, *got;

static void cleanup(void) {
    fuzz_rmdir(data_dir);
}

/*
 * libFuzzer's leak check after an input that allocated more than it freed
 * runs the input again and scans the heap; the server's records and free
 * lists grow across inputs, so that happens after nearly every input and
 * cost most of the time. It is turned off here (libFuzzer reads its flags
 * after this function); LeakSanitizer still checks everything at exit.
 */
static char no_leak_flag[] = "-detect_leaks=0";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static char *args[256];
    if (*argc > 0 && *argc < 255) {
        memcpy(args, *argv, (size_t)*argc * sizeof *args);
        args[*argc] = no_leak_flag;
        args[*argc + 1] = NULL;
        *argv = args;
        (*argc)++;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Test builds (EVENTD_FAULT_HOOKS) hash new passwords with libsodium's minimum limits:
     * the site's answers then take about a millisecond instead of Argon2's interactive 64 MiB. */
    setenv("EVENTD_TEST_PWHASH_FAST", "1", 1);
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    allow_head_body = getenv("FUZZ_ALLOW_HEAD_BODY") != NULL;
    if (sodium_init() < 0) fuzz_die("sodium_init");
    if (crypto_pwhash_str(site_pw_hash, SITE_PASSWORD, strlen(SITE_PASSWORD),
                          crypto_pwhash_OPSLIMIT_MIN, crypto_pwhash_MEMLIMIT_MIN) != 0)
        fuzz_die("crypto_pwhash_str failed");
    static const char *users[2][2] = {{"fuzz:", KEY1}, {"other:", KEY2}};
    char *out[2] = {auth1, auth2};
    for (int i = 0; i < 2; i++) {
        char raw[64];
        int n = snprintf(raw, sizeof raw, "%s%s", users[i][0], users[i][1]);
        memcpy(out[i], "Basic ", 6);
        sodium_bin2base64(out[i] + 6, sizeof auth1 - 6, (unsigned char *)raw, (size_t)n,
                          sodium_base64_VARIANT_ORIGINAL);
    }
    stream = malloc(MAX_STREAM);
    got = malloc(MAX_RECV);
    fuzz_tmpdir(data_dir, sizeof data_dir, "http");
    atexit(cleanup);
    uv_loop_init(&loop);
    svc_start();
    return 0;
}

/* The placeholders: "@A1@", "@A2@" (Authorization values), "@S1@" (user web's session cookie,
 * for a Cookie header) and "@C1@" (its CSRF token, for a form's csrf field). */
static const char *placeholder(const uint8_t *p) {
    static const char cookie[] = "eventd_session=" SITE_USER ":" SITE_TOKEN;
    if (p[0] != '@' || p[3] != '@' || (p[2] != '1' && p[2] != '2')) return NULL;
    if (p[1] == 'A') return p[2] == '1' ? auth1 : auth2;
    if (p[2] != '1') return NULL;
    return p[1] == 'S' ? cookie : p[1] == 'C' ? SITE_CSRF : NULL;
}

/* Copies the stream, expanding the placeholders. Returns its length. */
static size_t expand(const uint8_t *p, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        const char *rep = n - i >= 4 ? placeholder(p + i) : NULL;
        size_t rlen = rep ? strlen(rep) : 1;
        if (len + rlen > MAX_STREAM) break;
        if (rep) {
            memcpy(stream + len, rep, rlen);
            i += 4;
        } else {
            stream[len] = (char)p[i++];
        }
        len += rlen;
    }
    return len;
}

/* ---- the socket ---- */

/*
 * One simulated connection at a time. The client's bytes are stream[0, sent)
 * so far, of which the server has read [0, read); what the server wrote is
 * got[0, got_len). Writes and shutdowns complete, and reads happen, only in
 * net_step, which the client calls between its actions: never inside a call
 * of the server, as libuv calls callbacks only from the loop.
 */
static struct sock {
    uv_stream_t *h; /* the server's end; NULL before the accept and after the close */
    bool accepting; /* the next uv_accept is ours */
    uv_alloc_cb alloc_cb;
    uv_read_cb read_cb;
    bool reading;
    size_t sent, read; /* client bytes sent so far, and read by the server */
    bool client_shut;  /* the client sent all and shut down its side */
    uv_write_t *wreq;  /* the server's write in flight (it has at most one) */
    char *wbuf;        /* ... its bytes, not yet received by the client */
    size_t wlen, wcap;
    uv_shutdown_t *sreq; /* the server's shutdown, once its writes are done */
    uv_close_cb close_cb;
    bool shut;      /* the server shut down its side (the client saw FIN) */
    bool closed;    /* the server closed the connection */
    bool reset;     /* ... with client bytes unread: a real socket would reset */
    bool cut;       /* ... with a write in flight, whose bytes never arrive */
    size_t bufsize; /* the send buffer's size, from the input */
    size_t unread;  /* bytes in it the client has not read yet */
    size_t got_len; /* bytes of got[] the client received */
} sk;

static uv_connection_cb on_connection; /* the server's, caught in uv_listen */

int __real_uv_listen(uv_stream_t *s, int backlog, uv_connection_cb cb);
int __real_uv_accept(uv_stream_t *server, uv_stream_t *client);
int __real_uv_read_start(uv_stream_t *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
int __real_uv_read_stop(uv_stream_t *s);
int __real_uv_try_write(uv_stream_t *s, const uv_buf_t bufs[], unsigned int nbufs);
int __real_uv_write(uv_write_t *req, uv_stream_t *s, const uv_buf_t bufs[], unsigned int nbufs,
                    uv_write_cb cb);
int __real_uv_shutdown(uv_shutdown_t *req, uv_stream_t *s, uv_shutdown_cb cb);
void __real_uv_close(uv_handle_t *h, uv_close_cb cb);

static void received(const char *p, size_t n) {
    if (n > MAX_RECV - sk.got_len) n = MAX_RECV - sk.got_len;
    memcpy(got + sk.got_len, p, n);
    sk.got_len += n;
}

int __wrap_uv_listen(uv_stream_t *s, int backlog, uv_connection_cb cb) {
    on_connection = cb;
    return __real_uv_listen(s, backlog, cb);
}

int __wrap_uv_accept(uv_stream_t *server, uv_stream_t *client) {
    if (!sk.accepting) return __real_uv_accept(server, client);
    sk.accepting = false;
    sk.h = client; /* a TCP handle without a descriptor: libuv closes it as such */
    return 0;
}

/* The simulated peer: 192.0.2.7:40000 (TEST-NET-1). A TCP peer whose address cannot be
 * read is never served (server.c), so the simulated connection must have one. */
int __real_uv_tcp_getpeername(const uv_tcp_t *h, struct sockaddr *name, int *namelen);
int __wrap_uv_tcp_getpeername(const uv_tcp_t *h, struct sockaddr *name, int *namelen) {
    if ((const uv_stream_t *)h != sk.h) return __real_uv_tcp_getpeername(h, name, namelen);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(40000)};
    sa.sin_addr.s_addr = htonl(0xc0000207);
    if (*namelen < (int)sizeof sa) return UV_EINVAL;
    memcpy(name, &sa, sizeof sa);
    *namelen = sizeof sa;
    return 0;
}

int __wrap_uv_read_start(uv_stream_t *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb) {
    if (s != sk.h) return __real_uv_read_start(s, alloc_cb, read_cb);
    if (sk.closed) return UV_EINVAL;
    sk.alloc_cb = alloc_cb;
    sk.read_cb = read_cb;
    sk.reading = true;
    return 0;
}

int __wrap_uv_read_stop(uv_stream_t *s) {
    if (s != sk.h) return __real_uv_read_stop(s);
    sk.reading = false;
    return 0;
}

/*
 * The kernel's send buffer, as Linux fills it: a write is taken while fewer
 * than sk.bufsize bytes wait unread, at most an skb (SKB) past that bound,
 * so a large write may be taken in part and a small one whole or not at all.
 * The client reads the buffer empty at every net_step.
 */
#define SKB 2048
int __wrap_uv_try_write(uv_stream_t *s, const uv_buf_t bufs[], unsigned int nbufs) {
    if (s != sk.h) return __real_uv_try_write(s, bufs, nbufs);
    if (sk.closed || sk.shut || sk.sreq) return UV_EPIPE;
    if (sk.wreq) return UV_EAGAIN; /* libuv: nothing may overtake a queued write */
    if (sk.unread >= sk.bufsize) return UV_EAGAIN;
    size_t total = 0;
    for (unsigned i = 0; i < nbufs; i++)
        total += bufs[i].len;
    size_t room = sk.bufsize + SKB - sk.unread;
    size_t take = total < room ? total : room, left = take;
    for (unsigned i = 0; i < nbufs && left; i++) {
        size_t n = bufs[i].len < left ? bufs[i].len : left;
        received(bufs[i].base, n);
        left -= n;
    }
    sk.unread += take;
    return (int)take;
}

int __wrap_uv_write(uv_write_t *req, uv_stream_t *s, const uv_buf_t bufs[], unsigned int nbufs,
                    uv_write_cb cb) {
    if (s != sk.h) return __real_uv_write(req, s, bufs, nbufs, cb);
    if (sk.closed || sk.shut || sk.sreq) return UV_EPIPE;
    if (sk.wreq) fuzz_die("the server started a second write before the first completed");
    sk.wlen = 0;
    for (unsigned i = 0; i < nbufs; i++) {
        if (sk.wlen + bufs[i].len > sk.wcap) {
            sk.wcap = (sk.wlen + bufs[i].len) * 2;
            sk.wbuf = realloc(sk.wbuf, sk.wcap);
        }
        memcpy(sk.wbuf + sk.wlen, bufs[i].base, bufs[i].len);
        sk.wlen += bufs[i].len;
    }
    req->type = UV_WRITE;
    req->handle = s;
    req->cb = cb;
    sk.wreq = req;
    return 0;
}

int __wrap_uv_shutdown(uv_shutdown_t *req, uv_stream_t *s, uv_shutdown_cb cb) {
    if (s != sk.h) return __real_uv_shutdown(req, s, cb);
    if (sk.closed || sk.shut || sk.sreq) return UV_ENOTCONN;
    req->type = UV_SHUTDOWN;
    req->handle = s;
    req->cb = cb;
    sk.sreq = req;
    return 0;
}

/* libuv's order when a stream closes: its pending requests get UV_ECANCELED, then close_cb. */
static void on_sock_closed(uv_handle_t *h) {
    if (sk.wreq) {
        uv_write_t *req = sk.wreq;
        sk.wreq = NULL; /* its bytes never reach the client */
        sk.cut = true;
        req->cb(req, UV_ECANCELED);
    }
    if (sk.sreq) {
        uv_shutdown_t *req = sk.sreq;
        sk.sreq = NULL;
        req->cb(req, UV_ECANCELED);
    }
    sk.h = NULL;
    if (sk.close_cb) sk.close_cb(h);
}

void __wrap_uv_close(uv_handle_t *h, uv_close_cb cb) {
    if (!sk.h || h != (uv_handle_t *)sk.h) {
        __real_uv_close(h, cb);
        return;
    }
    sk.closed = true;
    sk.reading = false;
    sk.reset = sk.read < sk.sent;
    sk.close_cb = cb;
    __real_uv_close(h, on_sock_closed);
}

/*
 * One turn of the network: the server's write in flight reaches the client
 * (then its shutdown), and the server reads what the client has sent, or
 * its end, while it is reading. Returns whether anything happened.
 */
static bool net_step(void) {
    bool moved = false;
    sk.unread = 0;
    if (sk.wreq && !sk.closed) {
        uv_write_t *req = sk.wreq;
        received(sk.wbuf, sk.wlen);
        sk.wreq = NULL;
        req->cb(req, 0);
        moved = true;
    } else if (sk.sreq && !sk.closed) {
        uv_shutdown_t *req = sk.sreq;
        sk.sreq = NULL;
        sk.shut = true;
        req->cb(req, 0);
        moved = true;
    }
    for (int i = 0; i < 64 && sk.h && sk.reading && !sk.closed; i++) {
        if (sk.read == sk.sent && !sk.client_shut) break;
        uv_stream_t *h = sk.h;
        uv_buf_t b = uv_buf_init(NULL, 0);
        sk.alloc_cb((uv_handle_t *)h, 65536, &b);
        if (!b.base || b.len == 0) fuzz_die("the server's alloc callback gave no buffer");
        moved = true;
        if (sk.read == sk.sent) {
            sk.reading = false; /* libuv stops reading at the end of the stream */
            sk.read_cb(h, UV_EOF, &b);
            break;
        }
        size_t n = sk.sent - sk.read < b.len ? sk.sent - sk.read : b.len;
        memcpy(b.base, stream + sk.read, n);
        sk.read += n;
        sk.read_cb(h, (ssize_t)n, &b);
    }
    return moved;
}

/* ---- what the server was asked ---- */

/*
 * The requests in the stream, as the server's own parser (http.h) reads them
 * with the server's limits: the method of each, and whether it was complete.
 * Response i answers request i.
 */
struct requests {
    unsigned n;
    uint8_t method[MAX_REQUESTS];
    bool complete[MAX_REQUESTS];
    bool cut_short; /* the stream ends inside a request (its head may be incomplete) */
};

static int rq_headers(void *owner, struct http_request *req) {
    struct requests *r = owner;
    if (r->n < MAX_REQUESTS) {
        r->method[r->n] = req->method;
        r->complete[r->n] = false;
    }
    r->n++;
    return 0;
}

static void rq_body(void *owner, struct http_request *req, const char *ptr, size_t len) {}

static bool rq_complete(void *owner, struct http_request *req) {
    struct requests *r = owner;
    if (r->n - 1 < MAX_REQUESTS) r->complete[r->n - 1] = true;
    return false;
}

static void list_requests(const char *p, size_t n, struct requests *out) {
    static const struct http_limits limits = {MAX_HEADER_BYTES, MAX_BODY_BYTES};
    static const struct http_events ev = {rq_headers, rq_body, rq_complete};
    struct http_parser parser;
    out->n = 0;
    http_parser_init(&parser, &limits, &ev, out);
    size_t used;
    enum http_status st = http_parser_execute(&parser, p, n, &used);
    out->cut_short = st == HTTP_OK && parser.in_message;
    http_parser_destroy(&parser);
}

/* ---- checking the responses (http_check.c) ---- */

static void check_responses(size_t sent) {
    static struct requests rq;
    list_requests(stream, sent, &rq);
    size_t pos = 0;
    unsigned n = 0;
    while (pos < sk.got_len) {
        bool close = false, interim = false;
        size_t at = pos;
        /* An error answer may end a request cut short: only complete ones are held to HEAD. */
        int head = !allow_head_body && n < rq.n && n < MAX_REQUESTS && rq.method[n] == HTTP_HEAD
                       ? (rq.complete[n] ? 1 : 2)
                       : 0;
        if (n > rq.n)
            fuzz_die("%u responses to %u requests:\n%.*s", n + 1, rq.n,
                     (int)(sk.got_len > 2000 ? 2000 : sk.got_len), got);
        const char *why = http_check_response(got, sk.got_len, &pos, head, &close, &interim);
        /* A reset may cut off what was still in flight; what arrived must be well-formed. */
        if (why && sk.reset && strstr(why, "short")) return;
        if (why)
            fuzz_die("response %u (offset %zu of %zu received, %zu sent): %s\n%.*s", n, at,
                     sk.got_len, sent, why, (int)(sk.got_len - at > 2000 ? 2000 : sk.got_len - at),
                     got + at);
        if (close && pos != sk.got_len)
            fuzz_die("%zu bytes after a Connection: close response:\n%.*s", sk.got_len - pos,
                     (int)(sk.got_len - pos > 2000 ? 2000 : sk.got_len - pos), got + pos);
        n += !interim;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return -1;
    size_t max_piece = data[0];
    uint64_t rng = data[1] * 0x9E3779B97F4A7C15ull + 1;
    size_t len = expand(data + 2, size - 2);

    char *wbuf = sk.wbuf; /* kept from input to input */
    size_t wcap = sk.wcap;
    memset(&sk, 0, sizeof sk);
    sk.wbuf = wbuf;
    sk.wcap = wcap;
    /* Byte 1's top bits: a send buffer of 2 KiB to 256 KiB (real ones are 16 KiB to 4 MiB). */
    sk.bufsize = (size_t)2048 << (data[1] >> 5);
    svc_prepare();
    sk.accepting = true;
    on_connection((uv_stream_t *)&srv.listener, 0);
    if (!sk.h) fuzz_die("the server did not accept the connection");

    /* The client sends its pieces; the server reads each while it is reading (else they wait
     * in the "socket", as in the kernel's buffer). */
    while (sk.sent < len && !sk.closed) {
        size_t n = len - sk.sent;
        if (max_piece) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t piece = 1 + (size_t)(rng % max_piece);
            if (piece < n) n = piece;
        }
        sk.sent += n;
        net_step();
    }
    /* Sending to a closed connection: the client would get a reset. */
    if (sk.closed && sk.sent < len) sk.reset = true;
    sk.client_shut = true;
    uint64_t start = uv_hrtime();
    unsigned turns = 0;
    while (turns < MAX_TURNS && svc_connections() > 0) {
        bool moved = net_step(), blocked = !moved && svc_hashing();
        if (blocked)
            uv_run(&loop, UV_RUN_ONCE); /* waiting for the threadpool is not a turn */
        else if (!moved)
            uv_run(&loop, UV_RUN_NOWAIT);
        turns += !blocked;
        if ((blocked || (turns & 1023) == 1023) && uv_hrtime() - start > (uint64_t)MAX_MS * 1000000)
            break;
    }
    if (svc_connections() > 0)
        fuzz_die("the server neither answered nor closed the connection within %d ms / %d loop "
                 "turns (%zu bytes received, %s)",
                 MAX_MS, MAX_TURNS, sk.got_len,
                 sk.closed ? "closed"
                 : sk.shut ? "shut down"
                           : "open");
    /* A hash whose connection closed first answers nobody; it still ends before the next input
     * (which might restart the server). */
    if (!svc_wait_hashes()) fuzz_die("a password hash did not finish within %d ms", MAX_MS);
    if (verbose)
        fprintf(stderr, "---- %zu bytes received%s:\n%.*s\n", sk.got_len,
                sk.reset ? " (then a reset)" : "", (int)sk.got_len, got);
    check_responses(len);

    if (svc_too_big()) {
        if (verbose) fprintf(stderr, "---- restarting the server on an empty data directory\n");
        svc_stop();
        fuzz_empty_dir(data_dir);
        svc_start();
    }
    return 0;
}
