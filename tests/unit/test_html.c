/*
 * test_html: the escaping template helper: values escaped in text and in
 * attributes, values never re-read as templates, NUL bytes and invalid
 * UTF-8 replaced, sections (set, empty, inverted, nested), and html_check
 * finding unknown names and malformed or unbalanced tags.
 */
#include "site/html.h"

#include "check.h"
#include "storage/record.h"

static char *render(const char *tpl, const struct html_var *vars, size_t nvars) {
    static struct buf out;
    buf_reset(&out);
    html_render(&out, tpl, vars, nvars);
    buf_append(&out, "", 0); /* a terminated empty buffer even when nothing was written */
    return out.ptr;
}

static char *esc(const char *ptr, size_t len) {
    static struct buf out;
    buf_reset(&out);
    html_escape(&out, ptr, len);
    buf_append(&out, "", 0);
    return out.ptr;
}

#define ESC(lit) esc(lit, sizeof(lit) - 1)

static void test_escape_markup(void) {
    CHECK_EQ_STR(ESC("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
    CHECK_EQ_STR(ESC("a&b"), "a&amp;b");
    CHECK_EQ_STR(ESC("\"'`="), "&quot;&#39;&#96;&#61;");
    CHECK_EQ_STR(ESC("&amp;"), "&amp;amp;");
    CHECK_EQ_STR(ESC("plain text, 100% fine"), "plain text, 100% fine");
    CHECK_EQ_STR(ESC(""), "");
}

static void test_escape_controls(void) {
    CHECK_EQ_STR(ESC("a\0b"), "a\xEF\xBF\xBD"
                              "b");
    CHECK_EQ_STR(ESC("\t\r\n"), "\t\r\n");
    CHECK_EQ_STR(ESC("\x01\x1f\x7f"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

static void test_escape_utf8(void) {
    /* Valid sequences of every length pass through. */
    CHECK_EQ_STR(ESC("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
                 "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    /* A lone continuation byte, a truncated sequence at the end, a lead byte
     * followed by ASCII: one U+FFFD per bad byte, the ASCII kept (and escaped). */
    CHECK_EQ_STR(ESC("\x80"), "\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("a\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("\xC3<"), "\xEF\xBF\xBD&lt;");
    /* Overlong '<' (C0 BC), a surrogate (ED A0 80), above U+10FFFF (F4 90 80 80), FF. */
    CHECK_EQ_STR(ESC("\xC0\xBC"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("\xE0\x80\xBC"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_STR(ESC("\xFF"), "\xEF\xBF\xBD");
}

static void test_escape_output_is_utf8(void) {
    /* Every single byte and every pair of bytes: the output is strict UTF-8
     * with none of the characters that could change markup. */
    struct buf out = BUF_INIT;
    for (unsigned a = 0; a < 256; a++) {
        for (unsigned b = 0; b < 256; b++) {
            char in[2] = {(char)a, (char)b};
            buf_reset(&out);
            html_escape(&out, in, 2);
            CHECK(out.len > 0);
            CHECK(record_utf8_valid(out.ptr, out.len));
            for (size_t i = 0; i < out.len; i++) {
                char c = out.ptr[i];
                CHECK(c != '<' && c != '>' && c != '"' && c != '\'' && c != '`' && c != '=' &&
                      c != '\0');
            }
        }
    }
    buf_destroy(&out);
}

static void test_render_text_value(void) {
    struct html_var v[] = {html_var_str("name", "<script>alert('x')</script>")};
    CHECK_EQ_STR(render("<p>Hello {{name}}!</p>", v, 1),
                 "<p>Hello &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;!</p>");
}

static void test_render_attribute_breakout(void) {
    struct html_var v[] = {html_var_str("csrf", "\" onfocus=\"alert(1)\" x=\""),
                           html_var_str("base", "'><img src=x onerror=alert(1)>")};
    CHECK_EQ_STR(render("<input value=\"{{csrf}}\"><a href='{{base}}/x'>", v, 2),
                 "<input value=\"&quot; onfocus&#61;&quot;alert(1)&quot; x&#61;&quot;\">"
                 "<a href='&#39;&gt;&lt;img src&#61;x onerror&#61;alert(1)&gt;/x'>");
}

static void test_render_value_not_reexpanded(void) {
    struct html_var v[] = {html_var_str("a", "{{b}}{{#b}}x{{/b}}"), html_var_str("b", "SECRET")};
    CHECK_EQ_STR(render("[{{a}}]", v, 2), "[{{b}}{{#b}}x{{/b}}]");
}

static void test_render_nul_in_value(void) {
    struct html_var v[] = {{"v", "a\0<b>", 5}};
    CHECK_EQ_STR(render("{{v}}", v, 1), "a\xEF\xBF\xBD&lt;b&gt;");
}

static void test_render_unknown_name_is_empty(void) {
    CHECK_EQ_STR(render("a{{nope}}b{{#nope}}c{{/nope}}d", NULL, 0), "abd");
}

static void test_render_repeated_and_first_wins(void) {
    struct html_var v[] = {html_var_str("x", "1"), html_var_str("x", "2")};
    CHECK_EQ_STR(render("{{x}}{{x}}", v, 2), "11");
}

static void test_render_sections(void) {
    const char *tpl = "{{#e}}<p role=\"alert\">{{e}}</p>{{/e}}{{^e}}ok{{/e}}";
    struct html_var set[] = {html_var_str("e", "bad & wrong")};
    struct html_var empty[] = {html_var_str("e", "")};
    CHECK_EQ_STR(render(tpl, set, 1), "<p role=\"alert\">bad &amp; wrong</p>");
    CHECK_EQ_STR(render(tpl, empty, 1), "ok");
    CHECK_EQ_STR(render(tpl, NULL, 0), "ok");
    struct html_var nul[] = {{"e", "\0", 1}}; /* one byte is non-empty, even a NUL */
    CHECK_EQ_STR(render("{{#e}}set{{/e}}", nul, 1), "set");
}

static void test_render_nested_sections(void) {
    const char *tpl = "{{#a}}A{{#b}}B{{/b}}{{^b}}b{{/b}}{{/a}}.";
    struct html_var ab[] = {html_var_str("a", "1"), html_var_str("b", "1")};
    struct html_var a[] = {html_var_str("a", "1"), html_var_str("b", "")};
    struct html_var b[] = {html_var_str("a", ""), html_var_str("b", "1")};
    CHECK_EQ_STR(render(tpl, ab, 2), "AB.");
    CHECK_EQ_STR(render(tpl, a, 2), "Ab.");
    CHECK_EQ_STR(render(tpl, b, 2), ".");
}

static void test_render_malformed_tags_are_text(void) {
    /* Never produced by a checked template; rendering stays total anyway. */
    CHECK_EQ_STR(render("a{{ x }}b{{X}}{{", NULL, 0), "a{{ x }}b{{X}}{{");
    CHECK_EQ_STR(render("{{#open}}never closed", NULL, 0), "");
}

static void test_check_ok(void) {
    static const char *const names[] = {"a", "b", "csrf"};
    CHECK(html_check("plain { } }} text", names, 3) == NULL);
    CHECK(html_check("{{a}}{{#b}}{{csrf}}{{^a}}{{/a}}{{/b}}", names, 3) == NULL);
}

static void test_check_unknown_name(void) {
    static const char *const names[] = {"a"};
    const char *tpl = "{{a}} then {{typo}}";
    CHECK(html_check(tpl, names, 1) == strstr(tpl, "{{typo"));
    tpl = "{{#a}}x{{/b}}";
    CHECK(html_check(tpl, names, 1) == strstr(tpl, "{{/b"));
}

static void test_check_malformed(void) {
    static const char *const names[] = {"a", "b"};
    const char *bad[] = {"{{ a}}", "{{a }}", "{{A}}", "{{}}", "{{a}", "x{{", "{{!a}}", "{{{a}}}"};
    for (size_t i = 0; i < CHECK_COUNT(bad); i++)
        CHECK(html_check(bad[i], names, 2) == strstr(bad[i], "{{"));
}

static void test_check_unbalanced(void) {
    static const char *const names[] = {"a", "b"};
    const char *tpl = "{{#a}}{{#b}}{{/a}}{{/b}}";
    CHECK(html_check(tpl, names, 2) == strstr(tpl, "{{/a"));
    tpl = "x{{#a}}{{/a}}{{^b}}never closed";
    CHECK(html_check(tpl, names, 2) == strstr(tpl, "{{^b"));
    tpl = "{{/a}}";
    CHECK(html_check(tpl, names, 2) == tpl);
    tpl = "{{#a}}{{^a}}{{/a}}{{/a}}"; /* the same name nested: the renderer cannot */
    CHECK(html_check(tpl, names, 2) == strstr(tpl, "{{^a"));
}

static const struct check_case cases[] = {
    CHECK_CASE(test_escape_markup),
    CHECK_CASE(test_escape_controls),
    CHECK_CASE(test_escape_utf8),
    CHECK_CASE(test_escape_output_is_utf8),
    CHECK_CASE(test_render_text_value),
    CHECK_CASE(test_render_attribute_breakout),
    CHECK_CASE(test_render_value_not_reexpanded),
    CHECK_CASE(test_render_nul_in_value),
    CHECK_CASE(test_render_unknown_name_is_empty),
    CHECK_CASE(test_render_repeated_and_first_wins),
    CHECK_CASE(test_render_sections),
    CHECK_CASE(test_render_nested_sections),
    CHECK_CASE(test_render_malformed_tags_are_text),
    CHECK_CASE(test_check_ok),
    CHECK_CASE(test_check_unknown_name),
    CHECK_CASE(test_check_malformed),
    CHECK_CASE(test_check_unbalanced),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
