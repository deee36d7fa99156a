/* rt_util.c: the runtime's shared helpers, below every other runtime file: the clock,
 * how messages name a rank, an op's text for messages (the way `ppsc expand` writes it), --lr-schedule's names, and a few F32 values
 * reduced over the ranks through the transport. They call nothing of the runtime's
 * but error.c, so any file may use them without a dependency circle (the layering
 * check, tests/analysis/depcycles.sh). */
#include "config.h"
#include "rt.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *rt_who(const ppsrt_ctx *c, char *buf, size_t size) {
  int D = c->run ? c->run->nrep : 1, T = c->run ? c->run->ntp : 1, C = c->run ? c->run->ncp : 1, n = 0;
  char r[32] = "", cp[32] = "", t[32] = "";
  if (D > 1) { snprintf(r, sizeof r, "replica %d", c->replica); n++; }
  if (C > 1) { snprintf(cp, sizeof cp, "%scontext rank %d", n ? ", " : "", c->cp_rank); n++; }
  if (T > 1) { snprintf(t, sizeof t, "%stensor rank %d", n ? ", " : "", c->tp_rank); n++; }
  if (n) snprintf(buf, size, "device %d (%s%s%s)", c->rank, r, cp, t);
  else snprintf(buf, size, "device %d", c->rank);
  return buf;
}

/* Writes an op the way `ppsc expand` prints it: F(3,1), send F(3,1)->2, coll output_fwd(3). */
int rt_format_op(const ppsrt_program *p, const ppsrt_op *op, char *buf, int size) {
  switch (op->kind) {
  case PPSRT_OP_F: case PPSRT_OP_B: case PPSRT_OP_W: case PPSRT_OP_BW:
  case PPSRT_OP_OFFLOAD: case PPSRT_OP_RELOAD:
    return snprintf(buf, (size_t)size, "%s(%d,%d)", ppsrt_op_kind_name(op->kind), op->mb, op->stage);
  case PPSRT_OP_IF: case PPSRT_OP_IB: case PPSRT_OP_S: case PPSRT_OP_T:
    return snprintf(buf, (size_t)size, "%s(%d)", ppsrt_op_kind_name(op->kind), op->mb);
  case PPSRT_OP_SEND: case PPSRT_OP_RECV:
    return snprintf(buf, (size_t)size, "%s %s(%d,%d)%s%d", ppsrt_op_kind_name(op->kind),
                    op->xfer == PPSRT_XFER_GRAD ? "B" : "F", op->mb, op->stage,
                    op->kind == PPSRT_OP_SEND ? "->" : "<-", op->peer);
  case PPSRT_OP_COLL:
    return snprintf(buf, (size_t)size, "coll %s(%d)", ppsrt_coll_name(op->coll), op->mb);
  default:
    return snprintf(buf, (size_t)size, "op kind %d", op->kind);
  }
  (void)p;
}

/* Sums a few F32 values over the pipeline's ranks (staged through backend memory). */
int rt_allreduce_host(ppsrt_ctx *c, float *v, size_t n, ppsrt_redop op) { return rt_allreduce_host_on(c, c->tr, c->rank, v, n, op); }

/* The same over the ranks of transport tr, where this context is rank `rank`. */
int rt_allreduce_host_on(ppsrt_ctx *c, ppsrt_transport *tr, int rank, float *v, size_t n, ppsrt_redop op) {
  ppsrt_backend *be = c->be;
  if (!strcmp(be->name, "cpu")) return tr->allreduce_f32(tr, rank, be, PPSRT_STREAM_COMPUTE, v, n, op);
  void *d;
  ppsrt_tensor t;
  int rc = be->alloc(be, n * sizeof(float), &d);
  if (rc) return rc;
  t.data = d; t.numel = n; t.dtype = PPSRT_F32;
  if (!(rc = be->upload_f32(be, t, v)) &&
      !(rc = tr->allreduce_f32(tr, rank, be, PPSRT_STREAM_COMPUTE, d, n, op)))
    rc = be->download_f32(be, v, t);
  be->free(be, d);
  return rc;
}

/* --lr-schedule's names (rt.h RT_LR_*), as the command line and a checkpoint's
 * metadata spell them. */
const char *const rt_lr_schedule_names[RT_LR_NSCHEDULES] = {"constant", "cosine", "linear", "inverse-square-root"};

int rt_lr_schedule_parse(const char *name) {
  for (int k = 0; name && k < RT_LR_NSCHEDULES; k++)
    if (!strcmp(name, rt_lr_schedule_names[k])) return k;
  return -1;
}

const char *const rt_rope_scaling_names[PPSRT_ROPE_NSCALINGS] = {"none", "linear", "llama3"};

int rt_rope_scaling_parse(const char *name) {
  for (int k = 0; name && k < PPSRT_ROPE_NSCALINGS; k++)
    if (!strcmp(name, rt_rope_scaling_names[k])) return k;
  return -1;
}

const char *rt_rope_param_unused(const ppsrt_model_config *cfg, unsigned given) {
  if ((given & RT_GIVEN_ROPE_FACTOR) && cfg->rope_scaling == PPSRT_ROPE_NONE)
    return "--rope-scaling-factor needs --rope-scaling linear or llama3";
  if (cfg->rope_scaling == PPSRT_ROPE_LLAMA3) return NULL;
  return (given & RT_GIVEN_ROPE_LOW)    ? "--rope-low-freq-factor needs --rope-scaling llama3"
         : (given & RT_GIVEN_ROPE_HIGH) ? "--rope-high-freq-factor needs --rope-scaling llama3"
         : (given & RT_GIVEN_ROPE_ORIG) ? "--rope-original-max-positions needs --rope-scaling llama3"
                                        : NULL;
}
