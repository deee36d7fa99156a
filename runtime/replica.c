/* replica.c: --data-parallel D and --tensor-parallel T: one pipeline's view of the world
 * transport, the replicas' gradient averaging, the tensor-parallel groups' sums.
 *
 * D replicas of a P-device pipeline, each device split over T tensor ranks, run as
 * P x D x T ranks of one transport (threads in one process, or mpirun -np P*D*T);
 * device d of replica r at tensor rank t is world rank (r P + d) T + t (without
 * --tensor-parallel r P + d). Each (r, t) is a pipeline of its own: everything in the
 * runtime that speaks to "the transport" (the interpreter's sends and receives, the
 * per-iteration statistics, --check, --val-data, --save, --clip-grad) gets the view of
 * its pipeline: ranks 0..P-1, peers mapped into it, and collectives over its P ranks
 * only. Those collectives go to a transport of the pipeline's P ranks alone (`coll`;
 * cli.c makes one per pipeline: threads, MPI_Comm_split by pipeline, or an NCCL
 * communicator of its ranks; and one more per pipeline for its collective lane), so
 * they carry the pipeline's bytes, on the device, and nothing else. Its barrier is the
 * world's.
 *
 * The gradients of each stage are averaged over its D replicas on a transport of this
 * (device, tensor rank)'s D ranks alone (with --context-parallel C: its D x C ranks, rank
 * c->grank = r C + c, each context rank's gradient that of its tokens' mean loss, so the
 * mean over D x C is the batch's; the distributed optimizer shards over D x C; cp.c) (c->gtr: threads, MPI_Comm_split by the pair,
 * or an NCCL communicator of those ranks), right after the stage's last W of the iteration
 * (rt_replica_after, called by interp.c; on the GPU on a stream of its own).
 *
 * --distributed-optimizer (ZeRO stage 1, Megatron-LM's distributed optimizer): each
 * stage's weights are in one buffer too, at the gradients' offsets, padded to a multiple
 * of D (rt_replica_flatten; param.c's ppsrt_param_shard shards each tensor's state: its
 * elements in the replica's 1/D of the buffer); the stage's gradient buffer is
 * reduce-scattered instead, each replica keeping the mean of its 1/D; the optimizer
 * updates the tensors' shards (interp.c), and each stage's weight buffer is all-gathered
 * right after (rt_replica_gather_weights, on a GPU overlapping the next iteration's
 * passes). Checkpoints gather the state whole
 * (rt_replica_gather_state); the gradient norm of --clip-grad sums the shards
 * (rt_replica_sum).
 *
 * --expert-parallel X (ep.c): a stage's experts (ppsrt_param.expert) have a buffer of
 * their own, all-reduced over the expert-data-parallel group (c->etr: the D/X x C ranks
 * holding the same experts; none when that is one rank) and scaled by 1/(D C) like the
 * dense buffer (the experts saw every rank's tokens through the all-gathers).
 *
 * Vocabulary-parallel schedules: a replica's collectives go over its own devices (the
 * view's all-reduce and broadcast; the collective lane gets a view of its own of the
 * lane's transport, cli.c), and each device's rows of the input and output layers
 * (parameters of stage -1, which no W completes) are averaged at the end of the
 * iteration by rt_replica_end, like any stage without a W.
 *
 * Each stage's gradients live in one buffer (rt_replica_flatten, as Megatron-LM's
 * contiguous gradient buffer), so a stage is one all-reduce (reduce-scatter) and one
 * scaling, not one per tensor; a tied tensor on two devices has buffers of its own
 * under --distributed-optimizer (model.h `tied`).
 *
 * On a GPU the weights' all-gathers run on the DP stream and the next iteration's first
 * pass of each stage waits for its stage's (rt_replica_weights_wait).
 *
 * What it does not: no buckets within a stage (the stage's last W starts its
 * all-reduce, the stage's all-gather is one call); the CPU backend's collectives block
 * its device. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* pipeline (r, t) of D replicas x T tensor ranks: its device d is world rank (r P + d) T + t */
typedef struct view { ppsrt_transport *w, *coll; int P, D, T, r, t; } view;

