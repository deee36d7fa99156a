/* output.c: in-memory output buffers, used by every command that writes a file (-o,
 * --trace, --svg) so that an error never leaves a partial one (the file writes
 * themselves are in fileio.c). */
#include "driver.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void sb_reserve(StrBuf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) arena_out_of_memory(cap);
  b->data = p;
  b->cap = cap;
}

void sb_printf(StrBuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  sb_reserve(b, (size_t)n);
  if ((size_t)n < sizeof small) {
    memcpy(b->data + b->len, small, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void sb_puts(StrBuf *b, const char *s) {
  size_t n = strlen(s);
  sb_reserve(b, n);
  memcpy(b->data + b->len, s, n + 1);
  b->len += n;
}

void sb_json_string(StrBuf *b, const char *s) {
  sb_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': sb_puts(b, "\\\""); break;
    case '\\': sb_puts(b, "\\\\"); break;
    case '\n': sb_puts(b, "\\n"); break;
    case '\t': sb_puts(b, "\\t"); break;
    case '\r': sb_puts(b, "\\r"); break;
    default:
      if (*p < 0x20 || *p == 0x7f) sb_printf(b, "\\u%04x", *p);
      else { char c[2] = {(char)*p, 0}; sb_puts(b, c); }
    }
  }
  sb_puts(b, "\"");
}

void sb_free(StrBuf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void sb_num(StrBuf *b, double x) {
  if (!isfinite(x)) { sb_puts(b, "null"); return; }
  if (x == 0) { sb_puts(b, "0"); return; }
  if (fabs(x) < 1e15 && x == floor(x)) { sb_printf(b, "%.0f", x); return; }
  char buf[64];
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, x);
    double y;
    if (sscanf(buf, "%lf", &y) == 1 && fabs(y - x) <= 1e-12 * fabs(x)) break;
  }
  sb_puts(b, buf);
}
