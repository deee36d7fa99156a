/* coll_lane.c: asynchronous vocabulary collectives (the runtime side of `vocab async`).
 * Every device gets a collective lane: a thread that runs the model's collectives one
 * after the other, in the device's program order, on a second transport of the same
 * ranks (transport.h `dup`: threads, a second in-process transport; MPI, a duplicate
 * communicator), as `ppsc sim` models the lane: a COLL op is issued at no cost (queued
 * with its microbatch), the lane starts it once the previous one ended, and only its
 * consumers wait for it (the simulator's list: F(i, 0) waits for input_fwd(i); T(i) for
 * output_fwd(i); the last stage's B/BW(i) for output_bwd(i) in Vocab-1, output_fwd(i)
 * in Vocab-2; IB(i) for input_bwd(i)). Issue is the event in (what the producing pass
 * wrote is complete: passes are synchronous on the CPU backend), completion the event
 * out. S(i) stays where it is, on the device: its broadcast of LN_f(y) from the last
 * stage's device is a barrier on the run's transport, as the simulator times it.
 * The lane is drained at the end of every iteration, before the statistics.
 * Used wherever the run's transport has a dup (cli.c), on either backend: threads (a
 * second in-process transport), MPI (MPI_Comm_dup, MPI_THREAD_MULTIPLE), NCCL in one
 * process (a second set of collective communicators, or a second copy channel) and NCCL
 * over MPI (a second communicator from another ncclUniqueId round, made on the main
 * thread before the device threads start). On the GPU the lane thread's work (the
 * model's small kernels, the NCCL calls, or the threads and MPI transports' staging
 * copies through host memory, with their host waits on the lane stream only) goes to
 * the backend's lane stream
 * (backend.h PPSRT_OVERLAP_LANE maps COMPUTE to it on the lane thread, as an overlapped
 * pair's second pass maps it to the second compute stream), and issue and completion
 * are events: at issue an event is recorded on the device's compute stream, which the
 * lane stream waits for before the collective reads the producer's buffers (event in);
 * after the collective an event is recorded on the lane stream, which the consumer's
 * compute stream waits for (cudaStreamWaitEvent, no host wait: event out). The host
 * side of a consumer waits only until the lane thread has issued the collective (NCCL;
 * the threads and MPI transports stage through host memory, so there the lane thread
 * has waited for the collective itself, and so does the consumer's host side); the
 * drain makes the compute stream wait for the lane stream's last event. The CUDA
 * allocator keeps the lane stream out of its reuse waits (cuda_backend.c free_any), and
 * a block whose events the lane thread saw complete is queried again by the thread
 * that takes it (for the emulator's per-thread clocks).
 * Elsewhere (a dup that fails: an MPI without MPI_THREAD_MULTIPLE, a failed NCCL
 * bootstrap of the lane's communicator, on every rank alike; or --blocking-collectives)
 * the collectives run where they are issued, blocking.
 * What it does not: on the CPU backend no second compute stream (the lane's small local
 * steps run on its own thread, the CPU backend's allocator takes a lock while a lane
 * exists); a consumer that is the second pass of an overlapped F&B pair is ordered
 * through the compute stream only (the pair's fork precedes the wait). */
#include "config.h"
#include "rt.h"
#include "cpu_backend.h"
#include <stdlib.h>
#include <string.h>

struct rt_lane {
  ppsrt_ctx *c;
  ppsrt_transport *tr;   /* the run's lane transport */
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int cap;               /* room for the collectives of one iteration */
  int *qc, *qm, *qop;    /* [cap]: issued collective, microbatch, op index */
  int nissued, ndone, quit;
  int *seq;              /* [5 * nmb]: 1 + issue index of (coll, mb) this iteration, 0 not issued */
  double *t0, *t1;       /* [cap]: when the lane ran each (for --trace; GPU: issued) */
  ppsrt_event **ein, **eout;   /* [cap], GPU backends (backend overlap hook) only: events in and out */
  int status;            /* first failure of the lane */
  char errmsg[2048];
};

static int lane_allreduce(ppsrt_comm *cm, float *buf, size_t n, ppsrt_redop op) {
  rt_lane *L = cm->impl;
  return L->tr->allreduce_f32(L->tr, L->c->rank, L->c->be, PPSRT_STREAM_COMPUTE, buf, n, op);
}
static int lane_broadcast(ppsrt_comm *cm, void *buf, size_t bytes, int root) {
  rt_lane *L = cm->impl;
  return L->tr->broadcast(L->tr, L->c->rank, L->c->be, PPSRT_STREAM_COMPUTE, buf, bytes, root);
}

