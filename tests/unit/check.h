/*
 * check: the assert macros of the unit tests. A failed check prints
 * file:line, the expression and both sides, then exits with status 1.
 */
#ifndef EVENTD_CHECK_H
#define EVENTD_CHECK_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_FAIL_(...)                                                                           \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
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

/* Runs one test function and names it, so a failure is easy to place. */
#define RUN_TEST(fn)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "-- %s\n", #fn);                                                           \
        fn();                                                                                      \
    } while (0)

#endif
