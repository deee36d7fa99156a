/* interp.c: the op interpreter: one loop per device rank walking that device's op
 * table, once per iteration. Compute passes call the model; SEND/RECV move boundary
 * tensors between the device's IO box and the transport; OFFLOAD/RELOAD go to the
 * activation store's copy engines; vocabulary passes and collectives call the model's
 * vocabulary hooks with a ppsrt_comm bound to the transport. Compute ops are timed
 * (busy time for the measured bubble), every op with --trace (the trace's tracks); a
 * timed op that follows a timed op starts at its end (one clock read instead of two).
 * An error stops the device with a message naming the device, the op, its microbatch
 * and stage and its source line, and aborts the transport so that every other rank
 * stops too. rt_eval_forward (end of file): the same walk restricted to the forward
 * passes, for validate.c.
 * What it does not: no scheduling decisions (the table is the schedule, already
 * verified by ppsc), no printing (cli.c / metrics.c), no exit(). */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- the ppsrt_comm handed to the model's collectives ---- */
static int comm_allreduce(ppsrt_comm *cm, float *buf, size_t n, ppsrt_redop op) {
  ppsrt_ctx *c = cm->impl;
  return c->tr->allreduce_f32(c->tr, c->rank, c->be, PPSRT_STREAM_COMPUTE, buf, n, op);
}
static int comm_broadcast(ppsrt_comm *cm, void *buf, size_t bytes, int root) {
  ppsrt_ctx *c = cm->impl;
  return c->tr->broadcast(c->tr, c->rank, c->be, PPSRT_STREAM_COMPUTE, buf, bytes, root);
}

/* ---- setup ---- */

