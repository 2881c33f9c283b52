/*
 * test_site_pages: the account site's pages. Each page case renders a page
 * with fixed values and compares the whole output, byte for byte, with a
 * fixture in tests/fixtures/site/<name>.html. In a fixture the lines
 * @SITE_CSS@ and @SITE_COPY_SCRIPT@ stand for site_css and
 * site_copy_script (one long line each, pinned on their own by
 * test_inline_assets_hashable); they are expanded before the comparison,
 * so it still covers every byte. A failure prints the first line that
 * differs, both sides.
 *
 * Other cases check properties of every page: every placeholder is a
 * declared variable (html_check); hostile values in every variable add no
 * markup character at all; tags balance and every visible input has its
 * label; nothing is loaded from elsewhere.
 *
 *   EVENTD_WRITE_FIXTURES=1 test_site_pages
 *                                 writes the fixtures from the current
 *                                 output instead of comparing (review the
 *                                 diff before committing it).
 *   test_site_pages --write DIR   writes each page with sample values to
 *                                 DIR/<page>[-variant].html for a look in
 *                                 a browser, and runs no case.
 */
#include "site/site_pages.h"

#include <stdarg.h>
#include <sys/stat.h>

#include "check.h"
#include "storage/record.h"

#define MAX_VARS 16

#ifndef EVENTD_FIXTURES_DIR
#error "EVENTD_FIXTURES_DIR: tests/CMakeLists.txt defines it"
#endif
#define SITE_FIXTURES EVENTD_FIXTURES_DIR "/site"

static struct buf out;

/* Renders page with every declared variable set to value. */
static const char *render_all(enum site_page page, const char *value, size_t len) {
    const struct site_page_def *def = &site_pages[page];
    struct html_var vars[MAX_VARS];
    CHECK(def->nvars <= MAX_VARS);
    for (size_t i = 0; i < def->nvars; i++)
        vars[i] = (struct html_var){def->vars[i], value, len};
    buf_reset(&out);
    site_page_render(&out, page, vars, def->nvars);
    return out.ptr;
}

/* Renders page with the variables given as name, value pairs (NULL-ended);
 * the declared ones not given are empty. */
static const char *render_with(enum site_page page, ...) {
    struct html_var vars[MAX_VARS];
    size_t n = 0;
    va_list ap;
    va_start(ap, page);
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        CHECK(n < MAX_VARS);
        vars[n++] = html_var_str(name, va_arg(ap, const char *));
    }
    va_end(ap);
    buf_reset(&out);
    site_page_render(&out, page, vars, n);
    return out.ptr;
}

/* ---- fixtures ---- */

static const struct {
    const char *marker; /* a whole line of a fixture */
    const char *text;   /* what it stands for */
} markers[] = {{"@SITE_CSS@", site_css}, {"@SITE_COPY_SCRIPT@", site_copy_script}};

/* Appends <p, len> to b with every occurrence of from replaced by to. */
static void replace_all(struct buf *b, const char *p, size_t len, const char *from,
                        const char *to) {
    size_t flen = strlen(from);
    const char *end = p + len;
    while (p < end) {
        const char *hit =
            (size_t)(end - p) >= flen ? memmem(p, (size_t)(end - p), from, flen) : NULL;
        if (!hit) {
            buf_append(b, p, (size_t)(end - p));
            break;
        }
        buf_append(b, p, (size_t)(hit - p));
        buf_append_str(b, to);
        p = hit + flen;
    }
}

/* Replaces in b each marker's text by the marker (to_markers) or back. */
static void swap_markers(struct buf *b, bool to_markers) {
    for (size_t i = 0; i < CHECK_COUNT(markers); i++) {
        struct buf tmp = BUF_INIT;
        if (to_markers)
            replace_all(&tmp, b->ptr, b->len, markers[i].text, markers[i].marker);
        else
            replace_all(&tmp, b->ptr, b->len, markers[i].marker, markers[i].text);
        buf_reset(b);
        if (tmp.len) buf_append(b, tmp.ptr, tmp.len); /* an empty tmp has no storage */
        buf_destroy(&tmp);
    }
}

static void read_file(const char *path, struct buf *b) {
    FILE *f = fopen(path, "rb");
    if (!f) CHECK_FAIL_("cannot open %s: %s", path, strerror(errno));
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(b, chunk, n);
    CHECK(!ferror(f));
    fclose(f);
}

