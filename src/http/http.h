/*
 * http: the llhttp adapter and the response writer.
 *
 * http_parser is fed exactly the bytes each read returned; it accumulates
 * the request line and the few headers the service uses into the request
 * (other headers are counted against the header limit and dropped), and
 * reports progress through struct http_events. Only this module knows
 * llhttp's conventions (callbacks return 0 to go on, HPE_PAUSED to pause).
 *
 * A response is a status, a few header flags and a body buffer; the head is
 * serialized only when the response is written, so that "Connection: close"
 * can still be decided late. Buffers keep their capacity across requests.
 */
#ifndef EVENTD_HTTP_H
#define EVENTD_HTTP_H

#include <llhttp.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

/* Request headers kept for the handlers besides Authorization (see http_request_field). */
enum http_field {
    HF_COOKIE,
    HF_CONTENT_TYPE,
    HF_ACCEPT,
    HF_FORWARDED_FOR,   /* X-Forwarded-For */
    HF_REQUEST_ID,      /* X-Request-ID */
    HF_HOST,            /* Host (checked by the parser: at most one, well formed) */
    HF_ORIGIN,          /* Origin (the account site's form posts) */
    HF_FETCH_SITE,      /* Sec-Fetch-Site (the same) */
    HF_IDEMPOTENCY_KEY, /* Idempotency-Key (the API's creates) */
    HF_IF_MATCH,        /* If-Match (the API's updates and deletions) */
    HF_IF_NONE_MATCH,   /* If-None-Match (the API's reads, updates and deletions) */
    HF_COUNT
};

/*
 * What the parser keeps of a request head: the target, the Authorization
 * value and the other kept headers (enum http_field), whose values lie back
 * to back in fields. http_parser_init allocates it; the server's parsers
 * live in its kits, so an idle connection carries none.
 */
struct http_kept {
    struct buf target;        /* request target as sent (path and query) */
    struct buf authorization; /* Authorization header value */
    struct buf fields;
    uint32_t off[HF_COUNT], len[HF_COUNT]; /* into fields; len 0: absent or empty */
    bool seen[HF_COUNT];                   /* the header came */
};

struct http_limits {
    uint32_t max_header_bytes; /* request line + headers */
    uint32_t max_body_bytes;
};

/*
 * Who is connected. local says which listener accepted the connection: the
 * local Unix socket (then family is 0) or the TCP listener (then family is 4
 * or 6 with the address in network order: a TCP connection whose peer cannot
 * be read is closed before any request is parsed). Only local, never the
 * address, tells the admin socket apart.
 */
struct http_peer {
    bool local;
    uint8_t family;
    uint8_t addr[16];
};

/*
 * The request being parsed. Its buffers and slices are rewritten when the
 * next request on the connection begins, so everything here, path and
 * query included, is valid until the next request on the connection: use
 * it within this request's callbacks and copy what must live longer. (The
 * server lends the whole parser, this request included, to the next
 * connection once this one goes idle.)
 */
struct http_request {
    uint8_t method;        /* llhttp_method_t */
    uint8_t version_minor; /* HTTP/1.x */
    bool keep_alive;       /* what the client asked for (version and Connection) */
    bool expect_continue;  /* "Expect: 100-continue" */
    bool has_body;         /* Content-Length > 0 or chunked */
    uint8_t cur_header;    /* which interesting header the parser is in */
    uint32_t head_bytes;   /* request line + headers received so far, every byte */
    /* Who is connected: set by the parser's owner (the server: from its connection). */
    struct http_peer peer;
    uint64_t content_length; /* 0 when chunked or absent */
    uint64_t body_bytes;     /* received so far */
    struct http_kept *kept;  /* target, Authorization and the kept headers */
    struct slice path;       /* into target, set when the headers are complete; valid
                              * until the next request on the connection */
    struct slice query;      /* into target, without the '?'; valid as path */
};

/*
 * The value of a kept header (enum http_field), valid as path. Several
 * lines of one header are joined with ", " (RFC 9110 5.3), except Cookie,
 * whose lines are joined with "; " (RFC 6265 5.4). Absent: length 0.
 */
static inline struct slice http_request_field(const struct http_request *r, enum http_field f) {
    const struct http_kept *k = r->kept;
    /* No kept header yet: fields.ptr may be NULL, and NULL + 0 is undefined. */
    if (k->len[f] == 0) return (struct slice){"", 0};
    return (struct slice){k->fields.ptr + k->off[f], k->len[f]};
}

