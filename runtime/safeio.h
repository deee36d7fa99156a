/* safeio.h: the one implementation of safe whole-file input and output that ppsc
 * (compiler/fileio.c) and libppsrt (--trace, --profile, --save, --data, --load) share.
 * Header-only with static functions, so nothing of it is exported from libppsrt
 * (which exports ppsrt_ symbols only) and the two libraries never clash when linked
 * together. Every function returns -1 with errno set on failure and prints nothing:
 * the callers say it in their own words (pps_read_error / pps_write_error help).
 *
 * Reading (pps_read_file): a bounded read of a whole file. With regular_only anything
 * but a regular file is refused; else a pipe or FIFO is read too. Devices (/dev/zero),
 * directories and sockets are always refused before anything is read: the file is
 * opened without blocking, so a FIFO that is refused never waits for a writer. No
 * read goes past cap + 1 bytes (EFBIG when there is more than cap). "-" is stdin.
 *
 * Writing (pps_out_open / pps_out_write / pps_out_close, or pps_write_file for a
 * buffer): the whole output or nothing. For a regular file, or a path that does not
 * exist yet, the data go to a temporary file created exclusively (mkstemp: O_CREAT|
 * O_EXCL, so a planted symlink is never followed) in the target's own directory
 * (".NAME.pps-out.XXXXXX", NAME the target's name: whoever writes NAME again knows
 * what a killed run left, as checkpoint.c does), which
 * replaces the target by rename only once everything was written; an existing target
 * keeps its permission bits (and, where allowed, its owner), and a symlink keeps
 * pointing where it did (its final target is replaced). A path naming something other
 * than a regular file (a character device such as /dev/null, a FIFO, /dev/stdout) is
 * written in place, never replaced; a FIFO is opened without blocking, so one that
 * nobody opens for reading within PPS_FIFO_WAIT_MS (3 s) is an error (ENXIO), not a
 * hang. "-" is standard output. */
#ifndef PPS_SAFEIO_H
#define PPS_SAFEIO_H
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* how long writing to a FIFO waits for a reader to open it before failing (ENXIO) */
#ifndef PPS_FIFO_WAIT_MS
#define PPS_FIFO_WAIT_MS 3000
#endif

/* An output being written: a temporary file to rename, or a file written in place. */
typedef struct pps_out {
  int fd;
  int in_place;   /* a device, FIFO or stdout: written straight, never renamed */
  int err;        /* the first write error (errno), 0 while all is well */
  char *tmp;      /* the temporary file (regular targets) */
  char *target;   /* what the temporary file replaces (the symlinks' final target) */
} pps_out;