static int W(ppsrt_transport *t, int rank) { view *v = t->impl; return (v->r * v->P + rank) * v->T + v->t; }
static int v_send(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *buf, size_t bytes, int peer,
                  int64_t tag) {
  view *v = t->impl;
  return v->w->send(v->w, W(t, rank), b, stream, buf, bytes, W(t, peer), tag);
}
static int v_recv(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int peer,
                  int64_t tag) {
  view *v = t->impl;
  return v->w->recv(v->w, W(t, rank), b, stream, buf, bytes, W(t, peer), tag);
}
static int is_nccl(const ppsrt_transport *t) { return t->name && !strcmp(t->name, "nccl"); }
static int stage_in(ppsrt_backend *b, int stream, void *h, const void *buf, size_t bytes) {
  int rc = b->memcpy_async(b, stream, h, buf, bytes, 2);
  return rc ? rc : b->stream_sync(b, stream);
}
static int stage_out(ppsrt_backend *b, int stream, void *buf, const void *h, size_t bytes) {
  int rc = b->memcpy_async(b, stream, buf, h, bytes, 1);
  return rc ? rc : b->stream_sync(b, stream);
}

/* a pipeline's collectives: its own group's, with its device as the rank */
static int v_allreduce(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, float *buf, size_t n, ppsrt_redop op) {
  view *v = t->impl;
  return v->coll->allreduce_f32(v->coll, rank, b, stream, buf, n, op);
}
static int v_broadcast(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int root) {
  view *v = t->impl;
  return v->coll->broadcast(v->coll, rank, b, stream, buf, bytes, root);
}
static int v_barrier(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->barrier(v->w, W(t, rank)); }
static void v_abort(ppsrt_transport *t, int rank, const char *why) {
  view *v = t->impl;
  v->w->abort(v->w, W(t, rank), why);
  v->coll->abort(v->coll, rank, why);   /* its pending collectives fail too */
}
static void v_destroy(ppsrt_transport *t) { free(t->impl); free(t); }
static int v_group_begin(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->group_begin(v->w, W(t, rank)); }
static int v_group_end(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->group_end(v->w, W(t, rank)); }

