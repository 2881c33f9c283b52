/* log: stderr lines "2026-11-22T16:43:10Z warn message". */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum log_level log_threshold = LOG_INFO;

static const char *names[] = {"debug", "info", "warn", "error", "off"};

/* Set on one thread, read on any that logs: fn is stored last (and cleared first). */
static void (*_Atomic before_fn)(void *ctx);
static void *before_ctx;
static pthread_t before_thread;

void log_before_write(void (*fn)(void *ctx), void *ctx) {
    before_fn = NULL;
    before_ctx = ctx;
    before_thread = pthread_self();
    before_fn = fn;
}

void log_write(enum log_level level, const char *fmt, ...) {
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);

    char line[1024];
    int n = snprintf(line, sizeof line, "%s %s ", ts, names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    void (*fn)(void *ctx) = before_fn;
    if (fn && pthread_equal(pthread_self(), before_thread)) fn(before_ctx);
    fprintf(stderr, "%s\n", line);
}

int log_level_parse(const char *s, enum log_level *out) {
    for (int i = 0; i <= LOG_OFF; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}