/* Callbacks from the parser to its owner (the connection). */
struct http_events {
    /* Headers complete. Return 0 to go on with the body, or 1 to stop
     * parsing because the owner has answered already (execute then returns
     * HTTP_ERROR with error ERR_NONE). */
    int (*on_headers)(void *owner, struct http_request *req);
    /* A piece of the body, as it arrived: ptr is valid only during the call,
     * except the piece that ends a body framed by Content-Length: llhttp
     * completes the request on its last byte, so on_complete follows within
     * the same http_parser_execute, on the same bytes. */
    void (*on_body)(void *owner, struct http_request *req, const char *ptr, size_t len);
    /* The request is complete. Return true to pause parsing after it. */
    bool (*on_complete)(void *owner, struct http_request *req);
};

enum http_status { HTTP_OK, HTTP_PAUSED, HTTP_ERROR };

enum { PAUSE_NONE, PAUSE_HEADERS, PAUSE_CHUNKED_END };

struct http_parser {
    llhttp_t ll;
    struct http_request req;
    const struct http_limits *limits;
    const struct http_events *ev;
    void *owner;            /* may change between requests (see http_parser_reset) */
    enum err error;         /* the error to answer when execute returns HTTP_ERROR */
    bool stopped;           /* a callback stopped the parser (error is ours, not llhttp's) */
    const char *why;        /* what was wrong, for the answer's message (static), or NULL */
    uint8_t internal_pause; /* PAUSE_*: why llhttp paused itself, for execute */
    bool in_message;        /* bytes of a request seen, request not complete */
    bool in_headers;        /* ... and its headers are not complete */
    const char *begin_at;   /* where a request began in the segment being parsed, or NULL */
    char name[24];          /* start of a header name that came in pieces (then of an Expect
                             * or TE value) */
    size_t name_len, value_len;
    size_t value_trim; /* value_len without trailing whitespace */
    /* Header accounting for RFC 9112's framing rules (see http.c). */
    uint8_t n_host, n_auth, n_te; /* field lines seen, saturating at 2 */
    uint8_t cur_field;            /* enum http_field of a kept header being parsed */
    bool te_chunked;              /* the Transfer-Encoding value is exactly "chunked" */
    bool coded;                   /* a Content-Encoding other than "identity" came */
    bool bad_field;               /* a header name or Host value broke the grammar */
    uint8_t host_state;           /* HOST_*: where in the Host value we are */
    bool version_done;            /* the request line's version was well formed */
    bool cr_next;                 /* the next segment's first byte must end the request line */
    char prev_byte;               /* the byte before the next segment (the last one consumed) */
    const char *version_end;      /* where the version's last piece ended (on_version) */
    /* Contiguity of one header value across pieces: a gap is an obs-fold. */
    bool value_open;      /* a piece of the current value has been seen */
    bool in_gap;          /* between a header's name and its value's first piece */
    bool gap_lf;          /* ... and a line break was in it (an earlier segment's part) */
    const char *gap_from; /* where the gap starts in this segment, or NULL: at its start */
    uint8_t name_kind;    /* what the header name being parsed is (see http.c) */
    /* The CRLF that ends each chunk's data, checked here (see http.c). */
    uint8_t crlf_left;     /* bytes of it not yet checked */
    const char *value_end; /* where its next piece must start, or NULL */
    const char *seg_start; /* the segment llhttp is parsing */
    const char *seg_end;
    const char *crlf_at; /* where crlf_left's bytes are in the segment, or NULL: at its start */
};

void http_kept_init(struct http_kept *k);
void http_kept_destroy(struct http_kept *k);

/*
 * Initializes p (caller-owned storage). limits, ev and owner are stored, not
 * copied: they must stay valid for as long as p is used, across
 * http_parser_reset (the server passes its own limits and a static table,
 * which outlive it, and sets owner to each connection it lends p to).
 */
void http_parser_init(struct http_parser *p, const struct http_limits *limits,
                      const struct http_events *ev, void *owner);
/* Frees the request's buffers (the kept headers). */
void http_parser_destroy(struct http_parser *p);
/*
 * Starts over for a new connection (buffers are kept). A parser between two
 * requests (the last one complete, execute not paused, no byte of the next
 * one parsed) needs none: it may go on with another connection's bytes, and
 * another owner, as it is.
 */