int rt_replica_view(ppsrt_transport *world, ppsrt_transport *coll, int P, int D, int T, int r, int tr, ppsrt_transport **out) {
  if (!coll) return PPSRT_FAIL(PPSRT_E_USAGE, "a pipeline's view needs its group's transport");
  ppsrt_transport *t = calloc(1, sizeof *t);
  view *v = calloc(1, sizeof *v);
  if (!t || !v) { free(t); free(v); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  *v = (view){world, coll, P, D, T, r, tr};
  t->name = world->name;
  t->nranks = P;
  t->impl = v;
  t->timeout_s = world->timeout_s;
  t->send = v_send; t->recv = v_recv; t->allreduce_f32 = v_allreduce; t->broadcast = v_broadcast;
  t->barrier = v_barrier; t->abort = v_abort; t->destroy = v_destroy;
  if (world->group_begin && world->group_end) { t->group_begin = v_group_begin; t->group_end = v_group_end; }
  *out = t;
  return 0;
}

/* A stage's gradients become the mean over its replicas right after the stage's last W
 * (or BW) of the iteration on this device, by an all-reduce among this device's D
 * replicas only (c->gtr, its replica group), so it overlaps what the pipeline still runs:
 * the other devices' cool-down, and on a device with several stages (interleaved, V
 * shapes) its other stages' passes. One all-reduce per stage, the way ppsc sim models it
 * (compiler/dp.c).
 *  - GPU backends (cuda): on PPSRT_STREAM_DP, in device memory: the DP stream waits for
 *    the compute stream's work so far (the stage's last W), then the stage's gradient
 *    buffer is all-reduced there (with the distributed optimizer reduce-scattered;
 *    NCCL on the NCCL transport's replica group, its own stream; the
 *    threads and MPI transports stage it through the host) and scaled by 1/D; the host
 *    does not wait. rt_replica_end makes the compute stream wait for the
 *    DP stream before the optimizer step (end_iteration).
 *  - CPU: in place in host memory (the buffer); the
 *    collective blocks this device (it overlaps the other devices' work only). */
static int gpu(const ppsrt_ctx *c) { return strcmp(c->be->name, "cpu") != 0; }

/* The group that sums a buffer's gradients and shards its optimizer state: the device's
 * D x C replicas and context ranks (gtr), or for --expert-parallel's expert buffers the
 * expert-data-parallel group (etr: D x C / X ranks; NULL when that is one rank). */
typedef struct grp { ppsrt_transport *t; int rank, n; } grp;
static grp group_of(const ppsrt_ctx *c, int expert) {
  if (!expert) return (grp){c->gtr, c->grank, c->run->ngrad};
  return (grp){c->etr, c->etr ? c->erank : 0, c->run->ngrad / c->run->nep};
}

/* A tensor's place in its buffer: the next multiple of RT_DP_ALIGN elements, so that
 * every view starts 256-byte aligned (512 for F32) as the buffer itself (cudaMalloc's
 * alignment, which cuBLAS and the kernels' vector loads rely on). */
static size_t dp_align(size_t at) { return (at + RT_DP_ALIGN - 1) / RT_DP_ALIGN * RT_DP_ALIGN; }

/* Whether p goes to stage s's buffer (own 0), or with --distributed-optimizer (dist) to
 * the tied tensor's own (own 1); --expert-parallel: the stage's experts (ex 1) have a
 * buffer of their own, summed over the expert-data-parallel group (ep.c). */
static int in_bucket(const ppsrt_param *p, int s, int dist, int own, int ex) {
  return p->stage == s && (!dist || p->tied == own) && p->expert == ex;
}

/* After the model is created, with --data-parallel: the gradients of each stage this
 * device holds (its vocabulary rows as stage -1) are moved into one zeroed buffer, each
 * parameter's grad a view into it (grad_view), in parameter order, each at a multiple
 * of RT_DP_ALIGN elements. With --distributed-optimizer the weights too, into a buffer
 * of the same layout (param_view), both padded to a multiple of D, and each tensor's
 * optimizer state shrinks to its shard (ppsrt_param_shard); a tied tensor (model.h)
 * gets buffers of its own. */
int rt_replica_flatten(ppsrt_ctx *c) {
  ppsrt_model *m = c->model;
  int S = c->run->prog->nstage, rc = 0, dist = c->run->o.distopt;
  size_t es = ppsrt_dtype_size(c->be->act_dtype);
  if (c->run->ngrad <= 1) return 0;
  int nex = c->run->nep > 1 ? 2 : 1;
  if (!(c->dp_b = calloc(2 * (size_t)nex * ((size_t)S + 1), sizeof *c->dp_b))) return PPSRT_FAIL(PPSRT_E_NOMEM, "data-parallel: out of host memory");
  for (int s = -1; s < S && !rc; s++)
    for (int own = 0, ex = 0; own <= dist && !rc; ex = (ex + 1) % nex, own += !ex) {
      size_t at = 0;
      int any = 0;
      for (int k = 0; k < m->nparams; k++)
        if (in_bucket(&m->params[k], s, dist, own, ex)) { at = dp_align(at) + m->params[k].numel; any = 1; }
      if (!any || (!dist && own)) continue;
      rt_dp_bucket *b = &c->dp_b[c->dp_nb];
      grp G = group_of(c, ex);
      size_t D = (size_t)G.n;   /* (the shards: the buffer's group) */
      b->stage = s;
      b->expert = ex;
      b->n = dist ? (at + D - 1) / D * D : at;
      b->C = dist ? b->n / D : 0;
      size_t nb = b->n ? b->n : 1;
      if ((rc = c->be->alloc(c->be, nb * sizeof(float), (void **)&b->grad)) ||
          (rc = c->be->memset0(c->be, PPSRT_STREAM_COMPUTE, b->grad, nb * sizeof(float))))
        break;
      /* the weights' padding (between tensors, and the tail) is never read by a pass,
       * but moved by the all-gather: zero, as the gradient's */
      if (dist && ((rc = c->be->alloc(c->be, nb * es, &b->w)) || (rc = c->be->memset0(c->be, PPSRT_STREAM_COMPUTE, b->w, nb * es))))
        break;
      c->dp_nb++;
      at = 0;
      for (int k = 0; k < m->nparams && !rc; k++) {
        ppsrt_param *p = &m->params[k];
        if (!in_bucket(p, s, dist, own, ex)) continue;
        at = dp_align(at);
        if (dist) {
          rc = ppsrt_param_shard(c->be, p, b->w, b->grad, at, b->C, G.rank);
        } else {   /* (first freed: the buffer takes its place) */
          if (p->grad && !p->grad_view) c->be->free(c->be, p->grad);
          p->grad = b->grad + at;
          p->grad_view = 1;
          p->flat_off = at;
        }
        at += p->numel;
      }
    }
  return rc;
}

static int stage_grads(ppsrt_ctx *c, int stage) {
  int D = c->run->ngrad, rc = 0, g = gpu(c), st = g ? PPSRT_STREAM_DP : PPSRT_STREAM_COMPUTE;
  ppsrt_backend *be = g ? c->be : NULL;   /* (the host buffers of the CPU backend go as host memory) */
  if (g) {   /* the DP stream waits for the compute stream's work so far */
    if (!c->dp_ev[0] && ((rc = c->be->event_create(c->be, &c->dp_ev[0])) || (rc = c->be->event_create(c->be, &c->dp_ev[1]))))
      return rc;
    if ((rc = c->be->event_record(c->be, c->dp_ev[0], PPSRT_STREAM_COMPUTE)) ||
        (rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_DP, c->dp_ev[0])))
      return rc;
    c->dp_pending = 1;
  } else if ((rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE))) {
    return rc;
  }
  /* the stage's buffers: each all-reduced in place, or with --distributed-optimizer
   * reduce-scattered (this replica's C elements, in place); --expert-parallel: the
   * experts' buffer over the expert-data-parallel group (none when it is one rank), scaled
   * as the dense ones: the group's experts saw the tokens of all D x C ranks */
  for (int k = 0; k < c->dp_nb && !rc; k++) {
    rt_dp_bucket *b = &c->dp_b[k];
    if (b->stage != stage) continue;
    grp G = group_of(c, b->expert);
    float *mine = b->C ? b->grad + (size_t)G.rank * b->C : b->grad;
    size_t n = b->C ? b->C : b->n;
    if (G.t)
      rc = b->C ? G.t->reduce_scatter_f32(G.t, G.rank, be, st, b->grad, mine, n, PPSRT_SUM)
                : G.t->allreduce_f32(G.t, G.rank, be, st, b->grad, n, PPSRT_SUM);
    if (rc) break;
    if (g) rc = c->be->scale_f32(c->be, st, mine, 1.0f / (float)D, n);
    else
      for (size_t i = 0; i < n; i++) mine[i] /= (float)D;
  }
  return rc;
}

