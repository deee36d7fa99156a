/* dp.c: data parallelism in `ppsc sim`, and the tied embeddings' exchange.
 *
 * hardware { data_parallel = D; dp_bandwidth = B; dp_latency = a; dp_stage_bytes = G; }
 * runs D replicas of the pipeline, each on its own part of the global batch (D m
 * microbatches an iteration). After the iteration's last W (or BW) of a stage on the
 * device holding it, that stage's gradients are all-reduced across its D replicas, on
 * a stream of their own, as the runtime does it on the CUDA backend (runtime/replica.c):
 * the all-reduce overlaps whatever the pipeline still runs (the other stages' cool-down,
 * on this device and the others). A device with several stages (interleaved, V shapes)
 * runs one all-reduce per stage, one at a time in the order their last W end (one
 * stream: NCCL serialises them). The iteration ends when the pipeline's last op and the
 * last all-reduce have ended (the optimizer waits for both); `exposed` is what the
 * all-reduces add to the pipeline's makespan.
 *
 * Time of one stage's all-reduce (a ring over D ranks, as NCCL's ring algorithm): each
 * rank sends and receives 2(D-1)/D of the G gradient bytes in 2(D-1) steps,
 *   T = 2(D-1)/D x G / B + 2(D-1) x a
 * with B = dp_bandwidth (bytes/s each way on each device's link to its replicas;
 * default peer_bandwidth) and a = dp_latency (seconds a step, default 0). G is the
 * stage's parameters (costmodel.c, from model { }) times 4 bytes (the runtime
 * all-reduces F32 gradients), or dp_stage_bytes when given (every stage the same; it
 * is needed when model { } does not give the parameters).
 *
 * Links: the all-reduces use a network of their own (data parallelism across nodes,
 * Megatron's usual layout: tensor and pipeline parallelism inside a node or over their
 * own links, data parallelism between nodes); they share no link with the pipeline's
 * point-to-point transfers (TC) or the host copies. The times are seconds: a file that
 * gives its costs (`cost { }`) should give them in seconds too.
 *
 * Distributed optimizer (hardware distributed_optimizer = 1; the runtime's
 * --distributed-optimizer, Megatron's --use-distributed-optimizer, ZeRO-1): each
 * replica keeps and updates 1/D of each stage's optimizer state (costmodel.c shards
 * the static bytes). At the point of the all-reduce above, on the same stream, each
 * stage's F32 gradients are reduce-scattered instead (a ring: each rank sends (D-1)/D
 * of them in D-1 steps, half an all-reduce):
 *   T_rs = (D-1)/D x G / B + (D-1) x a.
 * Once every device is done with its last pipeline op, its stages' reduce-scatters (and
 * the tied exchange below): the runtime's statistics of the iteration, which every
 * device sends, precede the optimizer step. Then each device's optimizer step (no time
 * modelled) and the all-gathers of its stages' updated weights, one after another in
 * stage order:
 *   T_ag = (D-1)/D x Wb / B + (D-1) x a,
 * Wb = the stage's parameters x dtype_bytes d (G / 4 x d: with dp_stage_bytes, d =
 * model dtype_bytes, default 2 as in costmodel.c). The device's iteration ends with its
 * last all-gather; the iteration is the latest over the devices: one iteration alone
 * (the last of a run waits for its all-gathers).
 * The steady state (steady_state): on a GPU the runtime overlaps the all-gathers with
 * the next iteration (replica.c rt_replica_gather_weights, rt_replica_weights_wait):
 * it starts when every device is done (`next`), and each stage's first pass waits for
 * its stage's all-gather, every pass of a device for its vocabulary rows'. The
 * pipeline is run again by the executor with those release times (exec.h ExecModel
 * release, relative to the iteration's start), the collectives put after that run as
 * above, and again with the release times that gives, until they repeat (at most
 * DP_STEADY_ROUNDS runs; one when the delay shifts the whole iteration): the period
 * from one iteration's start to the next's is the steady iteration. Only compute
 * passes wait (a send or receive of the stage does not).
 * Vocabulary-parallel schedules: each device also holds its rows of the input and output
 * layers (and device 0 the position table; costmodel.c vocab_params), whose gradients
 * are complete only when the device's last op ends (its last T or IB): they are
 * all-reduced (reduce-scattered) over the device's replicas then, behind its stages'
 * collectives on the same stream, as the runtime does (replica.c rt_replica_end), and
 * under the distributed optimizer all-gathered before the stages' all-gathers (the
 * runtime's first buffer, stage -1).
 * What it does not: optimizer time, gradient bucketing within a stage, the CPU
 * backend's blocking all-gathers in the steady state (it is the GPU's).
 * Tied embeddings on two devices (costmodel.h TieModel): once both devices have ended
 * their last op and their gradient collectives above (not the all-gathers), they
 * exchange the matrix's F32 gradient point to point, bytes / peer_bandwidth, as the
 * runtime's tie_sync does before the optimizer step; under the distributed optimizer
 * their all-gathers follow it. It is simulated with or without data parallelism. Under
 * the distributed optimizer the runtime gives that matrix (and its copy) buffers of
 * their own on both devices (model.h `tied`), so stage 0 and stage S-1 each run one
 * more reduce-scatter and all-gather, of the matrix's 4 h V / T bytes (its weights'
 * h V / T x d), right after their other parameters' on the same stream: dp_derive
 * splits those stages' bytes and adds the second ring's time (DpModel tbytes; one more
 * ring latency, (D-1) a, each; not with dp_stage_bytes, which says nothing of the
 * matrix). The buffers' padding to a multiple of D is not counted.
 * Context parallelism (hardware context_parallel = C > 1, costmodel.c): the gradients
 * of a stage are reduced over R = D x C GPUs (the C GPUs of each replica's group that
 * hold the same layers with those of the other replicas): every ring time above spans
 * R (D -> R in the formulas), the distributed optimizer keeps 1/R a GPU, and with D = 1
 * the C GPUs still all-reduce (or reduce-scatter and all-gather) their gradients here,
 * at dp_bandwidth, else cp_bandwidth, else peer_bandwidth (dp_derive).
 * Expert parallelism (hardware expert_parallel = X > 1, costmodel.c): the experts' part
 * of a stage's gradients (DpModel ebytes) is reduced over the (D/X) x C GPUs of the same
 * EP rank (eranks), in a ring of its own after the rest's, on the same stream: the
 * stage's time (and all-gather time) is the sum of the two rings.
 * The keys are read at elaboration, with the ring time of each stage, by costmodel.c
 * (dp_derive: the hardware model, which the front end may call); this file only adds
 * the all-reduces to a simulation and reports them. */
