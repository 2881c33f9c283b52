/*
 * test_check: the runner of check.h can fail. A failed CHECK, a crash and a
 * hang each fail their own case only, every other case still runs, and the
 * run's result is non-zero. The inner runs print FAIL lines: they are the
 * expected output of this test.
 */
#include <fcntl.h>

#include "check.h"

static int marks[2]; /* pipe: each inner case writes its letter before and after its check */

static void mark(char c) {
    CHECK_EQ_INT(write(marks[1], &c, 1), 1);
}

static void inner_pass(void) {
    mark('a');
    CHECK_EQ_INT(1 + 1, 2);
    mark('A');
}

static void inner_fail(void) {
    mark('b');
    CHECK_EQ_INT(1 + 1, 3);
    mark('B'); /* never reached: the failed check ends the case */
}

static void inner_crash(void) {
    mark('c');
    raise(SIGKILL);
    mark('C');
}

static void inner_hang(void) {
    mark('d');
    for (int i = 0; i < 50; i++) /* bounded: 5 s, well past the 1 s timeout */
        usleep(100 * 1000);
    mark('D');
}

static void inner_last(void) {
    mark('e');
    CHECK_EQ_STR("x", "x");
    mark('E');
}

static const struct check_case inner[] = {
    CHECK_CASE(inner_pass), CHECK_CASE(inner_fail), CHECK_CASE(inner_crash),
    CHECK_CASE(inner_hang), CHECK_CASE(inner_last),
};

static const struct check_case inner_known[] = {
    CHECK_CASE(inner_pass),
    CHECK_CASE_XFAIL(inner_fail, "a known bug"),
};

static const struct check_case inner_fixed[] = {
    CHECK_CASE_XFAIL(inner_pass, "a bug fixed since"),
};

/* Runs a table with these arguments; checks its result and the letters its cases wrote. */
static void run_table(const struct check_case *table, size_t n, int argc, char **argv, int want_rc,
                      const char *want_marks) {
    CHECK_EQ_INT(pipe(marks), 0);
    CHECK_EQ_INT(fcntl(marks[0], F_SETFL, O_NONBLOCK), 0);
    setenv("CHECK_TIMEOUT", "1", 1);
    fprintf(stderr, "   (an inner run with expected failures follows)\n");
    int rc = check_run(argc, argv, table, n);
    fprintf(stderr, "   (end of the inner run)\n");
    unsetenv("CHECK_TIMEOUT");
    close(marks[1]);
    char got[32];
    ssize_t len = read(marks[0], got, sizeof got - 1);
    close(marks[0]);
    got[len > 0 ? len : 0] = 0;
    CHECK_EQ_INT(rc, want_rc);
    CHECK_EQ_STR(got, want_marks);
}

static void run_inner(int argc, char **argv, int want_rc, const char *want_marks) {
    run_table(inner, CHECK_COUNT(inner), argc, argv, want_rc, want_marks);
}

static void test_every_case_runs_after_failures(void) {
    char *argv[] = {"test_check", NULL};
    run_inner(1, argv, 1, "aAbcdeE");
}

static void test_passing_cases_pass(void) {
    char *argv[] = {"test_check", "inner_pass", "inner_last", NULL};
    run_inner(3, argv, 0, "aAeE");
}

static void test_one_failure_fails_the_run(void) {
    char *argv[] = {"test_check", "inner_pass", "inner_fail", NULL};
    run_inner(3, argv, 1, "aAb");
}

static void test_unknown_name_fails_the_run(void) {
    char *argv[] = {"test_check", "no_such_case", NULL};
    run_inner(2, argv, 1, "");
}

/* A case marked as a known failure does not fail the run while it fails... */
static void test_known_failure_is_reported_not_fatal(void) {
    char *argv[] = {"test_check", NULL};
    run_table(inner_known, CHECK_COUNT(inner_known), 1, argv, 0, "aAb");
}

/* ...and fails it once it passes, so that the mark is dropped. */
static void test_fixed_known_failure_fails_the_run(void) {
    char *argv[] = {"test_check", NULL};
    run_table(inner_fixed, CHECK_COUNT(inner_fixed), 1, argv, 1, "aA");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_known_failure_is_reported_not_fatal),
    CHECK_CASE(test_fixed_known_failure_fails_the_run),
    CHECK_CASE(test_every_case_runs_after_failures),
    CHECK_CASE(test_passing_cases_pass),
    CHECK_CASE(test_one_failure_fails_the_run),
    CHECK_CASE(test_unknown_name_fails_the_run),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
