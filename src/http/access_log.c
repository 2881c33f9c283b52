/* access_log: see access_log.h. */
#include "http/access_log.h"

#include <errno.h>
#include <limits.h>
#include <llhttp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WRITE_TRIES 64  /* a descriptor that keeps refusing (EAGAIN) loses the batch */
#define BUFFER_MIN 4096 /* the least --access-log-buffer-bytes the buffer is given */

/* The longest line: the fixed text, a method name, the escaped path and
 * request id, four numbers, an IPv6 address. */
#define LINE_BYTES_MAX (160 + 32 + ACCESS_LOG_PATH_MAX + 64 + 4 * 20 + 48)
_Static_assert(LINE_BYTES_MAX < PIPE_BUF, "a line fits in one atomic pipe write");

/*
 * Writes the whole lines at p (left bytes); returns the bytes not written. To
 * a pipe, FIFO or socket a write takes at most PIPE_BUF bytes, cut after a
 * line's newline (a line is shorter than PIPE_BUF, so one is always found):
 * POSIX makes such a write atomic, so the lines never interleave with another
 * writer's. Async-signal-safe (write, memrchr), for on_fatal.
 */
static size_t write_lines(struct access_log *al, const char *p, size_t left) {
    int tries = 0;
    while (left) {
        size_t n = left;
        if (al->atomic_cap && n > PIPE_BUF) {
            const char *nl = memrchr(p, '\n', PIPE_BUF);
            n = nl ? (size_t)(nl - p) + 1 : PIPE_BUF;
        }
        ssize_t w = write(al->fd, p, n);
        al->writes++;
        if (w > 0) {
            p += w;
            left -= (size_t)w;
            tries = 0;
        } else if (!(w < 0 && (errno == EINTR || errno == EAGAIN) && ++tries < WRITE_TRIES)) {
            break;
        }
    }
    return left;
}

void access_log_flush(struct access_log *al) {
    if (!al->pending.len) return;
    size_t left = write_lines(al, al->pending.ptr, al->pending.len);
    char *from = al->pending.ptr + al->pending.len - left, *end = from + left;
    /* A stream socket (journald's) may take part of a line: the rest of that line is
     * kept, to be written first next time, so that no line is torn. */
    size_t keep = 0;
    if (left && from > al->pending.ptr && from[-1] != '\n') {
        char *nl = memchr(from, '\n', left);
        keep = nl ? (size_t)(nl - from) + 1 : left;
        from += keep;
    }
    /* The lines refused (the descriptor is full or closed) are counted, then let go. */
    for (const char *p = from; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
        al->dropped++;
    memmove(al->pending.ptr, end - left, keep);
    al->pending.len = keep;
}

static void on_timer(uv_timer_t *t) {
    struct access_log *al = t->data;
    al->armed = false;
    access_log_flush(al);
}

static void on_prepare(uv_prepare_t *p) {
    struct access_log *al = p->data;
    access_log_flush(al);
    uv_prepare_stop(p);
    al->armed = false;
}

void access_log_init(struct access_log *al, uv_loop_t *loop, int fd,
                     const struct access_log_settings *s) {
    memset(al, 0, sizeof *al);
    al->fd = fd;
    al->on = s->on;
    al->flush_ms = s->flush_ms;
    al->limit = s->buffer_bytes < BUFFER_MIN ? BUFFER_MIN : s->buffer_bytes;
    /* A pipe, FIFO or socket (or a descriptor fstat cannot tell) gets PIPE_BUF
     * pieces; a regular file, a terminal or /dev/null takes the whole buffer: a
     * write to them is never split around another writer's. */
    struct stat st;
    al->atomic_cap = fstat(fd, &st) < 0 || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
    /* Flushed at limit, so a line always fits: the buffer never grows. */
    buf_init(&al->pending, al->on ? al->limit + LINE_BYTES_MAX : 0);
    if (!loop || !al->on) return;
    uv_handle_t *h;
    if (al->flush_ms) {
        uv_timer_init(loop, &al->timer);
        al->timer.data = al;
        h = (uv_handle_t *)&al->timer;
    } else {
        uv_prepare_init(loop, &al->prepare);
        al->prepare.data = al;
        h = (uv_handle_t *)&al->prepare;
    }
    /* The flush alone never keeps the loop running. */
    uv_unref(h);
    al->has_handle = true;
}

/* The log whose lines a dying process writes first (one per process). */
static struct access_log *volatile fatal_log;
static const int fatal_signals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};

/* The handler is reset to the default as it runs (SA_RESETHAND), so the signal
 * raised again, blocked until the handler returns, then ends the process. */
