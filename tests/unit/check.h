/*
 * check: the assert macros and the case runner of the unit tests (libuv's
 * test/task.h and TEST_IMPL are the model).
 *
 * A test file is a table of named cases, each a void function:
 *
 *     static void test_put_get(void) { CHECK_EQ_INT(1 + 1, 2); }
 *     static const struct check_case cases[] = {CHECK_CASE(test_put_get)};
 *     int main(int argc, char **argv) { return check_run(argc, argv, cases, CHECK_COUNT(cases)); }
 *
 * check_run runs every case in a child process of its own, so a failed
 * CHECK (which prints file:line, the expression and both sides, then ends
 * the child with status 1), a crash or a hang in one case never stops the
 * others, and no case sees what an earlier one left behind (environment,
 * globals, open stores). It prints PASS or FAIL with each case's name and
 * returns non-zero if any case failed or none ran. A case marked with
 * CHECK_CASE_XFAIL is expected to fail (a known bug, named in the mark).
 *
 *   ./test_x name...    runs only the named cases
 *   CHECK_NOFORK=1      runs the cases in this process (for a debugger); the first failure ends it
 *   CHECK_TIMEOUT=s     seconds a case may take before it is killed and fails (default 60)
 */
#ifndef EVENTD_CHECK_H
#define EVENTD_CHECK_H

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* _exit, not exit: a failed case stops where it is, and the leak checker
 * does not add a report of everything the case had not freed yet. */
#define CHECK_FAIL_(...)                                                                           \
    do {                                                                                           \
        fflush(stdout);                                                                            \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        _exit(1);                                                                                  \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) CHECK_FAIL_("CHECK(%s) failed", #cond);                                       \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                                           \
        if (a_ != b_) CHECK_FAIL_("%s == %s failed: %" PRIdMAX " != %" PRIdMAX, #a, #b, a_, b_);   \
    } while (0)

/* For uint64_t values that may not fit in intmax_t. */
#define CHECK_EQ_UINT(a, b)                                                                        \
    do {                                                                                           \
        uintmax_t a_ = (uintmax_t)(a), b_ = (uintmax_t)(b);                                        \
        if (a_ != b_) CHECK_FAIL_("%s == %s failed: %" PRIuMAX " != %" PRIuMAX, #a, #b, a_, b_);   \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ ? a_ != b_ : strcmp(a_, b_) != 0)                                           \
            CHECK_FAIL_("%s == %s failed: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",           \
                        b_ ? b_ : "(null)");                                                       \
    } while (0)

/* For a <ptr, len> pair against a C string. */
#define CHECK_EQ_MEM(ptr, len, str)                                                                \
    do {                                                                                           \
        const char *p_ = (const char *)(ptr), *s_ = (str);                                         \
        size_t n_ = (size_t)(len);                                                                 \
        if (n_ != strlen(s_) || memcmp(p_, s_, n_) != 0)                                           \
            CHECK_FAIL_("%s == %s failed: \"%.*s\" != \"%s\"", #ptr, #str, (int)n_, p_, s_);       \
    } while (0)

struct check_case {
    const char *name;
    void (*fn)(void);
    const char *xfail; /* NULL, or the known bug that makes this case fail (reported, not fatal) */
};

#define CHECK_CASE(fn)                                                                             \
    { #fn, fn, NULL }
/*
 * A case that pins documented behaviour the code does not have yet: its
 * failure is reported as XFAIL with the reason and does not fail the run,
 * but its passing does (XPASS), so the mark goes when the bug is fixed.
 */
#define CHECK_CASE_XFAIL(fn, reason)                                                               \
    { #fn, fn, reason }
#define CHECK_COUNT(cases) (sizeof(cases) / sizeof((cases)[0]))

static inline double check_now_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline bool check_selected_(int argc, char **argv, const char *name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return false;
}

/* Runs one case in a child; returns 0 if it passed, else writes why to why. */
static inline int check_fork_case_(const struct check_case *c, char *why, size_t why_len) {
    const char *t = getenv("CHECK_TIMEOUT");
    unsigned timeout = t && *t ? (unsigned)strtoul(t, NULL, 10) : 60;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork failed");
        return -1;
    }
    if (pid == 0) {
        alarm(timeout);
        c->fn();
        exit(0); /* exit, not _exit: flushes output, runs the leak checker */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            snprintf(why, why_len, "waitpid failed: %s", strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        snprintf(why, why_len, "timed out after %u s", timeout);
    else if (WIFSIGNALED(st))
        snprintf(why, why_len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(why, why_len, "exit status %d", WEXITSTATUS(st));
    return -1;
}

/* Runs the cases (all, or those named in argv); returns 0 if every one ran and passed, else 1. */
static inline int check_run(int argc, char **argv, const struct check_case *cases, size_t n) {
    bool nofork = getenv("CHECK_NOFORK") && *getenv("CHECK_NOFORK");
    size_t ran = 0, failed = 0, xfailed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!check_selected_(argc, argv, cases[i].name)) continue;
        if (nofork && cases[i].xfail && argc < 2) continue; /* it would end the run */
        ran++;
        fprintf(stderr, "-- %s\n", cases[i].name);
        double t0 = check_now_();
        char why[128] = "";
        int rc = 0;
        if (nofork)
            cases[i].fn();
        else
            rc = check_fork_case_(&cases[i], why, sizeof why);
        if (cases[i].xfail && rc == 0) {
            failed++;
            fprintf(stderr, "FAIL %s: passed, but is marked as failing (%s): drop the mark\n",
                    cases[i].name, cases[i].xfail);
        } else if (cases[i].xfail) {
            xfailed++;
            fprintf(stderr, "XFAIL %s: %s (known: %s)\n", cases[i].name, why, cases[i].xfail);
        } else if (rc == 0) {
            fprintf(stderr, "PASS %s (%.2f s)\n", cases[i].name, check_now_() - t0);
        } else {
            failed++;
            fprintf(stderr, "FAIL %s: %s\n", cases[i].name, why);
        }
    }
    fprintf(stderr, "%zu of %zu cases passed", ran - failed - xfailed, ran);
    if (xfailed) fprintf(stderr, ", %zu failed as known (XFAIL)", xfailed);
    fputc('\n', stderr);
    if (ran == 0) fprintf(stderr, "no case ran: check the names given\n");
    return failed || ran == 0 ? 1 : 0;
}

#endif
