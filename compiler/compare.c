/* compare.c: `ppsc compare A.pps B.pps`: both schedules checked and simulated, their
 * figures side by side (makespan, bubble, the bottleneck device's bubble, peak memory
 * overall and per device), the costs and memory settings that differ, and, per device,
 * where their compute orders first differ.
 * --cost, --memory and --schedule apply to both files; `-D NAME=V` to each file whose
 * schedule has the parameter (an error when neither has it), `-D A:NAME=V` and
 * `-D B:NAME=V` to one file. The sides run one after the other: of the first only
 * what the report needs is kept (its compute orders, figures and costs), so the peak
 * memory is about that of the larger side, not of both. Exit status: 0 when both are
 * valid, 1 when either is invalid (its errors printed), 2 on a usage or I/O error. */
#include "analysis.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the report needs of one side, outside its arena. */
typedef struct Kept {
  IrSchedule s;             /* name, placement, sizes, costs; devs: compute ops only */
  IrStage *stages;
  SimDev *dev;              /* per device busy and peak */
  double makespan, bubble_rate, peak_memory;
  int io, valid;
} Kept;

static char *dupstr(const char *x) {
  char *p = strdup(x ? x : "?");
  if (!p) arena_out_of_memory(strlen(x ? x : "?") + 1);
  return p;
}
static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) arena_out_of_memory(n);
  return p;
}

/* The compute passes of device d in order (sends, receives, copies left out). */
static int next_compute(const IrDevice *dv, int k) {
  while (k < dv->nops && dv->ops[k].kind > IR_T) k++;
  return k;
}

/* The defines for side `which` ('A' or 'B'): every plain -D and that side's `X:` ones
 * (prefix removed); idx[k] = the index in o->defs. */
static int side_defs(const Options *o, char which, Define *out, int *idx) {
  int n = 0;
  for (int k = 0; k < o->ndefs; k++) {
    const char *nm = o->defs[k].name;
    if ((nm[0] == 'A' || nm[0] == 'B') && nm[1] == ':') {
      if (nm[0] != which) continue;
      out[n] = o->defs[k];
      out[n].name = nm + 2;
    } else {
      out[n] = o->defs[k];
    }
    idx[n++] = k;
  }
  return n;
}

/* Compiles and analyses one side; keeps what the report needs; frees the rest.
 * used[k] is set for each of o->defs the side's schedule has. */
static void side_run(Kept *x, const Options *base, const char *file, char which, unsigned char *used) {
  Options o = *base;
  o.file = file;
  Define *defs = xmalloc(sizeof(Define) * (size_t)(base->ndefs + 1));
  int *idx = xmalloc(sizeof(int) * (size_t)(base->ndefs + 1));
  unsigned char *u = calloc((size_t)base->ndefs + 1, 1);
  if (!u) arena_out_of_memory((size_t)base->ndefs + 1);
  o.ndefs = side_defs(base, which, defs, idx);
  o.defs = defs;
  o.def_used = u;
  Compilation c;
  memset(&c, 0, sizeof c);
  c.opt = &o;
  diag_init(&c.diag, &c.arena);
  c.diag.max_errors = base->max_errors;
  c.diag.color = base->color;
  memset(x, 0, sizeof *x);
  IrSchedule *s = front_compile(&c, &x->io);
  for (int k = 0; k < o.ndefs; k++)
    if (u[k]) used[idx[k]] = 1;
  Analysis an;
  memset(&an, 0, sizeof an);
  if (s && !x->io && c.diag.errors == 0) analysis_run(&c.arena, &c.diag, s, &an, 0);
  x->valid = s && !x->io && c.diag.errors == 0 && an.simulated;
  diag_summary(&c.diag);
  if (x->valid) {
    x->s = *s;
    x->s.name = dupstr(s->name);
    x->s.file = NULL;
    x->s.placement = dupstr(s->placement);
    x->stages = xmalloc(sizeof(IrStage) * (size_t)s->nstage);
    memcpy(x->stages, s->stages, sizeof(IrStage) * (size_t)s->nstage);
    x->s.stages = x->stages;
    x->dev = xmalloc(sizeof(SimDev) * (size_t)s->ndev);
    memcpy(x->dev, an.sim.dev, sizeof(SimDev) * (size_t)s->ndev);
    x->makespan = an.sim.makespan;
    x->bubble_rate = an.sim.bubble_rate;
    x->peak_memory = an.sim.peak_memory;
    x->s.devs = xmalloc(sizeof(IrDevice) * (size_t)s->ndev);
    for (int d = 0; d < s->ndev; d++) {
      const IrDevice *dv = &s->devs[d];
      IrDevice *kd = &x->s.devs[d];
      memset(kd, 0, sizeof *kd);
      int n = 0;
      for (int k = next_compute(dv, 0); k < dv->nops; k = next_compute(dv, k + 1)) n++;
      kd->ops = xmalloc(sizeof(IrOp) * (size_t)n);
      for (int k = next_compute(dv, 0); k < dv->nops; k = next_compute(dv, k + 1)) {
        IrOp *op = &kd->ops[kd->nops++];
        *op = dv->ops[k];
      }
    }
  }
  arena_free(&c.arena);
  free(defs);
  free(idx);
  free(u);
}

