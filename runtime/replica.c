/* replica.c: --data-parallel D: one pipeline replica's view of the world transport.
 *
 * D replicas of a P-device pipeline run as P x D ranks of one transport (threads in one
 * process, or mpirun -np P*D); replica r's device d is world rank r*P + d. Everything
 * in the runtime that speaks to "the transport" (the interpreter's sends and receives,
 * the per-iteration statistics, --check, --val-data, --save, --clip-grad) gets the view
 * of its own replica: ranks 0..P-1, peers mapped into the replica, and collectives over
 * the replica's P ranks only. The world transport has collectives over all ranks only,
 * so a replica's all-reduce of n values is a world all-reduce of D x n values in which
 * each replica fills its own slot (zeros, or -inf for MAX, elsewhere) and reads it back;
 * a broadcast is D world broadcasts, one per replica's root. Every replica therefore
 * makes the same collective calls in the same order (they run the same program).
 *
 * The gradients of a device are averaged over its D replicas on a transport of those D
 * ranks alone (c->gtr: threads, or MPI_Comm_split by device), right after the
 * device's last W of the iteration (rt_replica_grads, called by interp.c).
 *
 * What it does not: host buffers only (the CPU backend: --data-parallel refuses
 * --backend cuda); no collective lane (vocabulary schedules are refused). */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct view { ppsrt_transport *w; int P, D, r; } view;

static int W(ppsrt_transport *t, int rank) { view *v = t->impl; return v->r * v->P + rank; }

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
static int v_allreduce(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, float *buf, size_t n, ppsrt_redop op) {
  view *v = t->impl;
  size_t all = (size_t)v->D * n;
  float *s = malloc((all ? all : 1) * sizeof *s);
  if (!s) return PPSRT_FAIL(PPSRT_E_NOMEM, "data-parallel all-reduce: out of host memory");
  for (size_t i = 0; i < all; i++) s[i] = op == PPSRT_MAX ? -INFINITY : 0.0f;
  memcpy(s + (size_t)v->r * n, buf, n * sizeof *buf);
  int rc = v->w->allreduce_f32(v->w, W(t, rank), b, stream, s, all, op);
  if (!rc) memcpy(buf, s + (size_t)v->r * n, n * sizeof *buf);
  free(s);
  return rc;
}
static int v_broadcast(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int root) {
  view *v = t->impl;
  void *tmp = malloc(bytes ? bytes : 1);
  if (!tmp) return PPSRT_FAIL(PPSRT_E_NOMEM, "data-parallel broadcast: out of host memory");
  int rc = 0;
  for (int q = 0; q < v->D && !rc; q++) {
    void *at = q == v->r ? buf : tmp;   /* replica q's root sends its buffer; the others receive into a scratch one */
    rc = v->w->broadcast(v->w, W(t, rank), b, stream, at, bytes, q * v->P + root);
  }
  free(tmp);
  return rc;
}
static int v_barrier(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->barrier(v->w, W(t, rank)); }
static void v_abort(ppsrt_transport *t, int rank, const char *why) { view *v = t->impl; v->w->abort(v->w, W(t, rank), why); }
static void v_destroy(ppsrt_transport *t) { free(t->impl); free(t); }
static int v_group_begin(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->group_begin(v->w, W(t, rank)); }
static int v_group_end(ppsrt_transport *t, int rank) { view *v = t->impl; return v->w->group_end(v->w, W(t, rank)); }

int rt_replica_view(ppsrt_transport *world, int P, int D, int r, ppsrt_transport **out) {
  ppsrt_transport *t = calloc(1, sizeof *t);
  view *v = calloc(1, sizeof *v);
  if (!t || !v) { free(t); free(v); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  *v = (view){world, P, D, r};
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

/* Right after the device's last W (or BW) of the iteration: its gradients become the
 * mean over its replicas, by an all-reduce among those D ranks only (c->gtr, this
 * device's replica group), so it overlaps what the other devices still run (their
 * cool-down). Staged through one host buffer of the device's parameters. */
int rt_replica_grads(ppsrt_ctx *c) {
  ppsrt_model *m = c->model;
  int D = c->run->nrep, rc;
  size_t total = 0, at = 0;
  for (int k = 0; k < m->nparams; k++) total += m->params[k].numel;
  float *g = malloc((total ? total : 1) * sizeof *g);
  if (!g) return PPSRT_FAIL(PPSRT_E_NOMEM, "data-parallel: out of host memory");
  rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE);
  for (int k = 0; k < m->nparams && !rc; k++) {
    rc = c->be->download_f32(c->be, g + at, (ppsrt_tensor){m->params[k].grad, m->params[k].numel, PPSRT_F32});
    at += m->params[k].numel;
  }
  if (!rc) rc = c->gtr->allreduce_f32(c->gtr, c->replica, NULL, PPSRT_STREAM_COMPUTE, g, total, PPSRT_SUM);
  at = 0;
  for (int k = 0; k < m->nparams && !rc; k++) {
    ppsrt_param *p = &m->params[k];
    for (size_t i = 0; i < p->numel; i++) g[at + i] /= (float)D;
    rc = c->be->upload_f32(c->be, (ppsrt_tensor){p->grad, p->numel, PPSRT_F32}, g + at);
    at += p->numel;
  }
  free(g);
  return rc;
}

/* The iteration's loss (the replica's, the same on its every device): the replicas' mean. */
int rt_replica_loss(ppsrt_ctx *c, double *loss) {
  float l[2] = {(float)*loss, 0};
  int rc = c->gtr->allreduce_f32(c->gtr, c->replica, NULL, PPSRT_STREAM_COMPUTE, l, 2, PPSRT_SUM);
  if (!rc) *loss = (double)l[0] / c->run->nrep;
  return rc;
}
