/*
 * password_policy: see password_policy.h. The list holds common passwords
 * of at least 8 bytes (the least --password-min-bytes allows), from the
 * published lists of leaked passwords; runs and repeats are a rule, not
 * entries. It is searched by bisection on the lower-cased password.
 */
#include "site/password_policy.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
const char *const password_policy_common[] = {
    "00000000",
    "0987654321",
    "11111111",
    "11223344",
    "112233445566",
    "12121212",
    "123123123",
    "123321123",
    "12341234",
    "1234512345",
    "1234554321",
    "123456123456",
    "123456654321",
    "12345678",
    "123456789",
    "1234567890",
    "12345678910",
    "1234qwer",
    "123qweasd",
    "123qweasdzxc",
    "147258369",
    "159753456",
    "1a2b3c4d",
    "1q2w3e4r",
    "1q2w3e4r5t",
    "1q2w3e4r5t6y",
    "1qaz2wsx",
    "1qaz2wsx3edc",
    "3.14159265",
    "31415926",
    "66666666",
    "88888888",
    "987654321",
    "a1b2c3d4",
    "aa123456",
    "aaaaaa11",
    "abc12345",
    "abc123456",
    "abcabcabc",
    "abcd1234",
    "abcdefgh",
    "access14",
    "admin123",
    "admin1234",
    "admin12345",
    "administrator",
    "arsenal1",
    "asdasdasd",
    "asdf1234",
    "asdfghjk",
    "asdfghjkl",
    "azertyuiop",
    "babygirl",
    "babygirl1",
    "baseball",
    "basketball",
    "batman123",
    "butterfly",
    "changeme",
    "changeme123",
    "charlie1",
    "chelsea1",
    "chocolate",
    "computer",
    "correcthorsebatterystaple",
    "default1",
    "dragon123",
    "eventd123",
    "eventdpassword",
    "facebook",
    "football",
    "football1",
    "freedom1",
    "google123",
    "guest1234",
    "hello123",
    "hello1234",
    "helloworld",
    "iloveyou",
    "iloveyou1",
    "iloveyou2",
    "internet",
    "jennifer",
    "jordan23",
    "letmein1",
    "letmein123",
    "letmeinplease",
    "linkedin",
    "liverpool",
    "lovely123",
    "loveme123",
    "manchester",
    "master123",
    "michael1",
    "michelle",
    "monkey123",
    "motdepasse",
    "mustang1",
    "mypassword",
    "mypassword1",
    "newyork1",
    "nopassword",
    "p@ssw0rd",
    "p@ssword",
    "pa$$word",
    "passw0rd",
    "password",
    "password!",
    "password1",
    "password12",
    "password123",
    "password1234",
    "password12345",
    "passwort",
    "pokemon123",
    "princess",
    "princess1",
    "q1w2e3r4",
    "q1w2e3r4t5",
    "qazwsxedc",
    "qazwsxedcrfv",
    "qwe123qwe",
    "qweasdzxc",
    "qweqweqwe",
    "qwer1234",
    "qwerty123",
    "qwerty1234",
    "qwerty12345",
    "qwertyui",
    "qwertyuiop",
    "qwertyuiop123",
    "root1234",
    "samsung1",
    "secret123",
    "shadow123",
    "starwars",
    "sunshine",
    "sunshine1",
    "superman",
    "test1234",
    "test12345",
    "testtest",
    "trustno1",
    "welcome1",
    "welcome123",
    "whatever",
    "yourpassword",
    "zaq12wsx",
    "zaq1zaq1",
    "zxcvbnm1",
    "zxcvbnm123",
};
/* clang-format on */
const size_t password_policy_common_count =
    sizeof password_policy_common / sizeof password_policy_common[0];

static char lower(char c) {
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool contains_nocase(const char *hay, size_t hay_len, const char *needle, size_t n) {
    for (size_t i = 0; n <= hay_len && i <= hay_len - n; i++) {
        size_t k = 0;
        while (k < n && lower(hay[i + k]) == lower(needle[k]))
            k++;
        if (k == n) return true;
    }
    return false;
}

/* One character repeated, or each byte one more (or one less) than the one before. */
static bool run(const char *pw, size_t len) {
    if (len < 2) return true;
    int step = (unsigned char)pw[1] - (unsigned char)pw[0];
    if (step < -1 || step > 1) return false;
    for (size_t i = 2; i < len; i++)
        if ((unsigned char)pw[i] - (unsigned char)pw[i - 1] != step) return false;
    return true;
}

static int cmp(const void *key, const void *elem) {
    return strcmp(key, *(const char *const *)elem);
}

static bool common(const char *pw, size_t len) {
    char low[64];
    if (len >= sizeof low) return false; /* longer than every entry */
    for (size_t i = 0; i < len; i++)
        low[i] = lower(pw[i]);
    low[len] = 0;
    return bsearch(low, password_policy_common, password_policy_common_count,
                   sizeof password_policy_common[0], cmp) != NULL;
}

const char *password_policy_check(const char *pw, size_t pw_len, const char *name,
                                  size_t name_len) {
    if (name_len && pw_len == name_len && contains_nocase(pw, pw_len, name, name_len))
        return "the password must not be the username";
    if (name_len >= PASSWORD_POLICY_NAME_MIN && contains_nocase(pw, pw_len, name, name_len))
        return "the password must not contain the username";
    if (run(pw, pw_len))
        return "the password must not be one character repeated or a run such as 12345678";
    if (common(pw, pw_len)) return "the password is one of the most common passwords";
    return NULL;
}
