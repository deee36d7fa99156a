/* csv.c: PyTorch interop, `ppsc import-csv` and `ppsc export-csv`.
 *
 * The format is torch.distributed.pipelining's compute-only schedule CSV
 * (PipelineScheduleRuntime._load_csv / _dump_csv): one row per rank, one cell per
 * time step, each cell an action `<stage><type><microbatch>` with type F (forward),
 * I (backward input), W (backward weight) or B (full backward), e.g. `0F1`, `1I0`;
 * an empty cell is an idle step. Mapping: F -> F, I -> B, W -> W, B -> BW.
 *
 * import-csv writes a literal .pps: the placement inferred from which rank runs
 * which stage (explicit list), the stage written in every op. Malformed input is
 * reported at file:line:col (exit 1) and nothing is written.
 * export-csv writes the elaborated, un-lowered compute ops of a .pps (sends,
 * receives, offloads and vocabulary passes have no compute-only CSV form and are
 * left out, with a warning). It does not verify the schedule (use check). */
#include "driver.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct CsvAct { int stage, mb; char type; Span span; } CsvAct;
typedef struct CsvRow { CsvAct *acts; int n, cap; int blank; } CsvRow;

/* A CSV is read like a .pps: a regular file or stdin ("-"), at most 1 GiB (fileio.c). */
static char *read_all(const char *path, size_t *size) { return read_input(path, 1, (size_t)1 << 30, size); }

/* Parses one cell [p, e) (already trimmed, quotes removed). Returns 0 = empty,
 * 1 = action, -1 = error (reported). */
static int parse_cell(Compilation *c, const char *p, const char *e, Span sp, CsvAct *out) {
  if (p == e) return 0;
  if (e - p == 4 && !strncmp(p, "None", 4)) return 0;
  const char *q = p;
  long st = 0, mb = 0;
  if (q == e || *q < '0' || *q > '9') goto bad;
  while (q < e && *q >= '0' && *q <= '9') { st = st * 10 + (*q - '0'); if (st > INT_MAX / 2) goto big; q++; }
  if (q == e) goto bad;
  char t = *q++;
  if (t != 'F' && t != 'I' && t != 'W' && t != 'B') {
    /* communication and resharding actions are not compute-only */
    diag_error(&c->diag, sp, "unsupported action '%.*s': only compute actions F, I, W, B are allowed (compute-only CSV)", (int)(e - p), p);
    return -1;
  }
  if (q == e || *q < '0' || *q > '9') {
    diag_error(&c->diag, sp, "action '%.*s' needs a microbatch number after '%c'", (int)(e - p), p, t);
    return -1;
  }
  while (q < e && *q >= '0' && *q <= '9') { mb = mb * 10 + (*q - '0'); if (mb > INT_MAX / 2) goto big; q++; }
  if (q != e) goto bad;
  out->stage = (int)st;
  out->mb = (int)mb;
  out->type = t;
  out->span = sp;
  return 1;
bad:
  diag_error(&c->diag, sp, "malformed action '%.*s': expected STAGE TYPE MICROBATCH, e.g. 0F1 or 1I0", (int)(e - p), p);
  return -1;
big:
  diag_error(&c->diag, sp, "number too large in action '%.*s'", (int)(e - p), p);
  return -1;
}