#include "dp.h"
#include "report.h"
#include <math.h>
#include <string.h>

/* x's arrays for model m (x->m, x->tie set). */
static void result_alloc(Arena *a, const IrSchedule *s, DpResult *x) {
  const DpModel *m = x->m;
  size_t S = (size_t)s->nstage, P = (size_t)s->ndev;
  if (!m) return;
  x->ready = arena_alloc(a, sizeof(double) * S);
  x->start = arena_alloc(a, sizeof(double) * S);
  x->end = arena_alloc(a, sizeof(double) * S);
  if (m->dist) {
    x->gstart = arena_alloc(a, sizeof(double) * S);
    x->gend = arena_alloc(a, sizeof(double) * S);
  }
  if (m->vbytes) {
    x->vstart = arena_alloc(a, sizeof(double) * P);
    x->vend = arena_alloc(a, sizeof(double) * P);
    if (m->dist) {
      x->vgstart = arena_alloc(a, sizeof(double) * P);
      x->vgend = arena_alloc(a, sizeof(double) * P);
    }
  }
}

/* The collectives after the pipeline run r (last[d]: device d's last op end; x's
 * arrays allocated, x->iteration the run's makespan): fills their times and
 * x->iteration. Returns when the next iteration starts: every device done with its
 * last op, its gradient collectives and the tied exchange (the optimizer step, untimed,
 * and the statistics every device sends at the end of an iteration, which wait for
 * all of them), the all-gathers not included. */
