/*
 * signin_throttle: when the account site lets a sign-in be checked. Failed
 * sign-ins are counted per name and per client address (throttle.h has the
 * policy: free failures, then a doubling wait).
 *
 * Sign-ins being checked count as failures of their name until their hash
 * is done: else attempts pipelined on one connection or sent in parallel
 * would all pass the throttle before the first failure is recorded (one
 * client could try a whole hashing queue of passwords on a name, found by
 * fuzz_http). For an address they count once it has a recorded failure: an
 * address with none may be a whole office behind one NAT signing in at
 * once. So past the free failures, a name or a failing address has at most
 * one attempt in flight. The list holds at most the hashing queue's jobs,
 * so a scan of it is cheap.
 */
#include <string.h>

#include "handlers_internal.h"

/* Sign-ins in flight for name (returned) and for addr (*by_addr). */
static uint32_t in_flight(const struct handlers *h, struct slice name, const uint8_t *addr,
                          size_t alen, uint32_t *by_addr) {
    uint32_t n = 0;
    *by_addr = 0;
    for (const struct signin_flight *f = h->verifying; f; f = f->next) {
        n += strlen(f->name) == name.len && memcmp(f->name, name.ptr, name.len) == 0;
        *by_addr += f->addr_len == alen && memcmp(f->addr, addr, alen) == 0;
    }
    return n;
}

uint32_t signin_wait(const struct handlers *h, struct slice name, const uint8_t *addr, size_t alen,
                     uint64_t now) {
    uint32_t wait_name = throttle_check(&h->by_name, name.ptr, name.len, now);
    uint32_t wait_addr = throttle_check(&h->by_addr, addr, alen, now);
    uint32_t wait = wait_name > wait_addr ? wait_name : wait_addr;
    if (wait) return wait;
    uint32_t fly_addr, fly_name = in_flight(h, name, addr, alen, &fly_addr);
    uint32_t free_failures = h->by_name.policy.free_failures;
    uint32_t name_failures = throttle_failures(&h->by_name, name.ptr, name.len, now);
    uint32_t addr_failures = throttle_failures(&h->by_addr, addr, alen, now);
    if ((fly_name && name_failures + fly_name >= free_failures) ||
        (fly_addr && addr_failures && addr_failures + fly_addr >= free_failures))
        return 1; /* the attempts in flight decide: they end within a second or two */
    return 0;
}

void signin_flight_add(struct handlers *h, struct signin_flight *f) {
    f->prev = NULL;
    f->next = h->verifying;
    if (f->next) f->next->prev = f;
    h->verifying = f;
}

void signin_flight_remove(struct handlers *h, struct signin_flight *f) {
    if (f->prev)
        f->prev->next = f->next;
    else if (h->verifying == f)
        h->verifying = f->next;
    if (f->next) f->next->prev = f->prev;
}

void signin_failed(struct handlers *h, const struct signin_flight *f, uint64_t now) {
    throttle_fail(&h->by_name, f->name, strlen(f->name), now);
    throttle_fail(&h->by_addr, f->addr, f->addr_len, now);
}

void signin_succeeded(struct handlers *h, const struct signin_flight *f) {
    throttle_success(&h->by_name, f->name, strlen(f->name));
}