static inline int pps_write_all_fd(int fd, const void *data, size_t size) {
  const char *p = (const char *)data;
  while (size > 0) {
    ssize_t n = write(fd, p, size > (1u << 30) ? (1u << 30) : size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

/* Opens path for writing (mode: the permission bits a new file gets before the umask:
 * 0666 for data, 0777 for programs). Returns 0, or -1 with errno set. */
static inline int pps_out_open(pps_out *o, const char *path, unsigned mode) {
  memset(o, 0, sizeof *o);
  o->fd = -1;
  if (!strcmp(path, "-")) {
    if (fflush(stdout)) return -1;   /* what stdio holds goes first */
    o->fd = 1;
    o->in_place = 1;
    return 0;
  }
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (!exists && errno != ENOENT) return -1;
  if (exists && S_ISDIR(st.st_mode)) { errno = EISDIR; return -1; }
  if (exists && !S_ISREG(st.st_mode)) {
    /* a device, FIFO, socket...: written in place. O_NONBLOCK makes opening a FIFO with
       no reader fail with ENXIO instead of waiting forever; writes then block as usual. */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    /* a reader started beside us (`ppsc ... -o fifo & cat fifo`) may come a moment
       later: wait for one for at most PPS_FIFO_WAIT_MS, then say there is none */
    for (int tries = 0; fd < 0 && errno == ENXIO && S_ISFIFO(st.st_mode) && tries < PPS_FIFO_WAIT_MS / 10; tries++) {
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    }
    if (fd < 0) return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    o->fd = fd;
    o->in_place = 1;
    return 0;
  }
  /* a regular file, or nothing yet: the final target of any symlinks is replaced */
  char *real = exists ? realpath(path, NULL) : NULL;
  const char *target = real ? real : path;
  const char *slash = strrchr(target, '/');
  size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
  size_t blen = strlen(target + dlen);
  if (blen > 200) blen = 200;   /* the temporary name stays within NAME_MAX */
  char *tmp = (char *)malloc(dlen + blen + 32);
  char *tgt = real ? real : strdup(path);
  if (!tmp || !tgt) {
    free(tmp);
    free(tgt);
    errno = ENOMEM;
    return -1;
  }
  memcpy(tmp, target, dlen);
  tmp[dlen] = '.';
  memcpy(tmp + dlen + 1, target + dlen, blen);
  strcpy(tmp + dlen + 1 + blen, ".pps-out.XXXXXX");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    free(tgt);
    errno = e;
    return -1;
  }
  mode_t want;
  if (exists) {
    want = st.st_mode & 07777;
    if (fchown(fd, st.st_uid, st.st_gid)) { /* best effort: only root may give a file away */ }
  } else {
    mode_t um = umask(022);
    umask(um);
    want = (mode_t)mode & ~um & 0777;
  }
  if (fchmod(fd, want)) {
    int e = errno;
    close(fd);
    unlink(tmp);
    free(tmp);
    free(tgt);
    errno = e;
    return -1;
  }
  o->fd = fd;
  o->tmp = tmp;
  o->target = tgt;
  return 0;
}

/* Appends n bytes. Returns 0, or -1 with errno set (the error is kept: close fails). */
static inline int pps_out_write(pps_out *o, const void *data, size_t n) {
  if (o->err) { errno = o->err; return -1; }
  if (pps_write_all_fd(o->fd, data, n)) { o->err = errno ? errno : EIO; return -1; }
  return 0;
}

/* Gives up: the temporary file is removed, the target left as it was. */
static inline void pps_out_abort(pps_out *o) {
  if (o->fd > 1) close(o->fd);
  o->fd = -1;
  if (o->tmp) unlink(o->tmp);
  free(o->tmp);
  free(o->target);
  o->tmp = o->target = NULL;
}

/* Finishes: closes and (for a regular target) renames the temporary file over the
 * target. Returns 0, or -1 with errno set, the temporary file removed. */
static inline int pps_out_close(pps_out *o) {
  int err = o->err;
  if (o->fd == 1) {
    o->fd = -1;   /* standard output stays open */
  } else if (o->fd >= 0) {
    if (close(o->fd) && !err) err = errno ? errno : EIO;
    o->fd = -1;
  }
  if (!err && o->tmp && rename(o->tmp, o->target)) err = errno ? errno : EIO;
  if (err && o->tmp) unlink(o->tmp);
  free(o->tmp);
  free(o->target);
  o->tmp = o->target = NULL;
  if (err) { errno = err; return -1; }
  return 0;
}

/* Writes a whole buffer with the rules above. Returns 0, or -1 with errno set. */
static inline int pps_write_file(const char *path, const void *data, size_t size, unsigned mode) {
  pps_out o;
  if (pps_out_open(&o, path, mode)) return -1;
  if (pps_out_write(&o, data, size)) {
    int e = errno;
    pps_out_abort(&o);
    errno = e;
    return -1;
  }
  return pps_out_close(&o);
}

/* The reason for a failed write in words (ENXIO is what a FIFO nobody reads gives). */
static inline const char *pps_write_error(int err) {
  return err == ENXIO ? "nothing is reading it (a FIFO with no reader, or a device that is not there)" : strerror(err);
}

/* Reads a whole file, NUL-terminated, at most cap bytes (see above). Returns the
 * malloc'ed text (*size bytes), or NULL with errno set: EPERM not a regular file (or
 * not a FIFO where those are allowed), EISDIR, EFBIG over the cap. */
static inline char *pps_read_file(const char *path, int regular_only, size_t cap, size_t *size) {
  int fd, fifo = 0;
  size_t want = 1 << 16;
  if (cap > SIZE_MAX - 2) cap = SIZE_MAX - 2;
  if (!strcmp(path, "-")) {
    fd = 0;
  } else {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before we know what it is */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st)) { int e = errno; close(fd); errno = e; return NULL; }
    if (S_ISDIR(st.st_mode)) { close(fd); errno = EISDIR; return NULL; }
    if (!S_ISREG(st.st_mode) && (regular_only || !S_ISFIFO(st.st_mode))) {
      close(fd);
      errno = EPERM;
      return NULL;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > cap) { close(fd); errno = EFBIG; return NULL; }
    if (S_ISREG(st.st_mode) && (size_t)st.st_size + 1 > want) want = (size_t)st.st_size + 1;
    if (S_ISFIFO(st.st_mode)) {
      /* a FIFO named on the command line: kept non-blocking (a writer may come and go
         between two opens) and read after poll(), which waits for data or for a writer
         that came and went (Linux reports POLLHUP only after one) */
      fifo = 1;
    } else {
      int fl = fcntl(fd, F_GETFL);
      if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
  }
  /* the buffer holds at most cap + 1 bytes (one more than allowed tells "too big") */
  size_t bufcap = want < cap + 1 ? want : cap + 1, n = 0;
  char *buf = (char *)malloc(bufcap + 1);
  if (!buf) { if (fd) close(fd); errno = ENOMEM; return NULL; }
  for (;;) {
    if (n == bufcap) {
      if (n > cap) { free(buf); if (fd) close(fd); errno = EFBIG; return NULL; }
      size_t nc = bufcap > (cap + 1) / 2 ? cap + 1 : bufcap * 2;
      char *nb = (char *)realloc(buf, nc + 1);
      if (!nb) { free(buf); if (fd) close(fd); errno = ENOMEM; return NULL; }
      buf = nb;
      bufcap = nc;
    }
    if (fifo) {
      struct pollfd pf = {fd, POLLIN, 0};
      if (poll(&pf, 1, -1) < 0 && errno != EINTR) { int e = errno; free(buf); close(fd); errno = e; return NULL; }
    }
    size_t chunk = bufcap - n > (1u << 30) ? (1u << 30) : bufcap - n;
    ssize_t r = read(fd, buf + n, chunk);
    if (r < 0) {
      if (errno == EINTR || (fifo && errno == EAGAIN)) continue;
      int e = errno;
      free(buf);
      if (fd) close(fd);
      errno = e;
      return NULL;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  if (fd) close(fd);
  if (n > cap) { free(buf); errno = EFBIG; return NULL; }
  buf[n] = 0;
  *size = n;
  return buf;
}

/* The reason for a failed read in words. */
static inline const char *pps_read_error(int err) {
  return err == EPERM ? "not a regular file" : strerror(err);
}
#endif