/* free_after[i] = 1 for a SEND whose box entry no later op of the device reads. */
static int mark_free_after(ppsrt_ctx *c) {
  size_t nkeys = (size_t)2 * c->nmb * (c->nstage + 2);
  uint8_t *ref = calloc(nkeys ? nkeys : 1, 1);
  c->free_after = calloc((size_t)c->nops + 1, 1);
  if (!ref || !c->free_after) { free(ref); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
#define KEY(x, mb, st) (((size_t)((x) - 1) * c->nmb + (mb)) * (c->nstage + 2) + ((st) + 1))
  for (int j = c->nops - 1; j >= 0; j--) {
    const ppsrt_op *op = &c->ops[j];
    if (op->mb < 0 || op->mb >= c->nmb) continue;
    switch (op->kind) {
    case PPSRT_OP_SEND:
      if ((op->xfer == PPSRT_XFER_ACT || op->xfer == PPSRT_XFER_GRAD) && op->stage >= -1 && op->stage <= c->nstage) {
        c->free_after[j] = !ref[KEY(op->xfer, op->mb, op->stage)];
        ref[KEY(op->xfer, op->mb, op->stage)] = 1;
      }
      break;
    case PPSRT_OP_F:
      if (op->stage >= 0 && op->stage <= c->nstage) ref[KEY(PPSRT_XFER_ACT, op->mb, op->stage - 1)] = 1;
      break;
    case PPSRT_OP_B: case PPSRT_OP_BW:
      if (op->stage >= -1 && op->stage < c->nstage) ref[KEY(PPSRT_XFER_GRAD, op->mb, op->stage + 1)] = 1;
      break;
    case PPSRT_OP_IF: case PPSRT_OP_IB: case PPSRT_OP_S: case PPSRT_OP_T: case PPSRT_OP_COLL:
      ref[KEY(PPSRT_XFER_ACT, op->mb, c->nstage - 1)] = 1;
      ref[KEY(PPSRT_XFER_GRAD, op->mb, 0)] = 1;
      break;
    default: break;
    }
  }
#undef KEY
  free(ref);
  return 0;
}

/* ---- posted receives (ppsrt.h: flag 8 on a RECV) ----
 * A posted recv is issued where it stands (inside its group); its data is waited for
 * only right before its consumer: the first later op of the device that reads its key
 * (the F(mb, s + 1) of an activation, the B or BW(mb, s - 1) of a gradient, a
 * vocabulary pass, or a SEND forwarding it), or the first op of the overlapped pair
 * whose second op that is (the pair's start waits); with no reader, at the end of the
 * iteration. On a transport with recv_post/recv_wait (NCCL) the post enqueues the
 * receive and the consumer's stream waits for it (no host wait); on the others
 * (buffered: threads, MPI, the NCCL copy channel) the whole receive is performed at the
 * consumer, after the channel's earlier pending posted ones (FIFO). */
static int pair_first(const ppsrt_ctx *c, int i);
static int posted_late(const ppsrt_ctx *c, int i);

/* The box keys op reads (the readers mark_free_after knows), as indexes
 * (xfer - 1, mb, stage + 1) into [2][nmb][nstage + 2]; returns how many (0..2). */
static int op_keys(const ppsrt_ctx *c, const ppsrt_op *op, size_t key[2]) {
#define PKEY(x, st) (((size_t)((x) - 1) * c->nmb + (size_t)op->mb) * ((size_t)c->nstage + 2) + (size_t)((st) + 1))
  int n = 0;
  if (op->mb < 0 || op->mb >= c->nmb) return 0;
  switch (op->kind) {
  case PPSRT_OP_SEND:
    if ((op->xfer == PPSRT_XFER_ACT || op->xfer == PPSRT_XFER_GRAD) && op->stage >= -1 && op->stage <= c->nstage)
      key[n++] = PKEY(op->xfer, op->stage);
    break;
  case PPSRT_OP_F:
    if (op->stage >= 0 && op->stage <= c->nstage) key[n++] = PKEY(PPSRT_XFER_ACT, op->stage - 1);
    break;
  case PPSRT_OP_B: case PPSRT_OP_BW:
    if (op->stage >= -1 && op->stage < c->nstage) key[n++] = PKEY(PPSRT_XFER_GRAD, op->stage + 1);
    break;
  case PPSRT_OP_IF: case PPSRT_OP_IB: case PPSRT_OP_S: case PPSRT_OP_T: case PPSRT_OP_COLL:
    key[n++] = PKEY(PPSRT_XFER_ACT, c->nstage - 1);
    key[n++] = PKEY(PPSRT_XFER_GRAD, 0);
    break;
  default: break;
  }
  return n;
}

/* Finds each posted recv's consumer (post_due/post_next) in one backward pass over the
 * table, keeping the nearest later reader of every key. */
static int mark_posted(ppsrt_ctx *c) {
  int any = 0;
  for (int i = 0; i < c->nops && !any; i++) any = c->ops[i].kind == PPSRT_OP_RECV && (c->ops[i].flags & PPSRT_FLAG_POSTED);
  if (!any) return 0;
  size_t nkeys = (size_t)2 * c->nmb * ((size_t)c->nstage + 2);
  int32_t *next = malloc((nkeys ? nkeys : 1) * sizeof *next);
  c->post_due = malloc(((size_t)c->nops + 1) * sizeof *c->post_due);
  c->post_next = malloc(((size_t)c->nops + 1) * sizeof *c->post_next);
  if (!next || !c->post_due || !c->post_next) { free(next); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  for (size_t k = 0; k < nkeys; k++) next[k] = c->nops;
  for (int i = 0; i <= c->nops; i++) c->post_due[i] = c->post_next[i] = -1;
  for (int i = c->nops - 1; i >= 0; i--) {   /* backwards: each list ends up in posting order */
    const ppsrt_op *op = &c->ops[i];
    size_t key[2];
    if (op->kind == PPSRT_OP_RECV && (op->flags & PPSRT_FLAG_POSTED)) {
      ppsrt_op as_send = *op;   /* the key a SEND of the same data would read */
      as_send.kind = PPSRT_OP_SEND;
      int j = op_keys(c, &as_send, key) ? next[key[0]] : c->nops;
      if (j < c->nops && pair_first(c, j - 1)) j--;   /* the pair starts together */
      c->post_next[i] = c->post_due[j];
      c->post_due[j] = i;
    }
    for (int k = op_keys(c, op, key); k-- > 0;) next[key[k]] = i;
  }
#undef PKEY
  free(next);
  return 0;
}

int rt_ctx_init(ppsrt_run *run, ppsrt_ctx *c, int rank) {
  const ppsrt_program *p = run->prog;
  memset(c, 0, sizeof *c);
  c->run = run;
  c->rank = rank;
  c->tr = run->tr;
  c->nmb = p->nmb;
  c->nstage = p->nstage;
  c->ops = rank >= 0 && rank < p->ndev ? p->ops[rank] : NULL;
  c->nops = rank >= 0 && rank < p->ndev ? p->nops[rank] : 0;
  int it = run->o.iterations > 0 ? run->o.iterations : 1;
  c->busy = calloc((size_t)it, sizeof *c->busy);
  c->span = calloc((size_t)it, sizeof *c->span);
  c->loss = calloc((size_t)it, sizeof *c->loss);
  c->peak_bytes = calloc((size_t)it, sizeof *c->peak_bytes);
  c->peak_units = calloc((size_t)it, sizeof *c->peak_units);
  c->upb = calloc((size_t)c->nstage + 1, sizeof *c->upb);
  c->store.upb = NULL;
  if (!c->busy || !c->span || !c->loss || !c->peak_bytes || !c->peak_units || !c->upb)
    return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  int rc = rt_box_init(c, 0);
  c->store.upb = c->upb;
  if (!rc) rc = mark_free_after(c);
  if (!rc) rc = mark_posted(c);
  return rc;
}

void rt_ctx_fini(ppsrt_ctx *c) {
  rt_lane_stop(c);
  if (c->be) {
    rt_replica_fini(c);
    if (c->box) rt_box_clear(c);
    for (int k = 0; k < c->npst; k++)   /* a run stopped with posted recvs pending */
      if (c->pst[k].buf) c->be->free(c->be, c->pst[k].buf);
    rt_poll_copies(c, 1);
    c->be->stream_sync(c->be, PPSRT_STREAM_D2H);
    c->be->stream_sync(c->be, PPSRT_STREAM_H2D);
    if (c->mark) c->be->event_destroy(c->be, c->mark);
    if (c->xev) c->be->event_destroy(c->be, c->xev);
    rt_store_fini(&c->store, c->be);
  }
  if (c->tev && c->be) {
    c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE);
    for (int i = 0; i < 2 * c->nops + 1; i++) if (c->tev[i]) c->be->event_destroy(c->be, c->tev[i]);
    for (int i = 0; c->rcev && i < 2 * c->nops; i++) if (c->rcev[i]) c->be->event_destroy(c->be, c->rcev[i]);
  }
  free(c->tev);
  free(c->rcev);
  if (c->model) c->model->destroy(c->model);
  if (c->be) c->be->destroy(c->be);
  free(c->box); free(c->bcol); free(c->free_after); free(c->ev);
  free(c->post_due); free(c->post_next); free(c->pst);
  free(c->busy); free(c->span); free(c->loss); free(c->peak_bytes); free(c->peak_units); free(c->upb);
  memset(c, 0, sizeof *c);
}

/* ---- executing one op ---- */

static int64_t xfer_tag(const ppsrt_op *op) {
  return ((int64_t)op->xfer << 48) | ((int64_t)(op->mb & 0xffffff) << 20) | (int64_t)((op->stage + 1) & 0xfffff);
}

/* Makes stream `to` wait for the work queued so far on `from` (an event, no host wait):
 * a buffer crossing between the compute and the communication streams. */
static int order_streams(ppsrt_ctx *c, int from, int to) {
  ppsrt_backend *be = c->be;
  int rc;
  if (!c->xev && (rc = be->event_create(be, &c->xev))) return rc;
  if ((rc = be->event_record(be, c->xev, from))) return rc;
  return be->stream_wait_event(be, to, c->xev);
}

/* Receives op's data into a fresh buffer and puts it into the box. The fresh buffer's
 * reuse is ordered by the allocator; its readers run on COMPUTE (in a group: ordered
 * after the group's end, group_close). */
static int recv_now(ppsrt_ctx *c, const ppsrt_op *op, int in_group) {
  ppsrt_backend *be = c->be;
  size_t bytes = c->model->xfer_bytes(c->model, op->xfer, op->mb, op->stage);
  void *buf;
  int rc = be->alloc(be, bytes ? bytes : 1, &buf);
  if (rc) return rc;
  if ((rc = c->tr->recv(c->tr, c->rank, be, PPSRT_STREAM_RECV, buf, bytes, op->peer, xfer_tag(op))) ||
      (!in_group && (rc = order_streams(c, PPSRT_STREAM_RECV, PPSRT_STREAM_COMPUTE))) ||
      (rc = ppsrt_io_put(c, op->xfer, op->mb, op->stage, buf, bytes))) {
    be->free(be, buf);
    return rc;
  }
  return 0;
}

/* Posts recv op i (flag 8): with recv_post, enqueued into a fresh buffer now; without,
 * only noted (performed whole at completion). */
static int post_recv(ppsrt_ctx *c, int i) {
  const ppsrt_op *op = &c->ops[i];
  ppsrt_backend *be = c->be;
  if (c->npst == c->cappst) {
    int cap = c->cappst ? 2 * c->cappst : 8;
    struct rt_posted *v = realloc(c->pst, (size_t)cap * sizeof *v);
    if (!v) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
    c->pst = v;
    c->cappst = cap;
  }
  struct rt_posted e = {i, NULL, 0, NULL};
  if (c->tr->recv_post) {
    e.bytes = c->model->xfer_bytes(c->model, op->xfer, op->mb, op->stage);
    int rc = be->alloc(be, e.bytes ? e.bytes : 1, &e.buf);
    if (rc) return rc;
    if ((rc = c->tr->recv_post(c->tr, c->rank, be, PPSRT_STREAM_RECV, e.buf, e.bytes, op->peer, xfer_tag(op),
                               c->grp_open && posted_late(c, i), &e.h))) {
      be->free(be, e.buf);
      return rc;
    }
  }
  c->pst[c->npst++] = e;
  return 0;
}

/* Completes pending posted recv k (index into c->pst): the compute stream waits for its
 * data (recv_post), or it is received now; its buffer goes into the box. With --trace
 * the recv shows here, where it completes. On failure *failed is the recv's op. */
static int posted_complete_at(ppsrt_ctx *c, int k, int *failed) {
  struct rt_posted e = c->pst[k];
  memmove(&c->pst[k], &c->pst[k + 1], (size_t)(c->npst - k - 1) * sizeof *c->pst);
  c->npst--;
  const ppsrt_op *op = &c->ops[e.op];
  int trace = c->run->o.trace != NULL || c->run->o.profile != NULL;
  double a = trace ? rt_now() : 0;
  int rc;
  *failed = e.op;
  if (c->tr->recv_post) {
    rc = e.h ? c->tr->recv_wait(c->tr, c->rank, c->be, PPSRT_STREAM_COMPUTE, e.h) : 0;
    if (!rc) rc = ppsrt_io_put(c, op->xfer, op->mb, op->stage, e.buf, e.bytes);
    if (rc) c->be->free(c->be, e.buf);   /* (a transport's use of it is recorded: recv_post) */
  } else {
    rc = recv_now(c, op, 0);
  }
  if (!rc && trace) rc = rt_event_add(c, a - c->run->epoch, rt_now() - c->run->epoch, e.op, 0);
  return rc;
}

/* Buffered transports: completes the pending posted recvs from `peer` that were posted
 * before op `upto` (-1: all), in posting order (the channel is FIFO). */
static int posted_complete_peer(ppsrt_ctx *c, int peer, int upto, int *failed) {
  for (int k = 0; k < c->npst;) {
    const ppsrt_op *op = &c->ops[c->pst[k].op];
    if (op->peer != peer || (upto >= 0 && c->pst[k].op >= upto)) { k++; continue; }
    int rc = posted_complete_at(c, k, failed);
    if (rc) return rc;
  }
  return 0;
}

/* Before op j (j = nops: the iteration's end): completes the posted recvs it consumes
 * (on a buffered transport, the channel's earlier ones first). On failure *failed is
 * the op that failed. */
static int posted_due(ppsrt_ctx *c, int j, int *failed) {
  *failed = j < c->nops ? j : -1;
  for (int r = c->post_due[j]; r >= 0; r = c->post_next[r]) {
    int k = 0;
    while (k < c->npst && c->pst[k].op != r) k++;
    if (k == c->npst) continue;   /* completed already (FIFO, before a later recv) */
    int rc;
    if (!c->tr->recv_post && (rc = posted_complete_peer(c, c->ops[r].peer, r, failed))) return rc;
    k = 0;
    while (k < c->npst && c->pst[k].op != r) k++;
    if (k < c->npst && (rc = posted_complete_at(c, k, failed))) return rc;
  }
  return 0;
}

static void check_act_bytes(ppsrt_ctx *c, const ppsrt_op *op);
static int exec_one(ppsrt_ctx *c, int i) {
  const ppsrt_op *op = &c->ops[i];
  ppsrt_model *m = c->model;
  ppsrt_backend *be = c->be;
  int rc = 0;
  switch (op->kind) {
  case PPSRT_OP_F:
    if ((rc = m->f(m, c, op->mb, op->stage)) || !rt_recomputed(c, op->stage)) return rc;
    check_act_bytes(c, op);   /* what F stored in full, before it keeps only its input */
    return rt_recompute_drop(c, op->mb, op->stage);
  case PPSRT_OP_B:
    if (rt_recomputed(c, op->stage) && (rc = rt_recompute_rebuild(c, i, op->mb, op->stage))) return rc;
    return m->b(m, c, op->mb, op->stage);
  case PPSRT_OP_W: return m->w(m, c, op->mb, op->stage);
  case PPSRT_OP_BW:
    if (rt_recomputed(c, op->stage) && (rc = rt_recompute_rebuild(c, i, op->mb, op->stage))) return rc;
    if (m->bw) return m->bw(m, c, op->mb, op->stage);
    if ((rc = m->b(m, c, op->mb, op->stage))) return rc;
    return m->w(m, c, op->mb, op->stage);
  case PPSRT_OP_IF: case PPSRT_OP_IB: case PPSRT_OP_S: case PPSRT_OP_T:
    if (!m->vocab_pass)
      return PPSRT_FAIL(PPSRT_E_USAGE, "model '%s' has no vocabulary passes\nhint: use --model gpt", m->name);
    return m->vocab_pass(m, c, op->kind, op->mb);
  case PPSRT_OP_COLL: {
    if (!m->collective)
      return PPSRT_FAIL(PPSRT_E_USAGE, "model '%s' has no vocabulary collectives\nhint: use --model gpt", m->name);
    if (c->lane) return rt_lane_issue(c, i);   /* on the collective lane (coll_lane.c) */
    ppsrt_comm cm = {c->rank, c->tr->nranks, comm_allreduce, comm_broadcast, c};
    return m->collective(m, c, op->coll, op->mb, &cm);
  }
  case PPSRT_OP_OFFLOAD: {
    double f = op->stage >= 0 && op->stage < c->nstage ? c->run->prog->stages[op->stage].offload : 1;
    return rt_offload(c, op->mb, op->stage, f > 0 ? f : 1);
  }
  case PPSRT_OP_RELOAD: return rt_reload(c, op->mb, op->stage);
  case PPSRT_OP_SEND: {
    void *buf; size_t bytes;
    if ((rc = ppsrt_io_peek(c, op->xfer, op->mb, op->stage, &buf, &bytes))) return rc;
    /* the buffer was written on COMPUTE (or received on RECV and ordered onto COMPUTE) */
    if ((rc = order_streams(c, PPSRT_STREAM_COMPUTE, PPSRT_STREAM_SEND))) return rc;
    if ((rc = c->tr->send(c->tr, c->rank, be, PPSRT_STREAM_SEND, buf, bytes, op->peer, xfer_tag(op)))) return rc;
    if (c->grp_open) return 0;   /* freed at the group's end (group_close) */
    if (c->free_after[i]) {
      ppsrt_io_take(c, op->xfer, op->mb, op->stage, &buf, &bytes);
      be->free(be, buf);
    }
    return 0;
  }
  case PPSRT_OP_RECV:
    /* posted: deferred to its consumer on a buffered transport, posted with recv_post;
     * a rendezvous transport without recv_post (NCCL by default) receives it here */
    if ((op->flags & PPSRT_FLAG_POSTED) && (c->tr->recv_post || !c->tr->group_begin)) return post_recv(c, i);
    /* buffered: the channel's pending posted recvs match first (FIFO) */
    if (!c->tr->recv_post && c->npst) {
      int failed;
      if ((rc = posted_complete_peer(c, op->peer, -1, &failed))) return rc;
    }
    return recv_now(c, op, c->grp_open);
  default:
    return PPSRT_FAIL(PPSRT_E_USAGE, "unknown op kind %d\nhint: regenerate the program with this ppsc", op->kind);
  }
}

static int is_compute(int kind) { return kind <= PPSRT_OP_T; }

/* An op flagged PPSRT_FLAG_OVERLAP is overlapped with the next one (`overlap { }`, ppsrt.h). With a
 * backend that has `overlap` (CUDA) the two passes run on two compute streams: a fork
 * before the first (the second stream waits for the compute stream's queued work, the
 * pair's inputs), the second issued on the second stream, a join after it (the compute
 * stream waits for it, so later consumers and sends see both outputs). Without it (CPU)
 * they run one after the other in program order; the simulator models the overlap. */
static int pair_first(const ppsrt_ctx *c, int i) {
  return i >= 0 && i + 1 < c->nops && (c->ops[i].flags & PPSRT_FLAG_OVERLAP) && is_compute(c->ops[i].kind) &&
         is_compute(c->ops[i + 1].kind);
}
static int exec_op(ppsrt_ctx *c, int i) {
  ppsrt_backend *be = c->be;
  if (!be->overlap) return exec_one(c, i);
  int rc;
  if (pair_first(c, i)) return (rc = be->overlap(be, PPSRT_OVERLAP_FORK)) ? rc : exec_one(c, i);
  if (!pair_first(c, i - 1)) return exec_one(c, i);
  if ((rc = be->overlap(be, PPSRT_OVERLAP_SECOND))) return rc;
  rc = exec_one(c, i);
  int rj = be->overlap(be, PPSRT_OVERLAP_JOIN);
  return rc ? rc : rj;
}

/* A posted recv i inside an open group, on a transport with recv_post (NCCL): a group's
 * operations complete together (NCCL makes every stream of a group wait for all of
 * it), so a posted recv stays in the group where a plain recv of the same channel is in
 * the group: a later one waits for it anyway (FIFO), and after an earlier one the
 * channel's stream is held by the group until the group completes, so a recv launched
 * after the group would be posted only then, later than the compiler's rendezvous model
 * (a posted recv matched at its group) assumes, and can deadlock (1f1b_v P = 4:
 * docs/gpu.md). Otherwise the transport posts it right after the group's launch, before
 * the group's plain recvs order the RECV stream after their data, so that neither
 * waits for the other. */
static int grouped_with_prev(const ppsrt_ctx *c, int i);
static int posted_late(const ppsrt_ctx *c, int i) {
  if (!c->tr->recv_post) return 0;
  int g = i;
  while (grouped_with_prev(c, g)) g--;
  for (int j = g; j == g || grouped_with_prev(c, j); j++)
    if (j != i && c->ops[j].kind == PPSRT_OP_RECV && !(c->ops[j].flags & PPSRT_FLAG_POSTED) &&
        c->ops[j].peer == c->ops[i].peer)
      return 0;
  return 1;
}

/* ---- point-to-point groups (ppsrt.h: flag 4 = issued with the op before) ----
 * With a transport that has group hooks (NCCL), a group of two or more sends and recvs
 * is issued between group_begin and group_end; what must follow the launch (freeing a
 * sent buffer no later op reads, ordering COMPUTE after the received data) runs after
 * group_end. Without hooks every op is issued alone, as before. */
static int is_p2p(int kind) { return kind == PPSRT_OP_SEND || kind == PPSRT_OP_RECV; }
static int grouped_with_prev(const ppsrt_ctx *c, int i) {
  return i > 0 && i < c->nops && is_p2p(c->ops[i].kind) && is_p2p(c->ops[i - 1].kind) && (c->ops[i].flags & PPSRT_FLAG_GROUP);
}

static int group_open(ppsrt_ctx *c, int i) {
  if (!c->tr || !c->tr->group_begin || !c->tr->group_end || !is_p2p(c->ops[i].kind) || grouped_with_prev(c, i) ||
      !grouped_with_prev(c, i + 1))
    return 0;
  int rc = c->tr->group_begin(c->tr, c->rank);
  if (!rc) { c->grp_open = 1; c->grp0 = i; }
  return rc;
}

/* After op i: ends the open group when i is its last op (or failed: rc_op != 0). */
static int group_close(ppsrt_ctx *c, int i, int rc_op) {
  if (!c->grp_open || (!rc_op && grouped_with_prev(c, i + 1))) return 0;
  c->grp_open = 0;
  int rc = c->tr->group_end(c->tr, c->rank);
  if (rc || rc_op) return rc;
  int recvd = 0;
  for (int j = c->grp0; j <= i; j++) {
    const ppsrt_op *op = &c->ops[j];
    if (op->kind == PPSRT_OP_RECV) recvd |= !(op->flags & PPSRT_FLAG_POSTED) || !c->tr->recv_post;   /* (a posted one waits at its consumer) */
    else if (c->free_after[j]) {
      void *buf; size_t bytes;
      if (!ppsrt_io_take(c, op->xfer, op->mb, op->stage, &buf, &bytes)) c->be->free(c->be, buf);
    }
  }
  return recvd ? order_streams(c, PPSRT_STREAM_RECV, PPSRT_STREAM_COMPUTE) : 0;
}

/* Asynchronous backends (CUDA) return from a pass before it ran: compute ops are then
 * timed with events on the compute stream (start/end per op, one base per iteration),
 * read after the iteration; CPU passes are synchronous and timed on the host (set
 * PPSRT_DEVICE_TIMING=1 to use events there too). Events are created once. */
static int devtime_init(ppsrt_ctx *c) {
  c->tev = calloc((size_t)2 * c->nops + 1, sizeof *c->tev);
  if (!c->tev) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  int rc = c->be->event_create(c->be, &c->tev[2 * c->nops]);
  for (int i = 0; i < c->nops && !rc; i++)
    if (is_compute(c->ops[i].kind) && !(rc = c->be->event_create(c->be, &c->tev[2 * i])))
      rc = c->be->event_create(c->be, &c->tev[2 * i + 1]);
  /* the CUDA backend starts recording timed events at the first event_elapsed call
   * (earlier records answer -1): ask once now, so the first iteration is timed too */
  if (!rc) (void)c->be->event_elapsed(c->be, c->tev[2 * c->nops], c->tev[2 * c->nops]);
  /* the rebuild inside a recomputed B/BW (recompute.c) gets its own pair */
  for (int i = 0; i < c->nops && !rc; i++) {
    const ppsrt_op *op = &c->ops[i];
    if ((op->kind != PPSRT_OP_B && op->kind != PPSRT_OP_BW) || !rt_recomputed(c, op->stage)) continue;
    if (!c->rcev && !(c->rcev = calloc((size_t)2 * c->nops, sizeof *c->rcev))) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
    if (!(rc = c->be->event_create(c->be, &c->rcev[2 * i]))) rc = c->be->event_create(c->be, &c->rcev[2 * i + 1]);
  }
  return rc;
}

/* After the iteration: busy time and trace records from the events. */
static int devtime_collect(ppsrt_ctx *c, double hbase, double *busy) {
  ppsrt_backend *be = c->be;
  int rc = be->stream_sync(be, PPSRT_STREAM_COMPUTE);
  if (rc) return rc;
  int trace = c->run->o.trace != NULL || c->run->o.profile != NULL;
  for (int i = 0; i < c->nops; i++) {
    if (!c->tev[2 * i]) continue;
    double d = be->event_elapsed(be, c->tev[2 * i], c->tev[2 * i + 1]);
    double s = be->event_elapsed(be, c->tev[2 * c->nops], c->tev[2 * i]);
    if (d < 0 || s < 0) continue;   /* the backend cannot say: leave it out */
    *busy += d;
    if (trace && (rc = rt_event_add(c, hbase + s, hbase + s + d, i, 0))) return rc;
    if (!c->rcev || !c->rcev[2 * i]) continue;
    d = be->event_elapsed(be, c->rcev[2 * i], c->rcev[2 * i + 1]);
    s = be->event_elapsed(be, c->tev[2 * c->nops], c->rcev[2 * i]);
    if (d < 0 || s < 0) continue;
    c->rc_time += d;
    if (c->run->o.trace && (rc = rt_event_add(c, hbase + s, hbase + s + d, i, RT_TRACK_RECOMPUTE))) return rc;
  }
  return 0;
}

/* Records the failure of op i (or of a phase, i < 0) and aborts the transport. */
static int fail_at(ppsrt_ctx *c, int i, int rc, const char *what) {
  const ppsrt_program *p = c->run->prog;
  char opbuf[96], who[64];
  if (i >= 0) {
    const ppsrt_op *op = &c->ops[i];
    rt_format_op(p, op, opbuf, sizeof opbuf);
    snprintf(c->errmsg, sizeof c->errmsg,
             "%s: op #%d %s (microbatch %d, stage %d) at %s:%d, iteration %d: %s", rt_who(c, who, sizeof who), i, opbuf,
             op->mb, op->stage, p->source ? p->source : "?", op->line, c->iteration, ppsrt_last_error());
  } else {
    snprintf(c->errmsg, sizeof c->errmsg, "%s: %s, iteration %d: %s", rt_who(c, who, sizeof who), what, c->iteration,
             ppsrt_last_error());
  }
  c->status = rc;
  if (c->tr && !c->reference) c->tr->abort(c->tr, c->rank, c->errmsg);
  if (c->gtr && !c->reference) c->gtr->abort(c->gtr, c->grank, c->errmsg);   /* --data-parallel (x context ranks): its group too */
  if (c->ttr && !c->reference) c->ttr->abort(c->ttr, c->tp_rank, c->errmsg);   /* --tensor-parallel: its group too */
  if (c->ctr && !c->reference) c->ctr->abort(c->ctr, c->cp_rank, c->errmsg);   /* --context-parallel: its group too */
  if (c->lane_tr && !c->reference) c->lane_tr->abort(c->lane_tr, c->rank, c->errmsg);
  return rc;
}

/* One process per rank (MPI): every world rank's timing records (nw = P x D x T of them)
 * reach world rank 0 through two sums over the world transport (counts, then each
 * rank's records in its own segment of a zeroed buffer; a time travels as two floats,
 * hi + lo, exact to ~1e-9 s), so rank 0 writes one trace with every rank. Times are
 * CLOCK_MONOTONIC based: comparable across the processes of one node. On world rank 0,
 * fills out[nw] with the records of each world rank (free with free()). */
int rt_gather_events(ppsrt_ctx *c, int nw, rt_event **out, int *nout) {
  int ndev = nw, me = c->wrank, rc;
  enum { K = 8 };
  float *cnt = calloc((size_t)ndev, sizeof *cnt);
  if (!cnt) return PPSRT_FAIL(PPSRT_E_NOMEM, "trace: out of host memory");
  cnt[me] = (float)c->nev;
  if ((rc = rt_allreduce_host_on(c, c->wtr, me, cnt, (size_t)ndev, PPSRT_SUM))) { free(cnt); return rc; }
  size_t total = 0, off = 0;
  for (int d = 0; d < ndev; d++) { if (d == me) off = total; total += (size_t)cnt[d]; }
  float *buf = calloc(total * K + 1, sizeof *buf);
  if (!buf) { free(cnt); return PPSRT_FAIL(PPSRT_E_NOMEM, "trace: out of host memory"); }
  double ep = c->run->epoch;
  for (int k = 0; k < c->nev; k++) {
    float *r = buf + (off + (size_t)k) * K;
    double a = c->ev[k].t0 + ep, b = c->ev[k].t1 + ep;
    r[0] = (float)c->ev[k].op; r[1] = (float)c->ev[k].track; r[2] = (float)c->ev[k].it;
    r[3] = (float)a; r[4] = (float)(a - (double)r[3]);
    r[5] = (float)b; r[6] = (float)(b - (double)r[5]);
  }
  if ((rc = rt_allreduce_host_on(c, c->wtr, me, buf, total * K, PPSRT_SUM))) { free(cnt); free(buf); return rc; }
  if (me == 0) {
    size_t at = 0;
    for (int d = 0; d < ndev; d++) {
      int n = (int)cnt[d];
      out[d] = malloc(((size_t)n + 1) * sizeof **out);
      nout[d] = out[d] ? n : 0;
      for (int k = 0; k < nout[d]; k++) {
        float *r = buf + (at + (size_t)k) * K;
        out[d][k] = (rt_event){(double)r[3] + (double)r[4] - ep, (double)r[5] + (double)r[6] - ep, (int32_t)r[0],
                               (int16_t)r[1], (int16_t)r[2]};
      }
      at += (size_t)n;
    }
  }
  free(cnt); free(buf);
  return 0;
}

/* The learning rate of step `step` (1-based), as Megatron-LM's lr-decay-style: linear
 * warm-up from lr/warmup to lr over steps 1..warmup, then
 *   constant: lr;
 *   cosine, linear: from lr down to min_lr over the steps warmup..decay_steps (a half
 *     cosine, or a straight line), min_lr from there on;
 *   inverse-square-root: lr * sqrt(max(warmup, 1) / step), never below min_lr. */
double rt_lr_at(const rt_opts *o, long step) {
  if (o->warmup > 0 && step <= o->warmup) return o->lr * (double)step / (double)o->warmup;
  if (o->lr_schedule == RT_LR_CONSTANT) return o->lr;
  if (o->lr_schedule == RT_LR_INVSQRT) {
    double lr = o->lr * sqrt((double)(o->warmup > 1 ? o->warmup : 1) / (double)(step > 1 ? step : 1));
    return lr > o->min_lr ? lr : o->min_lr;
  }
  long span = o->decay_steps - o->warmup;
  double t = span > 0 ? (double)(step - o->warmup) / (double)span : 1.0;
  if (t > 1) t = 1;
  double f = o->lr_schedule == RT_LR_LINEAR ? 1.0 - t : 0.5 * (1.0 + cos(3.14159265358979323846 * t));
  return o->min_lr + (o->lr - o->min_lr) * f;
}

/* The optimizer step: with --clip-grad the gradients are first scaled by
 * min(1, clip / norm), norm the 2-norm of every gradient of every rank (each rank's sum
 * of squares in its own slot of an all-reduce, as hi + lo floats, then added in rank
 * order: every rank gets the same norm, whatever the transport). */
int rt_optimizer_step(ppsrt_ctx *c, int step, double *lr_out, double *gnorm_out) {
  ppsrt_model *m = c->model;
  const rt_opts *o = &c->run->o;
  int rc = 0, nd = c->run->prog->ndev;
  double lr = rt_lr_at(o, step), norm = 0;
  if (o->clip_grad > 0) {
    double ss = 0, sx = 0;   /* sx: this rank's experts (--expert-parallel), summed over its group */
    float *buf = NULL, *row = calloc(2 * (size_t)nd + 1, sizeof *row);
    size_t cap = 0;
    if (!row) return PPSRT_FAIL(PPSRT_E_NOMEM, "--clip-grad: out of host memory");
    if ((rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE))) { free(row); return rc; }
    for (int k = 0; k < m->nparams && !rc; k++) {
      ppsrt_param *p = &m->params[k];   /* its shard: --distributed-optimizer reduced only that */
      if (c->tp_rank && !p->tp_split) continue;   /* --tensor-parallel: a whole tensor counts once, on rank 0 */
      if (p->shared) continue;                     /* a copy (tied embeddings): counted on the original's device */
      if (p->sh_n > cap) {
        free(buf);
        cap = p->sh_n;
        if (!(buf = malloc(cap * sizeof *buf))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--clip-grad: out of host memory"); break; }
      }
      if ((rc = c->be->download_f32(c->be, buf, (ppsrt_tensor){p->grad + p->sh_lo, p->sh_n, PPSRT_F32}))) break;
      double *acc = p->expert ? &sx : &ss;
      for (size_t i = 0; i < p->sh_n; i++) *acc += (double)buf[i] * buf[i];
    }
    free(buf);
    if (!rc && o->distopt) rc = rt_replica_expert_sum(c, &sx);   /* the shards of the experts' replicas */
    if (!rc) rc = rt_ep_sum(c, &sx);   /* every expert once: each rank of the group holds others */
    if (!rc && o->distopt && c->run->ngrad > 1) rc = rt_replica_sum(c, &ss);   /* the shards of the device's replicas */
    ss += sx;
    if (!rc) rc = rt_tp_sum(c, &ss);   /* the slices of the device's tensor-parallel group */
    row[2 * c->rank] = (float)ss;
    row[2 * c->rank + 1] = (float)(ss - (double)row[2 * c->rank]);
    if (!rc) rc = rt_allreduce_host(c, row, 2 * (size_t)nd, PPSRT_SUM);
    double total = 0;
    for (int d = 0; d < nd; d++) total += (double)row[2 * d] + (double)row[2 * d + 1];
    free(row);
    if (rc) return rc;
    norm = sqrt(total);
    if (!isfinite(norm)) norm = total;   /* a NaN or inf gradient: no scaling, the loss check stops the run */
    if (norm > o->clip_grad) {
      float sc = (float)(o->clip_grad / norm);
      for (int k = 0; k < m->nparams && !rc; k++)
        rc = c->be->scale_f32(c->be, PPSRT_STREAM_COMPUTE, m->params[k].grad, sc, m->params[k].numel);
      if (rc) return rc;
    }
  }
  for (int k = 0; k < m->nparams; k++) {
    ppsrt_param *p = &m->params[k];
    float wd = p->no_decay ? 0.0f : (float)o->weight_decay;
    /* this replica's shard (the whole tensor without --distributed-optimizer) */
    char *param = (char *)p->param.data + p->sh_lo * ppsrt_dtype_size(p->param.dtype);
    if (p->sh_n)
      rc = c->be->optimizer_step(c->be, PPSRT_STREAM_COMPUTE, o->optimizer, ppsrt_param_master(p), param,
                                 p->grad + p->sh_lo, p->m, p->v, p->sh_n, (float)lr, (float)o->beta1, (float)o->beta2,
                                 (float)o->eps, wd, step);
    if (rc) return rc;
  }
  if (o->distopt && c->run->ngrad > 1 && (rc = rt_replica_gather_weights(c))) return rc;   /* one all-gather a buffer */
  if (lr_out) *lr_out = lr;
  if (gnorm_out) *gnorm_out = norm;
  return 0;
}

/* The stats every rank contributes after an iteration (summed over ranks). */
enum { ST_BUSY, ST_SPAN, ST_PEAK_HI, ST_PEAK_LO, ST_RES_HI, ST_RES_LO, ST_HOST_HI, ST_HOST_LO, ST_UNIT_HI,
       ST_UNIT_LO, ST_UNITS, ST_MEMBAD, ST_ACTBAD, ST_DMEM_HI, ST_DMEM_LO, ST_CANCEL, ST_RCTIME, ST_RCCOUNT,
       ST_PAR_HI, ST_PAR_LO, ST_XPAR_HI, ST_XPAR_LO, ST_A2AB_HI, ST_A2AB_LO, ST_A2AS_HI, ST_A2AS_LO, ST_N };

/* After F(mb, stage): what it kept must be act_bytes(stage) for units to be exact. */
static void check_act_bytes(ppsrt_ctx *c, const ppsrt_op *op) {
  if (c->act_mismatch || op->stage < 0) return;
  size_t got = rt_store_slot_bytes(c, op->mb, op->stage), want = c->model->act_bytes(c->model, op->stage);
  if (got != want) {
    c->act_mismatch = 1;
    c->am_mb = op->mb; c->am_stage = op->stage; c->am_got = got; c->am_want = want;
  }
}

int rt_run_device(ppsrt_ctx *c) {
  ppsrt_run *run = c->run;
  const rt_opts *o = &run->o;
  ppsrt_model *m = c->model;
  int ndev = run->prog->ndev;
  int rc = 0;
  ppsrt_error_set_rank(c->rank);
  float *st = calloc((size_t)ndev * ST_N + 2, sizeof *st);
  if (!st) return fail_at(c, -1, PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"), "setup");
  c->devtime = strcmp(c->be->name, "cpu") || (getenv("PPSRT_DEVICE_TIMING") && atoi(getenv("PPSRT_DEVICE_TIMING")));
  if (c->devtime && (rc = devtime_init(c))) { free(st); return fail_at(c, -1, rc, "creating timing events"); }
  if (c->lane_tr && m->collective && !c->lane && (rc = rt_lane_start(c))) {
    free(st);
    return fail_at(c, -1, rc, "starting the collective lane");
  }
  for (int it = 0; it < o->iterations; it++) {
    c->iteration = it;
    if ((rc = c->tr->barrier(c->tr, c->rank))) { fail_at(c, -1, rc, "barrier before the iteration"); break; }
    rt_store_reset_peak(&c->store);
    /* the device's whole memory (parameters, gradients, optimizer state, activations,
     * buffers, workspaces: every backend allocation) peaks anew each iteration */
    if (c->be->mem_stats && (rc = c->be->mem_stats(c->be, NULL, NULL, 1))) { fail_at(c, -1, rc, "memory statistics"); break; }
    double t0 = rt_now(), busy = 0;
    c->rc_time = 0;
    c->rc_count = 0;
    if (m->begin_iteration && (rc = m->begin_iteration(m, c, it))) { fail_at(c, -1, rc, "begin_iteration"); break; }
    c->ep_a2a_sent = c->ep_a2a_slots = 0;
    int trace = o->trace != NULL || o->profile != NULL;
    double hbase = rt_now() - run->epoch;
    if (c->devtime && (rc = c->be->event_record(c->be, c->tev[2 * c->nops], PPSRT_STREAM_COMPUTE))) {
      fail_at(c, -1, rc, "timing event");
      break;
    }
    /* the clock is read only where a time is needed (compute ops for the busy time,
     * every op with --trace), once per op: an op's end is the next op's start when that
     * one needs a start too (what lies between is bookkeeping, a few ns) */
    double last = 0;
    int have_last = 0;
    for (int i = 0; i < c->nops; i++) {
      c->cur_op = i;
      if (c->store.npend && (rc = rt_poll_copies(c, 0))) { fail_at(c, i, rc, NULL); break; }
      if (o->die_rank == c->rank && o->die_op == i && it == 0 && (o->die_tp < 0 || o->die_tp == c->tp_rank)) {
        if (o->die_hard && strcmp(run->tr->name, "threads")) raise(SIGKILL);   /* test hook: a process dies */
        rc = fail_at(c, i, o->die_tp < 0 ? PPSRT_FAIL(PPSRT_E_BACKEND, "injected failure (--die-at %d:%d)", c->rank, i)
                                         : PPSRT_FAIL(PPSRT_E_BACKEND, "injected failure (--die-at %d:%d:%d)", c->rank, i, o->die_tp), NULL);
        break;
      }
      if (c->lane) {   /* a consumer of an asynchronous collective waits for it; an overlapped
                          pair's start waits for what its second half consumes too (the
                          second half runs on a stream forked here: a wait at its own turn
                          would order only the first stream after the collective) */
        int waited = 0, w2 = 0;
        double wa = trace ? rt_now() : 0;
        if ((rc = rt_lane_consume(c, i, &waited)) || (pair_first(c, i) && (rc = rt_lane_consume(c, i + 1, &w2)))) {
          fail_at(c, i, rc, NULL);
          break;
        }
        waited |= w2;
        if (waited) have_last = 0;
        if (waited && trace && (rc = rt_event_add(c, wa - run->epoch, rt_now() - run->epoch, i, 3))) { fail_at(c, i, rc, NULL); break; }
      }
      if (c->post_due && c->post_due[i] >= 0) {   /* a consumer of posted recvs waits for their data */
        int failed;
        if ((rc = posted_due(c, i, &failed))) { fail_at(c, failed, rc, NULL); break; }
        have_last = 0;
      }
      int comp = is_compute(c->ops[i].kind), ev = c->devtime && comp;
      int timed = (comp && !ev) || (trace && !ev);
      if (ev && (rc = c->be->event_record(c->be, c->tev[2 * i], PPSRT_STREAM_COMPUTE))) { fail_at(c, i, rc, NULL); break; }
      double a = timed ? (have_last ? last : rt_now()) : 0;
      /* --distributed-optimizer on a GPU: the stage's weights gathered (the last step's) */
      if (run->ngrad > 1 && (rc = rt_replica_weights_wait(c, c->ops[i].stage, 0))) { fail_at(c, i, rc, NULL); break; }
      if ((rc = group_open(c, i)) || (rc = exec_op(c, i)) || (rc = group_close(c, i, 0))) {
        group_close(c, i, rc);
        fail_at(c, i, rc, NULL);
        break;
      }
      double b = timed ? rt_now() : 0;
      last = b;
      have_last = timed;
      if (ev && (rc = c->be->event_record(c->be, c->tev[2 * i + 1], PPSRT_STREAM_COMPUTE))) { fail_at(c, i, rc, NULL); break; }
      rt_store_sample(&c->store);
      if (comp && !ev) busy += b - a;
      if (run->ngrad > 1 && (rc = rt_replica_after(c, i))) {
        fail_at(c, -1, rc, "data-parallel gradient all-reduce");
        break;
      }
      if (c->ops[i].kind == PPSRT_OP_F && !rt_recomputed(c, c->ops[i].stage)) check_act_bytes(c, &c->ops[i]);
      /* (offload/reload show on the copy-engine tracks, from issue to completion; a posted
       * recv where it completes, posted_complete_at) */
      if (trace && !ev && c->ops[i].kind != PPSRT_OP_OFFLOAD && c->ops[i].kind != PPSRT_OP_RELOAD &&
          !(c->ops[i].kind == PPSRT_OP_RECV && (c->ops[i].flags & PPSRT_FLAG_POSTED)) &&
          (rc = rt_event_add(c, a - run->epoch, b - run->epoch, i, 0))) { fail_at(c, i, rc, NULL); break; }
    }
    if (rc) break;
    if (c->npst) {   /* posted recvs nothing read (due at the end), or left over */
      int failed = -1;
      if (c->post_due) rc = posted_due(c, c->nops, &failed);
      while (!rc && c->npst) rc = posted_complete_at(c, 0, &failed);
      if (rc) { fail_at(c, failed, rc, "completing posted receives at the end of the iteration"); break; }
    }
    if (c->lane && (rc = rt_lane_drain(c))) { fail_at(c, -1, rc, "waiting for the collective lane"); break; }
    if (c->devtime && (rc = devtime_collect(c, hbase, &busy))) { fail_at(c, -1, rc, "reading timing events"); break; }
    if ((rc = rt_poll_copies(c, 1))) { fail_at(c, -1, rc, "waiting for copies at the end of the iteration"); break; }
    int lmb = 0, lst = 0, left = rt_store_leftover(c, &lmb, &lst);
    if (left) {
      rc = fail_at(c, -1, PPSRT_FAIL(PPSRT_E_USAGE, "%d activation(s) still stored at the end of the iteration, "
                                     "first of (mb %d, stage %d)\nhint: every F needs its B and W (or BW) on the "
                                     "same device", left, lmb, lst), "end of iteration");
      break;
    }
    rt_box_clear(c);
    if (run->ngrad > 1 && (rc = rt_replica_end(c))) { fail_at(c, -1, rc, "data-parallel gradient all-reduce"); break; }
    double loss = 0;
    if (m->end_iteration && (rc = m->end_iteration(m, c, &loss))) { fail_at(c, -1, rc, "end_iteration"); break; }
    double t1 = rt_now();
    /* stats of every device, summed over ranks: each rank fills its own row */
    memset(st, 0, ((size_t)ndev * ST_N + 2) * sizeof *st);
    float *row = st + (size_t)c->rank * ST_N;
    size_t pk = c->store.peak, rs = c->store.resident_peak, hs = c->store.host_peak, un = c->act_unit, dm = 0;
    if (c->be->mem_stats && (rc = c->be->mem_stats(c->be, NULL, &dm, 0))) { fail_at(c, -1, rc, "memory statistics"); break; }
    row[ST_BUSY] = (float)busy;
    row[ST_SPAN] = (float)(t1 - t0);
    row[ST_PEAK_HI] = (float)(pk >> 20); row[ST_PEAK_LO] = (float)(pk & 0xfffff);
    row[ST_RES_HI] = (float)(rs >> 20); row[ST_RES_LO] = (float)(rs & 0xfffff);
    row[ST_HOST_HI] = (float)(hs >> 20); row[ST_HOST_LO] = (float)(hs & 0xfffff);
    row[ST_UNIT_HI] = (float)(un >> 20); row[ST_UNIT_LO] = (float)(un & 0xfffff);
    row[ST_DMEM_HI] = (float)(dm >> 20); row[ST_DMEM_LO] = (float)(dm & 0xfffff);
    row[ST_CANCEL] = (float)c->store.ncancel;
    row[ST_RCTIME] = (float)c->rc_time;
    row[ST_RCCOUNT] = (float)c->rc_count;
    {   /* the parameter elements this rank holds, and of them its experts' (--expert-parallel) */
      size_t np = 0, nx = 0;
      for (int k = 0; k < m->nparams; k++) {
        np += m->params[k].numel;
        if (m->params[k].expert || strstr(m->params[k].name, ".moe.e")) nx += m->params[k].numel;
      }
      row[ST_PAR_HI] = (float)(np >> 20); row[ST_PAR_LO] = (float)(np & 0xfffff);
      row[ST_XPAR_HI] = (float)(nx >> 20); row[ST_XPAR_LO] = (float)(nx & 0xfffff);
    }
    if (run->nep > 1 && run->o.cfg.moe_a2a) {   /* --moe-token-dispatcher alltoall: the EP group's traffic */
      double xb = c->ep_a2a_sent, xs = c->ep_a2a_slots;
      if ((rc = rt_ep_sum(c, &xb)) || (rc = rt_ep_sum(c, &xs))) { fail_at(c, -1, rc, "expert-parallel all-reduce"); break; }
      size_t b = (size_t)(xb + 0.5), n = (size_t)(xs + 0.5);
      row[ST_A2AB_HI] = (float)(b >> 20); row[ST_A2AB_LO] = (float)(b & 0xfffff);
      row[ST_A2AS_HI] = (float)(n >> 20); row[ST_A2AS_LO] = (float)(n & 0xfffff);
    }
    /* measured vs predicted is decided here, in double; the sum only carries the verdict */
    c->peak_units[it] = c->store.upeak;
    if (c->store.upeak > c->max_units) c->max_units = c->store.upeak;
    const ppsrt_program *pg = run->prog;
    const double *pred = pg->predicted_peak_order ? pg->predicted_peak_order : pg->predicted_peak;
    row[ST_UNITS] = (float)c->store.upeak;
    row[ST_MEMBAD] = pred && fabs(c->max_units - pred[c->rank]) > 1e-9 * fmax(1.0, fabs(pred[c->rank]));
    row[ST_ACTBAD] = (float)(c->act_mismatch || c->rc_mismatch);
    st[(size_t)ndev * ST_N] = (float)loss;
    if ((rc = rt_allreduce_host(c, st, (size_t)ndev * ST_N + 2, PPSRT_SUM))) { fail_at(c, -1, rc, "loss all-reduce"); break; }
    c->loss[it] = st[(size_t)ndev * ST_N];
    /* --data-parallel: the loss averaged over the replicas (the gradients were, after the last W) */
    if (run->ngrad > 1 && (rc = rt_replica_loss(c, &c->loss[it]))) { fail_at(c, -1, rc, "data-parallel loss all-reduce"); break; }
    /* every rank is past the iteration's last communication: a caching backend may
     * release memory now (a device-wide synchronisation cannot wait for a peer here) */
    if (c->be->trim && (rc = c->be->trim(c->be))) { fail_at(c, -1, rc, "releasing cached memory"); break; }
    c->busy[it] = busy;
    c->span[it] = t1 - t0;
    c->peak_bytes[it] = pk;
    if ((c->rank == 0 && c->grank == 0 && c->tp_rank == 0) || run->nlocal == 1) {
      /* after the sum every rank holds every device's row; one context keeps them */
      for (int d = 0; d < ndev; d++) {
        float *r = st + (size_t)d * ST_N;
        run->dev_busy[(size_t)it * ndev + d] = r[ST_BUSY];
        run->dev_span[(size_t)it * ndev + d] = r[ST_SPAN];
        run->dev_peak[(size_t)it * ndev + d] = ((size_t)r[ST_PEAK_HI] << 20) + (size_t)r[ST_PEAK_LO];
        run->dev_resident[d] = ((size_t)r[ST_RES_HI] << 20) + (size_t)r[ST_RES_LO];
        run->dev_params[2 * d] = ((size_t)r[ST_PAR_HI] << 20) + (size_t)r[ST_PAR_LO];
        run->dev_params[2 * d + 1] = ((size_t)r[ST_XPAR_HI] << 20) + (size_t)r[ST_XPAR_LO];
        run->dev_a2a[2 * d] += (double)(((size_t)r[ST_A2AB_HI] << 20) + (size_t)r[ST_A2AB_LO]);
        run->dev_a2a[2 * d + 1] += (double)(((size_t)r[ST_A2AS_HI] << 20) + (size_t)r[ST_A2AS_LO]);
        run->dev_host[d] = ((size_t)r[ST_HOST_HI] << 20) + (size_t)r[ST_HOST_LO];
        run->dev_unit[d] = ((size_t)r[ST_UNIT_HI] << 20) + (size_t)r[ST_UNIT_LO];
        run->dev_units[(size_t)it * ndev + d] = r[ST_UNITS];
        run->dev_mem[(size_t)it * ndev + d] = ((size_t)r[ST_DMEM_HI] << 20) + (size_t)r[ST_DMEM_LO];
        run->dev_cancel[d] = (long)r[ST_CANCEL];
        run->dev_rctime[(size_t)it * ndev + d] = r[ST_RCTIME];
        run->dev_rccount[(size_t)it * ndev + d] = (long)r[ST_RCCOUNT];
        run->dev_membad[d] = r[ST_MEMBAD] != 0;
        run->dev_actbad[d] = r[ST_ACTBAD] != 0;
      }
      run->loss[it] = c->loss[it];
    }
    if (o->check && it == 0) {
      int bad = 0;
      if ((rc = rt_check_gradients(c, c->loss[0], &bad))) { fail_at(c, -1, rc, "--check"); break; }
      /* every rank compared what it holds (its slices, experts, shard, its replica's and
         context rank's routing: check.c): the mismatches are summed over the world, and the
         loss's verdict (world rank 0's) sent with them, so that each process under MPI holds
         the run's (and exits 1 on a mismatch) */
      float fb[2] = {(float)bad, c->wrank == 0 ? (float)run->check_loss_bad : 0};
      if ((rc = rt_allreduce_host_on(c, c->wtr, c->wrank, fb, 2, PPSRT_SUM))) { fail_at(c, -1, rc, "--check all-reduce"); break; }
      if (c->wrank == 0 || run->nlocal == 1) {   /* (threads: world rank 0, which wrote check_loss_bad, alone) */
        run->check_mismatches = (long)fb[0];
        run->check_loss_bad = fb[1] > 0;
      }
      /* the first context prints every local rank's lines in rank order, once all have
       * compared: every rank wrote its text before the world's all-reduce above, and the
       * world's barrier keeps the order plain (without a world-wide wait the first context
       * freed a replica's text while that rank still wrote it: the ASan build's leak of its
       * memstream, dp.sh and dp_emu.sh) */
      if ((rc = c->tr->barrier(c->tr, c->rank))) { fail_at(c, -1, rc, "--check barrier"); break; }
      if (c == &run->ctx[0]) {
        pthread_mutex_lock(&run->print_lock);
        for (int l = 0; l < run->nlocal; l++)
          if (run->ctx[l].check_text) {
            /* every replica's lines: each compared its own gradients after the all-reduce, its shard
               (--distributed-optimizer) and its own microbatches' routing (--context-parallel:
               ranks > 0 their routing's alone, check.c) */
            fputs(run->ctx[l].check_text, run->out);
            free(run->ctx[l].check_text);
            run->ctx[l].check_text = NULL;
          }
        pthread_mutex_unlock(&run->print_lock);
      }
    }
    long step = run->step0 + it + 1;
    double lr = 0, gnorm = 0;
    if ((rc = rt_optimizer_step(c, (int)step, &lr, &gnorm))) { fail_at(c, -1, rc, "optimizer step"); break; }
    if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0) {
      run->lr_it[it] = lr;
      run->gnorm_it[it] = gnorm;
      run->iterations_done = it + 1;
    }
    if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0 && !o->json && !o->quiet) {
      pthread_mutex_lock(&run->print_lock);
      rt_print_iteration(run, it);
      pthread_mutex_unlock(&run->print_lock);
    }
    /* a loss that is not a number stops the run here (every rank holds the same sum,
       so all stop together); cli.c reports it, exit 1 (--allow-nonfinite-loss: go on) */
    if (!o->allow_nonfinite && !isfinite(c->loss[it])) break;
    if (run->validate_step && (rc = run->validate_step(c, it))) { fail_at(c, -1, rc, "--val-data"); break; }
    /* checkpoints: every --save-every steps and after the last iteration */
    if (o->save && ((o->save_every && step % o->save_every == 0) || it + 1 == o->iterations)) {
      int peer = 0;
      if ((rc = rt_replica_weights_wait(c, 0, 1)) || (rc = rt_ckpt_save(c, o->save, step, &peer))) {
        if (!peer) { fail_at(c, -1, rc, "--save"); break; }
        /* every device knows (the save's all-reduce told them): nothing to abort */
        snprintf(c->errmsg, sizeof c->errmsg, "device %d: --save, iteration %d: %s", c->rank, it, ppsrt_last_error());
        c->status = rc;
        break;
      }
      if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0 && !o->json && !o->quiet) {
        pthread_mutex_lock(&run->print_lock);
        fprintf(run->out, "saved %s (step %ld, %d shard%s)\n", o->save, step, ndev, ndev == 1 ? "" : "s");
        fflush(run->out);
        pthread_mutex_unlock(&run->print_lock);
      }
    }
  }
  free(st);
  int rw = rt_replica_weights_wait(c, 0, 1);   /* (the last step's all-gathers, for what reads the weights after the run) */
  return rc ? rc : rw;
}

