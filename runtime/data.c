/* data.c: training tokens for the gpt model (--data, --val-data): llm.c's uint16 token
 * files and plain bytes, loaded once per process, checked (magic, version, size,
 * token range) with messages naming the file, and cut into sequences. */
#include "config.h"
#include "rt.h"
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

static int fail_file(ppsrt_tokens *t, FILE *f, int code, const char *msg) {
  if (f) fclose(f);
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
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(msg, sizeof msg, "data file '%s': %s", path, strerror(errno));
    return fail_file(t, NULL, PPSRT_E_USAGE, msg);
  }
  if (fseek(f, 0, SEEK_END) || ftell(f) < 0) {
    snprintf(msg, sizeof msg, "data file '%s': not a regular file", path);
    return fail_file(t, f, PPSRT_E_USAGE, msg);
  }
  size_t size = (size_t)ftell(f);
  rewind(f);
  if (format == 1) {
    int32_t hdr[TOK_HEADER];
    if (size < sizeof hdr || fread(hdr, sizeof hdr, 1, f) != 1) {
      snprintf(msg, sizeof msg, "data file '%s': truncated: %zu bytes, shorter than the %zu-byte header of a token file",
               path, size, sizeof hdr);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    if (hdr[0] != TOK_MAGIC) {
      snprintf(msg, sizeof msg, "data file '%s': not a token file (magic %d, expected %d)%s", path, (int)hdr[0],
               TOK_MAGIC, " (hint: --data-format bytes reads any file as bytes)");
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    if (hdr[1] != 1) {
      snprintf(msg, sizeof msg, "data file '%s': token file version %d is not supported (version 1: uint16 tokens)", path,
               (int)hdr[1]);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    if (hdr[2] < 0) {
      snprintf(msg, sizeof msg, "data file '%s': negative token count %d in the header", path, (int)hdr[2]);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    t->n = (size_t)hdr[2];
    size_t have = (size - sizeof hdr) / 2;
    if (have < t->n) {
      snprintf(msg, sizeof msg, "data file '%s': truncated: the header promises %zu tokens, the file holds %zu", path,
               t->n, have);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    if (!(t->tok = malloc((t->n ? t->n : 1) * sizeof *t->tok))) return fail_file(t, f, PPSRT_E_NOMEM, "out of host memory");
    if (fread(t->tok, sizeof *t->tok, t->n, f) != t->n) {
      snprintf(msg, sizeof msg, "data file '%s': read error", path);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
  } else {
    t->n = size;
    unsigned char *b = malloc(size ? size : 1);
    if (!b || !(t->tok = malloc((size ? size : 1) * sizeof *t->tok))) {
      free(b);
      return fail_file(t, f, PPSRT_E_NOMEM, "out of host memory");
    }
    if (fread(b, 1, size, f) != size) {
      free(b);
      snprintf(msg, sizeof msg, "data file '%s': read error", path);
      return fail_file(t, f, PPSRT_E_USAGE, msg);
    }
    for (size_t i = 0; i < size; i++) t->tok[i] = b[i];
    free(b);
  }
  fclose(f);
  for (size_t i = 0; i < t->n; i++) {
    if (t->tok[i] > t->max_token) t->max_token = t->tok[i];
    if (t->tok[i] >= vocab) {
      snprintf(msg, sizeof msg, "data file '%s': token %d at position %zu is out of range for --vocab %d%s", path,
               t->tok[i], i, vocab, t->bytes ? " (hint: a file read as bytes needs --vocab 256)" : "");
      return fail_file(t, NULL, PPSRT_E_USAGE, msg);
    }
  }
  if (t->n < (size_t)seq + 1) {
    snprintf(msg, sizeof msg, "data file '%s': %zu tokens, fewer than one sequence of --seq %d plus its next token", path,
             t->n, seq);
    return fail_file(t, NULL, PPSRT_E_USAGE, msg);
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