static void kept_free(Kept *x) {
  if (!x->valid) return;
  for (int d = 0; d < x->s.ndev; d++) free(x->s.devs[d].ops);
  free(x->s.devs);
  free((char *)x->s.name);
  free((char *)x->s.placement);
  free(x->stages);
  free(x->dev);
}

static int busiest(const Kept *x, double *rate) {
  int best = 0;
  for (int d = 1; d < x->s.ndev; d++)
    if (x->dev[d].busy > x->dev[best].busy) best = d;
  *rate = x->makespan > 0 ? 1 - x->dev[best].busy / x->makespan : 0;
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

/* The costs and memory settings of the two sides that differ, one row each; returns
 * how many rows. */
static int cost_rows(StrBuf *b, const IrSchedule *s, const IrSchedule *t) {
  int n = 0;
#define ROW(NAME, X, Y) do { if ((X) != (Y)) { row_num(b, NAME, X, Y); n++; } } while (0)
  ROW("TF", s->tf, t->tf);
  ROW("TB", s->tb, t->tb);
  ROW("TW", s->tw, t->tw);
  ROW("TC", s->tc, t->tc);
  ROW("TFB", s->tfb, t->tfb);
  ROW("memory limit", s->mem_limit, t->mem_limit);
  ROW("TIF", s->vocab.t_if, t->vocab.t_if);
  ROW("TIB", s->vocab.t_ib, t->vocab.t_ib);
  ROW("TS", s->vocab.t_s, t->vocab.t_s);
  ROW("TT", s->vocab.t_t, t->vocab.t_t);
  ROW("TCOLL", s->vocab.t_coll, t->vocab.t_coll);
#undef ROW
  /* per-stage costs (schedule-wide ones scaled, `cost stage`, profiles): the first
     stage where they differ, and how many do */
  if (s->nstage == t->nstage) {
    int first = -1, cnt = 0;
    for (int k = 0; k < s->nstage; k++) {
      const IrStage *p = &s->stages[k], *q = &t->stages[k];
      if (p->tf != q->tf || p->tb != q->tb || p->tw != q->tw || p->tbw != q->tbw || p->act != q->act) {
        if (first < 0) first = k;
        cnt++;
      }
    }
    if (first >= 0) {
      const IrStage *p = &s->stages[first], *q = &t->stages[first];
      char nm[48];
#define SROW(KEY, F) do { if (p->F != q->F) { snprintf(nm, sizeof nm, "stage %d " KEY, first); row_num(b, nm, p->F, q->F); n++; } } while (0)
      SROW("TF", tf); SROW("TB", tb); SROW("TW", tw); SROW("TBW", tbw); SROW("act", act);
#undef SROW
      if (cnt > 1) { sb_printf(b, "%-22s %d of %d stages differ\n", "", cnt, s->nstage); }
    }
  }
  return n;
}

int cmd_compare(Compilation *c) {
  const Options *o = c->opt;
  if (!o->file || !o->file2) {
    fputs("ppsc: compare needs two input files: ppsc compare A.pps B.pps\nTry 'ppsc --help'.\n", stderr);
    return PPSC_USAGE;
  }
  Kept *a = calloc(2, sizeof *a);
  unsigned char *used = calloc((size_t)o->ndefs + 1, 2);
  if (!a || !used) arena_out_of_memory(2 * sizeof *a + 2 * (size_t)o->ndefs);
  Kept *x = &a[0], *y = &a[1];
  side_run(x, o, o->file, 'A', used);
  side_run(y, o, o->file2, 'B', used + o->ndefs);
  int rc = PPSC_OK;
  /* a -D that neither side (or not its own side) has is a usage error */
  for (int k = 0; k < o->ndefs; k++) {
    const char *nm = o->defs[k].name;
    int pre = (nm[0] == 'A' || nm[0] == 'B') && nm[1] == ':';
    int ok = pre ? used[(nm[0] == 'B') * o->ndefs + k] : used[k] || used[o->ndefs + k];
    if (ok) continue;
    if (pre)
      fprintf(stderr, "ppsc: -D %s: the schedule of %s (%s) has no parameter '%s'\n", nm, nm[0] == 'A' ? "A" : "B",
              nm[0] == 'A' ? o->file : o->file2, nm + 2);
    else
      fprintf(stderr, "ppsc: -D %s: neither schedule has a parameter '%s' (-D A:%s=... or -D B:%s=... sets one file's)\n", nm, nm,
              nm, nm);
    rc = PPSC_USAGE;
  }
  if (rc == PPSC_OK) {
    if (x->io || y->io) rc = PPSC_USAGE;
    else if (!x->valid || !y->valid) rc = PPSC_INVALID;
  }
  if (rc == PPSC_OK && !o->quiet) {
    StrBuf b = {0};
    const IrSchedule *s = &x->s, *t = &y->s;
    sb_printf(&b, "%-22s %14s %14s\n", "", "A", "B");
    sb_printf(&b, "%-22s %14s %14s\n", "schedule", s->name, t->name);
    sb_printf(&b, "%-22s %14s %14s\n", "file", o->file, o->file2);
    char sa[40], sb2[40];
    snprintf(sa, sizeof sa, "%d/%d/%d", s->ndev, s->nstage, s->nmb);
    snprintf(sb2, sizeof sb2, "%d/%d/%d", t->ndev, t->nstage, t->nmb);
    sb_printf(&b, "%-22s %14s %14s\n", "devices/stages/mbs", sa, sb2);
    row_num(&b, "makespan", x->makespan, y->makespan);
    row_num(&b, "bubble", x->bubble_rate, y->bubble_rate);
    double ba, bb;
    int da = busiest(x, &ba), db = busiest(y, &bb);
    row_num(&b, "bottleneck bubble", ba, bb);
    snprintf(sa, sizeof sa, "%d", da);
    snprintf(sb2, sizeof sb2, "%d", db);
    sb_printf(&b, "%-22s %14s %14s\n", "bottleneck device", sa, sb2);
    row_num(&b, "peak memory", x->peak_memory, y->peak_memory);
    row_num(&b, "ops", (double)s->total_ops, (double)t->total_ops);
    int P = s->ndev > t->ndev ? s->ndev : t->ndev;
    for (int d = 0; d < P; d++) {
      char name[40];
      snprintf(name, sizeof name, "peak memory [%d]", d);
      if (d < s->ndev && d < t->ndev) row_num(&b, name, x->dev[d].peak, y->dev[d].peak);
      else sb_printf(&b, "%-22s %14s %14s\n", name, d < s->ndev ? "" : "-", d < t->ndev ? "" : "-");
    }
    sb_puts(&b, "\ncosts and memory settings:\n");
    if (!cost_rows(&b, s, t)) sb_puts(&b, "  the same\n");
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
      int i = 0, j = 0;
      while (i < u->nops && j < v->nops) {
        const IrOp *p1 = &u->ops[i], *p2 = &v->ops[j];
        if (p1->kind != p2->kind || p1->mb != p2->mb || p1->stage != p2->stage) break;
        i++;
        j++;
      }
      if (i >= u->nops && j >= v->nops) continue;
      same = 0;
      char e1[64] = "(end)", e2[64] = "(end)";
      if (i < u->nops) ir_format_op(s, &u->ops[i], e1, sizeof e1);
      if (j < v->nops) ir_format_op(t, &v->ops[j], e2, sizeof e2);
      sb_printf(&b, "  device %d: first differ at pass %d: A %s", d, i, e1);
      if (i < u->nops && u->ops[i].span.file) sb_printf(&b, " (line %u)", u->ops[i].span.line);
      sb_printf(&b, ", B %s", e2);
      if (j < v->nops && v->ops[j].span.file) sb_printf(&b, " (line %u)", v->ops[j].span.line);
      sb_puts(&b, "\n");
    }
    if (same) sb_puts(&b, "  the same passes in the same order on every device\n");
    if (fwrite(b.data, 1, b.len, stdout) != b.len) rc = PPSC_USAGE;
    sb_free(&b);
  }
  kept_free(x);
  kept_free(y);
  free(a);
  free(used);
  return rc;
}