static int is_w(int kind) { return kind == PPSRT_OP_W || kind == PPSRT_OP_BW; }

/* After op i of the iteration: op i was the last W (BW) of its stage on this device. */
int rt_replica_after(ppsrt_ctx *c, int i) {
  if (!is_w(c->ops[i].kind)) return 0;
  int st = c->ops[i].stage;
  for (int j = i + 1; j < c->nops; j++)
    if (is_w(c->ops[j].kind) && c->ops[j].stage == st) return 0;
  return stage_grads(c, st);
}

/* At the end of the iteration, before the optimizer: the stages of this device that no W
 * (BW) completed (none in the program) are all-reduced now, in stage order (every
 * replica runs the same program, so the same calls in the same order), and the compute
 * stream waits for the DP stream's all-reduces. */
int rt_replica_end(ppsrt_ctx *c) {
  ppsrt_model *m = c->model;
  int rc = 0;
  for (int k = 0; k < m->nparams && !rc; k++) {
    int st = m->params[k].stage, seen = 0, has = 0;
    for (int q = 0; q < k && !seen; q++) seen = m->params[q].stage == st;   /* each stage once */
    for (int j = 0; j < c->nops && !has && !seen; j++) has = is_w(c->ops[j].kind) && c->ops[j].stage == st;
    if (!seen && !has) rc = stage_grads(c, st);
  }
  /* (a stage without a pass this iteration: its weights' all-gather, before the step writes them) */
  if (!rc) rc = rt_replica_weights_wait(c, 0, 1);
  if (!rc && c->dp_pending) {
    c->dp_pending = 0;
    if (!(rc = c->be->event_record(c->be, c->dp_ev[1], PPSRT_STREAM_DP))) rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, c->dp_ev[1]);
  }
  return rc;
}

