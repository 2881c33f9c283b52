/*
 * bench_recv: what read(2) costs on a socket over recv(2), the one kernel
 * difference left between eventd's reads (libuv reads a socket with read)
 * and nginx's (recv). Calls each on an empty non-blocking loopback TCP socket
 * (the EAGAIN path: the system call's entry, the file lookup and the socket
 * layer, the same for both but read's VFS steps), ROUNDS rounds of N calls,
 * alternating, and prints the median ns per call of each and their
 * difference. Pin it to one CPU (taskset -c 0) for steady figures.
 *
 *   bench_recv [N] [ROUNDS]      (default 1000000 calls, 10 rounds)
 */
#define _GNU_SOURCE /* CLOCK_MONOTONIC in C11 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ns per call of n calls of read (use_recv 0) or recv on the empty socket fd. */
static double per_call(int fd, long n, int use_recv) {
    char buf[256];
    double t0 = now();
    for (long i = 0; i < n; i++) {
        ssize_t r = use_recv ? recv(fd, buf, sizeof buf, 0) : read(fd, buf, sizeof buf);
        if (r != -1 || errno != EAGAIN) {
            fprintf(stderr, "bench_recv: expected EAGAIN\n");
            exit(1);
        }
    }
    return (now() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 10;
    if (n < 1 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: bench_recv [N] [ROUNDS (1..1000)]\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s = -1;
    if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0 || listen(l, 1) < 0 ||
        connect(c, (struct sockaddr *)&a, sizeof a) < 0 || (s = accept(l, NULL, NULL)) < 0 ||
        fcntl(s, F_SETFL, O_NONBLOCK) < 0) {
        perror("bench_recv: loopback socket");
        return 1;
    }
    double *t[2] = {calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
    if (!t[0] || !t[1]) return 1;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++)
            t[k][r] = per_call(s, n, k);
    for (int k = 0; k < 2; k++)
        qsort(t[k], (size_t)rounds, sizeof(double), cmp);
    double rd = t[0][rounds / 2], rv = t[1][rounds / 2];
    printf("read %.1f ns/call, recv %.1f ns/call (medians of %d rounds of %ld): read costs %.1f "
           "ns more\n",
           rd, rv, rounds, n, rd - rv);
    free(t[0]);
    free(t[1]);
    close(s);
    close(c);
    close(l);
    return 0;
}
