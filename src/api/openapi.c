/*
 * openapi: GET {base}/openapi.json, the API contract (see api.h).
 *
 * docs/openapi.json is the source; the build embeds its bytes (cmake/embed.cmake
 * generates openapi_json[]). The served copy differs from the file in one place
 * only: the top-level servers entry names the configured --base-path (the file
 * says "/v2", the default, and then the copy is the file byte for byte). It is
 * built once at startup, with its ETag, so an answer is one copy into the
 * response body and no hashing.
 */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "common/json_write.h"

/* cmake/embed.cmake: the bytes of docs/openapi.json (NUL-terminated, not counted). */
extern const unsigned char openapi_json[];
extern const size_t openapi_json_len;

/* The top-level servers entry of docs/openapi.json: the first "url" in the file. */
static const char server_url[] = "\"url\": \"/v2\"";

void api_openapi_init(struct handlers *h) {
    const char *doc = (const char *)openapi_json;
    struct buf *b = &h->openapi_doc;
    buf_init(b, openapi_json_len + 64);
    const char *at = strstr(doc, server_url);
    const char *base = h->set.base_path;
    if (at && strcmp(base, "/v2") != 0) {
        buf_append(b, doc, (size_t)(at - doc));
        buf_append_str(b, "\"url\": ");
        /* "/" stands for the empty base path (the API at the root). */
        if (base[0])
            json_write_string(b, base, strlen(base));
        else
            buf_append_str(b, "\"/\"");
        size_t skip = (size_t)(at - doc) + sizeof server_url - 1;
        buf_append(b, doc + skip, openapi_json_len - skip);
    } else {
        buf_append(b, doc, openapi_json_len);
    }
    /* A strong ETag: 128 bits of BLAKE2b of the bytes served. */
    unsigned char hash[16];
    crypto_generichash(hash, sizeof hash, (const unsigned char *)b->ptr, b->len, NULL, 0);
    char hex[2 * sizeof hash + 1];
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    snprintf(h->openapi_head, sizeof h->openapi_head,
             "ETag: \"%s\"\r\nCache-Control: public, max-age=300\r\n", hex);
}

void api_openapi_destroy(struct handlers *h) {
    buf_destroy(&h->openapi_doc);
}

void api_openapi_reply(struct handlers *h, struct http_response *r) {
    r->route = MR_OPENAPI;
    buf_reset(&r->body);
    buf_append(&r->body, h->openapi_doc.ptr, h->openapi_doc.len);
    r->extra = h->openapi_head;
}