static double collectives(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimResult *r, const double *last, DpResult *x) {
  const DpModel *m = x->m;
  const TieModel *tm = x->tie;
  int S = s->nstage, P = s->ndev;
  /* each device's end of its last op and of its gradient collectives */
  double *after = arena_alloc(a, sizeof(double) * (size_t)P);
  for (int d = 0; d < P; d++) after[d] = last[d];
  if (m) {
    /* each stage's gradients are complete at the end of its last W or BW (a stage
     * without one: at its device's last op) */
    for (int st = 0; st < S; st++) {
      int d = s->stages[st].device, found = 0;
      double t = 0;
      for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
        const IrOp *op = ana_op(s, ix, g);
        if ((op->kind == IR_W || op->kind == IR_BW) && op->stage == st) { t = found ? fmax(t, r->end[g]) : r->end[g]; found = 1; }
      }
      x->ready[st] = found ? t : last[d];
    }
    /* per device, its stages' all-reduces one at a time, in the order they become ready
     * (ties: the lower stage first) */
    uint8_t *done = arena_alloc(a, (size_t)S + 1);
    for (int d = 0; d < P; d++) {
      double free_at = 0;
      for (;;) {
        int next = -1;
        for (int st = 0; st < S; st++)
          if (s->stages[st].device == d && !done[st] && (next < 0 || x->ready[st] < x->ready[next])) next = st;
        if (next < 0) break;
        done[next] = 1;
        x->start[next] = fmax(x->ready[next], free_at);
        x->end[next] = x->start[next] + m->time[next];
        free_at = x->end[next];
        if (x->end[next] > x->iteration) x->iteration = x->end[next];
      }
      if (m->vbytes) {   /* the vocabulary rows: after the device's last op, behind its stages' */
        x->vstart[d] = fmax(last[d], free_at);
        x->vend[d] = free_at = x->vstart[d] + m->vtime[d];
        if (free_at > x->iteration) x->iteration = free_at;
      }
      after[d] = fmax(after[d], free_at);
    }
  }
  if (tm) {   /* the tied matrix's two holders, once both are done, exchange its gradient */
    x->tie_start = fmax(after[tm->dev[0]], after[tm->dev[1]]);
    x->tie_end = after[tm->dev[0]] = after[tm->dev[1]] = x->tie_start + tm->time;
    if (x->tie_end > x->iteration) x->iteration = x->tie_end;
  }
  double next = 0;
  for (int d = 0; d < P; d++) next = fmax(next, after[d]);
  for (int d = 0; m && m->dist && d < P; d++) {
    /* distributed optimizer: after all of that on every device (the iteration's
     * statistics, which every device sends, precede the optimizer step), the optimizer
     * step (untimed), then the device's all-gathers in the runtime's buffer order:
     * its vocabulary rows (stage -1) first, its stages in stage order */
    double t = next;
    if (m->vbytes) {
      x->vgstart[d] = t;
      x->vgend[d] = t = t + m->vwtime[d];
      if (t > x->iteration) x->iteration = t;
    }
    for (int st = 0; st < S; st++) {
      if (s->stages[st].device != d) continue;
      x->gstart[st] = t;
      x->gend[st] = t = t + m->wtime[st];
      if (t > x->iteration) x->iteration = t;
    }
  }
  return next;
}

/* Release times of the next iteration, which starts at `next`: stage st's passes wait
 * for its all-gather (gend), every pass of device d for its vocabulary rows' (vgend,
 * or NULL). Returns whether any is after the start; *moved: whether one changed. */
static int releases(const IrSchedule *s, const double *gend, const double *vgend, double next, double *rel, double *reld, int *moved) {
  int any = 0;
  for (int st = 0; st < s->nstage; st++) {
    double v = fmax(0, gend[st] - next);
    if (fabs(v - rel[st]) > 1e-12 * fmax(1, v)) *moved = 1;
    rel[st] = v;
    any |= v > 0;
  }
  for (int d = 0; vgend && d < s->ndev; d++) {
    double v = fmax(0, vgend[d] - next);
    if (fabs(v - reld[d]) > 1e-12 * fmax(1, v)) *moved = 1;
    reld[d] = v;
    any |= v > 0;
  }
  return any;
}

