/*
 * html: the one small template helper of the account site. Every value is
 * HTML-escaped on the way in; there is no raw insertion at all, so a page
 * can only gain markup from its template, never from a value.
 *
 * Template syntax (names are [a-z0-9_]+):
 *   {{name}}               the value, escaped for both text and a
 *                          double-quoted attribute value
 *   {{#name}}...{{/name}}  the inner part only when the value is non-empty
 *   {{^name}}...{{/name}}  the inner part only when the value is empty
 * Sections of different names may nest; a section may not nest inside one
 * of the same name. A value is never itself read as a template, so "{{x}}"
 * in a value comes out as that text.
 *
 * A name that is not among the variables renders as empty (and opens a
 * section that is empty): that is a programming error, which html_check
 * finds in the tests rather than at run time.
 *
 * Escaping: & < > " ' ` = become character references; a NUL byte, another
 * C0 control other than tab, LF and CR, DEL, and every byte that does not
 * start a strict UTF-8 sequence (overlongs, surrogates and code points
 * above U+10FFFF included) become U+FFFD. The output is therefore valid
 * UTF-8 whenever the template is.
 *
 * Pure: no I/O, no allocation besides growing the output buffer.
 */
#ifndef EVENTD_HTML_H
#define EVENTD_HTML_H

#include <stddef.h>
#include <string.h>

#include "common/buf.h"

/* One template variable: name and the value's bytes, borrowed for the call. */
struct html_var {
    const char *name; /* NUL-terminated, [a-z0-9_]+ */
    const char *ptr;  /* value bytes; may hold anything, NULs included */
    size_t len;       /* bytes */
};

/* A variable from a C string (NULL counts as the empty value). */
static inline struct html_var html_var_str(const char *name, const char *s) {
    return (struct html_var){name, s ? s : "", s ? strlen(s) : 0};
}

/* Appends <ptr, len> to out, escaped as described above. */
void html_escape(struct buf *out, const char *ptr, size_t len);

/*
 * Appends the template tpl (a NUL-terminated string) rendered with the
 * nvars variables to out. When a name occurs twice in vars the first wins.
 * Text of tpl outside tags is copied as it is: it is trusted markup.
 */
void html_render(struct buf *out, const char *tpl, const struct html_var *vars, size_t nvars);

/*
 * Checks tpl against the nnames names it may use: returns NULL when every
 * tag is well formed, names one of them and sections close in order; else
 * a pointer into tpl at the first bad tag ("{{" of an unknown name, of a
 * malformed tag, of a close that does not match, or of a section never
 * closed). For the tests: valid as long as tpl is.
 */
const char *html_check(const char *tpl, const char *const *names, size_t nnames);

#endif
