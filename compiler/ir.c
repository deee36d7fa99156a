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

const char *ir_kind_name(IrKind k) { return ppsrt_op_kind_name((int)k); }

const char *ir_coll_name(IrColl c) { return ppsrt_coll_name((int)c); }

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

/* Frame k's chunk and place in it. Chunks grow from IR_FRAME_CHUNK0 frames, doubling
 * up to IR_FRAME_CHUNK_MAX: a small schedule allocates little, and a large one
 * allocates rarely (each allocation in the arena stops the op array elaboration is
 * appending to from growing in place). */
enum { IR_FRAME_CHUNK0 = 256, IR_FRAME_DOUBLINGS = 8, IR_FRAME_CHUNK_MAX = IR_FRAME_CHUNK0 << IR_FRAME_DOUBLINGS };
static void frame_slot(uint32_t k, uint32_t *chunk, uint32_t *off, uint32_t *size) {
  uint32_t base = 0, n = IR_FRAME_CHUNK0, c = 0;
  while (c < IR_FRAME_DOUBLINGS && k - base >= n) { base += n; n *= 2; c++; }
  *chunk = c + (k - base) / n;
  *off = (k - base) % n;
  *size = n;
}

uint32_t ir_frame_push(Arena *a, IrSchedule *s, uint32_t loop, int64_t value, uint32_t parent) {
  if (s->nframes == 0) s->nframes = 1; /* frame 0: no bindings */
  if (s->nframes >= (1u << IR_FRAME_BITS)) return 0;
  uint32_t k = s->nframes;
  if (!s->frame_left) { /* a new chunk */
    uint32_t c, off, size;
    frame_slot(k, &c, &off, &size);
    if ((int)c >= s->capchunks) {
      int cap = s->capchunks ? 2 * s->capchunks : 16;
      s->frames = arena_grow(a, s->frames, sizeof *s->frames * (size_t)s->capchunks, sizeof *s->frames * (size_t)cap);
      s->capchunks = cap;
    }
    if (!s->frames[c]) s->frames[c] = arena_alloc(a, sizeof(IrFrame) * size);
    s->frame_next = &s->frames[c][off];
    s->frame_left = size - off;
  }
  IrFrame *f = s->frame_next++;
  s->frame_left--;
  f->value = value;
  f->parent = parent;
  f->loop = loop;
  s->nframes = k + 1;
  return k;
}

const IrFrame *ir_frame(const IrSchedule *s, uint32_t frame) {
  if (frame == 0 || frame >= s->nframes) return NULL;
  uint32_t c, off, size;
  frame_slot(frame, &c, &off, &size);
  return &s->frames[c][off];
}

int ir_format_frame(const IrSchedule *s, uint32_t frame, char *buf, int size) {
  const IrFrame *chain[16];
  int n = 0;
  buf[0] = 0;
  /* innermost first; elaboration nests at most 16 loops' frames */
  for (const IrFrame *f = ir_frame(s, frame); f && n < 16; f = ir_frame(s, f->parent))
    if (f->loop >= (uint32_t)s->nloops || !s->loops[f->loop].use) chain[n++] = f;   /* uses: ir_note_op */
  int len = 0;
  for (int k = n - 1; k >= 0 && len < size; k--) {
    const IrFrame *f = chain[k];
    const char *name = f->loop < (uint32_t)s->nloops ? s->loops[f->loop].name : "?";
    len += snprintf(buf + len, (size_t)(size - len), "%s%s = %lld", k == n - 1 ? "" : ", ", name, (long long)f->value);
  }
  return len < size ? len : size - 1;
}

void ir_note_op(Diag *dg, const IrSchedule *s, int d, const IrOp *op, int named) {
  if (d < 0 || d >= s->ndev) return;
  char b[512];
  int n = ir_format_frame(s, ir_op_frame(op), b, sizeof b);
  const IrFrame *f = ir_frame(s, ir_op_frame(op));
  /* the innermost loop (a use's frame is not one) */
  while (f && f->loop < (uint32_t)s->nloops && s->loops[f->loop].use) f = ir_frame(s, f->parent);
  if (n > 0 && f && f->loop < (uint32_t)s->nloops) {
    diag_note(dg, s->loops[f->loop].span, "in device %d, %s", d, b);
  } else if (!named) {
    diag_note(dg, s->devs[d].span.file ? s->devs[d].span : op->span, "in device %d", d);
  }
  /* the `use` statements that wrote it, innermost first: the user's own line last */
  int k = 0;
  for (const IrFrame *u = ir_frame(s, ir_op_frame(op)); u && k < 64; u = ir_frame(s, u->parent), k++)
    if (u->loop < (uint32_t)s->nloops && s->loops[u->loop].use)
      diag_note(dg, s->loops[u->loop].span, "in schedule '%s', used here", s->loops[u->loop].use);
}