static void *lane_main(void *arg) {
  rt_lane *L = arg;
  ppsrt_ctx *c = L->c;
  ppsrt_error_set_rank(c->rank);
  ppsrt_backend *be = c->be;
  if (L->ein && (L->status = be->overlap(be, PPSRT_OVERLAP_LANE)))   /* COMPUTE: the lane stream, here */
    snprintf(L->errmsg, sizeof L->errmsg, "collective lane: %s", ppsrt_last_error());
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->quit && L->ndone == L->nissued) pthread_cond_wait(&L->cv, &L->mu);
    if (L->ndone == L->nissued) break;   /* quit, nothing left */
    int k = L->ndone, rc = L->status;
    pthread_mutex_unlock(&L->mu);
    double a = rt_now();
    if (!rc) {   /* after a failure the rest only count as done: every waiter sees status */
      ppsrt_comm cm = {c->rank, L->tr->nranks, lane_allreduce, lane_broadcast, L};
      /* GPU: after what the producer queued on the compute stream (event in), and the
       * consumer's compute stream after this (event out) */
      if (L->ein) rc = be->stream_wait_event(be, PPSRT_STREAM_COMPUTE, L->ein[k]);
      if (!rc) rc = c->model->collective(c->model, c, L->qc[k], L->qm[k], &cm);
      if (!rc && L->eout) rc = be->event_record(be, L->eout[k], PPSRT_STREAM_COMPUTE);
    }
    double b = rt_now();
    pthread_mutex_lock(&L->mu);
    L->t0[k] = a; L->t1[k] = b;
    if (rc && !L->status) {
      char opbuf[96];
      rt_format_op(c->run->prog, &c->ops[L->qop[k]], opbuf, sizeof opbuf);
      snprintf(L->errmsg, sizeof L->errmsg, "collective lane: %s: %s", opbuf, ppsrt_last_error());
      L->status = rc;
      pthread_mutex_unlock(&L->mu);
      /* the other devices' lanes and threads must not wait for this one */
      L->tr->abort(L->tr, c->rank, L->errmsg);
      c->tr->abort(c->tr, c->rank, L->errmsg);
      pthread_mutex_lock(&L->mu);
    }
    L->ndone++;
    pthread_cond_broadcast(&L->cv);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

static void lane_free(rt_lane *L) {
  for (int k = 0; k < L->cap && L->ein; k++)
    if (L->ein[k]) L->c->be->event_destroy(L->c->be, L->ein[k]);
  for (int k = 0; k < L->cap && L->eout; k++)
    if (L->eout[k]) L->c->be->event_destroy(L->c->be, L->eout[k]);
  free(L->ein); free(L->eout);
  free(L->qc); free(L->qm); free(L->qop); free(L->t0); free(L->t1); free(L->seq); free(L);
}

int rt_lane_start(ppsrt_ctx *c) {
  rt_lane *L = calloc(1, sizeof *L);
  if (!L) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  L->c = c;
  L->tr = c->lane_tr;
  L->cap = 4 * c->nmb + 1;
  L->qc = malloc((size_t)L->cap * sizeof *L->qc);
  L->qm = malloc((size_t)L->cap * sizeof *L->qm);
  L->qop = malloc((size_t)L->cap * sizeof *L->qop);
  L->t0 = calloc((size_t)L->cap, sizeof *L->t0);
  L->t1 = calloc((size_t)L->cap, sizeof *L->t1);
  L->seq = calloc((size_t)5 * c->nmb + 1, sizeof *L->seq);
  if (!L->qc || !L->qm || !L->qop || !L->t0 || !L->t1 || !L->seq) {
    lane_free(L);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  }
  ppsrt_backend *be = c->be;
  if (be->overlap) {   /* a GPU backend: events in and out, the lane stream */
    L->ein = calloc((size_t)L->cap, sizeof *L->ein);
    L->eout = calloc((size_t)L->cap, sizeof *L->eout);
    if (!L->ein || !L->eout) {
      lane_free(L);
      return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
    }
    for (int k = 0; k < L->cap; k++) {
      int rc = be->event_create(be, &L->ein[k]);
      if (!rc) rc = be->event_create(be, &L->eout[k]);
      if (rc) {
        lane_free(L);
        return rc;
      }
    }
  } else {
    ppsrt_cpu_backend_share(be);
  }
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv, NULL);
  if (pthread_create(&L->th, NULL, lane_main, L)) {
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    lane_free(L);
    return PPSRT_FAIL(PPSRT_E_BACKEND, "cannot start the collective lane thread");
  }
  L->started = 1;
  c->lane = L;
  return 0;
}

/* Ends the lane thread once what was issued has run (after a failure the transports
 * are aborted, so that is quick). */
