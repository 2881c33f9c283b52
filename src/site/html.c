/*
 * html: escaping and the {{...}} templates (see html.h).
 *
 * Rendering is one pass over the template: text is copied, a value tag is
 * replaced by the escaped value, a section whose condition fails is skipped
 * to its close tag, and the close tag of a section that was entered is
 * simply dropped. That is what lets sections of different names nest
 * without a stack at run time; html_check keeps the stack the tests need.
 */
#include "site/html.h"

#include <stdbool.h>
#include <stdint.h>

#include "storage/record.h"

/* Deepest section nesting html_check accepts. */
#define HTML_MAX_DEPTH 8

/* U+FFFD REPLACEMENT CHARACTER in UTF-8. */
#define HTML_FFFD "\xEF\xBF\xBD"

struct tag {
    char kind;        /* 0 for a value, or '#', '^', '/' */
    const char *name; /* into the template */
    size_t name_len;
    const char *end; /* just after the closing "}}" */
};

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* Parses the tag whose "{{" is at p; false when it is not a well-formed tag. */
static bool parse_tag(const char *p, struct tag *t) {
    p += 2;
    t->kind = 0;
    if (*p == '#' || *p == '^' || *p == '/') t->kind = *p++;
    t->name = p;
    while (name_char(*p))
        p++;
    t->name_len = (size_t)(p - t->name);
    if (t->name_len == 0 || p[0] != '}' || p[1] != '}') return false;
    t->end = p + 2;
    return true;
}

static bool name_is(const char *name, const char *ptr, size_t len) {
    return strlen(name) == len && memcmp(name, ptr, len) == 0;
}

static const struct html_var *find_var(const struct html_var *vars, size_t nvars,
                                       const struct tag *t) {
    for (size_t i = 0; i < nvars; i++)
        if (name_is(vars[i].name, t->name, t->name_len)) return &vars[i];
    return NULL;
}

/* Length of the strict UTF-8 sequence at s (at most avail bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    size_t n = *s >= 0xC2 && *s <= 0xDF   ? 2
               : *s >= 0xE0 && *s <= 0xEF ? 3
               : *s >= 0xF0 && *s <= 0xF4 ? 4
                                          : 0;
    if (n == 0 || n > avail) return 0;
    return record_utf8_valid((const char *)s, n) ? n : 0;
}

/* The replacement of the ASCII byte c, or NULL when it stands for itself. */
static const char *ascii_escape(unsigned char c) {
    switch (c) {
    case '&':
        return "&amp;";
    case '<':
        return "&lt;";
    case '>':
        return "&gt;";
    case '"':
        return "&quot;";
    case '\'':
        return "&#39;";
    case '`':
        return "&#96;";
    case '=':
        return "&#61;";
    case '\t':
    case '\n':
    case '\r':
        return NULL;
    default:
        return c < 0x20 || c == 0x7F ? HTML_FFFD : NULL;
    }
}

void html_escape(struct buf *out, const char *ptr, size_t len) {
    const unsigned char *s = (const unsigned char *)ptr, *end = s + len;
    const unsigned char *run = s; /* start of the bytes not yet appended */
    while (s < end) {
        const char *rep;
        if (*s < 0x80) {
            rep = ascii_escape(*s);
        } else {
            size_t n = utf8_seq(s, (size_t)(end - s));
            if (n) {
                s += n;
                continue;
            }
            rep = HTML_FFFD;
        }
        if (!rep) {
            s++;
            continue;
        }
        buf_append(out, run, (size_t)(s - run));
        buf_append_str(out, rep);
        run = ++s;
    }
    buf_append(out, run, (size_t)(s - run));
}

/* The position just after the "{{/name}}" that closes a section at p, or
 * the end of the template when there is none (html_check reports that). */
static const char *skip_section(const char *p, const struct tag *open) {
    const char *close;
    while ((close = strstr(p, "{{/")) != NULL) {
        struct tag t;
        if (parse_tag(close, &t) && t.name_len == open->name_len &&
            memcmp(t.name, open->name, t.name_len) == 0)
            return t.end;
        p = close + 3;
    }
    return p + strlen(p);
}

void html_render(struct buf *out, const char *tpl, const struct html_var *vars, size_t nvars) {
    const char *p = tpl, *open;
    while ((open = strstr(p, "{{")) != NULL) {
        buf_append(out, p, (size_t)(open - p));
        struct tag t;
        if (!parse_tag(open, &t)) {
            buf_append(out, "{{", 2);
            p = open + 2;
            continue;
        }
        p = t.end;
        const struct html_var *v = find_var(vars, nvars, &t);
        bool set = v && v->len > 0;
        if (t.kind == 0 && v)
            html_escape(out, v->ptr, v->len);
        else if ((t.kind == '#' && !set) || (t.kind == '^' && set))
            p = skip_section(p, &t);
    }
    buf_append_str(out, p);
}

static bool known(const char *const *names, size_t nnames, const struct tag *t) {
    for (size_t i = 0; i < nnames; i++)
        if (name_is(names[i], t->name, t->name_len)) return true;
    return false;
}

const char *html_check(const char *tpl, const char *const *names, size_t nnames) {
    struct tag stack[HTML_MAX_DEPTH];
    const char *at[HTML_MAX_DEPTH]; /* the "{{" of each open section */
    size_t depth = 0;
    const char *p = tpl, *open;
    while ((open = strstr(p, "{{")) != NULL) {
        struct tag t;
        if (!parse_tag(open, &t) || !known(names, nnames, &t)) return open;
        p = t.end;
        if (t.kind == '#' || t.kind == '^') {
            if (depth == HTML_MAX_DEPTH) return open;
            for (size_t i = 0; i < depth; i++)
                if (stack[i].name_len == t.name_len &&
                    memcmp(stack[i].name, t.name, t.name_len) == 0)
                    return open;
            at[depth] = open;
            stack[depth++] = t;
        } else if (t.kind == '/') {
            if (depth == 0 || stack[depth - 1].name_len != t.name_len ||
                memcmp(stack[depth - 1].name, t.name, t.name_len) != 0)
                return open;
            depth--;
        }
    }
    return depth ? at[depth - 1] : NULL;
}