static void on_fatal(int sig) {
    int saved = errno;
    struct access_log *al = fatal_log;
    fatal_log = NULL;
    if (al && al->pending.len) write_lines(al, al->pending.ptr, al->pending.len);
    raise(sig);
    errno = saved;
}

void access_log_catch_fatal(struct access_log *al) {
    fatal_log = al;
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(fatal_signals[i], NULL, &old) < 0) continue;
        bool ours = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == on_fatal;
        bool dfl = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
        if (al ? !dfl : !ours) continue;
        memset(&sa, 0, sizeof sa);
        sigemptyset(&sa.sa_mask);
        sa.sa_handler = al ? on_fatal : SIG_DFL;
        sa.sa_flags = al ? SA_RESETHAND : 0;
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

void access_log_close(struct access_log *al) {
    if (fatal_log == al) access_log_catch_fatal(NULL);
    access_log_flush(al);
    if (al->has_handle)
        uv_close(al->flush_ms ? (uv_handle_t *)&al->timer : (uv_handle_t *)&al->prepare, NULL);
    al->has_handle = al->armed = false;
    buf_destroy(&al->pending);
}

/* Bytes that go into a JSON string as they are: printable ASCII but '"' (0x22)
 * and '\\' (0x5c). A table: the path is scanned byte by byte on every line. */
static const uint8_t plain_tbl[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, /* 0x70 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x80 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x90 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xa0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xb0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xc0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xd0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xe0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xf0 */
};

/* Whether the eight bytes of w are all plain: none below 0x20 or above 0x7e,
 * none '"' or '\\' (the usual tests for a zero or a smaller byte in a word,
 * exact when asking whether there is one). */
static bool plain_word(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    uint64_t bad =
        ((w - ones * 0x20) & ~w) | ((w + ones) & highs) | w | ((q - ones) & ~q) | ((b - ones) & ~b);
    return !(bad & highs);
}

/* Writes the escaped s at o, at most max bytes, never cutting an escape; returns the end. */
static char *escape_to(char *o, struct slice s, size_t max) {
    static const char hex[] = "0123456789abcdef";
    char *end = o + max;
    size_t i = 0;
    /* Eight bytes at a time while they are all plain (the usual path). */
    uint64_t w;
    while (i + 8 <= s.len && end - o >= 8) {
        memcpy(&w, s.ptr + i, 8);
        if (!plain_word(w)) break;
        memcpy(o, &w, 8);
        o += 8;
        i += 8;
    }
    /* Fewer than eight left after plain words: the last eight bytes, if
     * plain, go as one word over the copy of the ones before them. */
    if (i < s.len && i >= 8 && i + 8 > s.len && (size_t)(end - o) >= s.len - i) {
        memcpy(&w, s.ptr + s.len - 8, 8);
        if (plain_word(w)) {
            memcpy(o - (i + 8 - s.len), &w, 8);
            return o + (s.len - i);
        }
    }
    while (i < s.len) {
        /* The common case: a run of plain bytes, copied at once. */
        size_t j = i;
        while (j < s.len && plain_tbl[(unsigned char)s.ptr[j]])
            j++;
        size_t run = j - i;
        if (run > (size_t)(end - o)) run = (size_t)(end - o);
        memcpy(o, s.ptr + i, run);
        o += run;
        if (j == s.len || i + run < j) break;
        unsigned char c = (unsigned char)s.ptr[j];
        if (c == '"' || c == '\\') {
            if (end - o < 2) break;
            *o++ = '\\';
            *o++ = (char)c;
        } else {
            if (end - o < 6) break;
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
        i = j + 1;
    }
    return o;
}

void access_log_escape(struct buf *out, struct slice s, size_t max) {
    size_t room = s.len * 6 < max ? s.len * 6 : max;
    char *o = buf_reserve(out, room);
    buf_commit(out, (size_t)(escape_to(o, s, room) - o));
}

/* The decimal digits of v at o, two at a time, written in place from the
 * end once their count is known; returns the end. */
static char *put_u64(char *o, uint64_t v) {
    static const char pairs[] = "00010203040506070809101112131415161718192021222324"
                                "25262728293031323334353637383940414243444546474849"
                                "50515253545556575859606162636465666768697071727374"
                                "75767778798081828384858687888990919293949596979899";
    /* Most numbers here (status, bytes, microseconds, ids) have 1 to 4 digits. */
    if (v < 100) {
        if (v < 10) {
            *o = (char)('0' + v);
            return o + 1;
        }
        memcpy(o, pairs + 2 * v, 2);
        return o + 2;
    }
    if (v < 10000) {
        unsigned hi = (unsigned)v / 100, lo = (unsigned)v % 100;
        if (hi < 10) {
            *o = (char)('0' + hi);
            memcpy(o + 1, pairs + 2 * lo, 2);
            return o + 3;
        }
        memcpy(o, pairs + 2 * hi, 2);
        memcpy(o + 2, pairs + 2 * lo, 2);
        return o + 4;
    }
    size_t n = 5;
    for (uint64_t p = 100000; n < 20 && v >= p; p *= 10)
        n++;
    char *end = o + n, *t = end;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        t -= 2;
        memcpy(t, pairs + 2 * r, 2);
    }
    if (v >= 10)
        memcpy(t - 2, pairs + 2 * v, 2);
    else
        t[-1] = (char)('0' + v);
    return end;
}

