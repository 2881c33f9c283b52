/*
 * bench_touch: how fast this machine hands a process fresh memory. Maps MB
 * mebibytes (default 160) of anonymous memory and writes one byte per cache
 * line, as a replay writing new records does, then prints the rate in MB/s
 * and the cost per 4 KiB page. Replay cannot be faster than its resident
 * memory divided by this rate (tests/bench/memory.sh prints that bound).
 *
 *   bench_touch [MB]
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, CLOCK_MONOTONIC in C11 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 160;
    size_t n = mb << 20;
    double t0 = now();
    volatile char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < n; i += 64)
        p[i] = 1;
    double t = now() - t0;
    printf("fresh memory: %.0f MB/s (%.2f us per 4 KiB page, %zu MiB)\n", (double)n / t / 1e6,
           t * 1e6 / (double)(n / 4096), mb);
    munmap((void *)p, n);
    return 0;
}