void rt_replica_fini(ppsrt_ctx *c) {
  for (int k = 0; k < 2; k++)
    if (c->dp_ev[k]) { c->be->event_destroy(c->be, c->dp_ev[k]); c->dp_ev[k] = NULL; }
  for (int k = 0; k < c->dp_nb; k++) {
    if (c->dp_b[k].ev) c->be->event_destroy(c->be, c->dp_b[k].ev);
    c->be->free(c->be, c->dp_b[k].grad);
    if (c->dp_b[k].w) c->be->free(c->be, c->dp_b[k].w);
  }
  free(c->dp_b);
  c->dp_b = NULL;
  c->dp_nb = 0;
}

/* --distributed-optimizer: after the optimizer updated this replica's shards, each
 * buffer's weights gathered from every replica in place (its C elements from each: one
 * all-gather a stage), in buffer order (every replica the same calls); each gradient
 * buffer, whose other parts hold this replica's own unreduced sums, is cleared whole
 * (on the compute stream, which writes the next gradients).
 *  - GPU backends: the all-gathers run on the DP stream, after the compute stream's
 *    optimizer step, each followed by its buffer's event: the compute stream goes on,
 *    and waits for a stage's weights only before that stage's first pass of the next
 *    iteration (rt_replica_weights_wait, Megatron-LM's --overlap-param-gather).
 *  - CPU: in place in host memory, blocking. */
int rt_replica_gather_weights(ppsrt_ctx *c) {
  size_t es = ppsrt_dtype_size(c->be->act_dtype);
  int rc = 0, g = gpu(c), st = g ? PPSRT_STREAM_DP : PPSRT_STREAM_COMPUTE;
  ppsrt_backend *b = g ? c->be : NULL;   /* the CPU backend's buffers are host memory */
  for (int k = 0; k < c->dp_nb && !rc; k++) rc = c->be->memset0(c->be, PPSRT_STREAM_COMPUTE, c->dp_b[k].grad, c->dp_b[k].n * sizeof(float));
  if (rc) return rc;
  if (!g) rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE);
  else if (!c->dp_ev[0] && ((rc = c->be->event_create(c->be, &c->dp_ev[0])) || (rc = c->be->event_create(c->be, &c->dp_ev[1]))))
    return rc;
  else if ((rc = c->be->event_record(c->be, c->dp_ev[0], PPSRT_STREAM_COMPUTE)) ||
           (rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_DP, c->dp_ev[0])))
    return rc;
  for (int k = 0; k < c->dp_nb && !rc; k++) {
    rt_dp_bucket *q = &c->dp_b[k];
    size_t blk = q->C * es;
    grp G = group_of(c, q->expert);
    if (!G.t) continue;   /* (--expert-parallel: one rank holds these experts' state, updated in place) */
    rc = G.t->allgather(G.t, G.rank, b, st, (char *)q->w + (size_t)G.rank * blk, q->w, blk);
    if (rc || !g) continue;
    if (!q->ev && (rc = c->be->event_create(c->be, &q->ev))) break;
    if (!(rc = c->be->event_record(c->be, q->ev, PPSRT_STREAM_DP))) q->pending = 1;
  }
  return rc;
}

int rt_replica_weights_wait(ppsrt_ctx *c, int stage, int all) {
  int rc = 0;
  for (int k = 0; k < c->dp_nb && !rc; k++) {
    rt_dp_bucket *q = &c->dp_b[k];
    if (!q->pending || !(all || q->stage == stage || q->stage < 0)) continue;
    q->pending = 0;
    rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, q->ev);
  }
  return rc;
}

/* The sum of *x over the ranks of group transport g (as a float pair, hi + lo, like the
 * loss; staged through the backend's memory by rt_allreduce_host_on). */