/* ---- forward-only evaluation (validate.c; Megatron-LM's evaluate(), forward_only) ----
 * Each device walks its own op table restricted to what the loss needs, in the table's
 * order: F, the vocabulary passes IF and S, the forward vocabulary collectives
 * (input_fwd, output_fwd) and the SENDs and RECVs of activations. Dropped: B, W, BW,
 * IB, T, the backward collectives, gradient SENDs/RECVs, OFFLOAD/RELOAD (nothing is
 * kept for a backward: F's and S's stored activations are released right after the
 * pass, so evaluation's peak is at most one pass's activations above what the passes
 * hold in flight, never more than training's), no data-parallel gradient all-reduce,
 * no optimizer. The model runs with m->eval set (no dropout).
 *
 * Why the restricted tables cannot deadlock: training's tables run deadlock-free (ppsc
 * verified them), i.e. the graph of "op a must complete before op b" edges (each
 * device's program order, a SEND before its matching RECV, a collective on all its
 * devices together) is acyclic. The restriction is the same predicate on every device,
 * and it keeps or drops both ends of every match together: an activation SEND and its
 * RECV are both kept, a gradient SEND and its RECV both dropped, a collective kind is
 * kept or dropped on every device. Each device keeps its kept ops in their original
 * order. So every edge between kept ops is implied by a path of the original graph
 * (program order is transitive over the dropped ops between; matches are unchanged):
 * the restricted graph is a subgraph of the original's transitive closure, acyclic too.
 * Nothing kept reads what a dropped op produces (F reads activations only; S the last
 * F's output; output_fwd S's statistics). Point-to-point groups (NCCL) keep their kept
 * members together (a subset of a group is issued as one group); overlapped pairs run
 * one after the other; posted RECVs are matched to their first kept reader again. */