static void write_file(const char *path, const char *ptr, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(ptr, 1, len, f) != len || fclose(f) != 0)
        CHECK_FAIL_("cannot write %s: %s", path, strerror(errno));
}

/* Fails with the first line where got and want differ. */
static void check_same(const char *what, const char *got, size_t glen, const char *want,
                       size_t wlen) {
    if (glen == wlen && memcmp(got, want, glen) == 0) return;
    size_t i = 0, line = 1, bol = 0;
    while (i < glen && i < wlen && got[i] == want[i]) {
        if (got[i] == '\n') {
            line++;
            bol = i + 1;
        }
        i++;
    }
    const char *g = got + bol, *w = want + bol;
    const char *ge = memchr(g, '\n', glen - bol), *we = memchr(w, '\n', wlen - bol);
    int gn = (int)(ge ? ge - g : (ptrdiff_t)(glen - bol));
    int wn = (int)(we ? we - w : (ptrdiff_t)(wlen - bol));
    CHECK_FAIL_("%s differs at line %zu, column %zu (%zu bytes rendered, %zu expected):\n"
                "  rendered: \"%.*s\"%s\n  expected: \"%.*s\"%s",
                what, line, i - bol + 1, glen, wlen, gn, g,
                bol + (size_t)gn >= glen ? " (end)" : "", wn, w,
                bol + (size_t)wn >= wlen ? " (end)" : "");
}

/* Compares out with the fixture name (or writes it: EVENTD_WRITE_FIXTURES). */
static void expect_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.html", SITE_FIXTURES, name);
    struct buf want = BUF_INIT;
    const char *w = getenv("EVENTD_WRITE_FIXTURES");
    if (w && *w) {
        buf_append(&want, out.ptr, out.len);
        swap_markers(&want, true);
        write_file(path, want.ptr, want.len);
        fprintf(stderr, "wrote %s\n", path);
    } else {
        read_file(path, &want);
        struct buf full = BUF_INIT, got = BUF_INIT;
        buf_append(&full, want.ptr, want.len);
        swap_markers(&full, false);
        if (full.len != out.len || memcmp(full.ptr, out.ptr, out.len) != 0) {
            /* Told in the fixture's terms, so the line numbers are the file's. */
            buf_append(&got, out.ptr, out.len);
            swap_markers(&got, true);
            check_same(path, got.ptr, got.len, want.ptr, want.len);
            CHECK_FAIL_("%s differs in a marker's text", path);
        }
        buf_destroy(&got);
        buf_destroy(&full);
    }
    buf_destroy(&want);
}

/* Compares the nlines lines of out that start at the first from (from
 * included) with want. */
static void expect_fragment(const char *from, size_t nlines, const char *want) {
    const char *a = strstr(out.ptr, from);
    if (!a) CHECK_FAIL_("no \"%s\" in the page", from);
    const char *b = a;
    for (size_t i = 0; i < nlines; i++) {
        b = strchr(b, '\n');
        if (!b) CHECK_FAIL_("fewer than %zu lines from \"%s\"", nlines, from);
        b++;
    }
    check_same("the fragment", a, (size_t)(b - a), want, strlen(want));
}

static size_t count_char(const char *s, size_t len, char c) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == c;
    return n;
}

static void test_placeholders_declared(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        const struct site_page_def *def = &site_pages[p];
        const char *bad = html_check(def->tpl, def->vars, def->nvars);
        if (bad) CHECK_FAIL_("page %s: bad tag at \"%.40s\"", def->name, bad);
    }
}

static const char hostile[] = "<script>alert(1)</script>\"'`=&{{csrf}}{{#error}}x"
                              "\" onmouseover=\"alert(2)\"<img src=x onerror=alert(3)>"
                              "\xff\xc0\xaf\0</textarea></pre>-->";

static void test_hostile_values_add_no_markup(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        /* The same sections are taken with a harmless non-empty value. */
        render_all(p, "x", 1);
        struct buf plain = BUF_INIT;
        buf_append(&plain, out.ptr, out.len);
        render_all(p, hostile, sizeof hostile - 1);
        CHECK(record_utf8_valid(out.ptr, out.len));
        CHECK(strstr(out.ptr, "<script>alert") == NULL);
        CHECK(strstr(out.ptr, "<img") == NULL);
        CHECK(memchr(out.ptr, '\0', out.len) == NULL);
        const char special[] = "<>\"'`=";
        for (size_t i = 0; special[i]; i++)
            if (count_char(out.ptr, out.len, special[i]) !=
                count_char(plain.ptr, plain.len, special[i]))
                CHECK_FAIL_("page %s: a value added a raw '%c'", site_pages[p].name, special[i]);
        buf_destroy(&plain);
    }
}

