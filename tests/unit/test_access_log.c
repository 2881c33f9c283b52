/*
 * test_access_log: the access log's buffering (src/http/access_log.h): lines
 * wait across loop turns until the flush interval's timer fires, the buffer
 * fills, or the log is flushed or closed; a pipe never gets a write over
 * PIPE_BUF; a dying process writes what is buffered. The line format and its
 * escaping are in test_metrics.
 *
 * No sleeps: a loop turn is uv_run(UV_RUN_NOWAIT) with an idle handle that
 * keeps the loop alive; the interval's timer is waited for by uv_run until it
 * has fired (the test refs it: the log's own handle never keeps a loop alive).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/log.h"
#include "http/access_log.h"

static const uint8_t addr[4] = {10, 0, 0, 7};

/* One response; path_len bytes of 'p' after "/", to make lines of a chosen length. */
static void write_line(struct access_log *al, size_t path_len) {
    static char path[ACCESS_LOG_PATH_MAX];
    path[0] = '/';
    memset(path + 1, 'p', sizeof path - 1);
    struct access_entry e = {.method = 1 + 1 /* llhttp: GET */,
                             .status = 200,
                             .path = {path, path_len < sizeof path ? path_len : sizeof path},
                             .request_id = {"r-1", 3},
                             .bytes = 123,
                             .us = 45,
                             .user_id = 6,
                             .family = 4,
                             .addr = addr};
    access_log_write(al, &e);
}

/* A file with no name that the log writes to. */
static int temp_fd(void) {
    char path[] = "/tmp/eventd-test-alog-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    return fd;
}

static off_t file_size(int fd) {
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    return st.st_size;
}

/* The count of '\n' in fd's content, each line checked to be one whole JSON object. */
static int count_lines(int fd) {
    static char got[1 << 20];
    ssize_t n = pread(fd, got, sizeof got - 1, 0);
    CHECK(n >= 0);
    got[n] = 0;
    int lines = 0;
    for (char *p = got, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        CHECK(p[0] == '{' && nl[-1] == '}');
        lines++;
    }
    CHECK(n == 0 || got[n - 1] == '\n');
    return lines;
}

static void on_idle(uv_idle_t *h) {
    (void)h;
}

/* A loop kept alive by an idle handle, so that UV_RUN_NOWAIT runs one whole turn. */
struct turns {
    uv_loop_t loop;
    uv_idle_t idle;
};

static void turns_init(struct turns *t) {
    CHECK_EQ_INT(uv_loop_init(&t->loop), 0);
    uv_idle_init(&t->loop, &t->idle);
    uv_idle_start(&t->idle, on_idle);
}

static void turns_close(struct turns *t) {
    uv_close((uv_handle_t *)&t->idle, NULL);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&t->loop), 0);
}