static int eval_keeps(const ppsrt_op *op) {
  switch (op->kind) {
  case PPSRT_OP_F: case PPSRT_OP_IF: case PPSRT_OP_S: return 1;
  case PPSRT_OP_SEND: case PPSRT_OP_RECV: return op->xfer == PPSRT_XFER_ACT;
  case PPSRT_OP_COLL: return op->coll == PPSRT_COLL_INPUT_FWD || op->coll == PPSRT_COLL_OUTPUT_FWD;
  default: return 0;
  }
}

/* The device's table restricted to eval_keeps (a new array): a kept op stays in a
 * point-to-point group with the kept op before it only when both were in the same
 * group of the original table; no overlapped pairs. */
static int eval_table(const ppsrt_ctx *c, ppsrt_op **out, int *nout) {
  ppsrt_op *t = malloc(((size_t)c->nops + 1) * sizeof *t);
  int *chain = malloc(((size_t)c->nops + 1) * sizeof *chain);
  if (!t || !chain) { free(t); free(chain); return PPSRT_FAIL(PPSRT_E_NOMEM, "evaluation: out of host memory"); }
  int n = 0, prev = -1;
  for (int i = 0; i < c->nops; i++) {
    chain[i] = grouped_with_prev(c, i) ? chain[i - 1] : i;   /* the first op of i's group */
    if (!eval_keeps(&c->ops[i])) continue;
    t[n] = c->ops[i];
    t[n].flags &= (uint8_t)~PPSRT_FLAG_OVERLAP;
    if (!n || prev != chain[i]) t[n].flags &= (uint8_t)~PPSRT_FLAG_GROUP;
    prev = chain[i];
    n++;
  }
  free(chain);
  *out = t;
  *nout = n;
  return 0;
}