static void write_name(StrBuf *b, const char *path) {
  /* schedule name from the file name: letters, digits, '_' */
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char name[64];
  int n = 0;
  for (const char *p = base; *p && *p != '.' && n < 60; p++) {
    char ch = *p;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || (n && ch >= '0' && ch <= '9');
    name[n++] = ok ? ch : '_';
  }
  name[n] = 0;
  if (!n || !strcmp(name, "_")) strcpy(name, "imported");
  sb_puts(b, name);
}

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
  CsvRow *rows = NULL;
  int nrows = 0, caprows = 0;
  const char *p = text, *end = text + size;
  uint32_t line = 1;
  if (size >= 3 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf) p += 3;
  while (p < end) {
    const char *ls = p;
    while (p < end && *p != '\n') p++;
    const char *le = p;
    if (le > ls && le[-1] == '\r') le--;
    CsvRow *row = VEC_PUSH(&c->arena, rows, nrows, caprows);
    row->blank = le == ls;
    const char *q = ls;
    for (;;) {
      const char *cs = q;
      int quoted = 0;
      while (q < le && *q != ',') {
        if (*q == '"') quoted = !quoted;
        q++;
      }
      const char *a = cs, *e = q;
      while (a < e && (*a == ' ' || *a == '\t')) a++;
      while (e > a && (e[-1] == ' ' || e[-1] == '\t')) e--;
      if (e - a >= 2 && *a == '"' && e[-1] == '"') { a++; e--; }
      Span sp = {fid, line, (uint32_t)(a - ls + 1), (uint32_t)(e > a ? e - a : 1)};
      (void)quoted;
      CsvAct act;
      int r = parse_cell(c, a, e, sp, &act);
      if (r > 0) *VEC_PUSH(&c->arena, row->acts, row->n, row->cap) = act;
      if (q >= le) break;
      q++;
    }
    if (p < end) p++;
    line++;
  }
  /* trailing blank lines are not ranks (a line of empty cells is an idle rank) */
  while (nrows > 0 && rows[nrows - 1].blank) {
    nrows--;
  }
  if (nrows == 0 && !c->diag.errors) diag_error(&c->diag, (Span){fid, 1, 1, 1}, "no ranks: the CSV has no actions");
  /* stages, microbatches, placement */
  int S = 0, m = 0;
  for (int r = 0; r < nrows; r++)
    for (int k = 0; k < rows[r].n; k++) {
      if (rows[r].acts[k].stage + 1 > S) S = rows[r].acts[k].stage + 1;
      if (rows[r].acts[k].mb + 1 > m) m = rows[r].acts[k].mb + 1;
    }
  int *place = S ? arena_alloc(&c->arena, sizeof(int) * (size_t)S) : NULL;
  Span *place_at = S ? arena_alloc(&c->arena, sizeof(Span) * (size_t)S) : NULL;
  for (int st = 0; st < S; st++) place[st] = -1;
  for (int r = 0; r < nrows && !c->diag.errors; r++)
    for (int k = 0; k < rows[r].n; k++) {
      CsvAct *a = &rows[r].acts[k];
      if (place[a->stage] < 0) { place[a->stage] = r; place_at[a->stage] = a->span; }
      else if (place[a->stage] != r) {
        diag_error(&c->diag, a->span, "stage %d runs on rank %d here, but on rank %d before: a stage lives on one rank",
                   a->stage, r, place[a->stage]);
        diag_note(&c->diag, place_at[a->stage], "stage %d first runs here", a->stage);
      }
    }
  for (int st = 0; st < S && !c->diag.errors; st++)
    if (place[st] < 0) diag_error(&c->diag, (Span){fid, 1, 1, 1}, "stage %d appears on no rank (stages 0..%d are used)", st, S - 1);
  if (c->diag.errors) {
    free(text);
    diag_summary(&c->diag);
    return PPSC_INVALID;
  }
  StrBuf b = {0};
  sb_printf(&b, "// imported by `ppsc import-csv` from %s\n// torch.distributed.pipelining actions: F -> F, I -> B, W -> W, B -> BW\nschedule ", o->file);
  write_name(&b, o->file);
  sb_printf(&b, "() {\n  devices %d;\n  microbatches %d;\n  stages %d;\n  placement [", nrows, m, S);
  for (int st = 0; st < S; st++) sb_printf(&b, "%s%d", st ? ", " : "", place[st]);
  sb_puts(&b, "];\n");
  for (int r = 0; r < nrows; r++) {
    sb_printf(&b, "  device %d {", r);
    for (int k = 0; k < rows[r].n; k++) {
      CsvAct *a = &rows[r].acts[k];
      const char *kn = a->type == 'F' ? "F" : a->type == 'I' ? "B" : a->type == 'W' ? "W" : "BW";
      if (k && k % 16 == 0) sb_puts(&b, "\n   ");
      sb_printf(&b, " %s(%d,%d)", kn, a->mb, a->stage);
    }
    sb_puts(&b, " }\n");
  }
  sb_puts(&b, "}\n");
  free(text);
  int rc = write_file_atomic(o->out, b.data, b.len) ? PPSC_USAGE : PPSC_OK;
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
}

int cmd_export_csv(Compilation *c) {
  const Options *o = c->opt;
  if (!o->out) { fputs("ppsc: export-csv needs -o OUT.csv\n", stderr); return PPSC_USAGE; }
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  if (io) { diag_summary(&c->diag); return PPSC_USAGE; }
  if (!s || c->diag.errors) { diag_summary(&c->diag); return PPSC_INVALID; }
  StrBuf b = {0};
  int skipped = 0;
  Span first_skip = {0};
  for (int d = 0; d < s->ndev; d++) {
    const IrDevice *dv = &s->devs[d];
    int n = 0;
    for (int k = 0; k < dv->nops; k++) {
      const IrOp *op = &dv->ops[k];
      char t;
      switch ((IrKind)op->kind) {
      case IR_F: t = 'F'; break;
      case IR_B: t = 'I'; break;
      case IR_W: t = 'W'; break;
      case IR_BW: t = 'B'; break;
      default:
        if (!skipped++) first_skip = op->span;
        continue;
      }
      sb_printf(&b, "%s%d%c%d", n++ ? "," : "", op->stage, t, op->mb);
    }
    sb_puts(&b, "\n");
  }
  if (skipped)
    diag_warning(&c->diag, first_skip, "%d communication, offload or vocabulary ops left out: the compute-only CSV has no form for them", skipped);
  int rc = write_file_atomic(o->out, b.data ? b.data : "", b.len) ? PPSC_USAGE : PPSC_OK;
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
}