static int group_sum(ppsrt_ctx *c, ppsrt_transport *g, int rank, double *x) {
  float v[2] = {(float)*x, 0};
  v[1] = (float)(*x - (double)v[0]);
  int rc = rt_allreduce_host_on(c, g, rank, v, 2, PPSRT_SUM);
  if (!rc) *x = (double)v[0] + (double)v[1];
  return rc;
}

/* A model's host values summed over its gradients' group (model.h). */
int ppsrt_replica_allreduce_host(ppsrt_ctx *c, float *buf, size_t n) {
  if (!c->gtr || c->run->ngrad <= 1) return 0;
  return rt_allreduce_host_on(c, c->gtr, c->grank, buf, n, PPSRT_SUM);
}

/* The sum of *x over this device's replicas. */
int rt_replica_sum(ppsrt_ctx *c, double *x) { return group_sum(c, c->gtr, c->grank, x); }
int rt_replica_expert_sum(ppsrt_ctx *c, double *x) { return c->etr ? group_sum(c, c->etr, c->erank, x) : 0; }

/* p's sharded state `shard` (sh_n F32 values in the backend's memory: master, m or v)
 * whole into host memory `out` (numel values): each replica's shard of p (replica u's:
 * the tensor's elements in [u C, (u + 1) C) of its buffer, at most min(C, numel)) in a
 * block of that size of a scratch buffer, all-gathered, and put in place. */
int rt_replica_gather_state(ppsrt_ctx *c, const ppsrt_param *p, const float *shard, float *out) {
  grp G = group_of(c, p->expert);
  size_t D = (size_t)G.n, C = p->chunk, B = C < p->numel ? C : p->numel, off = p->flat_off;
  size_t nb = D * B > 0 ? D * B : 1;
  float *all = NULL, *h = malloc(nb * sizeof *h);
  if (!h) return PPSRT_FAIL(PPSRT_E_NOMEM, "distributed optimizer: out of host memory");
  int rc = c->be->alloc(c->be, nb * sizeof(float), (void **)&all);
  if (rc) { free(h); return rc; }
  float *mine = all + (size_t)G.rank * B;
  if (!(rc = c->be->memset0(c->be, PPSRT_STREAM_COMPUTE, all, nb * sizeof(float))) && p->sh_n)
    rc = c->be->memcpy_async(c->be, PPSRT_STREAM_COMPUTE, mine, shard, p->sh_n * sizeof(float), 0);
  ppsrt_backend *b = gpu(c) ? c->be : NULL;
  if (!rc && !b) rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE);
  if (!rc && G.t) rc = G.t->allgather(G.t, G.rank, b, PPSRT_STREAM_COMPUTE, mine, all, B * sizeof(float));
  if (!rc) rc = c->be->download_f32(c->be, h, (ppsrt_tensor){all, D * B, PPSRT_F32});
  for (size_t u = 0; u < D && !rc; u++) {
    size_t lo = u * C > off ? u * C : off, hi = (u + 1) * C < off + p->numel ? (u + 1) * C : off + p->numel;
    if (hi > lo) memcpy(out + (lo - off), h + u * B, (hi - lo) * sizeof *h);
  }
  c->be->free(c->be, all);
  free(h);
  return rc;
}

/* The iteration's loss (the replica's, the same on its every device): the replicas' mean
 * (--context-parallel: each context rank's loss is the mean over its tokens, the same
 * number on every rank, so the mean over D x C is the batch's). */
int rt_replica_loss(ppsrt_ctx *c, double *loss) {
  int rc = rt_replica_sum(c, loss);
  if (!rc) *loss /= c->run->ngrad;
  return rc;
}

/* ---- --tensor-parallel T: the group of a (replica, device) pair, c->ttr (threads: a
 * transport of T ranks each; MPI: MPI_Comm_split by replica x P + device; NCCL: a
 * communicator of the T ranks, ppsrt_nccl_transport_group; cli.c), whose
 * all-reduces sum the layers' partial products (model_gpt.c gemm_tp_sum) and whose
 * all-gathers put the slices of a checkpoint's tensors together ---- */

