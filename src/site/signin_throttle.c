/*
 * signin_throttle: when the account site lets a sign-in be checked or a
 * registration be hashed, and the client address both are counted by.
 *
 * Failed sign-ins are counted per name and per client address (throttle.h
 * has the policy: free failures, then a doubling wait).
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
 *
 * Right passwords cost a hash too, and are never counted as failures: one
 * client signing in again and again on a few accounts of its own kept the
 * sign-in lane full, and everybody else's sign-in got 503 (found by review).
 * So, failures or not, a name has at most SIGNIN_PER_NAME checks in flight
 * (a double click), and a client address at most an eighth of the sign-in
 * queue (at least 2): an office behind one NAT signing in at once waits a
 * second for some of its sign-ins (429, Retry-After: 1), and filling the
 * lane takes eight addresses.
 *
 * Registrations are counted per client address and in a server-wide token
 * bucket when their hash is queued, so pipelined ones cannot slip past. A
 * registration for a taken name is counted and hashed like any other (the
 * name is checked once the hash is done): probing names costs what
 * registering does, and answers the same until the final 409.
 *
 * The client address is the key both tables use (net_client_key): its family and,
 * an IPv6 address cut to its /64 (one subscriber's usual allocation, so a
 * client cannot walk its prefix for fresh keys) and an IPv4-mapped IPv6
 * address (a dual-stack listener's) taken as the IPv4 address it is.
 */
#include <arpa/inet.h>
#include <string.h>

#include "site/site.h"

static bool trusted(const struct handlers *h, uint8_t family, const uint8_t *a) {
    for (uint32_t i = 0; i < h->nproxies; i++)
        if (net_block_contains(&h->proxies[i], family, a)) return true;
    return false;
}

size_t site_client_addr(const struct handlers *h, const struct http_request *req, uint8_t out[17]) {
    uint8_t family = req->peer.family;
    uint8_t addr[16];
    memcpy(addr, req->peer.addr, 16);
    if (!family || !trusted(h, family, addr)) goto done;
    /* Rightmost first: each proxy appends the address it got the request from. */
    struct slice x = http_request_field(req, HF_FORWARDED_FOR);
    const char *end = x.ptr + x.len;
    while (end > x.ptr) {
        const char *start = end;
        while (start > x.ptr && start[-1] != ',')
            start--;
        const char *a = start, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        char tmp[64];
        uint8_t fwd[16] = {0};
        uint8_t fam = 0;
        if ((size_t)(b - a) < sizeof tmp) {
            memcpy(tmp, a, (size_t)(b - a));
            tmp[b - a] = 0;
            if (inet_pton(AF_INET, tmp, fwd) == 1)
                fam = 4;
            else if (inet_pton(AF_INET6, tmp, fwd) == 1)
                fam = 6;
        }
        if (!fam) break; /* garbage: the last proxy's peer is all we know */
        family = fam;
        memcpy(addr, fwd, 16);
        if (!trusted(h, fam, addr)) break;
        end = start > x.ptr ? start - 1 : x.ptr;
    }
done:
    net_client_key(family, addr, out);
    return NET_KEY_BYTES;
}

#define SIGNIN_PER_NAME 2

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
    uint32_t addr_cap = h->set.pwhash_queue / 8 > 2 ? h->set.pwhash_queue / 8 : 2;
    if (fly_name >= SIGNIN_PER_NAME || fly_addr >= addr_cap) return 1;
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

uint32_t register_wait(const struct handlers *h, const uint8_t *addr, size_t alen, uint64_t now,
                       bool *server_wide) {
    uint32_t by_addr = throttle_check(&h->reg_by_addr, addr, alen, now);
    *server_wide = false;
    if (by_addr) return by_addr;
    uint32_t all = throttle_rate_check(&h->reg_rate, now);
    *server_wide = all > 0;
    return all;
}

void register_counted(struct handlers *h, const uint8_t *addr, size_t alen, uint64_t now) {
    throttle_fail(&h->reg_by_addr, addr, alen, now);
    throttle_rate_take(&h->reg_rate, now);
}
