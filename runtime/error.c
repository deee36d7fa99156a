/* error.c: error reporting for libppsrt: ppsrt_set_error records the last error of
 * the calling thread (code, rank, file, line, message, hint) and ppsrt_last_error
 * returns it. It prints nothing and never exits; ppsrt_main decides what to print.
 * Also the library's version string. */
#include "config.h"
#include "rt.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static __thread char last_error[2048];
static __thread int error_rank = -1;

void ppsrt_error_set_rank(int rank) { error_rank = rank; }

int ppsrt_set_error(int code, const char *file, int line, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : (file ? file : "?");
  if (error_rank >= 0)
    snprintf(last_error, sizeof last_error, "rank %d: %s:%d: %s", error_rank, base, line, msg);
  else
    snprintf(last_error, sizeof last_error, "%s:%d: %s", base, line, msg);
  return code;
}

const char *ppsrt_last_error(void) { return last_error[0] ? last_error : "no error recorded"; }
void ppsrt_clear_error(void) { last_error[0] = 0; }

const char *ppsrt_version(void) {
  return PACKAGE_VERSION " (cpu"
#ifdef HAVE_OPENBLAS
         " openblas"
#endif
#ifdef HAVE_MPI
         ", mpi"
#endif
#ifdef HAVE_CUDA
         ", cuda"
#endif
#ifdef HAVE_NCCL
         ", nccl"
#endif
         ")";
}