/* A model's partial sums (interp's service, model.h): F32 in the backend's memory. */
int ppsrt_tp_allreduce(ppsrt_ctx *c, float *buf, size_t n) {
  if (!c->ttr) return 0;
  return c->ttr->allreduce_f32(c->ttr, c->tp_rank, c->be, PPSRT_STREAM_COMPUTE, buf, n, PPSRT_SUM);
}
int ppsrt_tp_allreduce_max(ppsrt_ctx *c, float *buf, size_t n) {
  if (!c->ttr) return 0;
  return c->ttr->allreduce_f32(c->ttr, c->tp_rank, c->be, PPSRT_STREAM_COMPUTE, buf, n, PPSRT_MAX);
}

int rt_tp_sum(ppsrt_ctx *c, double *x) { return c->ttr ? group_sum(c, c->ttr, c->tp_rank, x) : 0; }
int rt_cp_sum(ppsrt_ctx *c, double *x) { return c->ctr ? group_sum(c, c->ctr, c->cp_rank, x) : 0; }

/* Rank u's slice of p: its ranges are rank t's moved by (u - t) lengths (tp_slice in
 * model_gpt.c cuts every tensor so: base + rank x length). */
static ppsrt_param tp_of_rank(const ppsrt_param *p, int t, int u) {
  ppsrt_param q = *p;
  for (int k = 0; k < q.tp_n; k++) q.tp_lo[k] = p->tp_lo[k] - (size_t)t * p->tp_len[k] + (size_t)u * p->tp_len[k];
  return q;
}

int rt_tp_gather(ppsrt_ctx *c, const ppsrt_param *p, const float *mine, float *full) {
  int T = c->run->ntp;
  size_t n = p->numel;
  float *all = malloc((size_t)T * (n ? n : 1) * sizeof *all);
  if (!all) return PPSRT_FAIL(PPSRT_E_NOMEM, "tensor-parallel gather: out of host memory");
  int rc = 0;
  if (is_nccl(c->ttr)) {   /* NCCL gathers device memory: through a buffer of the backend */
    float *d = NULL;
    size_t bytes = (size_t)T * n * sizeof *d;
    if (!(rc = c->be->alloc(c->be, bytes ? bytes : 4, (void **)&d))) {
      float *dm = d + (size_t)c->tp_rank * n;   /* in place: this rank's block */
      rc = stage_out(c->be, PPSRT_STREAM_COMPUTE, dm, mine, n * sizeof *d);
      if (!rc) rc = c->ttr->allgather(c->ttr, c->tp_rank, c->be, PPSRT_STREAM_COMPUTE, dm, d, n * sizeof *d);
      if (!rc) rc = stage_in(c->be, PPSRT_STREAM_COMPUTE, all, d, bytes);
      c->be->free(c->be, d);
    }
  } else {
    rc = c->ttr->allgather(c->ttr, c->tp_rank, NULL, PPSRT_STREAM_COMPUTE, mine, all, n * sizeof(float));
  }
  if (!rc && full && c->tp_rank == 0)
    for (int u = 0; u < T; u++) {
      ppsrt_param q = tp_of_rank(p, c->tp_rank, u);
      for (size_t i = 0; i < n; i++) full[ppsrt_param_full_index(&q, i) - p->offset] = all[(size_t)u * n + i];
    }
  free(all);
  return rc;
}

/* ---- --sequence-parallel: the all-gathers and reduce-scatters of model_gpt.c's
 * sequence-split residual stream, on the same group and stream as ppsrt_tp_allreduce
 * (the device buffers handed to the transport; threads and MPI stage a GPU's) ---- */

int ppsrt_tp_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes) {
  if (!c->ttr) return send == recv ? 0 : c->be->memcpy_async(c->be, PPSRT_STREAM_COMPUTE, recv, send, bytes, 0);
  return c->ttr->allgather(c->ttr, c->tp_rank, c->be, PPSRT_STREAM_COMPUTE, send, recv, bytes);
}

int ppsrt_tp_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count) {
  if (!c->ttr)
    return send == recv ? 0 : c->be->memcpy_async(c->be, PPSRT_STREAM_COMPUTE, recv, send, count * sizeof(float), 0);
  return c->ttr->reduce_scatter_f32(c->ttr, c->tp_rank, c->be, PPSRT_STREAM_COMPUTE, send, recv, count, PPSRT_SUM);
}