/* Every page with the hostile value in every variable: <page>-hostile.html. */
static void test_hostile_values_render_escaped(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        render_all(p, hostile, sizeof hostile - 1);
        char name[64];
        snprintf(name, sizeof name, "%s-hostile", site_pages[p].name);
        expect_fixture(name);
    }
}

/* Every page with every variable empty: <page>-empty.html. */
static void test_empty_values(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        render_all(p, "", 0);
        CHECK(strstr(out.ptr, "{{") == NULL);
        CHECK(strstr(out.ptr, "role=\"alert\"") == NULL);
        CHECK(strstr(out.ptr, "role=\"status\"") == NULL);
        char name[64];
        snprintf(name, sizeof name, "%s-empty", site_pages[p].name);
        expect_fixture(name);
    }
}

/* The alerts come right after the heading, on every page. */
static void test_alerts_shown(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        render_with(p, "title", "T", "error", "Wrong <password>", "notice", "Saved & done", NULL);
        expect_fragment("</h1>\n", 3,
                        "</h1>\n"
                        "<p class=\"alert error\" role=\"alert\">Wrong &lt;password&gt;</p>\n"
                        "<p class=\"alert notice\" role=\"status\">Saved &amp; done</p>\n");
    }
}

static void test_register_page(void) {
    render_with(SITE_REGISTER, "base", "/acct", "csrf", "TOKEN", "username", "al", NULL);
    CHECK(strstr(out.ptr, "minlength") == NULL);
    expect_fixture("register");
}

static void test_register_page_shows_password_min(void) {
    render_with(SITE_REGISTER, "password_min", "12", NULL);
    expect_fixture("register-password-min");
}

static void test_register_page_with_alerts(void) {
    render_with(SITE_REGISTER, "base", "/acct", "csrf", "TOKEN", "username", "alice",
                "password_min", "12", "error", "This username is taken: choose another one.",
                "notice", "Saved & done", NULL);
    expect_fixture("register-alerts");
}

static void test_password_page(void) {
    render_with(SITE_PASSWORD, "base", "/acct", "csrf", "TOKEN", "username", "alice",
                "password_min", "12", NULL);
    expect_fixture("password");
}

static void test_signin_page(void) {
    render_with(SITE_SIGNIN, "base", "/acct", "csrf", "TOKEN", NULL);
    expect_fixture("signin");
}

static void test_user_api_page_with_new_key(void) {
    render_with(SITE_USER_API, "base", "/acct", "csrf", "TOKEN", "username", "alice", "user_id",
                "42", "api_key", "KEY_abc-123", "api_url", "http://127.0.0.1:8080/v2", "has_key",
                "1", NULL);
    expect_fixture("user_api-key");
}

static void test_user_api_page_without_key(void) {
    render_with(SITE_USER_API, "base", "", "csrf", "T", "username", "bob", "user_id", "7", NULL);
    CHECK(strstr(out.ptr, "<script") == NULL);
    expect_fixture("user_api-no-key");
}

static void test_user_api_page_with_old_key(void) {
    render_with(SITE_USER_API, "has_key", "1", NULL);
    CHECK(strstr(out.ptr, "id=\"api-key\"") == NULL);
    expect_fixture("user_api-has-key");
}

static void test_message_page(void) {
    render_with(SITE_MESSAGE, "title", "Not found", "message", "No such <page>.", NULL);
    expect_fixture("message");
}

static void test_phone_ready(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        const char *tpl = site_pages[p].tpl;
        CHECK(strstr(tpl, "<meta charset=\"utf-8\">"));
        CHECK(strstr(tpl, "<meta name=\"viewport\" content=\"width=device-width, "
                          "initial-scale=1\">"));
        CHECK(strstr(tpl, "<html lang=\"en\">"));
    }
    CHECK(strstr(site_css, "system-ui"));
    CHECK(strstr(site_css, "min-height:44px"));
}

