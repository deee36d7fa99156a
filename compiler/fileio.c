/* fileio.c: how ppsc reads its inputs and writes its outputs safely.
 *
 * Reading (read_input): a bounded read of a whole file. A file named inside another
 * (an import) must be a regular file; one named on the command line may also be a
 * pipe or FIFO ("-" is stdin). Devices, directories and sockets are refused before
 * anything is read (the file is opened without blocking, so a FIFO that is refused
 * never waits for a writer), and no read goes past the size cap.
 *
 * Writing (write_output): the whole output or nothing. For a regular file (or a path
 * that does not exist yet) the data go to a temporary file created exclusively
 * (mkstemp, so O_CREAT|O_EXCL: a planted symlink is never followed) in the target's
 * own directory, which then replaces the target by rename; an existing target keeps
 * its permission bits, a symlink keeps pointing where it did (its final target is
 * replaced). A path that names something other than a regular file (a character
 * device such as /dev/null, a FIFO, /dev/stdout) is written in place, never replaced.
 * "-" is standard output. */
#include "driver.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all_fd(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size > (1u << 30) ? (1u << 30) : size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    size -= (size_t)n;
  }
  return 0;
}

static int write_in_place(const char *path, const char *data, size_t size) {
  int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(errno));
    return -1;
  }
  int bad = write_all_fd(fd, data, size);
  int err = errno;
  if (close(fd) && !bad) { bad = 1; err = errno; }
  if (bad) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(err));
    return -1;
  }
  return 0;
}

int write_output(const char *path, const char *data, size_t size, unsigned mode) {
  if (!strcmp(path, "-")) {
    if (fwrite(data, 1, size, stdout) != size || fflush(stdout)) {
      fprintf(stderr, "ppsc: error writing standard output: %s\n", strerror(errno));
      return -1;
    }
    return 0;
  }
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(EISDIR));
      return -1;
    }
    if (!S_ISREG(st.st_mode)) return write_in_place(path, data, size);
  } else if (errno != ENOENT) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(errno));
    return -1;
  }
  /* a regular file, or nothing yet: replace the final target of any symlinks */
  int exists = stat(path, &st) == 0;
  char *real = exists ? realpath(path, NULL) : NULL;
  const char *target = real ? real : path;
  const char *slash = strrchr(target, '/');
  size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
  char *tmp = malloc(dlen + 32);
  if (!tmp) { free(real); fprintf(stderr, "ppsc: out of memory\n"); return -1; }
  memcpy(tmp, target, dlen);
  strcpy(tmp + dlen, ".ppsc-out.XXXXXX");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(errno));
    free(tmp);
    free(real);
    return -1;
  }
  mode_t want;
  if (exists) {
    want = st.st_mode & 07777;
  } else {
    mode_t um = umask(022);
    umask(um);
    want = (mode_t)mode & ~um & 0777;
  }
  int bad = fchmod(fd, want) != 0;
  int err = errno;
  if (!bad && write_all_fd(fd, data, size)) { bad = 1; err = errno; }
  if (close(fd) && !bad) { bad = 1; err = errno; }
  if (!bad && rename(tmp, target)) { bad = 1; err = errno; }
  if (bad) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, strerror(err));
    unlink(tmp);
  }
  free(tmp);
  free(real);
  return bad ? -1 : 0;
}

int write_file_atomic(const char *path, const char *data, size_t size) {
  return write_output(path, data, size, 0666);
}

char *read_input(const char *path, int regular_only, size_t cap, size_t *size) {
  int fd, fifo = 0;
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
      errno = EPERM; /* reported by the callers as "not a regular file" */
      return NULL;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > cap) { close(fd); errno = EFBIG; return NULL; }
    if (S_ISFIFO(st.st_mode)) {
      /* a FIFO named on the command line: kept non-blocking (a writer may come and go
         between two opens) and read after poll(), which waits for data or for a
         writer that came and went (Linux reports POLLHUP only after one) */
      fifo = 1;
    } else {
      int fl = fcntl(fd, F_GETFL);
      if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
  }
  size_t bufcap = 1 << 16, n = 0;
  char *buf = malloc(bufcap + 1);
  if (!buf) { if (fd) close(fd); errno = ENOMEM; return NULL; }
  for (;;) {
    if (n == bufcap) {
      if (bufcap > cap) { free(buf); if (fd) close(fd); errno = EFBIG; return NULL; }
      size_t nc = bufcap * 2;
      char *nb = realloc(buf, nc + 1);
      if (!nb) { free(buf); if (fd) close(fd); errno = ENOMEM; return NULL; }
      buf = nb;
      bufcap = nc;
    }
    if (fifo) {
      struct pollfd pf = {fd, POLLIN, 0};
      if (poll(&pf, 1, -1) < 0 && errno != EINTR) { int e = errno; free(buf); close(fd); errno = e; return NULL; }
    }
    ssize_t r = read(fd, buf + n, bufcap - n);
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

const char *read_input_error(int err) {
  return err == EPERM ? "not a regular file" : strerror(err);
}
