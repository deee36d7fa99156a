/* irbuild.h: builds schedule IR directly in C for the analysis tests and the
 * simulator benchmark, without the parser: placements, standard orders (1F1B,
 * interleaved 1F1B), and single ops. Every op gets its own line of a synthetic
 * source file ("ir.pps", one op per line) so diagnostics carry real locations.
 * Not a public API: a header of static functions for tests and bench only. */
#ifndef PPS_IRBUILD_H
#define PPS_IRBUILD_H
#include "driver.h"
#include "ir.h"
#include <stdio.h>
#include <string.h>

typedef struct IB {
  Arena *a;
  Diag *dg;
  IrSchedule *s;
  StrBuf src;      /* the synthetic source, one line per op */
  uint32_t line;
  int keep_text;   /* 0: no source text (bench: millions of ops) */
} IB;

/* A schedule of P devices, v stages per device (interleaved when v > 1), m
 * microbatches, costs for one device share. */
static inline IrSchedule *ib_new(IB *b, Arena *a, Diag *dg, int P, int v, int m, double TF, double TB, double TW, double TC) {
  memset(b, 0, sizeof *b);
  b->a = a;
  b->dg = dg;
  b->keep_text = 1;
  b->line = 1;
  IrSchedule *s = arena_alloc(a, sizeof *s);
  b->s = s;
  s->name = "test";
  s->file = "ir.pps";
  s->span = (Span){1, 1, 1, 8};
  s->ndev = P;
  s->nstage = P * v;
  s->nmb = m;
  s->v = v;
  s->placement = v == 1 ? "linear" : "interleaved";
  s->tf = TF, s->tb = TB, s->tw = TW, s->tc = TC;
  s->mem_limit = -1;
  s->offload.host_limit = -1;
  s->stages = arena_alloc(a, sizeof(IrStage) * (size_t)s->nstage);
  for (int st = 0; st < s->nstage; st++) {
    IrStage *x = &s->stages[st];
    x->device = st % P;
    x->tf = TF / v, x->tb = TB / v, x->tw = TW / v, x->tbw = (TB + TW) / v;
    x->act = 1.0 / v;
    x->span = s->span;
  }
  s->devs = arena_alloc(a, sizeof(IrDevice) * (size_t)P);
  sb_puts(&b->src, "schedule test\n");
  b->line = 2;
  return s;
}

static inline IrOp *ib_op(IB *b, int d, IrKind k, int mb, int stage) {
  IrOp *op = ir_push(b->a, b->s, d);
  op->kind = (uint8_t)k;
  op->mb = mb;
  op->stage = stage;
  if (b->keep_text) {
    char buf[96];
    int n = ir_format_op(b->s, op, buf, sizeof buf);
    if (k == IR_SEND || k == IR_RECV) n = ir_format_op(b->s, op, buf, sizeof buf);
    sb_printf(&b->src, "  %s\n", buf);
    op->span = (Span){1, b->line++, 3, (uint32_t)(n > 0 ? n : 1)};
  } else {
    op->span = (Span){1, 2, 1, 1};
  }
  return op;
}

static inline IrOp *ib_comm(IB *b, int d, IrKind k, IrXfer x, int mb, int stage, int peer) {
  IrOp *op = ir_push(b->a, b->s, d);
  op->kind = (uint8_t)k;
  op->xfer = (uint8_t)x;
  op->mb = mb;
  op->stage = stage;
  op->peer = peer;
  char buf[96];
  int n = ir_format_op(b->s, op, buf, sizeof buf);
  sb_printf(&b->src, "  %s\n", buf);
  op->span = (Span){1, b->line++, 3, (uint32_t)(n > 0 ? n : 1)};
  return op;
}

static inline IrExpect *ib_expect(IB *b, IrMetric mt, IrCmp c, double v, int device) {
  IrSchedule *s = b->s;
  IrExpect *e = VEC_PUSH(b->a, s->expects, s->nexpects, s->capexpects);
  e->metric = (uint8_t)mt;
  e->cmp = (uint8_t)c;
  e->value = v;
  e->device = device;
  sb_printf(&b->src, "  expect %s ...;\n", ir_metric_name(mt));
  e->span = (Span){1, b->line++, 3, 6};
  return e;
}

/* Registers the synthetic source (call once, after the last op). */
static inline void ib_done(IB *b) {
  diag_add_file(b->dg, "ir.pps", b->src.data ? b->src.data : "", b->src.len);
  sb_free(&b->src);
}

/* The backward of (i, s): BW, or B then W (split). */
static inline void ib_bwd(IB *b, int d, int i, int st, int split) {
  if (split) { ib_op(b, d, IR_B, i, st); ib_op(b, d, IR_W, i, st); }
  else ib_op(b, d, IR_BW, i, st);
}

/* 1F1B on a linear placement (v = 1). */
static inline void ib_1f1b(IB *b, int split) {
  IrSchedule *s = b->s;
  int P = s->ndev, m = s->nmb;
  for (int d = 0; d < P; d++) {
    int warm = P - d - 1 < m ? P - d - 1 : m;
    for (int i = 0; i < warm; i++) ib_op(b, d, IR_F, i, d);
    for (int i = 0; i < m - warm; i++) { ib_op(b, d, IR_F, i + warm, d); ib_bwd(b, d, i, d, split); }
    for (int i = m - warm; i < m; i++) ib_bwd(b, d, i, d, split);
  }
}

/* Megatron's interleaved 1F1B (v chunks per device, m a multiple of P). Forward k
 * of a device runs chunk (k / P) % v of microbatch (k / (P v)) P + k % P; backward
 * k the chunks in reverse. */
static inline void ib_interleaved(IB *b, int split) {
  IrSchedule *s = b->s;
  int P = s->ndev, m = s->nmb, v = s->v;
  int total = m * v;
  for (int d = 0; d < P; d++) {
    int warm = (P - d - 1) * 2 + (v - 1) * P;
    if (warm > total) warm = total;
    int fk = 0, bk = 0;
#define FWD() do { int c = (fk / P) % v, i = (fk / (P * v)) * P + fk % P; ib_op(b, d, IR_F, i, c * P + d); fk++; } while (0)
#define BWD() do { int c = v - 1 - (bk / P) % v, i = (bk / (P * v)) * P + bk % P; ib_bwd(b, d, i, c * P + d, split); bk++; } while (0)
    for (int k = 0; k < warm; k++) FWD();
    while (fk < total) { FWD(); BWD(); }
    while (bk < total) BWD();
#undef FWD
#undef BWD
  }
}
#endif