void rt_lane_stop(ppsrt_ctx *c) {
  rt_lane *L = c->lane;
  if (!L) return;
  pthread_mutex_lock(&L->mu);
  L->quit = 1;
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
  if (L->started) pthread_join(L->th, NULL);
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv);
  lane_free(L);
  c->lane = NULL;
}

static int lane_error(rt_lane *L) {
  return PPSRT_FAIL(L->status, "%s", L->errmsg);
}

/* A COLL op (index i): queued for the lane, the device goes on. */
int rt_lane_issue(ppsrt_ctx *c, int i) {
  rt_lane *L = c->lane;
  const ppsrt_op *op = &c->ops[i];
  if (op->coll < PPSRT_COLL_INPUT_FWD || op->coll > PPSRT_COLL_INPUT_BWD || op->mb < 0 || op->mb >= c->nmb)
    return PPSRT_FAIL(PPSRT_E_USAGE, "bad vocabulary collective %d of microbatch %d", op->coll, op->mb);
  int *sq = &L->seq[op->coll * c->nmb + op->mb];
  pthread_mutex_lock(&L->mu);
  int rc = 0;
  if (L->status) rc = lane_error(L);
  else if (*sq || L->nissued >= L->cap) rc = PPSRT_FAIL(PPSRT_E_USAGE, "collective issued twice in one iteration");
  /* event in: what the device queued so far (the producer) is done before the lane reads */
  else if (L->ein && (rc = c->be->event_record(c->be, L->ein[L->nissued], PPSRT_STREAM_COMPUTE))) {
  } else {
    L->qc[L->nissued] = op->coll;
    L->qm[L->nissued] = op->mb;
    L->qop[L->nissued] = i;
    *sq = ++L->nissued;
    pthread_cond_broadcast(&L->cv);
  }
  pthread_mutex_unlock(&L->mu);
  return rc;
}

/* Which collective op consumes (ppsc's sim.c coll_needs), or 0. */
static int consumed(const ppsrt_ctx *c, const ppsrt_op *op) {
  switch (op->kind) {
  case PPSRT_OP_F: return op->stage == 0 ? PPSRT_COLL_INPUT_FWD : 0;
  case PPSRT_OP_T: return PPSRT_COLL_OUTPUT_FWD;
  case PPSRT_OP_IB: return PPSRT_COLL_INPUT_BWD;
  case PPSRT_OP_B: case PPSRT_OP_BW:
    if (op->stage != c->nstage - 1) return 0;
    return c->run->prog->vocab_mode == 1 ? PPSRT_COLL_OUTPUT_BWD : PPSRT_COLL_OUTPUT_FWD;
  default: return 0;
  }
}

/* Before op i: waits for the collective it consumes, if one was issued. *waited: the
 * wait blocked (for the trace's wait track). */
int rt_lane_consume(ppsrt_ctx *c, int i, int *waited) {
  rt_lane *L = c->lane;
  const ppsrt_op *op = &c->ops[i];
  int coll = consumed(c, op);
  *waited = 0;
  if (!coll || op->mb < 0 || op->mb >= c->nmb) return 0;
  int s = L->seq[coll * c->nmb + op->mb];
  if (!s) return 0;
  pthread_mutex_lock(&L->mu);
  while (L->ndone < s && !L->status) { *waited = 1; pthread_cond_wait(&L->cv, &L->mu); }
  int rc = L->status ? lane_error(L) : 0;
  pthread_mutex_unlock(&L->mu);
  /* GPU: the lane has issued it; the compute stream waits for it (event out) */
  if (!rc && L->eout) rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, L->eout[s - 1]);
  return rc;
}

/* End of an iteration: waits for every collective issued, adds the lane's records to
 * the trace (track 4), and starts the next iteration's numbering. */
int rt_lane_drain(ppsrt_ctx *c) {
  rt_lane *L = c->lane;
  pthread_mutex_lock(&L->mu);
  while (L->ndone < L->nissued) pthread_cond_wait(&L->cv, &L->mu);
  int rc = L->status ? lane_error(L) : 0;
  int n = L->nissued;
  L->nissued = L->ndone = 0;
  pthread_mutex_unlock(&L->mu);
  if (rc) return rc;
  /* GPU: the compute stream after the lane stream's last collective (what the iteration's
   * end reads: the loss, the next iteration's buffers) */
  if (n && L->eout && (rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, L->eout[n - 1]))) return rc;
  for (int k = 0; k < n && c->run->o.trace; k++)
    if ((rc = rt_event_add(c, L->t0[k] - c->run->epoch, L->t1[k] - c->run->epoch, L->qop[k], 4))) return rc;
  memset(L->seq, 0, ((size_t)5 * c->nmb + 1) * sizeof *L->seq);
  return 0;
}
