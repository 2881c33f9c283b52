/* logfile: see logfile.h. */
#include "storage/logfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/crc32c.h"
#include "common/csprng.h"

#ifdef EVENTD_FAULT_HOOKS
/*
 * Test hooks, read from the environment by logfile_faults_rearm and counted
 * from there (the server calls it once it listens, the CLI once the log is
 * replayed, so startup is never hit):
 *   EVENTD_FAULT_FSYNC_AFTER=N  data syncs after the first N fail with EIO
 *   EVENTD_FAULT_WRITE_AFTER=N  log writes after the first N fail with ENOSPC
 *   EVENTD_FAULT_DIRSYNC_AFTER=N  directory fsyncs after the first N fail with EIO
 *   EVENTD_FAULT_TIMES=M        at most M injected failures, then the disk "recovers"
 * Only builds with the tests have them (EVENTD_TESTS).
 */
static struct {
    long sync_after, write_after, dirsync_after, times;
    long syncs, writes, dirsyncs, injected;
} faults = {-1, -1, -1, -1, 0, 0, 0, 0};

static long env_long(const char *name) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : -1;
}

static bool fault_hit(long after, long *count) {
    if (after < 0 || __atomic_fetch_add(count, 1, __ATOMIC_RELAXED) < after) return false;
    return faults.times < 0 ||
           __atomic_fetch_add(&faults.injected, 1, __ATOMIC_RELAXED) < faults.times;
}
#define FAULT(kind) fault_hit(faults.kind##_after, &faults.kind##s)
#else
#define FAULT(kind) false
#endif

void logfile_faults_rearm(void) {
#ifdef EVENTD_FAULT_HOOKS
    faults.sync_after = env_long("EVENTD_FAULT_FSYNC_AFTER");
    faults.write_after = env_long("EVENTD_FAULT_WRITE_AFTER");
    faults.dirsync_after = env_long("EVENTD_FAULT_DIRSYNC_AFTER");
    faults.times = env_long("EVENTD_FAULT_TIMES");
    faults.syncs = faults.writes = faults.dirsyncs = faults.injected = 0;
#endif
}

char *logfile_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int logfile_write_all(int fd, const void *ptr, size_t len) {
    const char *p = ptr;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO; /* cannot happen on a regular file; do not spin */
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int logfile_write_at(int fd, const void *ptr, size_t len, uint64_t off) {
    const char *p = ptr;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int logfile_append(int fd, const void *ptr, size_t len, uint64_t off) {
    if (len && FAULT(write)) return -ENOSPC;
    return logfile_write_at(fd, ptr, len, off);
}

static int zero_fill_fd(int fd, uint64_t off, uint64_t len) {
    static const uint8_t zeros[64 << 10];
    struct iovec iov[16];
    for (size_t i = 0; i < 16; i++)
        iov[i] = (struct iovec){.iov_base = (void *)zeros, .iov_len = sizeof zeros};
    while (len) {
        /* 1 MiB a call, the same zeros 16 times over. */
        int cnt = 0;
        uint64_t want = len;
        for (; cnt < 16 && want; cnt++) {
            iov[cnt].iov_len = want < sizeof zeros ? (size_t)want : sizeof zeros;
            want -= iov[cnt].iov_len;
        }
        ssize_t n = pwritev(fd, iov, cnt, (off_t)off);
        for (int i = 0; i < cnt; i++)
            iov[i].iov_len = sizeof zeros;
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    while (fdatasync(fd) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

int logfile_zero_fill(const char *path, uint64_t off, uint64_t len) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int err = zero_fill_fd(fd, off, len);
    close(fd);
    return err;
}

/*
 * Every sync of the store goes through here: fdatasync, or fsync for
 * metadata (a directory, a new size), retried on EINTR. Data syncs are what
 * the fault hook hits.
 */
int logfile_sync(int fd, bool data) {
    if (data && FAULT(sync)) return -EIO;
    while ((data ? fdatasync(fd) : fsync(fd)) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

int logfile_sync_dir(const char *dir) {
    if (FAULT(dirsync)) return -EIO;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int err = logfile_sync(fd, false);
    close(fd);
    return err;
}

int logfile_cut(int fd, uint64_t size) {
    while (ftruncate(fd, (off_t)size) < 0) {
        if (errno != EINTR) return -errno;
    }
    return logfile_sync(fd, false);
}

int logfile_probe(int fd, uint64_t size) {
    if (FAULT(write)) return -ENOSPC;
    if (fallocate(fd, 0, (off_t)size, 4096) < 0 && errno != EOPNOTSUPP) {
        int err = -errno;
        logfile_cut(fd, size);
        return err;
    }
    int err = logfile_cut(fd, size);
    return err ? err : logfile_datasync(fd);
}

uint64_t logfile_free_bytes(int fd) {
    struct statvfs st;
    if (fstatvfs(fd, &st) < 0) return 0;
    return (uint64_t)st.f_bavail * st.f_frsize;
}

int logfile_mkdir_p(const char *dir) {
    char *p = xstrdup(dir);
    int err = 0;
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            err = -errno;
            break;
        }
        *q = c;
        if (!c) break;
    }
    free(p);
    if (err) return err;
    struct stat st;
    if (stat(dir, &st) < 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

uint32_t logfile_frame_check(uint32_t key, const uint8_t *frame, size_t len) {
    /* The checksum covers length, type and payload: bytes 4.. of the frame. */
    return crc32c(0, frame + 4, 5 + len) ^ key;
}

void logfile_frame_put(uint8_t *out, uint32_t key, uint8_t type, const void *payload, size_t len) {
    if (len) memcpy(out + STORE_FRAME_HEADER_SIZE, payload, len);
    logfile_frame_seal(out, key, type, len);
}

void logfile_frame_seal(uint8_t *out, uint32_t key, uint8_t type, size_t len) {
    logfile_put_le32(out + 4, (uint32_t)len);
    out[8] = type;
    logfile_put_le32(out, logfile_frame_check(key, out, len));
}

void logfile_frames_rekey(uint8_t *p, size_t len, uint32_t from, uint32_t to) {
    for (size_t off = 0; off + STORE_FRAME_HEADER_SIZE <= len;) {
        logfile_put_le32(p + off, logfile_get_le32(p + off) ^ from ^ to);
        off += STORE_FRAME_HEADER_SIZE + logfile_get_le32(p + off + 4);
    }
}

uint32_t logfile_new_key(void) {
    uint32_t key = 0;
    while (!key)
        csprng_bytes(&key, sizeof key);
    return key;
}

void logfile_header_put(uint8_t out[STORE_HEADER_SIZE], uint32_t version, uint32_t key) {
    memcpy(out, STORE_MAGIC, 8);
    logfile_put_le32(out + 8, version);
    logfile_put_le32(out + 12, key);
}

uint32_t logfile_header_key(const uint8_t h[STORE_HEADER_SIZE], uint32_t *key) {
    uint32_t version = logfile_get_le32(h + 8);
    if (version < STORE_VERSION_UNKEYED || version > STORE_VERSION) return 0;
    *key = version == STORE_VERSION_UNKEYED ? 0 : logfile_get_le32(h + 12);
    return version;
}
