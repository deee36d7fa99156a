/* iobox.c: a device context's IO box (the boundary tensors a device's ops produce and
 * consume, keyed by (what, microbatch, stage), with columns only for the stages its ops
 * touch), the reference context --check builds beside it, and the
 * services the models call (ppsrt_io_*, ppsrt_ctx_*). Below the interpreter: it calls
 * only the activation store (actstore.c) and error.c. */
#include "config.h"
#include "rt.h"
#include <stdlib.h>
#include <string.h>

/* ---- services for the model ---- */
ppsrt_backend *ppsrt_ctx_backend(ppsrt_ctx *c) { return c->be; }
int ppsrt_ctx_rank(ppsrt_ctx *c) { return c->rank; }
int ppsrt_ctx_iteration(ppsrt_ctx *c) { return c->iteration; }

/* Without columns (bcol NULL: a context built by hand, as tests do) every key stage
 * -1..nstage has a column. */
static int box_ncol(const ppsrt_ctx *c) { return c->bcol ? c->nbcol : c->nstage + 2; }

static rt_box *box_at(ppsrt_ctx *c, int xfer, int mb, int stage) {
  if ((xfer != PPSRT_XFER_ACT && xfer != PPSRT_XFER_GRAD) || mb < 0 || mb >= c->nmb || stage < -1 ||
      stage > c->nstage || (c->bcol && c->bcol[stage + 1] < 0))
    return NULL;
  int col = c->bcol ? c->bcol[stage + 1] : stage + 1;
  return &c->box[((size_t)(xfer - 1) * c->nmb + mb) * box_ncol(c) + col];
}

/* The box and the store get columns only for the stages the device's ops can touch,
 * so their size is O(m x stages per device), not O(m x all stages), per device:
 * F(i,s): s, s-1; B/W/BW(i,s): s, s+1; send/recv/offload/reload(i,s): s; vocabulary
 * passes and collectives: -1, 0, S-1, S; always -1 and S (the loss gradient key). */
int rt_box_init(ppsrt_ctx *c, int all) {
  int S = c->nstage;
  uint8_t *used = calloc((size_t)S + 2, 1);
  c->bcol = malloc(((size_t)S + 2) * sizeof *c->bcol);
  if (!used || !c->bcol) { free(used); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
#define USE(st) do { int s_ = (st); if (s_ >= -1 && s_ <= S) used[s_ + 1] = 1; } while (0)
  USE(-1); USE(S);
  for (int i = 0; i < c->nops || (all && i <= S); i++) {
    if (all) { USE(i - 1); continue; }
    const ppsrt_op *op = &c->ops[i];
    switch (op->kind) {
    case PPSRT_OP_F: USE(op->stage); USE(op->stage - 1); break;
    case PPSRT_OP_B: case PPSRT_OP_W: case PPSRT_OP_BW: USE(op->stage); USE(op->stage + 1); break;
    case PPSRT_OP_IF: case PPSRT_OP_IB: case PPSRT_OP_S: case PPSRT_OP_T: case PPSRT_OP_COLL:
      USE(0); USE(S - 1); break;
    default: USE(op->stage); break;
    }
  }
#undef USE
  c->nbcol = 0;
  for (int st = -1; st <= S; st++) c->bcol[st + 1] = used[st + 1] ? c->nbcol++ : -1;
  c->box = calloc((size_t)2 * c->nmb * c->nbcol, sizeof *c->box);
  int rc = c->box ? rt_store_init(&c->store, c->nmb, S, used) : PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  free(used);
  return rc;
}

int rt_ref_ctx_init(ppsrt_ctx *rx, ppsrt_run *run, const ppsrt_ctx *c) {
  memset(rx, 0, sizeof *rx);
  rx->run = run; rx->rank = c->rank; rx->be = c->be; rx->reference = 1;
  rx->nmb = c->nmb * (run->nrep > 1 ? run->nrep : 1); rx->nstage = c->nstage;   /* --check: the global batch */
  int rc = rt_box_init(rx, 1);
  if (rc) { free(rx->box); free(rx->bcol); rt_store_fini(&rx->store, c->be); }
  return rc;
}

static const char *xfer_name(int xfer) { return xfer == PPSRT_XFER_GRAD ? "input gradient of B" : "output of F"; }

int ppsrt_io_put(ppsrt_ctx *c, int xfer, int mb, int stage, void *buf, size_t bytes) {
  if (c->recomputing) { c->be->free(c->be, buf); return 0; }   /* F again (recompute.c): sent already */
  rt_box *b = box_at(c, xfer, mb, stage);
  if (!b) return PPSRT_FAIL(PPSRT_E_USAGE, "io box: key (xfer %d, mb %d, stage %d) out of range", xfer, mb, stage);
  if (b->buf)
    return PPSRT_FAIL(PPSRT_E_USAGE, "io box: the %s(%d,%d) is already here (produced or received twice)",
                      xfer_name(xfer), mb, stage);
  b->buf = buf; b->bytes = bytes;
  return 0;
}

int ppsrt_io_peek(ppsrt_ctx *c, int xfer, int mb, int stage, void **buf, size_t *bytes) {
  rt_box *b = box_at(c, xfer, mb, stage);
  if (!b || !b->buf)
    return PPSRT_FAIL(PPSRT_E_USAGE, "the %s(%d,%d) is not on this device\n"
                      "hint: a recv of it (or the pass producing it) must come first", xfer_name(xfer), mb, stage);
  *buf = b->buf;
  if (bytes) *bytes = b->bytes;
  return 0;
}

int ppsrt_io_take(ppsrt_ctx *c, int xfer, int mb, int stage, void **buf, size_t *bytes) {
  if (c->recomputing && c->rc_in && xfer == PPSRT_XFER_ACT && mb == c->rc_mb && stage == c->rc_stage - 1) {
    *buf = c->rc_in;   /* F again (recompute.c): its kept input */
    if (bytes) *bytes = c->rc_bytes;
    c->rc_in = NULL;
    return 0;
  }
  int rc = ppsrt_io_peek(c, xfer, mb, stage, buf, bytes);
  if (rc) return rc;
  rt_box *b = box_at(c, xfer, mb, stage);
  b->buf = NULL; b->bytes = 0;
  return 0;
}

int rt_box_clear(ppsrt_ctx *c) {
  size_t n = (size_t)2 * c->nmb * box_ncol(c);
  for (size_t i = 0; i < n; i++)
    if (c->box[i].buf) { c->be->free(c->be, c->box[i].buf); c->box[i].buf = NULL; }
  return 0;
}
