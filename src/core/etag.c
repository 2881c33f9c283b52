/*
 * etag: see etag.h.
 */
#include "core/etag.h"

#include <string.h>

void etag_of(const struct db *db, const struct record *r, struct http_etag *out) {
    out->n = 1;
    out->v[0] = r->rev;
    if (r->type == REC_EVENT) {
        static const struct {
            int field;
            char tag;
        } embeds[] = {{EVENT_THEME_ID, 't'}, {EVENT_ADDRESS_ID, 'a'}};
        for (int i = 0; i < 2; i++) {
            uint64_t id = record_ref(r, embeds[i].field);
            const struct record *t = id ? db_get(db, id) : NULL;
            if (!t) continue;
            out->tag[out->n] = embeds[i].tag;
            out->v[out->n++] = t->rev;
        }
    } else if (r->event_id) {
        out->tag[1] = 'e';
        out->v[1] = r->event_id;
        out->n = 2;
    }
    uint32_t node = db_node_id(db);
    if (node) {
        out->tag[out->n] = 'n';
        out->v[out->n++] = node;
    }
}

static bool ows(char c) {
    return c == ' ' || c == '\t';
}

/* etagc (RFC 9110 8.8.3): "!" / %x23-7E / obs-text; not DQUOTE, not a control. */
static bool etagc(unsigned char c) {
    return c == 0x21 || (c >= 0x23 && c != 0x7f);
}

int etag_match(struct slice value, const char *etag, size_t etag_len, bool weak) {
    const char *p = value.ptr, *end = value.ptr + value.len;
    while (p < end && ows(*p))
        p++;
    const char *e = end;
    while (e > p && ows(e[-1]))
        e--;
    if (e - p == 1 && *p == '*') return etag != NULL;
    if (p == e) return -1;
    int found = 0;
    while (p < e) {
        /* #entity-tag: empty elements and whitespace around commas are allowed. */
        if (*p == ',' || ows(*p)) {
            p++;
            continue;
        }
        bool is_weak = false;
        if (e - p >= 2 && p[0] == 'W' && p[1] == '/') {
            is_weak = true;
            p += 2;
        }
        if (p == e || *p != '"') return -1;
        const char *s = p++;
        while (p < e && etagc((unsigned char)*p))
            p++;
        if (p == e || *p != '"') return -1;
        p++;
        size_t len = (size_t)(p - s);
        while (p < e && ows(*p))
            p++;
        if (p < e && *p != ',') return -1;
        if (etag && (weak || !is_weak) && len == etag_len && memcmp(s, etag, len) == 0) found = 1;
    }
    return found;
}
