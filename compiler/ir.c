/* ir.c: small helpers over the schedule IR (names, printing, appending). */
#include "ir.h"
#include <stdio.h>

IrOp *ir_push(Arena *a, IrSchedule *s, int d) {
  IrDevice *dev = &s->devs[d];
  IrOp *op = VEC_PUSH(a, dev->ops, dev->nops, dev->capops);
  op->peer = -1;
  s->total_ops++;
  return op;
}

const char *ir_kind_name(IrKind k) {
  static const char *n[IR_NKINDS] = {"F", "B", "W", "BW", "IF", "IB", "S", "T",
                                     "offload", "reload", "send", "recv", "coll"};
  return (unsigned)k < IR_NKINDS ? n[k] : "?";
}

const char *ir_coll_name(IrColl c) {
  static const char *n[] = {"none", "input_fwd", "output_fwd", "output_bwd", "input_bwd"};
  return (unsigned)c <= IR_COLL_INPUT_BWD ? n[c] : "?";
}

const char *ir_metric_name(IrMetric m) {
  static const char *n[IR_NMETRICS] = {"makespan", "bubble_rate", "bubble_rate_span",
                                       "peak_memory", "host_memory", "ops", "idle"};
  return (unsigned)m < IR_NMETRICS ? n[m] : "?";
}

/* The canonical literal form, the same syntax a file may write:
 *   F(i) / F(i,s)           compute (stage omitted when every device holds one stage)
 *   IF(i) IB(i) S(i) T(i)   vocabulary passes
 *   offload(i,s) reload(i,s)
 *   send F(i,s) / recv B(i,s)   the activation of F or the input gradient of B
 *   coll output_fwd(i)      vocabulary collective */
int ir_format_op(const IrSchedule *s, const IrOp *op, char *buf, int size) {
  int one_stage = s->nstage == s->ndev && s->placement && s->placement[0] == 'l';
  switch ((IrKind)op->kind) {
  case IR_F: case IR_B: case IR_W: case IR_BW:
    if (one_stage) return snprintf(buf, (size_t)size, "%s(%d)", ir_kind_name(op->kind), op->mb);
    return snprintf(buf, (size_t)size, "%s(%d,%d)", ir_kind_name(op->kind), op->mb, op->stage);
  case IR_IF: case IR_IB: case IR_S: case IR_T:
    return snprintf(buf, (size_t)size, "%s(%d)", ir_kind_name(op->kind), op->mb);
  case IR_OFFLOAD: case IR_RELOAD:
    return snprintf(buf, (size_t)size, "%s(%d,%d)", ir_kind_name(op->kind), op->mb, op->stage);
  case IR_SEND: case IR_RECV: {
    const char *what = op->xfer == IR_XFER_ACT ? "F" : "B";
    if (one_stage) return snprintf(buf, (size_t)size, "%s %s(%d)", ir_kind_name(op->kind), what, op->mb);
    return snprintf(buf, (size_t)size, "%s %s(%d,%d)", ir_kind_name(op->kind), what, op->mb, op->stage);
  }
  case IR_COLL:
    return snprintf(buf, (size_t)size, "coll %s(%d)", ir_coll_name(op->coll), op->mb);
  default:
    return snprintf(buf, (size_t)size, "?");
  }
}