#define PUT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)

static char *format_addr(char *o, uint8_t family, const uint8_t *a) {
    if (family == 4) {
        for (int i = 0; i < 4; i++) {
            if (i) *o++ = '.';
            o += u64_digits(a[i], o);
        }
    } else if (family == 6) {
        char tmp[48];
        if (uv_inet_ntop(AF_INET6, a, tmp, sizeof tmp) == 0) {
            size_t n = strlen(tmp);
            memcpy(o, tmp, n);
            o += n;
        }
    } else {
        o = PUT(o, "local");
    }
    return o;
}

/* The peer's address as text; the last one is kept, since a server mostly
 * sees a few clients (or one load balancer) many times in a row. */
static char *put_addr(struct access_log *al, char *o, uint8_t family, const uint8_t *a) {
    size_t alen = family == 4 ? 4 : family == 6 ? 16 : 0;
    bool same = al->addr_len && family == al->addr_family &&
                (family == 4 ? memcmp(a, al->addr, 4) == 0 : memcmp(a, al->addr, alen) == 0);
    if (!same) {
        al->addr_family = family;
        memcpy(al->addr, a, alen);
        al->addr_len = (uint8_t)(format_addr(al->addr_str, family, a) - al->addr_str);
    }
    /* The whole array: a copy of known size, and the line's reservation has
     * room for the longest address; the bytes after it are overwritten. */
    memcpy(o, al->addr_str, sizeof al->addr_str);
    return o + al->addr_len;
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
    /* Hot path: one reservation, then plain stores (no append per field). */
    char *o = buf_reserve(&al->pending, LINE_BYTES_MAX), *start = o;
    o = PUT(o, "{\"time\":\"");
    memcpy(o, now_str(al), 20);
    o += 20;
    o = PUT(o, "\",\"method\":\"");
    if (e->method == HTTP_GET + 1) {
        o = PUT(o, "GET");
    } else if (e->method == HTTP_POST + 1) {
        o = PUT(o, "POST");
    } else if (e->method) {
        const char *m = llhttp_method_name((llhttp_method_t)(e->method - 1));
        size_t n = strnlen(m, 32);
        memcpy(o, m, n);
        o += n;
    } else {
        *o++ = '-';
    }
    o = PUT(o, "\",\"path\":\"");
    o = escape_to(o, e->path, ACCESS_LOG_PATH_MAX);
    o = PUT(o, "\",\"status\":");
    o = put_u64(o, e->status);
    o = PUT(o, ",\"bytes\":");
    o = put_u64(o, e->bytes);
    o = PUT(o, ",\"us\":");
    o = put_u64(o, e->us);
    o = PUT(o, ",\"user_id\":");
    o = put_u64(o, e->user_id);
    o = PUT(o, ",\"request_id\":\"");
    size_t rid = e->request_id.len < 64 ? e->request_id.len : 64;
    memcpy(o, e->request_id.ptr, rid); /* [A-Za-z0-9._:-] only: nothing to escape */
    o += rid;
    o = PUT(o, "\",\"client\":\"");
    o = put_addr(al, o, e->family, e->addr);
    o = PUT(o, "\"}\n");
    buf_commit(&al->pending, (size_t)(o - start));
    if (al->pending.len >= al->limit || !al->has_handle) {
        access_log_flush(al);
    } else if (!al->armed) {
        /* Started once per batch, when the buffer goes from empty to not: a busy
         * server starts the timer once an interval, not once a line. */
        al->armed = true;
        if (al->flush_ms)
            uv_timer_start(&al->timer, on_timer, al->flush_ms, 0);
        else
            uv_prepare_start(&al->prepare, on_prepare);
    }
}
