/* fileio.c: how ppsc reads its inputs and writes its outputs safely: the messages
 * around runtime/safeio.h, the one implementation ppsc and libppsrt share.
 *
 * Reading (read_input): a bounded read of a whole file. A file named inside another
 * (an import, a `cost profile`) must be a regular file; one named on the command line
 * may also be a pipe or FIFO ("-" is stdin). Devices, directories and sockets are
 * refused before anything is read, and no read goes past the size cap (+1 byte).
 *
 * Writing (write_output): the whole output or nothing. A regular file (or a path that
 * does not exist yet) is replaced by a temporary file created exclusively in its own
 * directory, keeping its mode (a symlink keeps pointing where it did); a device, a
 * FIFO or /dev/stdout is written in place, never replaced; a FIFO nobody reads is an
 * error, not a hang. "-" is standard output. */
#include "driver.h"
#include "safeio.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

int write_output(const char *path, const char *data, size_t size, unsigned mode) {
  if (pps_write_file(path, data, size, mode)) {
    int e = errno;
    if (!strcmp(path, "-")) fprintf(stderr, "ppsc: error writing standard output: %s\n", strerror(e));
    else fprintf(stderr, "ppsc: cannot write '%s': %s\n", path, pps_write_error(e));
    return -1;
  }
  return 0;
}

int write_file_atomic(const char *path, const char *data, size_t size) {
  return write_output(path, data, size, 0666);
}

char *read_input(const char *path, int regular_only, size_t cap, size_t *size) {
  return pps_read_file(path, regular_only, cap, size);
}

const char *read_input_error(int err) { return pps_read_error(err); }
