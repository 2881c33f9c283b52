/* access_log: see access_log.h. */
#include "access_log.h"

#include <errno.h>
#include <llhttp.h>
#include <string.h>
#include <unistd.h>

#define WRITE_TRIES 64 /* a descriptor that keeps refusing (EAGAIN) loses the batch */

static void on_prepare(uv_prepare_t *p) {
    struct access_log *al = p->data;
    access_log_flush(al);
    uv_prepare_stop(p);
    al->armed = false;
}

void access_log_init(struct access_log *al, uv_loop_t *loop, int fd, bool on) {
    memset(al, 0, sizeof *al);
    al->fd = fd;
    al->on = on;
    buf_init(&al->pending, on ? ACCESS_LOG_BATCH * 2 : 0);
    if (loop) {
        uv_prepare_init(loop, &al->prepare);
        al->prepare.data = al;
        /* The flush alone never keeps the loop running. */
        uv_unref((uv_handle_t *)&al->prepare);
        al->has_handle = true;
    }
}

void access_log_flush(struct access_log *al) {
    const char *p = al->pending.ptr;
    size_t left = al->pending.len;
    for (int tries = 0; left && tries < WRITE_TRIES; tries++) {
        ssize_t n = write(al->fd, p, left);
        if (n > 0) {
            p += n;
            left -= (size_t)n;
            tries = 0;
        } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
            break;
        }
    }
    if (left) al->dropped++;
    buf_reset(&al->pending);
}

void access_log_close(struct access_log *al) {
    access_log_flush(al);
    if (al->has_handle) uv_close((uv_handle_t *)&al->prepare, NULL);
    al->has_handle = al->armed = false;
    buf_destroy(&al->pending);
}

void access_log_escape(struct buf *out, struct slice s, size_t max) {
    static const char hex[] = "0123456789abcdef";
    /* At most 6 output bytes per input byte; reserve once, cut at max. */
    size_t room = s.len * 6 < max ? s.len * 6 : max;
    char *o = buf_reserve(out, room), *start = o, *end = o + room;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            if (o + 1 > end) break;
            *o++ = (char)c;
        } else if (c == '"' || c == '\\') {
            if (o + 2 > end) break;
            *o++ = '\\';
            *o++ = (char)c;
        } else {
            if (o + 6 > end) break;
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
    }
    buf_commit(out, (size_t)(o - start));
}

static void put_lit(struct buf *b, const char *s, size_t n) {
    buf_append(b, s, n);
}
#define PUT(b, lit) put_lit((b), (lit), sizeof(lit) - 1)

static void put_u64(struct buf *b, uint64_t v) {
    char *o = buf_reserve(b, 20);
    buf_commit(b, u64_digits(v, o));
}

static void put_addr(struct buf *b, uint8_t family, const uint8_t *a) {
    if (family == 4) {
        char *o = buf_reserve(b, 15), *start = o;
        for (int i = 0; i < 4; i++) {
            if (i) *o++ = '.';
            o += u64_digits(a[i], o);
        }
        buf_commit(b, (size_t)(o - start));
    } else if (family == 6) {
        char tmp[48];
        if (uv_inet_ntop(AF_INET6, a, tmp, sizeof tmp) == 0) buf_append_str(b, tmp);
    } else {
        PUT(b, "local");
    }
}

/* The second's timestamp, formatted once per second. */
static const char *now_str(struct access_log *al) {
    time_t now = time(NULL);
    if (now != al->time_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(al->time_str, sizeof al->time_str, "%Y-%m-%dT%H:%M:%SZ", &tm);
        al->time_at = now;
    }
    return al->time_str;
}

void access_log_write(struct access_log *al, const struct access_entry *e) {
    if (!al->on) return;
    struct buf *b = &al->pending;
    PUT(b, "{\"time\":\"");
    put_lit(b, now_str(al), 20);
    PUT(b, "\",\"method\":\"");
    if (e->method)
        buf_append_str(b, llhttp_method_name((llhttp_method_t)(e->method - 1)));
    else
        PUT(b, "-");
    PUT(b, "\",\"path\":\"");
    access_log_escape(b, e->path, ACCESS_LOG_PATH_MAX);
    PUT(b, "\",\"status\":");
    put_u64(b, e->status);
    PUT(b, ",\"bytes\":");
    put_u64(b, e->bytes);
    PUT(b, ",\"us\":");
    put_u64(b, e->us);
    PUT(b, ",\"user_id\":");
    put_u64(b, e->user_id);
    PUT(b, ",\"request_id\":\"");
    access_log_escape(b, e->request_id, 6 * 64);
    PUT(b, "\",\"client\":\"");
    put_addr(b, e->family, e->addr);
    PUT(b, "\"}\n");
    if (b->len >= ACCESS_LOG_BATCH || !al->has_handle) {
        access_log_flush(al);
    } else if (!al->armed) {
        uv_prepare_start(&al->prepare, on_prepare);
        al->armed = true;
    }
}
