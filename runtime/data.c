/* data.c: training tokens for the gpt model (--data, --val-data): llm.c's uint16 token
 * files and plain bytes, loaded once per process (regular files only: safeio.h),
 * checked (magic, version, size, token range) with messages naming the file, and
 * cut into sequences. */
#include "config.h"
#include "rt.h"
#include "safeio.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TOK_MAGIC = 20240520, TOK_HEADER = 256 };

void ppsrt_tokens_free(ppsrt_tokens *t) {
  if (!t) return;
  free(t->tok);
  free(t->path);
  free(t);
}

static int fail_file(ppsrt_tokens *t, int code, const char *msg) {
  ppsrt_tokens_free(t);
  return PPSRT_FAIL(code, "%s", msg);
}

int ppsrt_tokens_load(const char *path, int format, int vocab, int seq, ppsrt_tokens **out) {
  *out = NULL;
  char msg[1024];
  size_t pl = strlen(path);
  if (format == 0) format = pl >= 4 && !strcmp(path + pl - 4, ".bin") ? 1 : 2;
  ppsrt_tokens *t = calloc(1, sizeof *t);
  if (!t || !(t->path = strdup(path))) { free(t); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  t->bytes = format == 2;
  /* safeio.h: a regular file only (a FIFO would block, /dev/zero never end) */
  size_t size = 0;
  unsigned char *buf = (unsigned char *)pps_read_file(path, 1, SIZE_MAX / 8, &size);
  if (!buf) {
    int e = errno;
    snprintf(msg, sizeof msg, "data file '%s': %s", path, pps_read_error(e));
    return fail_file(t, e == ENOMEM ? PPSRT_E_NOMEM : PPSRT_E_USAGE, msg);
  }
  if (format == 1) {
    int32_t hdr[TOK_HEADER];
    if (size < sizeof hdr) {
      snprintf(msg, sizeof msg, "data file '%s': truncated: %zu bytes, shorter than the %zu-byte header of a token file",
               path, size, sizeof hdr);
      free(buf);
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
    memcpy(hdr, buf, sizeof hdr);
    if (hdr[0] != TOK_MAGIC) {
      snprintf(msg, sizeof msg, "data file '%s': not a token file (magic %d, expected %d)%s", path, (int)hdr[0],
               TOK_MAGIC, " (hint: --data-format bytes reads any file as bytes)");
      free(buf);
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
    if (hdr[1] != 1) {
      snprintf(msg, sizeof msg, "data file '%s': token file version %d is not supported (version 1: uint16 tokens)", path,
               (int)hdr[1]);
      free(buf);
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
    if (hdr[2] < 0) {
      snprintf(msg, sizeof msg, "data file '%s': negative token count %d in the header", path, (int)hdr[2]);
      free(buf);
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
    t->n = (size_t)hdr[2];
    size_t have = (size - sizeof hdr) / 2;
    if (have < t->n) {
      snprintf(msg, sizeof msg, "data file '%s': truncated: the header promises %zu tokens, the file holds %zu", path,
               t->n, have);
      free(buf);
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
    if (!(t->tok = malloc((t->n ? t->n : 1) * sizeof *t->tok))) { free(buf); return fail_file(t, PPSRT_E_NOMEM, "out of host memory"); }
    const unsigned char *p = buf + sizeof hdr;
    for (size_t i = 0; i < t->n; i++) t->tok[i] = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));   /* little-endian uint16 */
  } else {
    t->n = size;
    if (!(t->tok = malloc((size ? size : 1) * sizeof *t->tok))) { free(buf); return fail_file(t, PPSRT_E_NOMEM, "out of host memory"); }
    for (size_t i = 0; i < size; i++) t->tok[i] = buf[i];
  }
  free(buf);
  for (size_t i = 0; i < t->n; i++) {
    if (t->tok[i] > t->max_token) t->max_token = t->tok[i];
    if (t->tok[i] >= vocab) {
      snprintf(msg, sizeof msg, "data file '%s': token %d at position %zu is out of range for --vocab %d%s", path,
               t->tok[i], i, vocab, t->bytes ? " (hint: a file read as bytes needs --vocab 256)" : "");
      return fail_file(t, PPSRT_E_USAGE, msg);
    }
  }
  if (t->n < (size_t)seq + 1) {
    snprintf(msg, sizeof msg, "data file '%s': %zu tokens, fewer than one sequence of --seq %d plus its next token", path,
             t->n, seq);
    return fail_file(t, PPSRT_E_USAGE, msg);
  }
  *out = t;
  return 0;
}

void ppsrt_tokens_window(const ppsrt_tokens *t, long sample, int T, int32_t *ids, int32_t *tgt) {
  size_t nwin = (t->n - 1) / (size_t)T;
  size_t start = ((size_t)sample % nwin) * (size_t)T;
  for (int i = 0; i < T; i++) {
    ids[i] = t->tok[start + (size_t)i];
    tgt[i] = t->tok[start + (size_t)i + 1];
  }
}
