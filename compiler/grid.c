/* grid.c: `ppsc sim --grid`, the simulated schedule as a text grid, in the spirit of
 * PyTorch's _format_pipeline_order: one column per device, one row per time step.
 * A time step is an instant at which some device starts a compute pass (F, B, W, BW,
 * and the vocabulary passes); the cell of a device holds the pass it starts then, or
 * is empty. Communication and copies are left out (they are in --trace and --svg).
 * At most GRID_MAX_ROWS rows are printed; the rest is counted. */
#include "report.h"
#include <stdlib.h>
#include <string.h>

enum { GRID_MAX_ROWS = 5000 };

typedef struct GridCell { double t; int32_t g; int32_t dev; } GridCell;

static int cell_cmp(const void *x, const void *y) {
  const GridCell *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return a->dev - b->dev;
}

void report_grid(StrBuf *b, const Report *r) {
  const IrSchedule *s = r->s;
  const SimResult *sim = r->sim;
  const AnaIndex *ix = r->ix;
  if (!s || !sim || !ix || !sim->start) return;
  int P = s->ndev;
  int64_t n = 0;
  for (int32_t g = 0; g < ix->total; g++)
    if (ana_op(s, ix, g)->kind <= IR_T) n++;
  GridCell *c = malloc(sizeof *c * (size_t)(n + 1));
  if (!c) arena_out_of_memory(sizeof *c * (size_t)(n + 1));
  int64_t k = 0;
  int width = 4;
  for (int32_t g = 0; g < ix->total; g++) {
    const IrOp *op = ana_op(s, ix, g);
    if (op->kind > IR_T) continue;
    c[k].t = sim->start[g];
    c[k].g = g;
    c[k].dev = ix->devof[g];
    char buf[64];
    int w = ir_format_op(s, op, buf, sizeof buf);
    if (w > width) width = w;
    k++;
  }
  qsort(c, (size_t)n, sizeof *c, cell_cmp);
  /* the time column */
  int tw = 4;
  for (int64_t i = 0; i < n; i++) {
    char buf[32];
    int w = snprintf(buf, sizeof buf, "%.6g", c[i].t);
    if (w > tw) tw = w;
  }
  sb_printf(b, "%-*s", tw, "time");
  for (int d = 0; d < P; d++) {
    char h[24];
    snprintf(h, sizeof h, "dev %d", d);
    sb_printf(b, " | %-*s", width, h);
  }
  sb_puts(b, "\n");
  for (int i = 0; i < tw; i++) sb_puts(b, "-");
  for (int d = 0; d < P; d++) {
    sb_puts(b, "-+-");
    for (int i = 0; i < width; i++) sb_puts(b, "-");
  }
  sb_puts(b, "\n");
  char **row = calloc((size_t)(P > 0 ? P : 1), sizeof *row);
  char *cells = malloc((size_t)(P > 0 ? P : 1) * 64);
  if (!row || !cells) arena_out_of_memory((size_t)P * 64);
  int64_t rows = 0, i = 0;
  while (i < n) {
    double t = c[i].t;
    for (int d = 0; d < P; d++) row[d] = NULL;
    int64_t j = i;
    /* one row per instant; a device starting two passes at once (zero-cost ones)
       gets a row each */
    while (j < n && c[j].t == t && !row[c[j].dev]) {
      char *cell = cells + (size_t)c[j].dev * 64;
      ir_format_op(s, ana_op(s, ix, c[j].g), cell, 64);
      row[c[j].dev] = cell;
      j++;
    }
    if (rows < GRID_MAX_ROWS) {
      char tb[32];
      snprintf(tb, sizeof tb, "%.6g", t);
      sb_printf(b, "%-*s", tw, tb);
      for (int d = 0; d < P; d++) sb_printf(b, " | %-*s", width, row[d] ? row[d] : "");
      sb_puts(b, "\n");
    }
    rows++;
    i = j;
  }
  if (rows > GRID_MAX_ROWS) sb_printf(b, "... %lld more rows (--trace or --svg show them all)\n", (long long)(rows - GRID_MAX_ROWS));
  free(row);
  free(cells);
  free(c);
}
