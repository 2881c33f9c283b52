/* router: see router.h. */
#include "core/router.h"

#include <llhttp.h>
#include <string.h>

#include "storage/record.h"

static enum err pick(uint8_t method, struct route *out, const char *allow, int nalts,
                     const uint8_t *methods, const uint8_t *actions) {
    /* HEAD is GET without the body (RFC 9110 9.3.2): the same action, the same
     * answer; the server sends its head only. */
    if (method == HTTP_HEAD) method = HTTP_GET;
    for (int i = 0; i < nalts; i++) {
        if (methods[i] == method) {
            out->action = actions[i];
            return ERR_NONE;
        }
    }
    out->allow = allow;
    return ERR_METHOD_NOT_ALLOWED;
}

enum err router_match(struct slice base, struct slice path, uint8_t method, struct route *out) {
    memset(out, 0, sizeof *out);
    if (slice_eq(path, "/healthz", 8)) {
        static const uint8_t m[] = {HTTP_GET}, a[] = {ACT_HEALTH};
        return pick(method, out, "Allow: GET, HEAD\r\n", 1, m, a);
    }
    if (path.len <= base.len + 1 || memcmp(path.ptr, base.ptr, base.len) != 0 ||
        path.ptr[base.len] != '/')
        return ERR_NOT_FOUND;
    const char *p = path.ptr + base.len + 1, *end = path.ptr + path.len;
    if (slice_eq((struct slice){p, (size_t)(end - p)}, "openapi.json", 12)) {
        static const uint8_t m[] = {HTTP_GET}, a[] = {ACT_OPENAPI};
        return pick(method, out, "Allow: GET, HEAD\r\n", 1, m, a);
    }
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash && end - p == 7 && memcmp(p, "changes", 7) == 0) {
        static const uint8_t m[] = {HTTP_GET}, a[] = {ACT_CHANGES};
        return pick(method, out, "Allow: GET, HEAD\r\n", 1, m, a);
    }
    const struct kind_desc *k = record_kind_by_path(p, (size_t)((slash ? slash : end) - p));
    if (!k) return ERR_NOT_FOUND;
    out->type = k->type;

    if (!slash) {
        static const uint8_t m[] = {HTTP_POST, HTTP_GET}, a[] = {ACT_CREATE, ACT_LIST};
        return pick(method, out, "Allow: GET, HEAD, POST\r\n", 2, m, a);
    }
    if (record_parse_id(slash + 1, (size_t)(end - slash - 1), &out->id) < 0) return ERR_NOT_FOUND;
    if (k->type == REC_ADDRESS) {
        /* The spec's own example updates an address with POST: take it as PUT. */
        static const uint8_t m[] = {HTTP_GET, HTTP_PUT, HTTP_POST, HTTP_DELETE},
                             a[] = {ACT_GET, ACT_UPDATE, ACT_UPDATE, ACT_DELETE};
        return pick(method, out, "Allow: GET, HEAD, PUT, POST, DELETE\r\n", 4, m, a);
    }
    static const uint8_t m[] = {HTTP_GET, HTTP_PUT, HTTP_DELETE},
                         a[] = {ACT_GET, ACT_UPDATE, ACT_DELETE};
    return pick(method, out, "Allow: GET, HEAD, PUT, DELETE\r\n", 3, m, a);
}

bool query_next(struct slice *rest, struct slice *name, struct slice *val) {
    if (!rest->len) return false;
    const char *p = rest->ptr, *end = p + rest->len;
    const char *amp = memchr(p, '&', rest->len);
    const char *stop = amp ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(stop - p));
    *name = (struct slice){p, (size_t)((eq ? eq : stop) - p)};
    *val = eq ? (struct slice){eq + 1, (size_t)(stop - eq - 1)} : (struct slice){stop, 0};
    *rest = amp ? (struct slice){amp + 1, (size_t)(end - amp - 1)} : (struct slice){end, 0};
    return true;
}
