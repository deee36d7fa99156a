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

/* A CSV is read like a .pps: a regular file or stdin ("-"), at most 1 GiB (fileio.c). */
static char *read_all(const char *path, size_t *size) { return read_input(path, 1, (size_t)1 << 30, size); }

int cmd_import_csv(Compilation *c) {
  const Options *o = c->opt;
  if (!o->out) { fputs("ppsc: import-csv needs -o OUT.pps\n", stderr); return PPSC_USAGE; }
  size_t size = 0;
  char *text = read_all(o->file, &size);
  if (!text) {
    fprintf(stderr, "ppsc: cannot read '%s': %s\n", o->file, read_input_error(errno ? errno : EIO));
    return PPSC_USAGE;
  }
  uint32_t fid = diag_add_file(&c->diag, o->file, text, size);
  int rc = torch_csv_import(c, fid, text, size);
  free(text);
  return rc;
}

int cmd_export_csv(Compilation *c) { return torch_csv_export(c); }
