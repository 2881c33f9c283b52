/* Routes, methods and path ids. */
#include <llhttp.h>

#include "check.h"
#include "core/router.h"
#include "storage/record.h"

static enum err match(const char *path, uint8_t method, struct route *r) {
    struct slice base = SLICE_LIT("/v2");
    return router_match(base, (struct slice){path, strlen(path)}, method, r);
}

static void test_routes(void) {
    struct route r;
    CHECK_EQ_INT(match("/v2/theme", HTTP_POST, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_CREATE);
    CHECK_EQ_INT(r.type, REC_THEME);
    CHECK_EQ_INT(match("/v2/theme", HTTP_GET, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_LIST);
    CHECK_EQ_INT(match("/v2/theme/42", HTTP_PUT, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_UPDATE);
    CHECK_EQ_INT((int)r.id, 42);
    CHECK_EQ_INT(match("/v2/address/7", HTTP_POST, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_UPDATE);
    CHECK_EQ_INT(match("/v2/event/9", HTTP_GET, &r), ERR_NONE);
    CHECK_EQ_INT(r.type, REC_EVENT);
    CHECK_EQ_INT(match("/healthz", HTTP_GET, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_HEALTH);
}

static void test_method_not_allowed(void) {
    struct route r;
    CHECK_EQ_INT(match("/v2/theme/7", HTTP_POST, &r), ERR_METHOD_NOT_ALLOWED);
    CHECK_EQ_STR(r.allow, "Allow: GET, HEAD, PUT, DELETE\r\n");
    CHECK_EQ_INT(match("/v2/theme", HTTP_DELETE, &r), ERR_METHOD_NOT_ALLOWED);
    CHECK_EQ_STR(r.allow, "Allow: GET, HEAD, POST\r\n");
    CHECK_EQ_INT(match("/v2/address/7", HTTP_PATCH, &r), ERR_METHOD_NOT_ALLOWED);
    CHECK_EQ_STR(r.allow, "Allow: GET, HEAD, PUT, POST, DELETE\r\n");
    CHECK_EQ_INT(match("/healthz", HTTP_POST, &r), ERR_METHOD_NOT_ALLOWED);
    CHECK_EQ_STR(r.allow, "Allow: GET, HEAD\r\n");
}

/* HEAD is GET without the body: the same action wherever GET is served. */
static void test_head_is_get(void) {
    struct route r;
    CHECK_EQ_INT(match("/v2/theme", HTTP_HEAD, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_LIST);
    CHECK_EQ_INT(match("/v2/event/9", HTTP_HEAD, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_GET);
    CHECK_EQ_INT(r.type, REC_EVENT);
    CHECK_EQ_INT((int)r.id, 9);
    CHECK_EQ_INT(match("/v2/address/7", HTTP_HEAD, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_GET);
    CHECK_EQ_INT(match("/healthz", HTTP_HEAD, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_HEALTH);
    CHECK_EQ_INT(match("/v2/theme/0", HTTP_HEAD, &r), ERR_NOT_FOUND);
}

/* Not ours: bad ids, unknown kinds, trailing slashes, other versions. */
static void test_not_found(void) {
    struct route r;
    const char *missing[] = {"/v2/theme/0",
                             "/v2/theme/-1",
                             "/v2/theme/01",
                             "/v2/theme/1.5",
                             "/v2/theme/abc",
                             "/v2/theme/9007199254740992",
                             "/v2/theme/",
                             "/v2/user/1",
                             "/v2/themes",
                             "/v1/theme",
                             "/",
                             "/v2",
                             "/v2/",
                             "/v2/theme/1/x",
                             "/v2theme"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        if (match(missing[i], HTTP_GET, &r) != ERR_NOT_FOUND) fprintf(stderr, "%s\n", missing[i]);
        CHECK_EQ_INT(match(missing[i], HTTP_GET, &r), ERR_NOT_FOUND);
    }
}

static void test_openapi(void) {
    struct route r;
    CHECK_EQ_INT(match("/v2/openapi.json", HTTP_GET, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_OPENAPI);
    CHECK_EQ_INT(match("/v2/openapi.json", HTTP_HEAD, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_OPENAPI);
    CHECK_EQ_INT(match("/v2/openapi.json", HTTP_POST, &r), ERR_METHOD_NOT_ALLOWED);
    CHECK_EQ_STR(r.allow, "Allow: GET, HEAD\r\n");
    CHECK_EQ_INT(match("/openapi.json", HTTP_GET, &r), ERR_NOT_FOUND);
    CHECK_EQ_INT(match("/v2/openapi.json/", HTTP_GET, &r), ERR_NOT_FOUND);
    CHECK_EQ_INT(match("/v2/openapi.jsonx", HTTP_GET, &r), ERR_NOT_FOUND);
    CHECK_EQ_INT(router_match((struct slice){"", 0}, SLICE_LIT("/openapi.json"), HTTP_GET, &r),
                 ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_OPENAPI);
}

static void test_largest_id(void) {
    struct route r;
    CHECK_EQ_INT(match("/v2/theme/9007199254740991", HTTP_GET, &r), ERR_NONE);
    CHECK(r.id == RECORD_ID_MAX);
}

/* An empty base path serves at the root. */
static void test_empty_base(void) {
    struct route r;
    struct slice root = {"", 0};
    CHECK_EQ_INT(router_match(root, SLICE_LIT("/theme"), HTTP_POST, &r), ERR_NONE);
    CHECK_EQ_INT(r.action, ACT_CREATE);
}

/* A query string, pair by pair: "=" optional, empty pairs kept, a trailing '&' ends it. */
static void test_query_pairs(void) {
    struct slice q = SLICE_LIT("limit=5&&cursor&wait=&after=7&"), name, val;
    const char *want[][2] = {
        {"limit", "5"}, {"", ""}, {"cursor", ""}, {"wait", ""}, {"after", "7"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        CHECK(query_next(&q, &name, &val));
        CHECK_EQ_MEM(name.ptr, name.len, want[i][0]);
        CHECK_EQ_MEM(val.ptr, val.len, want[i][1]);
    }
    CHECK(!query_next(&q, &name, &val));
    struct slice empty = {"", 0};
    CHECK(!query_next(&empty, &name, &val));
}

static const struct check_case cases[] = {
    CHECK_CASE(test_routes),    CHECK_CASE(test_method_not_allowed), CHECK_CASE(test_head_is_get),
    CHECK_CASE(test_not_found), CHECK_CASE(test_largest_id),         CHECK_CASE(test_empty_base),
    CHECK_CASE(test_openapi),   CHECK_CASE(test_query_pairs),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