void http_parser_reset(struct http_parser *p);
/*
 * Parses len bytes (not kept after the call: what the request needs is
 * copied). *consumed is how many were used: all of them unless
 * the result is HTTP_PAUSED (resume with the rest after http_parser_resume)
 * or HTTP_ERROR (p->error says what to answer).
 */
enum http_status http_parser_execute(struct http_parser *p, const char *ptr, size_t len,
                                     size_t *consumed);
void http_parser_resume(struct http_parser *p);
/*
 * The method and path (without the query) of the request being parsed, when
 * its request line was read whole but the request was refused before its
 * headers reached the owner (431, 413 by its Content-Length, 408, a bad
 * header), for the access log; false when there is no such line.
 */
bool http_parser_request_line(struct http_parser *p, uint8_t *method, struct slice *path);

/* ---- responses ---- */

#define HTTP_REQUEST_ID_MAX 64 /* bytes of an X-Request-ID kept; longer ones are replaced */
#define HTTP_PATH_KEEP 1024    /* bytes of the path kept with the response for the access log */
#define HTTP_ETAG_MAX 72       /* bytes of a formatted http_etag, quotes included */

/*
 * An entity tag of 1 to 3 numbers: "v0", "v0-<tag[1]>v1", "v0-<tag[1]>v1-<tag[2]>v2"
 * (the API's ETags: core/etag.h); n 0: none. A response keeps it as numbers, so that
 * the ring of response slots stays small, and the head writer formats it.
 */
struct http_etag {
    uint64_t v[4];
    char tag[4];
    uint8_t n;
};
/* Writes e, quotes included, into out (HTTP_ETAG_MAX bytes); returns its length. */
size_t http_etag_format(const struct http_etag *e, char *out);

/*
 * True when an X-Request-ID value can be echoed as it is: 1 to
 * HTTP_REQUEST_ID_MAX bytes of [A-Za-z0-9._:-].
 */
bool http_request_id_ok(struct slice v);

struct http_response {
    uint16_t status;
    bool close;               /* the connection closes after this response */
    bool no_body;             /* 204: no body, no Content-Type */
    bool http10;              /* HTTP/1.0 client: keep-alive must be said */
    bool head_only;           /* a HEAD request: the head is sent, the body dropped */
    const char *extra;        /* extra header lines, each ending "\r\n"; static: must outlive r */
    const char *content_type; /* static; NULL: application/json */
    struct buf headers;       /* more header lines built for this response (Set-Cookie...);
                               * each ends "\r\n"; http_response_finish ends the head here */
    uint64_t lsn;             /* sent only once the store has acknowledged this LSN */
    struct http_etag etag;    /* an "ETag: " line when etag.n > 0 */
    struct buf body;
    char head[384];
    uint32_t head_len;
    uint64_t head_gen; /* which of http.c's head starts head begins with; 0: none */
    /* What the access log and the metrics need of the request, kept with its
     * response: a pipelined next request rewrites the request's own buffers
     * before this response leaves. The server fills them when the headers
     * are complete (or when it answers an error); the handler adds the
     * route and the user. */
    uint8_t route;          /* the handler's metrics label (enum metrics_route); 0: other */
    uint8_t method;         /* llhttp_method_t + 1; 0: the request line was not read */
    uint8_t request_id_len; /* 0: no X-Request-ID line */
    uint64_t user_id;       /* the caller, 0 if none */
    uint64_t start_ns;      /* uv_hrtime() of the read that brought the request's first byte */
    struct buf path;        /* the request's path, without the query, cut at HTTP_PATH_KEEP */
    char request_id[HTTP_REQUEST_ID_MAX]; /* echoed as X-Request-ID; [A-Za-z0-9._:-] only */
};

void http_response_init(struct http_response *r);
void http_response_destroy(struct http_response *r);
void http_response_reset(struct http_response *r);
/*
 * Replaces the response with the JSON error envelope
 * {"Status":"error","Error":{"Code":..,"Message":..[,"Field":..]}}, with no
 * extra header lines (set r->extra after it); message NULL uses the error's
 * default. field and message are copied into the body: they need not
 * outlive the call.
 */
void http_response_error(struct http_response *r, enum err e, const char *field,
                         const char *message);
/* Serializes the head into r->head: "Connection: close" when the connection
 * closes after it, "Connection: keep-alive" to an HTTP/1.0 client otherwise,
 * and "X-Request-ID" when the response has one. */
void http_response_finish(struct http_response *r, bool keep_alive);

/* The current IMF-fixdate, recomputed at most once a second: a static
 * buffer, valid until the next call. */
const char *http_date(void);

#endif
