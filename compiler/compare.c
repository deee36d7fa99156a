/* compare.c: `ppsc compare A.pps B.pps`: both schedules checked and simulated, their
 * figures side by side (makespan, bubble, the bottleneck device's bubble, peak memory
 * overall and per device) and, per device, where their compute orders first differ.
 * -D, --cost, --memory and --schedule apply to both files. Exit status: 0 when both
 * are valid, 1 when either is invalid (its errors printed), 2 on a usage or I/O error. */
#include "analysis.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Side {
  Compilation c;
  Options o;
  IrSchedule *s;
  Analysis an;
  int io, valid;
} Side;

static void side_run(Side *x, const Options *base, const char *file) {
  x->o = *base;
  x->o.file = file;
  memset(&x->c, 0, sizeof x->c);
  x->c.opt = &x->o;
  diag_init(&x->c.diag, &x->c.arena);
  x->c.diag.max_errors = base->max_errors;
  x->c.diag.color = base->color;
  x->s = front_compile(&x->c, &x->io);
  memset(&x->an, 0, sizeof x->an);
  if (x->s && !x->io && x->c.diag.errors == 0) analysis_run(&x->c.arena, &x->c.diag, x->s, &x->an, 0);
  x->valid = x->s && !x->io && x->c.diag.errors == 0 && x->an.simulated;
  diag_summary(&x->c.diag);
}

static int busiest(const IrSchedule *s, const SimResult *r, double *rate) {
  int best = 0;
  for (int d = 1; d < s->ndev; d++)
    if (r->dev[d].busy > r->dev[best].busy) best = d;
  *rate = r->makespan > 0 ? 1 - r->dev[best].busy / r->makespan : 0;
  return best;
}

static void row_num(StrBuf *b, const char *name, double x, double y) {
  char l[40], r[40], dl[48];
  snprintf(l, sizeof l, "%.6g", x);
  snprintf(r, sizeof r, "%.6g", y);
  if (x == y) snprintf(dl, sizeof dl, "same");
  else snprintf(dl, sizeof dl, "%+.6g (%+.1f%%)", y - x, x != 0 ? 100 * (y - x) / x : 0.0);
  sb_printf(b, "%-22s %14s %14s   %s\n", name, l, r, dl);
}

/* The compute passes of device d in order (sends, receives, copies left out). */
static int next_compute(const IrDevice *dv, int k) {
  while (k < dv->nops && dv->ops[k].kind > IR_T) k++;
  return k;
}

int cmd_compare(Compilation *c) {
  const Options *o = c->opt;
  if (!o->file || !o->file2) {
    fputs("ppsc: compare needs two input files: ppsc compare A.pps B.pps\nTry 'ppsc --help'.\n", stderr);
    return PPSC_USAGE;
  }
  Side *a = calloc(2, sizeof *a);
  if (!a) arena_out_of_memory(2 * sizeof *a);
  Side *x = &a[0], *y = &a[1];
  side_run(x, o, o->file);
  side_run(y, o, o->file2);
  int rc = PPSC_OK;
  if (x->io || y->io) rc = PPSC_USAGE;
  else if (!x->valid || !y->valid) rc = PPSC_INVALID;
  if (rc == PPSC_OK && !o->quiet) {
    StrBuf b = {0};
    const IrSchedule *s = x->s, *t = y->s;
    const SimResult *r = &x->an.sim, *q = &y->an.sim;
    sb_printf(&b, "%-22s %14s %14s\n", "", "A", "B");
    sb_printf(&b, "%-22s %14s %14s\n", "schedule", s->name, t->name);
    sb_printf(&b, "%-22s %14s %14s\n", "file", o->file, o->file2);
    char sa[40], sb2[40];
    snprintf(sa, sizeof sa, "%d/%d/%d", s->ndev, s->nstage, s->nmb);
    snprintf(sb2, sizeof sb2, "%d/%d/%d", t->ndev, t->nstage, t->nmb);
    sb_printf(&b, "%-22s %14s %14s\n", "devices/stages/mbs", sa, sb2);
    row_num(&b, "makespan", r->makespan, q->makespan);
    row_num(&b, "bubble", r->bubble_rate, q->bubble_rate);
    double ba, bb;
    int da = busiest(s, r, &ba), db = busiest(t, q, &bb);
    row_num(&b, "bottleneck bubble", ba, bb);
    snprintf(sa, sizeof sa, "%d", da);
    snprintf(sb2, sizeof sb2, "%d", db);
    sb_printf(&b, "%-22s %14s %14s\n", "bottleneck device", sa, sb2);
    row_num(&b, "peak memory", r->peak_memory, q->peak_memory);
    row_num(&b, "ops", (double)s->total_ops, (double)t->total_ops);
    int P = s->ndev > t->ndev ? s->ndev : t->ndev;
    for (int d = 0; d < P; d++) {
      char name[40];
      snprintf(name, sizeof name, "peak memory [%d]", d);
      if (d < s->ndev && d < t->ndev) row_num(&b, name, r->dev[d].peak, q->dev[d].peak);
      else sb_printf(&b, "%-22s %14s %14s\n", name, d < s->ndev ? "" : "-", d < t->ndev ? "" : "-");
    }
    /* orders: per device, the first compute pass where they differ */
    int same = 1;
    sb_puts(&b, "\norders (compute passes):\n");
    for (int d = 0; d < P; d++) {
      if (d >= s->ndev || d >= t->ndev) {
        sb_printf(&b, "  device %d: only in %s\n", d, d < s->ndev ? "A" : "B");
        same = 0;
        continue;
      }
      const IrDevice *u = &s->devs[d], *v = &t->devs[d];
      int i = next_compute(u, 0), j = next_compute(v, 0), pos = 0;
      while (i < u->nops && j < v->nops) {
        const IrOp *p1 = &u->ops[i], *p2 = &v->ops[j];
        if (p1->kind != p2->kind || p1->mb != p2->mb || p1->stage != p2->stage) break;
        i = next_compute(u, i + 1);
        j = next_compute(v, j + 1);
        pos++;
      }
      if (i >= u->nops && j >= v->nops) continue;
      same = 0;
      char e1[64] = "(end)", e2[64] = "(end)";
      if (i < u->nops) ir_format_op(s, &u->ops[i], e1, sizeof e1);
      if (j < v->nops) ir_format_op(t, &v->ops[j], e2, sizeof e2);
      sb_printf(&b, "  device %d: first differ at pass %d: A %s", d, pos, e1);
      if (i < u->nops && u->ops[i].span.file) sb_printf(&b, " (line %u)", u->ops[i].span.line);
      sb_printf(&b, ", B %s", e2);
      if (j < v->nops && v->ops[j].span.file) sb_printf(&b, " (line %u)", v->ops[j].span.line);
      sb_puts(&b, "\n");
    }
    if (same) sb_puts(&b, "  the same on every device\n");
    if (fwrite(b.data, 1, b.len, stdout) != b.len) rc = PPSC_USAGE;
    sb_free(&b);
  }
  arena_free(&x->c.arena);
  arena_free(&y->c.arena);
  free(a);
  return rc;
}