static void test_no_external_assets(void) {
    const char *banned[] = {"://",           "src=", "@import", "url(",   "<link rel=\"stylesheet",
                            "<iframe",       "<img", "<object", "<embed", "fetch(",
                            "XMLHttpRequest"};
    for (int p = 0; p < SITE_PAGE_COUNT; p++)
        for (size_t i = 0; i < CHECK_COUNT(banned); i++)
            if (strstr(site_pages[p].tpl, banned[i]))
                CHECK_FAIL_("page %s holds \"%s\"", site_pages[p].name, banned[i]);
    /* The one link element is the empty icon, which stops a /favicon.ico request. */
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        const char *link = strstr(site_pages[p].tpl, "<link");
        CHECK(link && strncmp(link, "<link rel=\"icon\" href=\"data:,\">", 31) == 0);
        CHECK(strstr(link + 1, "<link") == NULL);
    }
}

static void test_inline_assets_hashable(void) {
    /* A Content-Security-Policy hash covers the element's exact contents. */
    struct buf want = BUF_INIT;
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        buf_reset(&want);
        buf_append_str(&want, "<style>");
        buf_append_str(&want, site_css);
        buf_append_str(&want, "</style>");
        CHECK(strstr(site_pages[p].tpl, want.ptr));
    }
    buf_reset(&want);
    buf_append_str(&want, "<script>");
    buf_append_str(&want, site_copy_script);
    buf_append_str(&want, "</script>");
    CHECK(strstr(site_pages[SITE_USER_API].tpl, want.ptr));
    buf_destroy(&want);
}

static bool is_void(const char *name, size_t len) {
    const char *voids[] = {"meta", "link", "input", "br", "hr", "img"};
    for (size_t i = 0; i < CHECK_COUNT(voids); i++)
        if (strlen(voids[i]) == len && memcmp(voids[i], name, len) == 0) return true;
    return false;
}

/* Checks that the elements of html nest and close, skipping the contents
 * of <style> and <script>. */
static void check_balanced(const char *name, const char *html) {
    const char *stack[64];
    size_t lens[64], depth = 0;
    const char *p = html;
    while ((p = strchr(p, '<')) != NULL) {
        if (strncmp(p, "<!doctype", 9) == 0) {
            p++;
            continue;
        }
        bool close = p[1] == '/';
        const char *tag = p + 1 + close;
        size_t len = strspn(tag, "abcdefghijklmnopqrstuvwxyz0123456789");
        if (len == 0) CHECK_FAIL_("page %s: a raw '<' at \"%.20s\"", name, p);
        const char *end = strchr(tag, '>');
        CHECK(end != NULL);
        if (close) {
            if (depth == 0 || lens[depth - 1] != len || memcmp(stack[depth - 1], tag, len) != 0)
                CHECK_FAIL_("page %s: unexpected \"%.*s\"", name, (int)(end - p + 1), p);
            depth--;
        } else if (!is_void(tag, len)) {
            CHECK(depth < 64);
            stack[depth] = tag;
            lens[depth++] = len;
            if ((len == 5 && memcmp(tag, "style", 5) == 0) ||
                (len == 6 && memcmp(tag, "script", 6) == 0)) {
                char closing[16];
                snprintf(closing, sizeof closing, "</%.*s>", (int)len, tag);
                end = strstr(end, closing);
                CHECK(end != NULL);
                end--;
            }
        }
        p = end + 1;
    }
    if (depth)
        CHECK_FAIL_("page %s: <%.*s> never closed", name, (int)lens[depth - 1], stack[depth - 1]);
}

/* Every input that is not hidden has a <label for> of its id, and ids are unique. */
static void check_labels(const char *name, const char *html) {
    const char *p = html;
    while ((p = strstr(p, "<input ")) != NULL) {
        const char *end = strchr(p, '>');
        p++;
        if (strstr(p, "type=\"hidden\"") && strstr(p, "type=\"hidden\"") < end) continue;
        const char *id = strstr(p, " id=\"");
        if (!id || id > end) CHECK_FAIL_("page %s: an input with no id", name);
        id += 5;
        size_t len = (size_t)(strchr(id, '"') - id);
        char want[80];
        snprintf(want, sizeof want, "<label for=\"%.*s\">", (int)len, id);
        if (!strstr(html, want)) CHECK_FAIL_("page %s: no %s", name, want);
    }
    for (p = strstr(html, " id=\""); p; p = strstr(p + 1, " id=\"")) {
        const char *v = p + 5;
        size_t len = (size_t)(strchr(v, '"') - v);
        for (const char *q = strstr(p + 1, " id=\""); q; q = strstr(q + 1, " id=\""))
            if (strncmp(q + 5, v, len) == 0 && q[5 + len] == '"')
                CHECK_FAIL_("page %s: id \"%.*s\" twice", name, (int)len, v);
    }
}

