/* index: the id lists' lower bound, the one search behind list pages and removal. */
#include "check.h"
#include "index.h"

static uint64_t ids[] = {3, 5, 9, 12};
static const struct id_list list = {ids, 4, 4};

static void test_lower_bound_empty_list(void) {
    static const struct id_list empty;
    CHECK_EQ_INT(id_list_lower_bound(&empty, 7), 0);
}

static void test_lower_bound_below_every_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&list, 1), 0);
}

static void test_lower_bound_exact_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&list, 3), 0);
    CHECK_EQ_INT(id_list_lower_bound(&list, 9), 2);
    CHECK_EQ_INT(id_list_lower_bound(&list, 12), 3);
}

static void test_lower_bound_between_ids(void) {
    CHECK_EQ_INT(id_list_lower_bound(&list, 4), 1);
    CHECK_EQ_INT(id_list_lower_bound(&list, 10), 3);
}

static void test_lower_bound_above_every_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&list, 13), 4);
    CHECK_EQ_INT(id_list_lower_bound(&list, UINT64_MAX), 4);
}

int main(void) {
    RUN_TEST(test_lower_bound_empty_list);
    RUN_TEST(test_lower_bound_below_every_id);
    RUN_TEST(test_lower_bound_exact_id);
    RUN_TEST(test_lower_bound_between_ids);
    RUN_TEST(test_lower_bound_above_every_id);
    return 0;
}
