/*
 * test_password_policy: the rules beyond length (password_policy.h): the
 * username, alone or inside, in any case; one character repeated and runs
 * up or down; the common list, in any case, sorted and lower case (the
 * lookup bisects); and ordinary passwords pass.
 */
#include "site/password_policy.h"

#include <string.h>

#include "check.h"

static const char *check(const char *pw, const char *name) {
    return password_policy_check(pw, strlen(pw), name, strlen(name));
}

static void test_ordinary_passwords_pass(void) {
    CHECK(check("correct horse battery", "alice") == NULL);
    CHECK(check("Tr0ub4dor&3x", "bob") == NULL);
    CHECK(check("zebra-lamp-7-ocean", "carol") == NULL);
    CHECK(check("1234567891", "dave") == NULL); /* a run broken at its end */
}

static void test_the_username_is_refused(void) {
    CHECK_EQ_STR(check("alice12345", "alice12345"), "the password must not be the username");
    CHECK_EQ_STR(check("ALICE12345", "alice12345"), "the password must not be the username");
}

static void test_a_password_containing_the_username_is_refused(void) {
    CHECK_EQ_STR(check("my-alice-secret", "alice"), "the password must not contain the username");
    CHECK_EQ_STR(check("xxBOBBYxxyy", "Bobby"), "the password must not contain the username");
    CHECK_EQ_STR(check("secretdave", "dave"), "the password must not contain the username");
}

static void test_a_short_username_inside_is_allowed(void) {
    /* Below PASSWORD_POLICY_NAME_MIN characters containment would refuse too much. */
    CHECK(check("totally fine pw", "al") == NULL);
    CHECK(check("totally fine pw", "tot") == NULL);
}

static void test_one_character_repeated_is_refused(void) {
    const char *why = "the password must not be one character repeated or a run such as 12345678";
    CHECK_EQ_STR(check("aaaaaaaaaa", "bob"), why);
    CHECK_EQ_STR(check("          ", "bob"), why);
    CHECK(check("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", "bob") == NULL); /* bytes alternate */
}

static void test_runs_are_refused(void) {
    const char *why = "the password must not be one character repeated or a run such as 12345678";
    CHECK_EQ_STR(check("23456789", "bob"), why);
    CHECK_EQ_STR(check("0123456789", "bob"), why);
    CHECK_EQ_STR(check("9876543210", "bob"), why);
    CHECK_EQ_STR(check("abcdefghijk", "bob"), why);
    CHECK_EQ_STR(check("ZYXWVUTSRQ", "bob"), why);
}

static void test_common_passwords_are_refused_in_any_case(void) {
    const char *why = "the password is one of the most common passwords";
    CHECK_EQ_STR(check("password123", "bob"), why);
    CHECK_EQ_STR(check("Password123", "bob"), why);
    CHECK_EQ_STR(check("QWERTYUIOP", "bob"), why);
    CHECK_EQ_STR(check("iloveyou", "bob"), why);
    CHECK_EQ_STR(check("1q2w3e4r5t", "bob"), why);
}

static void test_every_entry_is_refused(void) {
    for (size_t i = 0; i < password_policy_common_count; i++)
        CHECK(check(password_policy_common[i], "nobody-else") != NULL);
}

static void test_the_list_is_sorted_lower_case_and_at_least_8_bytes(void) {
    CHECK(password_policy_common_count >= 100);
    for (size_t i = 0; i < password_policy_common_count; i++) {
        const char *w = password_policy_common[i];
        CHECK(strlen(w) >= 8);
        for (const char *p = w; *p; p++)
            CHECK(!(*p >= 'A' && *p <= 'Z'));
        if (i) CHECK(strcmp(password_policy_common[i - 1], w) < 0);
    }
}

static void test_a_long_password_is_not_looked_up(void) {
    char pw[257];
    for (size_t i = 0; i < 256; i++)
        pw[i] = (char)('a' + (i * 7) % 26);
    pw[256] = 0;
    CHECK(check(pw, "bob") == NULL);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_ordinary_passwords_pass),
    CHECK_CASE(test_the_username_is_refused),
    CHECK_CASE(test_a_password_containing_the_username_is_refused),
    CHECK_CASE(test_a_short_username_inside_is_allowed),
    CHECK_CASE(test_one_character_repeated_is_refused),
    CHECK_CASE(test_runs_are_refused),
    CHECK_CASE(test_common_passwords_are_refused_in_any_case),
    CHECK_CASE(test_every_entry_is_refused),
    CHECK_CASE(test_the_list_is_sorted_lower_case_and_at_least_8_bytes),
    CHECK_CASE(test_a_long_password_is_not_looked_up),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
