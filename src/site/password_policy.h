/*
 * password_policy: what a new password must not be, beyond its length
 * (the length rule, --password-min-bytes, is the caller's, with the number
 * in its message). A new password is refused when it
 *
 *   - equals the username, or contains it (ASCII case-insensitively) when
 *     the username has at least PASSWORD_POLICY_NAME_MIN characters (a
 *     shorter one would refuse too much: "al" inside "totally");
 *   - is one of the most common passwords of a short built-in list
 *     (ASCII case-insensitively: "Password123" is "password123");
 *   - is one character repeated ("aaaaaaaaaa") or a run of consecutive
 *     characters up or down ("1234567890", "abcdefghij", "9876543210").
 *
 * Used where a password is chosen: registration and the password change
 * (site.c). Pure: no I/O, no allocation.
 */
#ifndef EVENTD_PASSWORD_POLICY_H
#define EVENTD_PASSWORD_POLICY_H

#include <stddef.h>

#define PASSWORD_POLICY_NAME_MIN 4 /* characters of a username checked for containment */

/*
 * NULL when the password (pw_len bytes at pw) may be chosen by the user
 * named name (name_len bytes), else the reason as a sentence about the field
 * "password" (static).
 */
const char *password_policy_check(const char *pw, size_t pw_len, const char *name, size_t name_len);

/* The built-in list (lower case, sorted by strcmp), for the tests. */
extern const char *const password_policy_common[];
extern const size_t password_policy_common_count;

#endif