/* The distributed optimizer's all-gathers overlapping the next iteration, as the runtime
 * runs them on a GPU (replica.c rt_replica_gather_weights, rt_replica_weights_wait):
 * the iteration after this one starts at `next` and each stage's passes wait for the
 * stage's all-gather (every pass of a device for its vocabulary rows'). The pipeline is
 * simulated again with those release times, its collectives after it, and again with
 * the all-gathers that gives, until the release times repeat (at most
 * DP_STEADY_ROUNDS runs): x->steady is the period of that steady state, from one
 * iteration's start to the next's. */
enum { DP_STEADY_ROUNDS = 8 };
static void steady_state(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, DpResult *x, double next) {
  const DpModel *m = x->m;
  int S = s->nstage, P = s->ndev;
  double *rel = arena_alloc(a, sizeof(double) * (size_t)S), *reld = m->vbytes ? arena_alloc(a, sizeof(double) * (size_t)P) : NULL;
  double *gend = arena_alloc(a, sizeof(double) * (size_t)S), *vgend = m->vbytes ? arena_alloc(a, sizeof(double) * (size_t)P) : NULL;
  memcpy(gend, x->gend, sizeof(double) * (size_t)S);
  if (vgend) memcpy(vgend, x->vgend, sizeof(double) * (size_t)P);
  x->steady = next;
  for (int round = 0; round < DP_STEADY_ROUNDS; round++) {
    int moved = 0;
    if (!releases(s, gend, vgend, next, rel, reld, &moved) || (round > 0 && !moved)) break;
    Arena t = {0};
    SimResult r2 = {0};
    if (exec_timed_release(&t, s, ix, L, &r2, exec_async(s), rel, reld) != 1) { arena_free(&t); break; }
    double *last = arena_alloc(&t, sizeof(double) * (size_t)P);
    for (int d = 0; d < P; d++)
      for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) last[d] = fmax(last[d], r2.end[g]);
    DpResult y = {.m = m, .tie = x->tie};
    result_alloc(&t, s, &y);
    next = collectives(&t, s, ix, &r2, last, &y);
    memcpy(gend, y.gend, sizeof(double) * (size_t)S);
    if (vgend) memcpy(vgend, y.vgend, sizeof(double) * (size_t)P);
    arena_free(&t);
    x->steady = next;
    x->steady_runs = round + 1;
  }
  x->steady_wait = x->steady - x->next;
}

DpResult *dp_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const SimResult *r) {
  const DpModel *m = s->derived.dp;
  const TieModel *tm = s->derived.tie;
  if ((!m && !tm) || !r || !r->ok) return NULL;
  int P = s->ndev;
  DpResult *x = arena_alloc(a, sizeof *x);
  x->m = m;
  x->tie = tm;
  x->iteration = r->makespan;
  result_alloc(a, s, x);
  double *last = arena_alloc(a, sizeof(double) * (size_t)P);
  for (int d = 0; d < P; d++) last[d] = r->dev[d].last;
  x->next = collectives(a, s, ix, r, last, x);
  if (m && m->dist && L) steady_state(a, s, ix, L, x, x->next);
  x->exposed = x->iteration - r->makespan;
  return x;
}

/* The first words of the section: the replicas, and with context parallelism (C > 1)
 * the gradient group of D x C GPUs every collective spans (R in the ring times). */
static void group_head(StrBuf *b, const DpModel *m) {
  if (m->C > 1) sb_printf(b, "\ndata parallel %d x context parallel %d = R = %d GPUs a gradient group", m->D, m->C, m->ranks);
  else sb_printf(b, "\ndata parallel %d replicas", m->D);
}

