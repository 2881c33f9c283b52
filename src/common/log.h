/*
 * log: one LOG(level, fmt, ...) macro writing timestamped lines to stderr.
 * Formatting is skipped below the threshold. Never log keys, passwords or bodies.
 */
#ifndef EVENTD_LOG_H
#define EVENTD_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };

extern enum log_level log_threshold;

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * fn(ctx) runs before each log line written on the thread that called this
 * one (the loop's): the access log (src/http/access_log.h) writes its
 * buffered lines there first, so that stderr keeps the order in which things
 * happened. Lines of other threads skip it. NULL: none. fn must not log.
 */
void log_before_write(void (*fn)(void *ctx), void *ctx);
/* Parses "debug", "info", "warn", "error" or "off"; returns 0 or -1. */
int log_level_parse(const char *s, enum log_level *out);

#define LOG(level, ...)                                                                            \
    do {                                                                                           \
        if ((level) >= log_threshold) log_write((level), __VA_ARGS__);                             \
    } while (0)

#endif