/* One kept op: F and S release what they stored once the store's peak has seen it. */
static int eval_exec(ppsrt_ctx *c, int i) {
  const ppsrt_op *op = &c->ops[i];
  ppsrt_model *m = c->model;
  int rc;
  if (op->kind == PPSRT_OP_F) {
    if ((rc = m->f(m, c, op->mb, op->stage))) return rc;
    rt_store_sample(&c->store);
    return ppsrt_act_release(c, op->mb, op->stage);
  }
  if ((rc = exec_one(c, i))) return rc;
  rt_store_sample(&c->store);
  return op->kind == PPSRT_OP_S ? ppsrt_act_release(c, op->mb, -1) : 0;
}

/* Batch k: the kept ops in order, then this device's share of the batch's loss. */
static int eval_batch(ppsrt_ctx *c, int k, double *loss) {
  ppsrt_model *m = c->model;
  int rc;
  *loss = 0;
  if (m->begin_iteration && (rc = m->begin_iteration(m, c, k))) return fail_at(c, -1, rc, "evaluation: begin_iteration");
  for (int i = 0; i < c->nops; i++) {
    c->cur_op = i;
    if (c->lane) {
      int waited;
      if ((rc = rt_lane_consume(c, i, &waited))) return fail_at(c, i, rc, NULL);
    }
    if (c->post_due && c->post_due[i] >= 0) {
      int failed;
      if ((rc = posted_due(c, i, &failed))) return fail_at(c, failed, rc, NULL);
    }
    if ((rc = group_open(c, i)) || (rc = eval_exec(c, i)) || (rc = group_close(c, i, 0))) {
      group_close(c, i, rc);
      return fail_at(c, i, rc, NULL);
    }
  }
  if (c->npst) {
    int failed = -1;
    if (c->post_due) rc = posted_due(c, c->nops, &failed);
    while (!rc && c->npst) rc = posted_complete_at(c, 0, &failed);
    if (rc) return fail_at(c, failed, rc, "evaluation: completing posted receives");
  }
  if (c->lane && (rc = rt_lane_drain(c))) return fail_at(c, -1, rc, "evaluation: waiting for the collective lane");
  int lmb = 0, lst = 0, left = rt_store_leftover(c, &lmb, &lst);
  if (left)
    return fail_at(c, -1, PPSRT_FAIL(PPSRT_E_USAGE, "%d activation(s) still stored after the forward passes, first of "
                                     "(mb %d, stage %d)", left, lmb, lst), "evaluation");
  rt_box_clear(c);   /* (what only a dropped op read: the mlp's loss gradient) */
  if (m->end_iteration && (rc = m->end_iteration(m, c, loss))) return fail_at(c, -1, rc, "evaluation: end_iteration");
  return 0;
}