/* under expert parallelism: the experts' part of each stage's bytes and its own group */
static void expert_note(StrBuf *b, const DpResult *x) {
  const DpModel *m = x->m;
  if (!m->ebytes) return;
  if (m->eranks == 1) {   /* D = X, C = 1: each EP rank alone in its expert-data-parallel group */
    sb_printf(b, "  expert parallelism: of each stage's bytes the experts' (stage 0: %.4g) have no collective: each EP rank is the only\n"
                 "  one of its expert-data-parallel group (D/X = 1); the times above are the rest's\n", m->ebytes[0]);
    return;
  }
  sb_printf(b, "  expert parallelism: of each stage's bytes the experts' (stage 0: %.4g) are %s over the %d GPU%s of the same EP\n"
               "  rank (D/X%s), a ring of their own after the rest's; the times above are the sums\n",
            m->ebytes[0], m->dist ? "reduce-scattered (and all-gathered)" : "all-reduced", m->eranks, m->eranks == 1 ? "" : "s",
            m->C > 1 ? " x C" : "");
}

/* under the distributed optimizer: the reduce-scatters and all-gathers */
static void dist_report_text(StrBuf *b, const IrSchedule *s, const DpResult *x) {
  const DpModel *m = x->m;
  const char *n = m->C > 1 ? "R" : "D", *who = m->C > 1 ? "group" : "replicas", *one = m->C > 1 ? "GPU" : "replica";
  group_head(b, m);
  sb_printf(b, ", distributed optimizer: each stage's F32 gradients reduce-scattered over its %s\n"
               "  after its last W, each %s updating 1/%d of the optimizer state, the weights all-gathered after the device's\n"
               "  last op and reduce-scatters; ring time (%s-1)/%s x bytes / %.4g B/s + (%s-1) x %.4g s each, on each device's own link\n",
            who, one, m->ranks, n, n, m->bandwidth, n, m->latency);
  sb_printf(b, "%6s %6s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "stage", "device", "bytes", "ready", "rs_start", "rs_end",
            "rs_time", "ag_bytes", "ag_start", "ag_end", "ag_time");
  for (int st = 0; st < s->nstage; st++)
    sb_printf(b, "%6d %6d %10.4g %10.6g %10.6g %10.6g %10.6g %10.4g %10.6g %10.6g %10.6g\n", st, s->stages[st].device, m->bytes[st],
              x->ready[st], x->start[st], x->end[st], m->time[st], m->wbytes[st], x->gstart[st], x->gend[st], m->wtime[st]);
  for (int d = 0; m->vbytes && d < s->ndev; d++)
    sb_printf(b, "%6s %6d %10.4g %10s %10.6g %10.6g %10.6g %10.4g %10.6g %10.6g %10.6g\n", "vocab", d, m->vbytes[d], "last op",
              x->vstart[d], x->vend[d], m->vtime[d], m->vwbytes[d], x->vgstart[d], x->vgend[d], m->vwtime[d]);
  expert_note(b, x);
  if (m->tbytes)
    sb_printf(b, "  tied embeddings: stages 0 and %d keep the matrix (%.4g bytes of F32 gradients) in buffers of their own: each runs\n"
                 "  one more reduce-scatter and all-gather, after its other parameters'; rs_time and ag_time are the two rings'\n",
              s->nstage - 1, m->tbytes[0]);
  sb_puts(b, "iteration   ");
  sb_num(b, x->iteration);
  sb_puts(b, " with the reduce-scatters and all-gathers (makespan ");
  sb_num(b, x->iteration - x->exposed);
  sb_puts(b, " + exposed reduce-scatter and all-gather ");
  sb_num(b, x->exposed);
  sb_puts(b, ")\n");
  sb_puts(b, "steady      ");
  sb_num(b, x->steady);
  sb_puts(b, " an iteration with the all-gathers overlapping the next one (its passes of a stage wait for the stage's\n"
             "            weights; the next iteration starts at ");
  sb_num(b, x->next);
  sb_printf(b, ", the all-gathers add ");
  sb_num(b, x->steady_wait);
  sb_printf(b, "; %d more pipeline run%s)\n", x->steady_runs, x->steady_runs == 1 ? "" : "s");
}

