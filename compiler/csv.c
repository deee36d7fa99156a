/* csv.c: PyTorch interop, `ppsc import-csv` and `ppsc export-csv`.
 *
 * This file reads the input; torch_csv.c holds the formats (the grammar of
 * torch.distributed.pipelining's schedule CSVs, compute-only and compute-comms), the
 * import (a verified literal .pps) and the export (compute-only, or --comms). */
#include "driver.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *size) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) return NULL;
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  if (!buf) { if (f != stdin) fclose(f); return NULL; }
  for (;;) {
    if (n + 1 >= cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) { free(buf); if (f != stdin) fclose(f); return NULL; }
      buf = nb;
      cap *= 2;
    }
    size_t k = fread(buf + n, 1, cap - n - 1, f);
    n += k;
    if (k == 0) break;
  }
  int err = ferror(f);
  if (f != stdin) fclose(f);
  if (err) { free(buf); return NULL; }
  buf[n] = 0;
  *size = n;
  return buf;
}

int cmd_import_csv(Compilation *c) {
  const Options *o = c->opt;
  if (!o->out) { fputs("ppsc: import-csv needs -o OUT.pps\n", stderr); return PPSC_USAGE; }
  size_t size = 0;
  char *text = read_all(o->file, &size);
  if (!text) {
    fprintf(stderr, "ppsc: cannot read '%s': %s\n", o->file, strerror(errno ? errno : EIO));
    return PPSC_USAGE;
  }
  uint32_t fid = diag_add_file(&c->diag, o->file, text, size);
  int rc = torch_csv_import(c, fid, text, size);
  free(text);
  return rc;
}

int cmd_export_csv(Compilation *c) { return torch_csv_export(c); }