int rt_eval_forward(ppsrt_ctx *c, int batches, double *loss, size_t *peak, size_t *dmem) {
  ppsrt_model *m = c->model;
  ppsrt_backend *be = c->be;
  const ppsrt_op *ops0 = c->ops;
  int nops0 = c->nops, rc;
  uint8_t *fa0 = c->free_after;
  int32_t *pd0 = c->post_due, *pn0 = c->post_next;
  ppsrt_op *t = NULL;
  int n = 0, nev0 = c->nev;
  *loss = 0;
  *peak = *dmem = 0;
  if ((rc = eval_table(c, &t, &n))) return fail_at(c, -1, rc, "evaluation");
  c->ops = t;
  c->nops = n;
  c->free_after = NULL;
  c->post_due = c->post_next = NULL;
  if ((rc = mark_free_after(c)) || (rc = mark_posted(c))) fail_at(c, -1, rc, "evaluation");
  m->eval = 1;
  rt_store_reset_peak(&c->store);
  if (!rc && be->mem_stats && (rc = be->mem_stats(be, NULL, NULL, 1))) fail_at(c, -1, rc, "evaluation: memory statistics");
  double sum = 0;
  for (int k = 0; k < batches && !rc; k++) {
    double l = 0;
    if (!(rc = eval_batch(c, k, &l))) sum += l;
  }
  if (!rc && be->mem_stats && (rc = be->mem_stats(be, NULL, dmem, 0))) fail_at(c, -1, rc, "evaluation: memory statistics");
  *peak = c->store.peak;
  *loss = batches > 0 ? sum / batches : 0;   /* every batch has as many tokens: the mean over all */
  m->eval = 0;
  c->nev = nev0;   /* --trace, --profile: the records of posted recvs and of the lane name ops of t */
  free(c->free_after);
  free(c->post_due);
  free(c->post_next);
  free(t);
  c->ops = ops0;
  c->nops = nops0;
  c->free_after = fa0;
  c->post_due = pd0;
  c->post_next = pn0;
  return rc;
}