/* the tied embeddings' exchange (TieModel) */
static void tie_report_text(StrBuf *b, const DpResult *x) {
  const TieModel *t = x->tie;
  sb_printf(b, "\ntied embeddings: devices %d and %d exchange the matrix's F32 gradient (%.4g bytes each way) after their last op%s, ",
            t->dev[0], t->dev[1], t->bytes, x->m ? " and gradient collectives" : "");
  if (t->bandwidth > 0) sb_printf(b, "%.4g s at %.4g B/s: start ", t->time, t->bandwidth);
  else sb_puts(b, "not timed (no peer_bandwidth): start ");
  sb_num(b, x->tie_start);
  sb_puts(b, ", end ");
  sb_num(b, x->tie_end);
  sb_puts(b, "\niteration   ");
  sb_num(b, x->iteration);
  sb_puts(b, " with the exchange");
  if (x->m) sb_puts(b, " and the data-parallel collectives");
  sb_puts(b, " (makespan ");
  sb_num(b, x->iteration - x->exposed);
  sb_puts(b, " + exposed ");
  sb_num(b, x->exposed);
  sb_puts(b, ")\n");
}

static void plain_report_text(StrBuf *b, const IrSchedule *s, const DpResult *x) {
  const DpModel *m = x->m;
  const char *n = m->C > 1 ? "R" : "D";
  group_head(b, m);
  sb_printf(b, ": each stage's F32 gradients all-reduced over its %s after its last W,\n"
               "  ring time 2(%s-1)/%s x bytes / %.4g B/s + 2(%s-1) x %.4g s, on each device's own link\n",
            m->C > 1 ? "group" : "replicas", n, n, m->bandwidth, n, m->latency);
  sb_printf(b, "%6s %6s %10s %10s %10s %10s %10s\n", "stage", "device", "bytes", "ready", "start", "end", "time");
  for (int st = 0; st < s->nstage; st++)
    sb_printf(b, "%6d %6d %10.4g %10.6g %10.6g %10.6g %10.6g\n", st, s->stages[st].device, m->bytes[st], x->ready[st],
              x->start[st], x->end[st], m->time[st]);
  for (int d = 0; m->vbytes && d < s->ndev; d++)   /* the vocabulary layers' rows of each device */
    sb_printf(b, "%6s %6d %10.4g %10s %10.6g %10.6g %10.6g\n", "vocab", d, m->vbytes[d], "last op", x->vstart[d], x->vend[d],
              m->vtime[d]);
  expert_note(b, x);
  sb_puts(b, "iteration   ");
  sb_num(b, x->iteration);
  sb_puts(b, " with the all-reduces (makespan ");
  sb_num(b, x->iteration - x->exposed);
  sb_puts(b, " + exposed all-reduce ");
  sb_num(b, x->exposed);
  sb_puts(b, ")\n");
}

void dp_report_text(StrBuf *b, const IrSchedule *s, const DpResult *x) {
  if (x->m && x->m->dist) dist_report_text(b, s, x);
  else if (x->m) plain_report_text(b, s, x);
  if (x->tie) tie_report_text(b, x);
}

/* A collective's JSON fields after its bytes (and ready): start, end and time, and under
 * the distributed optimizer its all-gather's (wb < 0: none). */
static void coll_json(StrBuf *b, double start, double end, double time, double wb, double gstart, double gend, double wtime) {
  const char *const k[7] = {"start", "end", "time", "allgather_bytes", "allgather_start", "allgather_end", "allgather_time"};
  const double v[7] = {start, end, time, wb, gstart, gend, wtime};
  for (int i = 0; i < (wb < 0 ? 3 : 7); i++) {
    sb_printf(b, ",\"%s\":", k[i]);
    sb_num(b, v[i]);
  }
}