static void test_tidy(void) {
    for (int p = 0; p < SITE_PAGE_COUNT; p++) {
        const char *sets[] = {"x", ""};
        for (size_t s = 0; s < 2; s++) {
            render_all(p, sets[s], strlen(sets[s]));
            check_balanced(site_pages[p].name, out.ptr);
            check_labels(site_pages[p].name, out.ptr);
        }
    }
}

/* ---- --write DIR ---- */

#define SAMPLE_COMMON "base", "", "csrf", "c5rf-t0ken"

static void write_page(const char *dir, const char *file, enum site_page page, ...);

static int write_samples(const char *dir) {
    mkdir(dir, 0755);
    write_page(dir, "register", SITE_REGISTER, SAMPLE_COMMON, "password_min", "12", NULL);
    write_page(dir, "register-error", SITE_REGISTER, SAMPLE_COMMON, "password_min", "12",
               "username", "alice", "error", "This username is taken: choose another one.", NULL);
    write_page(dir, "signin", SITE_SIGNIN, SAMPLE_COMMON, "notice", "You are signed out.", NULL);
    write_page(dir, "signin-throttled", SITE_SIGNIN, SAMPLE_COMMON, "username", "alice", "error",
               "Too many failed sign-ins: try again in 8 seconds.", NULL);
    write_page(dir, "password", SITE_PASSWORD, SAMPLE_COMMON, "username", "alice", "password_min",
               "12", NULL);
    write_page(dir, "password-error", SITE_PASSWORD, SAMPLE_COMMON, "username", "alice",
               "password_min", "12", "error", "the current password is wrong", NULL);
    write_page(dir, "user_api", SITE_USER_API, SAMPLE_COMMON, "username", "alice", "user_id", "17",
               NULL);
    write_page(dir, "user_api-key", SITE_USER_API, SAMPLE_COMMON, "username", "alice", "user_id",
               "17", "api_key", "mZ1q8X0dYc3fV6pL2rT9sK4wB7nH5jE0aQ_u-Gx1yOi", "api_url",
               "http://127.0.0.1:8080/v2", "has_key", "1", "notice", "A new API key was issued.",
               NULL);
    write_page(dir, "user_api-has-key", SITE_USER_API, SAMPLE_COMMON, "username", "alice",
               "user_id", "17", "has_key", "1", NULL);
    write_page(dir, "message", SITE_MESSAGE, SAMPLE_COMMON, "title", "Session expired", "message",
               "Your session has ended. Sign in again to continue.", NULL);
    return 0;
}

static void write_page(const char *dir, const char *file, enum site_page page, ...) {
    struct html_var vars[MAX_VARS];
    size_t n = 0;
    va_list ap;
    va_start(ap, page);
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL && n < MAX_VARS)
        vars[n++] = html_var_str(name, va_arg(ap, const char *));
    va_end(ap);
    buf_reset(&out);
    site_page_render(&out, page, vars, n);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.html", dir, file);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(out.ptr, 1, out.len, f) != out.len || fclose(f) != 0) {
        fprintf(stderr, "test_site_pages: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    printf("%s\n", path);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_placeholders_declared),
    CHECK_CASE(test_hostile_values_add_no_markup),
    CHECK_CASE(test_hostile_values_render_escaped),
    CHECK_CASE(test_empty_values),
    CHECK_CASE(test_alerts_shown),
    CHECK_CASE(test_register_page),
    CHECK_CASE(test_register_page_shows_password_min),
    CHECK_CASE(test_register_page_with_alerts),
    CHECK_CASE(test_password_page),
    CHECK_CASE(test_signin_page),
    CHECK_CASE(test_user_api_page_with_new_key),
    CHECK_CASE(test_user_api_page_without_key),
    CHECK_CASE(test_user_api_page_with_old_key),
    CHECK_CASE(test_message_page),
    CHECK_CASE(test_phone_ready),
    CHECK_CASE(test_no_external_assets),
    CHECK_CASE(test_inline_assets_hashable),
    CHECK_CASE(test_tidy),
};

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return write_samples(argv[2]);
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