static void test_lines_wait_across_loop_turns(void) {
    struct turns t;
    turns_init(&t);
    int fd = temp_fd();
    struct access_log al;
    access_log_init(
        &al, &t.loop, fd,
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
    for (int i = 0; i < 5; i++) {
        write_line(&al, 10);
        CHECK_EQ_INT(uv_run(&t.loop, UV_RUN_NOWAIT), 1);
    }
    CHECK_EQ_INT(file_size(fd), 0);
    CHECK_EQ_UINT(al.writes, 0);
    /* Closing writes them, in one write to a regular file. */
    access_log_close(&al);
    CHECK_EQ_UINT(al.writes, 1);
    CHECK_EQ_INT(count_lines(fd), 5);
    turns_close(&t);
    close(fd);
}

static void test_interval_zero_writes_each_loop_turn(void) {
    struct turns t;
    turns_init(&t);
    int fd = temp_fd();
    struct access_log al;
    access_log_init(&al, &t.loop, fd,
                    &(struct access_log_settings){.on = true, .buffer_bytes = 65536});
    write_line(&al, 10);
    write_line(&al, 10);
    CHECK_EQ_INT(file_size(fd), 0);
    uv_run(&t.loop, UV_RUN_NOWAIT);
    CHECK_EQ_UINT(al.writes, 1);
    CHECK_EQ_INT(count_lines(fd), 2);
    write_line(&al, 10);
    uv_run(&t.loop, UV_RUN_NOWAIT);
    CHECK_EQ_UINT(al.writes, 2);
    CHECK_EQ_INT(count_lines(fd), 3);
    access_log_close(&al);
    turns_close(&t);
    close(fd);
}

static void test_timer_writes_after_the_interval_and_is_started_once(void) {
    uv_loop_t loop;
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    int fd = temp_fd();
    struct access_log al;
    access_log_init(
        &al, &loop, fd,
        &(struct access_log_settings){.on = true, .flush_ms = 50, .buffer_bytes = 65536});
    write_line(&al, 10);
    uint64_t due = al.timer.timeout;
    /* A later line, at a later loop time, leaves the first line's deadline. */
    uint64_t t0 = uv_now(&loop);
    for (int spins = 0; uv_now(&loop) == t0 && spins < 100000000; spins++)
        uv_update_time(&loop);
    CHECK(uv_now(&loop) > t0);
    write_line(&al, 10);
    CHECK_EQ_UINT(al.timer.timeout, due);
    CHECK_EQ_INT(file_size(fd), 0);
    /* Wait for the timer: it stops on its own once fired, and the loop ends. */
    uv_ref((uv_handle_t *)&al.timer);
    CHECK_EQ_INT(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CHECK(uv_now(&loop) >= due);
    CHECK_EQ_UINT(al.writes, 1);
    CHECK_EQ_INT(count_lines(fd), 2);
    CHECK(!al.armed);
    /* The next line starts it again. */
    write_line(&al, 10);
    CHECK(al.armed);
    CHECK(uv_is_active((uv_handle_t *)&al.timer));
    CHECK_EQ_INT(uv_run(&loop, UV_RUN_DEFAULT), 0);
    CHECK_EQ_INT(count_lines(fd), 3);
    access_log_close(&al);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    close(fd);
}

static void test_full_buffer_is_written_at_once(void) {
    struct turns t;
    turns_init(&t);
    int fd = temp_fd();
    struct access_log al;
    access_log_init(
        &al, &t.loop, fd,
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 4096});
    int n = 0;
    while (al.writes == 0 && n < 100) {
        write_line(&al, 200);
        n++;
    }
    CHECK_EQ_UINT(al.writes, 1);
    CHECK(file_size(fd) >= 4096);
    CHECK_EQ_INT(count_lines(fd), n);
    CHECK_EQ_UINT(al.pending.len, 0);
    access_log_close(&al);
    turns_close(&t);
    close(fd);
}

static void test_small_buffer_setting_is_raised_to_4096(void) {
    int fd = temp_fd();
    struct access_log al;
    access_log_init(&al, NULL, fd, &(struct access_log_settings){.on = true, .buffer_bytes = 1});
    CHECK_EQ_UINT(al.limit, 4096);
    access_log_close(&al);
    close(fd);
}

/*
 * A packet-mode pipe (O_DIRECT) keeps each write a packet of its own and cuts
 * a write over PIPE_BUF into several: as many packets as writes, each ending
 * with a line's newline, shows that no write passed PIPE_BUF.
 */
static void test_pipe_never_gets_a_write_over_pipe_buf(void) {
    int p[2];
    CHECK_EQ_INT(pipe2(p, O_DIRECT), 0);
    struct turns t;
    turns_init(&t);
    struct access_log al;
    access_log_init(
        &al, &t.loop, p[1],
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
    CHECK(al.atomic_cap);
    /* About 9 x PIPE_BUF of lines of different lengths: fewer packets than the pipe holds. */
    int lines = 0;
    size_t bytes = 0;
    while (bytes < 9 * PIPE_BUF) {
        size_t before = al.pending.len;
        write_line(&al, 50 + (size_t)(lines * 37) % 700);
        bytes += al.pending.len - before;
        lines++;
    }
    CHECK_EQ_UINT(al.writes, 0);
    access_log_close(&al);
    CHECK(al.writes >= 10);
    close(p[1]);
    static char packet[65536];
    uint64_t packets = 0;
    int got_lines = 0;
    size_t got = 0;
    ssize_t n;
    while ((n = read(p[0], packet, sizeof packet)) > 0) {
        CHECK(n <= PIPE_BUF);
        CHECK_EQ_INT(packet[n - 1], '\n');
        for (ssize_t i = 0; i < n; i++)
            got_lines += packet[i] == '\n';
        got += (size_t)n;
        packets++;
    }
    close(p[0]);
    CHECK_EQ_UINT(packets, al.writes);
    CHECK_EQ_INT(got_lines, lines);
    CHECK_EQ_UINT(got, bytes);
    turns_close(&t);
}

static void test_regular_file_takes_the_buffer_in_one_write(void) {
    struct turns t;
    turns_init(&t);
    int fd = temp_fd();
    struct access_log al;
    access_log_init(
        &al, &t.loop, fd,
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
    CHECK(!al.atomic_cap);
    int lines = 0;
    while (al.pending.len < 9 * PIPE_BUF) {
        write_line(&al, 300);
        lines++;
    }
    access_log_close(&al);
    CHECK_EQ_UINT(al.writes, 1);
    CHECK_EQ_INT(count_lines(fd), lines);
    turns_close(&t);
    close(fd);
}

static void test_refused_lines_are_counted(void) {
    int p[2];
    CHECK_EQ_INT(pipe(p), 0);
    close(p[0]);
    struct access_log al;
    uv_loop_t loop;
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    access_log_init(
        &al, &loop, p[1],
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
    write_line(&al, 10);
    write_line(&al, 10);
    write_line(&al, 10);
    access_log_flush(&al); /* EPIPE: SIGPIPE is ignored, as eventd's main does */
    CHECK_EQ_UINT(al.dropped, 3);
    CHECK_EQ_UINT(al.pending.len, 0);
    access_log_close(&al);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    close(p[1]);
}

/* A stream socket (journald's) may take part of a line: the rest is kept and written
 * first at the next flush, so the stream holds only whole lines. */
static void test_a_line_a_socket_took_in_part_is_finished_not_torn(void) {
    /* A loopback TCP pair: it takes any number of bytes of a write. */
    int sv[2], ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t slen = sizeof sa;
    int small = 4096;
    setsockopt(ls, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* the accepted one's */
    CHECK_EQ_INT(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ_INT(listen(ls, 1), 0);
    CHECK_EQ_INT(getsockname(ls, (struct sockaddr *)&sa, &slen), 0);
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    CHECK_EQ_INT(connect(sv[0], (struct sockaddr *)&sa, sizeof sa), 0);
    sv[1] = accept(ls, NULL, NULL);
    CHECK(sv[1] >= 0);
    close(ls);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    struct access_log al;
    uv_loop_t loop;
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    access_log_init(
        &al, &loop, sv[0],
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 1 << 20});
    /* Until the socket refuses: some flush ends mid-line (or every line fits whole). */
    bool torn = false;
    for (int round = 0; round < 200 && !torn; round++) {
        for (int i = 0; i < 20; i++)
            write_line(&al, 200);
        access_log_flush(&al);
        torn = al.pending.len > 0;
    }
    CHECK(torn); /* a flush stopped mid-line and kept the line's rest */
    CHECK(al.pending.len < 1024);
    CHECK(al.pending.ptr[al.pending.len - 1] == '\n');
    CHECK(memchr(al.pending.ptr, '\n', al.pending.len) == al.pending.ptr + al.pending.len - 1);
    /* The reader drains; the next flush finishes the line first. */
    static char got[1 << 22];
    size_t n = 0;
    for (int spin = 0; spin < 100000; spin++) {
        ssize_t r = read(sv[1], got + n, sizeof got - n);
        if (r > 0) {
            n += (size_t)r;
        } else {
            access_log_flush(&al);
            if (!al.pending.len) {
                while ((r = read(sv[1], got + n, sizeof got - n)) > 0)
                    n += (size_t)r;
                break;
            }
        }
    }
    CHECK_EQ_UINT(al.pending.len, 0);
    /* Every line the stream holds is whole: it starts as a line starts. */
    size_t lines = 0;
    for (char *p = got, *end = got + n; p < end; lines++) {
        CHECK(end - p > 10 && memcmp(p, "{\"time\":\"", 9) == 0);
        char *nl = memchr(p, '\n', (size_t)(end - p));
        CHECK(nl != NULL);
        p = nl + 1;
    }
    CHECK(lines > 0);
    CHECK(al.dropped > 0);
    access_log_close(&al);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    close(sv[0]);
    close(sv[1]);
}

static void test_abort_writes_the_buffered_lines_first(void) {
    int fd = temp_fd();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        uv_loop_t loop;
        uv_loop_init(&loop);
        struct access_log al;
        access_log_init(
            &al, &loop, fd,
            &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
        access_log_catch_fatal(&al);
        write_line(&al, 10);
        write_line(&al, 10);
        abort();
    }
    int status;
    CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ_INT(WTERMSIG(status), SIGABRT);
    CHECK_EQ_INT(count_lines(fd), 2);
    close(fd);
}

static void test_close_gives_the_fatal_signals_back(void) {
    int fd = temp_fd();
    struct access_log al;
    access_log_init(&al, NULL, fd, &(struct access_log_settings){.on = true});
    struct sigaction before, during, after;
    CHECK_EQ_INT(sigaction(SIGABRT, NULL, &before), 0);
    access_log_catch_fatal(&al);
    CHECK_EQ_INT(sigaction(SIGABRT, NULL, &during), 0);
    access_log_close(&al);
    CHECK_EQ_INT(sigaction(SIGABRT, NULL, &after), 0);
    if (before.sa_handler == SIG_DFL) CHECK(during.sa_handler != SIG_DFL);
    CHECK(after.sa_handler == before.sa_handler);
    close(fd);
}

static void flush_cb(void *al) {
    access_log_flush(al);
}

static void *log_from_another_thread(void *arg) {
    (void)arg;
    LOG(LOG_WARN, "from another thread");
    return NULL;
}

/* eventd's app wires log_before_write so: a log line follows the access lines buffered
 * before it, on the loop's thread; another thread's line leaves the buffer alone. */
static void test_log_line_follows_the_buffered_lines(void) {
    int fd = temp_fd();
    uv_loop_t loop;
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    /* stderr is the file until the lines are out; a failed CHECK must print to the real one. */
    int saved = dup(STDERR_FILENO);
    CHECK(saved >= 0);
    CHECK_EQ_INT(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    struct access_log al;
    access_log_init(
        &al, &loop, STDERR_FILENO,
        &(struct access_log_settings){.on = true, .flush_ms = 60000, .buffer_bytes = 65536});
    log_before_write(flush_cb, &al);
    write_line(&al, 10);
    write_line(&al, 10);
    pthread_t th;
    int created = pthread_create(&th, NULL, log_from_another_thread, NULL);
    if (created == 0) pthread_join(th, NULL);
    uint64_t writes_after_other = al.writes;
    LOG(LOG_WARN, "after the lines");
    uint64_t writes_after_log = al.writes;
    log_before_write(NULL, NULL);
    access_log_close(&al);
    CHECK_EQ_INT(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    CHECK_EQ_INT(created, 0);
    CHECK_EQ_UINT(writes_after_other, 0);
    CHECK_EQ_UINT(writes_after_log, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    char got[4096] = {0};
    CHECK(pread(fd, got, sizeof got - 1, 0) > 0);
    char *other = strstr(got, "warn from another thread\n");
    char *after = strstr(got, "warn after the lines\n");
    CHECK(other != NULL && after != NULL);
    CHECK(other < strchr(got, '{')); /* written at once, before the buffered lines */
    CHECK(strrchr(got, '}') < after);
    close(fd);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    static const struct check_case cases[] = {
        CHECK_CASE(test_lines_wait_across_loop_turns),
        CHECK_CASE(test_interval_zero_writes_each_loop_turn),
        CHECK_CASE(test_timer_writes_after_the_interval_and_is_started_once),
        CHECK_CASE(test_full_buffer_is_written_at_once),
        CHECK_CASE(test_small_buffer_setting_is_raised_to_4096),
        CHECK_CASE(test_pipe_never_gets_a_write_over_pipe_buf),
        CHECK_CASE(test_regular_file_takes_the_buffer_in_one_write),
        CHECK_CASE(test_refused_lines_are_counted),
        CHECK_CASE(test_a_line_a_socket_took_in_part_is_finished_not_torn),
        CHECK_CASE(test_abort_writes_the_buffered_lines_first),
        CHECK_CASE(test_close_gives_the_fatal_signals_back),
        CHECK_CASE(test_log_line_follows_the_buffered_lines),
    };
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