void dp_report_json(StrBuf *b, const IrSchedule *s, const DpResult *x) {
  const DpModel *m = x->m;
  if (!m) return;
  sb_printf(b, ",\"data_parallel\":{\"replicas\":%d,\"bandwidth\":", m->D);
  sb_num(b, m->bandwidth);
  sb_puts(b, ",\"latency\":");
  sb_num(b, m->latency);
  sb_puts(b, ",\"iteration_time\":");
  sb_num(b, x->iteration);
  sb_puts(b, ",\"exposed_allreduce\":");
  sb_num(b, x->exposed);
  sb_puts(b, ",\"stages\":[");
  for (int st = 0; st < s->nstage; st++) {
    sb_printf(b, "%s{\"stage\":%d,\"device\":%d,\"bytes\":", st ? "," : "", st, s->stages[st].device);
    sb_num(b, m->bytes[st]);
    sb_puts(b, ",\"ready\":");
    sb_num(b, x->ready[st]);
    if (m->dist) coll_json(b, x->start[st], x->end[st], m->time[st], m->wbytes[st], x->gstart[st], x->gend[st], m->wtime[st]);
    else coll_json(b, x->start[st], x->end[st], m->time[st], -1, 0, 0, 0);
    if (m->tbytes && m->tbytes[st] > 0) {   /* appended: the tied matrix's own buffer */
      sb_puts(b, ",\"tied_bytes\":");
      sb_num(b, m->tbytes[st]);
    }
    if (m->ebytes) {   /* appended: the experts' part under expert parallelism */
      sb_puts(b, ",\"expert_bytes\":");
      sb_num(b, m->ebytes[st]);
    }
    sb_puts(b, "}");
  }
  sb_puts(b, "]");
  if (m->dist) sb_puts(b, ",\"distributed_optimizer\":true");   /* appended: absent without it */
  if (m->vbytes) {   /* appended: absent without `vocab parallel` */
    sb_puts(b, ",\"vocab\":[");
    for (int d = 0; d < s->ndev; d++) {
      sb_printf(b, "%s{\"device\":%d,\"bytes\":", d ? "," : "", d);
      sb_num(b, m->vbytes[d]);
      if (m->dist) coll_json(b, x->vstart[d], x->vend[d], m->vtime[d], m->vwbytes[d], x->vgstart[d], x->vgend[d], m->vwtime[d]);
      else coll_json(b, x->vstart[d], x->vend[d], m->vtime[d], -1, 0, 0, 0);
      sb_puts(b, "}");
    }
    sb_puts(b, "]");
  }
  if (m->C > 1) sb_printf(b, ",\"context_parallel\":%d,\"ranks\":%d", m->C, m->ranks);   /* appended: absent without it */
  if (m->ebytes) sb_printf(b, ",\"expert_ranks\":%d", m->eranks);   /* appended: absent without expert parallelism */
  if (m->dist) {   /* appended: the all-gathers overlapping the next iteration (steady_state) */
    const char *const k[3] = {"next_iteration_start", "steady_iteration_time", "steady_allgather_wait"};
    const double v[3] = {x->next, x->steady, x->steady_wait};
    for (int i = 0; i < 3; i++) {
      sb_printf(b, ",\"%s\":", k[i]);
      sb_num(b, v[i]);
    }
    sb_printf(b, ",\"steady_runs\":%d", x->steady_runs);
  }
  sb_puts(b, "}");
}

void dp_report_tie_json(StrBuf *b, const DpResult *x) {
  const TieModel *t = x ? x->tie : NULL;
  if (!t) return;
  sb_printf(b, ",\"tied_embeddings\":{\"devices\":[%d,%d],\"bytes\":", t->dev[0], t->dev[1]);
  sb_num(b, t->bytes);
  if (t->bandwidth > 0) {
    sb_puts(b, ",\"bandwidth\":");
    sb_num(b, t->bandwidth);
  } else sb_puts(b, ",\"bandwidth\":null");
  const char *const k[5] = {"start", "end", "time", "iteration_time", "exposed"};
  const double v[5] = {x->tie_start, x->tie_end, t->time, x->iteration, x->exposed};
  for (int i = 0; i < 5; i++) {
    sb_printf(b, ",\"%s\":", k[i]);
    sb_num(b, v[i]);
  }
  sb_puts(b, "}");
}
