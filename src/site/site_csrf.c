/*
 * site_csrf: the server secret, the CSRF token of the forms shown before
 * sign-in, and the Origin check of every form post (site_internal.h).
 *
 * Before sign-in there is no session to bind a token to, so the form's page
 * sets a cookie of 256 random bits and puts in the form the MAC of that
 * cookie under the server secret (crypto_auth, HMAC-SHA-512-256). A post
 * passes only with a form token that the server made for its cookie: a
 * cookie planted by another page (another port of the same host, a sibling
 * host: cookies are not isolated by port) with a matching made-up form
 * value fails. A planted pair the server did make (the attacker fetched the
 * form) is what the Origin check is for: a browser sends Origin (and
 * Sec-Fetch-Site) on every form post, and another origin's post is refused.
 *
 * The secret lives in a file (DATA/site.key, or --site-secret-file), made
 * 0600 at the first start: open sign-in forms survive a restart, and shards
 * behind one balancer share it, since a form fetched from one shard is
 * posted to another (docs/SCALING.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "site/site_internal.h"

#define SECRET_HEX (2 * sizeof(((struct handlers *)0)->site_secret))

_Static_assert(sizeof(((struct handlers *)0)->site_secret) == crypto_auth_KEYBYTES,
               "the secret is a crypto_auth key");

static int read_secret(struct handlers *h, int fd, const char *path, char *msg, size_t msg_len) {
    char text[SECRET_HEX + 8];
    ssize_t n;
    do
        n = read(fd, text, sizeof text);
    while (n < 0 && errno == EINTR);
    size_t len = n > 0 ? (size_t)n : 0;
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    size_t got = 0;
    if (n < 0 || len != SECRET_HEX ||
        sodium_hex2bin(h->site_secret, sizeof h->site_secret, text, len, NULL, &got, NULL) != 0 ||
        got != sizeof h->site_secret) {
        snprintf(msg, msg_len, "site secret %s: %s", path,
                 n < 0 ? strerror(errno) : "not 64 hex digits (make one: openssl rand -hex 32)");
        sodium_memzero(text, sizeof text);
        return -1;
    }
    sodium_memzero(text, sizeof text);
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077))
        LOG(LOG_WARN, "site secret %s is readable by others (mode %03o): chmod 600 it", path,
            (unsigned)(st.st_mode & 0777));
    return 0;
}

/* Writes a new secret to a private temporary file and links it into place,
 * so a crash leaves no half-written secret and a second creator (a shard
 * starting at the same moment on a shared file) loses the race cleanly. */
static int create_secret(struct handlers *h, const char *path, char *msg, size_t msg_len) {
    char tmp[4200], hex[SECRET_HEX + 2];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) goto fail;
    randombytes_buf(h->site_secret, sizeof h->site_secret);
    sodium_bin2hex(hex, sizeof hex, h->site_secret, sizeof h->site_secret);
    hex[SECRET_HEX] = '\n';
    ssize_t n;
    do
        n = write(fd, hex, SECRET_HEX + 1);
    while (n < 0 && errno == EINTR);
    sodium_memzero(hex, sizeof hex);
    if (n != (ssize_t)SECRET_HEX + 1 || fsync(fd) < 0) {
        if (n >= 0 && n != (ssize_t)SECRET_HEX + 1) errno = EIO;
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        goto fail;
    }
    close(fd);
    int rc = link(tmp, path), e = errno;
    unlink(tmp);
    if (rc < 0 && e == EEXIST) return 1; /* someone else made it: read theirs */
    if (rc < 0) {
        errno = e;
        goto fail;
    }
    LOG(LOG_INFO, "site secret: created %s", path);
    return 0;
fail:
    snprintf(msg, msg_len, "site secret %s: cannot create it: %s", path, strerror(errno));
    return -1;
}

int site_secret_init(struct handlers *h, const char *path, char *msg, size_t msg_len) {
    if (!path || !*path) {
        randombytes_buf(h->site_secret, sizeof h->site_secret);
        return 0;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            int rc = read_secret(h, fd, path, msg, msg_len);
            close(fd);
            return rc;
        }
        if (errno != ENOENT) {
            snprintf(msg, msg_len, "site secret %s: %s", path, strerror(errno));
            return -1;
        }
        int rc = create_secret(h, path, msg, msg_len);
        if (rc <= 0) return rc;
    }
    snprintf(msg, msg_len, "site secret %s: made and gone again", path);
    return -1;
}

void site_csrf_form_token(const struct handlers *h, const char *cookie,
                          char out[SITE_TOKEN_CHARS + 1]) {
    /* The label keeps this MAC from ever meaning anything else under the key. */
    static const char label[] = "eventd pre-sign-in csrf v1:";
    unsigned char in[sizeof label - 1 + SITE_TOKEN_CHARS];
    memcpy(in, label, sizeof label - 1);
    memcpy(in + sizeof label - 1, cookie, SITE_TOKEN_CHARS);
    unsigned char mac[crypto_auth_BYTES];
    crypto_auth(mac, in, sizeof in, h->site_secret);
    sodium_bin2base64(out, SITE_TOKEN_CHARS + 1, mac, sizeof mac,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

bool site_csrf_pre_ok(const struct handlers *h, const struct http_request *req, struct slice got) {
    struct slice c = site_cookie(h, req, SITE_COOKIE_CSRF);
    if (c.len != SITE_TOKEN_CHARS || got.len != SITE_TOKEN_CHARS) return false;
    char want[SITE_TOKEN_CHARS + 1];
    site_csrf_form_token(h, c.ptr, want);
    return sodium_memcmp(want, got.ptr, SITE_TOKEN_CHARS) == 0;
}

const char *site_origin_setting_check(const char *o) {
    if (!o || !*o) return NULL;
    size_t sl = strncmp(o, "https://", 8) == 0 ? 8 : strncmp(o, "http://", 7) == 0 ? 7 : 0;
    if (!sl) return "is not https://HOST[:PORT] or http://HOST[:PORT]";
    if (!o[sl] || strlen(o) > 255) return "needs a host (and at most 255 characters)";
    for (const char *p = o + sl; *p; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == '@' || *p <= ' ' || *p == 0x7f)
            return "must be the scheme, the host and the port only, as browsers send Origin";
    return NULL;
}
