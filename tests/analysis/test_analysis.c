/* test_analysis.c: lowering, verification, simulation and reports on IR built in
 * memory (irbuild.h): closed forms (1F1B makespan (m+P-1)(TF+TB+TW), peak P on
 * device 0), the reference figure 33/4, deadlock cycles, memory limits at the right
 * op, expectation failures, missing passes, offload and vocabulary lowering,
 * well-formed reports, and the executor alone (exec.c: a recv at device 0's first op
 * under rendezvous sends; the repair hook's contract, exec.h). Exact comparisons use a
 * tolerance of 1e-9 (stated below).
 * Prints every failure with expected and actual values; exit 1 on any. */
#include "analysis.h"
#include "irbuild.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
#define TOL 1e-9 /* |actual - expected| <= TOL * max(1, |expected|) */

static void check_num(const char *what, double got, double want) {
  checks++;
  if (!(fabs(got - want) <= TOL * fmax(1, fabs(want)))) {
    failures++;
    printf("FAIL %s: got %.12g, expected %.12g (diff %.3g)\n", what, got, want, got - want);
  }
}
static void check_true(const char *what, int ok) {
  checks++;
  if (!ok) { failures++; printf("FAIL %s\n", what); }
}

typedef struct T { Arena a; Diag dg; IB b; IrSchedule *s; Analysis an; } T;

static void t_begin(T *t, int P, int v, int m, double TF, double TB, double TW, double TC) {
  memset(t, 0, sizeof *t);
  diag_init(&t->dg, &t->a);
  t->dg.out = getenv("TEST_VERBOSE") ? stderr : NULL;
  t->s = ib_new(&t->b, &t->a, &t->dg, P, v, m, TF, TB, TW, TC);
}
static int t_run(T *t) {
  ib_done(&t->b);
  return analysis_run(&t->a, &t->dg, t->s, &t->an, 1);
}
static void t_end(T *t) { arena_free(&t->a); }

/* The first error record whose message contains `needle`, or NULL. */
static const DiagRecord *find_err(T *t, const char *needle) {
  for (int k = 0; k < t->dg.nrecs; k++)
    if (t->dg.recs[k].level == DIAG_ERROR && strstr(t->dg.recs[k].message, needle)) return &t->dg.recs[k];
  return NULL;
}
static void dump_errs(T *t) {
  for (int k = 0; k < t->dg.nrecs; k++)
    printf("  [%d] %u:%u %s\n", t->dg.recs[k].level, t->dg.recs[k].span.line, t->dg.recs[k].span.col, t->dg.recs[k].message);
}
/* The line of the op (kind, mb, stage) on device d in the lowered IR. */
static uint32_t line_of(T *t, int d, IrKind k, int mb, int st) {
  IrDevice *dv = &t->s->devs[d];
  for (int j = 0; j < dv->nops; j++)
    if (dv->ops[j].kind == k && dv->ops[j].mb == mb && dv->ops[j].stage == st && !(dv->ops[j].flags & IR_FLAG_INSERTED))
      return dv->ops[j].span.line;
  return 0;
}

static void test_1f1b_closed_form(void) {
  static const int Ps[] = {1, 2, 3, 4, 8, 16};
  static const int ms[] = {1, 2, 4, 8, 13, 32};
  char name[128];
  for (size_t a = 0; a < sizeof Ps / sizeof *Ps; a++)
    for (size_t b = 0; b < sizeof ms / sizeof *ms; b++)
      for (int split = 0; split < 2; split++) {
        int P = Ps[a], m = ms[b];
        double TF = 1, TB = 1, TW = 1;
        if (split) TF = 1.5, TB = 2, TW = 0.5; /* equal costs per stage, any values */
        T t;
        t_begin(&t, P, 1, m, TF, TB, TW, 0);
        ib_1f1b(&t.b, split);
        int ok = t_run(&t);
        snprintf(name, sizeof name, "1F1B P=%d m=%d split=%d valid", P, m, split);
        check_true(name, ok);
        if (!ok) { dump_errs(&t); t_end(&t); continue; }
        snprintf(name, sizeof name, "1F1B P=%d m=%d split=%d makespan", P, m, split);
        /* fused: (m+P-1)(TF+TB+TW); split with W right after B, the input gradient
         * leaves after B, so the drain saves TW per hop: minus (P-1) TW */
        check_num(name, t.an.sim.makespan, (m + P - 1) * (TF + TB + TW) - (split ? (P - 1) * TW : 0));
        snprintf(name, sizeof name, "1F1B P=%d m=%d split=%d peak on device 0", P, m, split);
        check_num(name, t.an.sim.dev[0].peak, m < P ? m : P);
        if (!split) check_num("1F1B bubble", t.an.sim.bubble_rate, (P - 1.0) / (m + P - 1));
        /* sends/recvs inserted: 2 (P-1) m of each */
        snprintf(name, sizeof name, "1F1B P=%d m=%d inserted ops", P, m);
        check_num(name, (double)t.an.inserted_ops, 4.0 * (P - 1) * m);
        t_end(&t);
      }
}

static void test_reference_figures(void) {
  T t;
  t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
  ib_1f1b(&t.b, 0);
  check_true("ref 1F1B valid", t_run(&t));
  check_num("ref 1F1B makespan 33", t.an.sim.makespan, 33);
  check_num("ref 1F1B peak 4", t.an.sim.peak_memory, 4);
  t_end(&t);
  /* interleaved v=2 (Megatron order, fused BW): 28.5 / 5.5 */
  t_begin(&t, 4, 2, 8, 1, 1, 1, 0);
  ib_interleaved(&t.b, 0);
  int ok = t_run(&t);
  check_true("ref interleaved valid", ok);
  if (!ok) dump_errs(&t);
  else {
    check_num("ref interleaved makespan 28.5", t.an.sim.makespan, 28.5);
    check_num("ref interleaved peak 5.5", t.an.sim.peak_memory, 5.5);
  }
  t_end(&t);
}

/* TC per hop: P = 2, m = 1: F, TC, F, BW, TC, BW. */
static void test_tc(void) {
  T t;
  t_begin(&t, 2, 1, 1, 1, 1, 1, 0.25);
  ib_1f1b(&t.b, 0);
  check_true("tc valid", t_run(&t));
  check_num("TC on both hops", t.an.sim.makespan, 6 + 2 * 0.25);
  t_end(&t);
  t_begin(&t, 4, 1, 8, 1, 1, 1, 0.25);
  ib_1f1b(&t.b, 0);
  check_true("tc valid", t_run(&t));
  check_true("TC at least on the fill and drain", t.an.sim.makespan >= 33 + 2 * 3 * 0.25 - 1e-9);
  t_end(&t);
}

/* Explicit sends and recvs, with device 0's send F(1) written after its recv B(0):
 * the classic FIFO deadlock, reported as a cycle. */
static void test_deadlock_explicit(void) {
  T t;
  t_begin(&t, 2, 1, 2, 1, 1, 1, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 0);
  ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1);
  ib_op(b, 0, IR_F, 1, 0);
  ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
  ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 1, 0, 1); /* misordered: should precede the recv */
  ib_op(b, 0, IR_BW, 0, 0);
  ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 1, 1, 1);
  ib_op(b, 0, IR_BW, 1, 0);
  ib_comm(b, 1, IR_RECV, IR_XFER_ACT, 0, 0, 0);
  ib_op(b, 1, IR_F, 0, 1);
  ib_comm(b, 1, IR_RECV, IR_XFER_ACT, 1, 0, 0);
  ib_op(b, 1, IR_F, 1, 1);
  ib_op(b, 1, IR_BW, 0, 1);
  ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
  ib_op(b, 1, IR_BW, 1, 1);
  ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 1, 1, 0);
  check_true("deadlock: invalid", !t_run(&t));
  const DiagRecord *e = find_err(&t, "deadlock");
  check_true("deadlock reported", e != NULL);
  if (!e) { dump_errs(&t); t_end(&t); return; }
  /* the notes name both stuck ops and the misordered send (line 6) */
  int saw_send = 0, notes = 0;
  for (const DiagRecord *n = e + 1; n < t.dg.recs + t.dg.nrecs && n->level == DIAG_NOTE; n++) {
    notes++;
    if (n->span.line == 6 && strstr(n->message, "send F(1)")) saw_send = 1;
  }
  check_true("deadlock cycle has notes for each op", notes >= 3);
  check_true("deadlock cycle names the misordered send at its line", saw_send);
  if (!saw_send) dump_errs(&t);
  t_end(&t);
}

/* Posted receives (IR_FLAG_POSTED, docs/runtime.md): device 1 posts both its recvs
 * first; F(1, 1) then waits for act(1, 0), whose send device 0 reaches only after
 * device 1's send B(0). With buffered sends (--p2p buffered) the executor blocks at the
 * consumer and wakes when the send ran; the recv spans from where it stands to its
 * data's arrival. Unposted, the second recv would block where it stands: a deadlock.
 * With rendezvous sends a posted recv is still matched at its group (NCCL completes a
 * group as a whole), so the two recvs posted together wait for both sends: a deadlock. */
static IrOp *posted_recv(IB *b, int d, IrXfer x, int mb, int st, int peer) {
  IrOp *op = ib_comm(b, d, IR_RECV, x, mb, st, peer);
  op->flags |= IR_FLAG_INSERTED | IR_FLAG_POSTED;
  return op;
}
static void test_posted_recv(void) {
  for (int posted = 0; posted < 3; posted++) {   /* 0 unposted, 1 posted, 2 posted under rendezvous */
    T t;
    t_begin(&t, 2, 1, 2, 1, 1, 0, 0.5);
    IB *b = &t.b;
    ib_op(b, 0, IR_F, 0, 0);
    ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1);
    ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
    ib_op(b, 0, IR_BW, 0, 0);
    ib_op(b, 0, IR_F, 1, 0);
    ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 1, 0, 1);
    ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 1, 1, 1);
    ib_op(b, 0, IR_BW, 1, 0);
    IrOp *r0 = posted_recv(b, 1, IR_XFER_ACT, 0, 0, 0), *r1 = posted_recv(b, 1, IR_XFER_ACT, 1, 0, 0);
    if (!posted) r0->flags &= (uint8_t)~IR_FLAG_POSTED, r1->flags &= (uint8_t)~IR_FLAG_POSTED;
    t.s->p2p_buffered = posted < 2;
    ib_op(b, 1, IR_F, 0, 1);
    ib_op(b, 1, IR_BW, 0, 1);
    ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
    ib_op(b, 1, IR_F, 1, 1);
    ib_op(b, 1, IR_BW, 1, 1);
    ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 1, 1, 0);
    int ok = t_run(&t);
    if (posted == 2) {
      check_true("posted recvs up front, rendezvous: deadlock",
                 !ok && find_err(&t, "deadlock with rendezvous sends") != NULL);
      t_end(&t);
      continue;
    }
    if (!posted) {
      check_true("unposted recvs up front: deadlock", !ok && find_err(&t, "deadlock") != NULL);
      t_end(&t);
      continue;
    }
    check_true("posted recvs up front: valid", ok);
    if (!ok) dump_errs(&t);
    /* F(0,0) 0-1, F(0,1) 1.5-2.5, BW(0,1) -3.5, BW(0,0) 4-5, F(1,0) -6, F(1,1) 6.5-7.5,
     * BW(1,1) -8.5, BW(1,0) 9-10 */
    check_num("posted recvs: makespan", t.an.sim.makespan, 10);
    AnaIndex *ix = &t.an.vr.ix;
    int32_t g1 = ix->off[1] + 1;   /* recv act(1, 0): posted at 0, waited for at F(1, 1) from 3.5 to 6.5 */
    check_num("posted recv: starts where it stands", t.an.sim.start[g1], 0);
    check_num("posted recv: ends at its data's arrival", t.an.sim.end[g1], 6.5);
    check_num("posted recv: comm_wait counts the wait", t.an.sim.dev[1].comm_wait, 1.5 + 3);
    check_num("posted recv: consumer waits for it", t.an.sim.start[ix->off[1] + 5], 6.5);
    t_end(&t);
  }
  /* a genuine deadlock through a posted recv's consumer: device 0 receives B(0) before
   * it sends F(0); device 1 has posted recv F(0) and waits at F(0, 1) for its data */
  T t;
  t_begin(&t, 2, 1, 1, 1, 1, 0, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 0);
  ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
  ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1);
  ib_op(b, 0, IR_BW, 0, 0);
  posted_recv(b, 1, IR_XFER_ACT, 0, 0, 0);
  ib_op(b, 1, IR_F, 0, 1);
  ib_op(b, 1, IR_BW, 0, 1);
  ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
  check_true("posted deadlock: invalid", !t_run(&t));
  const DiagRecord *e = find_err(&t, "deadlock");
  check_true("posted deadlock: reported", e != NULL);
  int named = 0;
  for (const DiagRecord *n = e ? e + 1 : t.dg.recs + t.dg.nrecs; n < t.dg.recs + t.dg.nrecs && n->level == DIAG_NOTE; n++)
    if (strstr(n->message, "device 1 waits at F(0) for the data of recv F(0) (inserted, posted earlier), from send F(0) on device 0"))
      named = 1;
  check_true("posted deadlock: the note names the consumer and the posted recv", named);
  if (!named) dump_errs(&t);
  t_end(&t);
}

/* Compute orders that wait on each other: device 1 runs microbatch 1 first. */
static void test_deadlock_compute(void) {
  T t;
  t_begin(&t, 2, 1, 2, 1, 1, 1, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 0); ib_op(b, 0, IR_BW, 0, 0); ib_op(b, 0, IR_F, 1, 0); ib_op(b, 0, IR_BW, 1, 0);
  ib_op(b, 1, IR_F, 1, 1); ib_op(b, 1, IR_BW, 1, 1); ib_op(b, 1, IR_F, 0, 1); ib_op(b, 1, IR_BW, 0, 1);
  check_true("compute deadlock: invalid", !t_run(&t));
  check_true("compute deadlock reported as a cycle", find_err(&t, "deadlock") != NULL);
  t_end(&t);
}

static void test_memory_limit(void) {
  for (int limit = 3; limit <= 4; limit++) {
    T t;
    t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
    t.s->mem_limit = limit;
    ib_1f1b(&t.b, 1);
    int ok = t_run(&t);
    if (limit == 4) { check_true("memory at the limit is valid", ok); t_end(&t); continue; }
    check_true("memory one over the limit: invalid", !ok);
    const DiagRecord *e = find_err(&t, "over the limit");
    check_true("memory error reported", e != NULL);
    if (e) {
      checks++;
      uint32_t want = line_of(&t, 0, IR_F, 3, 0);
      if (e->span.line != want || !strstr(e->message, "device 0") || !strstr(e->message, "F(3)")) {
        failures++;
        printf("FAIL memory error at line %u (%s), expected F(3) on device 0 at line %u\n", e->span.line, e->message, want);
      }
    }
    int nmem = 0;
    for (int k = 0; k < t.dg.nrecs; k++) if (strstr(t.dg.recs[k].message, "over the limit")) nmem++;
    check_num("only device 0 is over the limit", nmem, 1);
    t_end(&t);
  }
}

static void test_expect(void) {
  T t;
  t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
  ib_1f1b(&t.b, 0);
  ib_expect(&t.b, IR_METRIC_MAKESPAN, IR_CMP_EQ, 33, -1);
  ib_expect(&t.b, IR_METRIC_PEAK_MEMORY, IR_CMP_LE, 4, 0);
  IrExpect *bad = ib_expect(&t.b, IR_METRIC_BUBBLE_RATE, IR_CMP_LE, 0.05, -1);
  check_true("expect: invalid", !t_run(&t));
  const DiagRecord *e = find_err(&t, "expectation failed");
  check_true("expect failure reported", e != NULL);
  if (e) {
    check_num("expect failure at its line", e->span.line, bad->span.line);
    check_true("expect message", strstr(e->message, "bubble_rate is 0.272727, expected <= 0.05") != NULL);
    if (!strstr(e->message, "bubble_rate is 0.272727, expected <= 0.05")) printf("  got: %s\n", e->message);
  }
  check_num("one expectation failed", t.dg.errors, 1);
  check_true("others ok", t.an.expects[0].ok && t.an.expects[1].ok && !t.an.expects[2].ok);
  t_end(&t);
}

static void test_missing(void) {
  T t;
  t_begin(&t, 2, 1, 2, 1, 1, 1, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 0); ib_op(b, 0, IR_F, 1, 0); ib_op(b, 0, IR_B, 0, 0); ib_op(b, 0, IR_W, 0, 0);
  ib_op(b, 0, IR_B, 1, 0); /* W(1) missing */
  ib_op(b, 1, IR_F, 0, 1); ib_op(b, 1, IR_BW, 0, 1); ib_op(b, 1, IR_F, 1, 1); ib_op(b, 1, IR_BW, 1, 1);
  check_true("missing: invalid", !t_run(&t));
  const DiagRecord *e = find_err(&t, "never runs W(1)");
  check_true("missing W(1) named", e && strstr(e->message, "device 0"));
  if (!e) dump_errs(&t);
  t_end(&t);
  /* W before its B; F(1,1) before F(1,0) on the same device (v = 2, P = 1) */
  t_begin(&t, 1, 2, 1, 1, 1, 1, 0);
  b = &t.b;
  ib_op(b, 0, IR_F, 0, 1); ib_op(b, 0, IR_F, 0, 0); ib_op(b, 0, IR_B, 0, 1); ib_op(b, 0, IR_W, 0, 0);
  ib_op(b, 0, IR_B, 0, 0); ib_op(b, 0, IR_W, 0, 1);
  check_true("order errors: invalid", !t_run(&t));
  check_true("F chain error", find_err(&t, "F(0,1) runs before F(0,0)") != NULL);
  check_true("W after B error", find_err(&t, "W(0,0) runs before B(0,0)") != NULL);
  if (!find_err(&t, "W(0,0) runs before B(0,0)")) dump_errs(&t);
  t_end(&t);
}

/* A pass on another device than its stage's (IR built by hand; the front end rejects
 * it): reported, and its dependencies are checked on the device it runs on (verify.c's
 * need() takes the devices from the stages only when no pass is misplaced). */
static void test_misplaced(void) {
  T t;
  t_begin(&t, 2, 1, 1, 1, 1, 1, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 1); ib_op(b, 0, IR_F, 0, 0); ib_op(b, 0, IR_BW, 0, 1); ib_op(b, 0, IR_BW, 0, 0);
  check_true("misplaced: invalid", !t_run(&t));
  check_true("misplaced: reported", find_err(&t, "F(0) runs on device 0, but stage 1 is on device 1") != NULL);
  check_true("misplaced: F chain on its device", find_err(&t, "F(0) runs before F(0), which it needs") != NULL);
  if (!find_err(&t, "F(0) runs before F(0)")) dump_errs(&t);
  t_end(&t);
}

/* overlap_verify's errors on IR built by hand (the front end rejects these pairs):
 * each names its passes (they are formatted only when reported). */
static void test_overlap_errors(void) {
  T t;
  t_begin(&t, 1, 1, 3, 1, 1, 1, 0);
  IB *b = &t.b;
  ib_op(b, 0, IR_F, 0, 0)->flags |= IR_FLAG_OVERLAP;
  ib_op(b, 0, IR_F, 1, 0);
  ib_op(b, 0, IR_F, 2, 0)->flags |= IR_FLAG_OVERLAP;
  ib_op(b, 0, IR_BW, 2, 0);
  ib_op(b, 0, IR_BW, 0, 0);
  ib_op(b, 0, IR_BW, 1, 0)->flags |= IR_FLAG_OVERLAP;
  check_true("overlap errors: invalid", !t_run(&t));
  check_true("overlap: same direction named",
             find_err(&t, "overlap pairs a forward with a backward pass (B, W or BW), not F(0) with F(1)") != NULL);
  check_true("overlap: same microbatch named",
             find_err(&t, "overlapped F(2) and BW(2) belong to the same microbatch") != NULL);
  check_true("overlap: no partner named", find_err(&t, "overlapped BW(1) has no partner pass right after it on device 0") != NULL);
  if (!find_err(&t, "has no partner")) dump_errs(&t);
  t_end(&t);
}

static void test_offload(void) {
  /* cheap copies: free, lower time-based peak; expensive copies: not made (lower.c) */
  double times[] = {0.5, 20};
  for (int k = 0; k < 2; k++) {
    T t;
    t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
    t.s->offload.enabled = 1;
    t.s->offload.ratio = 1;
    t.s->offload.host_limit = -1;
    t.s->offload.stage_lo = 0;
    t.s->offload.stage_hi = 3; /* the last stage runs B right after F: nothing to hide behind */
    for (int st = 0; st < 4; st++) { t.s->stages[st].offload = 1; t.s->stages[st].offload_time = times[k]; }
    ib_1f1b(&t.b, 1);
    int ok = t_run(&t);
    check_true("offload valid", ok);
    if (!ok) { dump_errs(&t); t_end(&t); continue; }
    if (k == 0) {
      check_num("cheap offload costs nothing", t.an.sim.makespan, 30); /* 1F1B, B and W split */
      check_true("offload lowers device 0's peak over time", t.an.sim.dev[0].peak_time < 4);
      check_true("host memory used", t.an.sim.host_memory > 0);
    } else {
      /* a round trip of 40 outlives every activation (lifetimes of 1F1B P=4: at most
       * 2(P-1) passes): nothing is offloaded, nothing is slowed */
      check_num("copies slower than any lifetime are not made", t.an.sim.makespan, 30);
      check_true("no host memory for copies not made", !(t.an.sim.host_memory > 0));
    }
    t_end(&t);
  }
}

static void test_vocab(void) {
  for (int mode = 1; mode <= 2; mode++) {
    T t;
    t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
    t.s->vocab.mode = mode;
    t.s->vocab.t_if = t.s->vocab.t_ib = 0.1;
    t.s->vocab.t_s = t.s->vocab.t_t = 0.2;
    t.s->vocab.t_coll = 0.05;
    t.s->vocab.act_s = 0.1;
    ib_1f1b(&t.b, 1);
    int ok = t_run(&t);
    check_true("vocab valid", ok);
    if (!ok) { dump_errs(&t); t_end(&t); continue; }
    int colls = 0;
    for (int j = 0; j < t.s->devs[2].nops; j++) colls += t.s->devs[2].ops[j].kind == IR_COLL;
    check_num("vocab collectives per device", colls, 8 * (mode == 1 ? 4 : 3));
    check_true("vocab adds time", t.an.sim.makespan > 33);
    t_end(&t);
  }
}

/* Vocabulary groups at clean instants (lower.c): on 1F1B with B and W apart and equal
 * costs every unit of time is an instant where no device is inside a pass, so no
 * device waits at a barrier and the makespan is the base one plus the vocabulary
 * passes and collectives once: (m+P-1)(TF+TB+TW) - (P-1)TW + m(TIF+TIB+TS+TT+n TCOLL),
 * n = 4 (Vocab-1) or 3 (Vocab-2). Interleaved 1F1B (split, v = 2) likewise adds
 * exactly m times the vocabulary share to its own makespan. */
static void vocab_costs(IrSchedule *s, int mode) {
  s->vocab.mode = mode;
  s->vocab.t_if = 0.125, s->vocab.t_ib = 0.25;
  s->vocab.t_s = 0.5, s->vocab.t_t = 0.375;
  s->vocab.t_coll = 0.0625;
  s->vocab.act_s = 0.25;
}
static void test_vocab_clean(void) {
  static const int Ps[] = {2, 3, 4, 7, 8}, ms[] = {1, 3, 8, 17};
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 4; b++)
      for (int mode = 1; mode <= 2; mode++) {
        int P = Ps[a], m = ms[b];
        T t;
        t_begin(&t, P, 1, m, 1, 1, 1, 0);
        vocab_costs(t.s, mode);
        ib_1f1b(&t.b, 1);
        int ok = t_run(&t);
        char what[96];
        snprintf(what, sizeof what, "vocab 1f1b split P=%d m=%d mode=%d valid", P, m, mode);
        check_true(what, ok);
        if (!ok) { dump_errs(&t); t_end(&t); continue; }
        double share = 0.125 + 0.25 + 0.5 + 0.375 + (mode == 1 ? 4 : 3) * 0.0625;
        snprintf(what, sizeof what, "vocab 1f1b split P=%d m=%d mode=%d makespan", P, m, mode);
        check_num(what, t.an.sim.makespan, (m + P - 1) * 3.0 - (P - 1) + m * share);
        t_end(&t);
      }
  for (int mode = 1; mode <= 2; mode++) {
    T t;
    t_begin(&t, 4, 2, 8, 1, 1, 1, 0);
    ib_interleaved(&t.b, 1);
    int ok = t_run(&t);
    double base = t.an.sim.makespan;
    t_end(&t);
    t_begin(&t, 4, 2, 8, 1, 1, 1, 0);
    vocab_costs(t.s, mode);
    ib_interleaved(&t.b, 1);
    ok = ok && t_run(&t);
    check_true("vocab interleaved valid", ok);
    if (ok) check_num("vocab interleaved makespan: base + m share", t.an.sim.makespan,
                      base + 8 * (0.125 + 0.25 + 0.5 + 0.375 + (mode == 1 ? 4 : 3) * 0.0625));
    t_end(&t);
  }
}

/* With 1F1B's full backward (BW of 2 units) some device is always inside a pass, so a
 * barrier makes devices wait; the lowering takes the instants of least disruption and
 * shares them between the groups of a period: at P = 4, m = 8 with free vocabulary
 * passes the makespan stays within 40 (it was 45 with the groups at the start of
 * F(i, 0), the end of F(i, S-1) and the end of B(i, 0)). */
static void test_vocab_fused(void) {
  for (int mode = 1; mode <= 2; mode++) {
    T t;
    t_begin(&t, 4, 1, 8, 1, 1, 1, 0);
    t.s->vocab.mode = mode;
    ib_1f1b(&t.b, 0);
    int ok = t_run(&t);
    check_true("vocab fused valid", ok);
    if (ok) check_true("vocab fused: makespan <= 40", t.an.sim.makespan <= 40 + 1e-9);
    t_end(&t);
  }
}

/* S(i) is a broadcast (the runtime blocks every device, the root included, until all
 * have reached it), so the simulator treats it as a collective: here the root (device
 * 1) runs S(1) before B(0, 1), whose gradient device 0 needs before its own S(1).
 * Collective order is the same on both devices, and a root that went on alone would
 * not deadlock; a blocking broadcast does, and verify says so. */
static IrOp *vop(T *t, int d, IrKind k, int mb, int st, int coll) {
  IrOp *op = ib_op(&t->b, d, k, mb, st);
  op->coll = (uint8_t)coll;
  return op;
}
static void test_vocab_broadcast_blocks(void) {
  T t;
  t_begin(&t, 2, 1, 2, 1, 1, 1, 0);
  t.s->vocab.mode = 2;
  for (int d = 0; d < 2; d++) {
    vop(&t, d, IR_IF, 0, -1, 0); vop(&t, d, IR_COLL, 0, -1, IR_COLL_INPUT_FWD);
    vop(&t, d, IR_IF, 1, -1, 0); vop(&t, d, IR_COLL, 1, -1, IR_COLL_INPUT_FWD);
    vop(&t, d, IR_F, 0, d, 0); vop(&t, d, IR_F, 1, d, 0);
    vop(&t, d, IR_S, 0, -1, 0); vop(&t, d, IR_COLL, 0, -1, IR_COLL_OUTPUT_FWD); vop(&t, d, IR_T, 0, -1, 0);
    if (d == 0) { vop(&t, d, IR_BW, 0, 0, 0); vop(&t, d, IR_S, 1, -1, 0); }
    else { vop(&t, d, IR_S, 1, -1, 0); vop(&t, d, IR_BW, 0, 1, 0); }
    vop(&t, d, IR_COLL, 0, -1, IR_COLL_INPUT_BWD); vop(&t, d, IR_IB, 0, -1, 0);
    vop(&t, d, IR_COLL, 1, -1, IR_COLL_OUTPUT_FWD); vop(&t, d, IR_T, 1, -1, 0);
    vop(&t, d, IR_BW, 1, d, 0);
    vop(&t, d, IR_COLL, 1, -1, IR_COLL_INPUT_BWD); vop(&t, d, IR_IB, 1, -1, 0);
  }
  int ok = t_run(&t);
  check_true("S broadcast blocks: invalid", !ok);
  check_true("S broadcast blocks: a deadlock", find_err(&t, "deadlock") != NULL);
  check_true("S broadcast blocks: collective order is not the reason", find_err(&t, "collective order") == NULL);
  if (ok || !find_err(&t, "deadlock")) dump_errs(&t);
  t_end(&t);
}

static void test_reports(void) {
  T t;
  t_begin(&t, 3, 1, 4, 1, 1, 1, 0);
  ib_1f1b(&t.b, 0);
  ib_expect(&t.b, IR_METRIC_MAKESPAN, IR_CMP_LE, 100, -1);
  check_true("reports valid", t_run(&t));
  Report r = {.cmd = "sim", .s = t.s, .diag = &t.dg, .ix = &t.an.vr.ix, .sim = &t.an.sim, .expects = t.an.expects,
              .inserted_ops = t.an.inserted_ops, .valid = 1};
  StrBuf b = {0};
  report_json(&b, &r);
  check_true("json has makespan", strstr(b.data, "\"makespan\":18") != NULL);
  check_true("json valid true", strstr(b.data, "\"valid\":true") != NULL);
  check_true("json per_device", strstr(b.data, "\"per_device\":[{\"device\":0,\"peak_memory\":3,") != NULL);
  if (!strstr(b.data, "\"makespan\":18")) printf("%s\n", b.data);
  sb_free(&b);
  report_text(&b, &r);
  check_true("text has makespan", strstr(b.data, "makespan    18") != NULL);
  sb_free(&b);
  report_trace(&b, &r);
  check_true("trace has an F event", strstr(b.data, "\"name\":\"F 0 s0\"") != NULL);
  sb_free(&b);
  report_svg(&b, &r);
  check_true("svg closes", b.len > 100 && strstr(b.data, "</svg>") != NULL);
  sb_free(&b);
  t_end(&t);
}

/* Random orders (a fixed-seed LCG): shuffled 1F1B orders, some with dropped or
 * duplicated passes, B/W split or not, a memory limit sometimes. Whatever the order,
 * the analysis must not crash, must call a schedule valid only when it simulated, and
 * a valid schedule's makespan is at least the busiest device's work. */
static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (unsigned)(rng % n);
}
static void test_random_orders(void) {
  int nvalid = 0, ninvalid = 0;
  for (int it = 0; it < 400; it++) {
    int P = 1 + (int)rnd(4), v = 1 + (int)rnd(2), m = 1 + (int)rnd(5), split = (int)rnd(2);
    T t;
    t_begin(&t, P, v, m, 1, 1 + rnd(2), 1, rnd(2) * 0.5);
    if (rnd(4) == 0) t.s->mem_limit = 1 + rnd(4);
    if (rnd(5) == 0) {
      t.s->offload.enabled = 1;
      for (int st = 0; st < P * v; st++) { t.s->stages[st].offload = 0.5; t.s->stages[st].offload_time = rnd(3); }
    }
    if (rnd(6) == 0) { t.s->vocab.mode = 1 + (int)rnd(2); t.s->vocab.t_s = 0.5; t.s->vocab.t_coll = 0.1; }
    /* per device: its passes in a shuffled but mostly sensible order */
    for (int d = 0; d < P; d++) {
      int kinds = split ? 3 : 2, n = 0;
      int cap = m * v * kinds + 2;
      int (*ops)[3] = malloc(sizeof(int[3]) * (size_t)cap);
      for (int i = 0; i < m; i++)
        for (int c = 0; c < v; c++) {
          int st = c * P + d;
          ops[n][0] = IR_F, ops[n][1] = i, ops[n][2] = st, n++;
          if (split) { ops[n][0] = IR_B, ops[n][1] = i, ops[n][2] = st, n++; ops[n][0] = IR_W, ops[n][1] = i, ops[n][2] = st, n++; }
          else { ops[n][0] = IR_BW, ops[n][1] = i, ops[n][2] = st, n++; }
        }
      /* sort by a noisy key: forward early, backward late */
      int swaps = (int)rnd(4) * n;
      for (int k = 0; k < swaps; k++) {
        int a = (int)rnd((unsigned)n), b = (int)rnd((unsigned)n);
        int tmp[3] = {ops[a][0], ops[a][1], ops[a][2]};
        memcpy(ops[a], ops[b], sizeof tmp);
        memcpy(ops[b], tmp, sizeof tmp);
      }
      if (rnd(8) == 0 && n > 1) n--;                                    /* a pass missing */
      if (rnd(8) == 0 && n > 0) { memcpy(ops[n], ops[0], sizeof ops[0]); n++; } /* written twice */
      for (int k = 0; k < n; k++) ib_op(&t.b, d, (IrKind)ops[k][0], ops[k][1], ops[k][2]);
      free(ops);
    }
    int ok = t_run(&t);
    checks++;
    if (ok && !t.an.simulated) { failures++; printf("FAIL random %d: valid but not simulated\n", it); }
    if (!ok && t.dg.errors == 0) { failures++; printf("FAIL random %d: invalid without an error\n", it); }
    if (ok) {
      double work = 0;
      for (int d = 0; d < P; d++) if (t.an.sim.dev[d].busy > work) work = t.an.sim.dev[d].busy;
      checks++;
      if (t.an.sim.makespan < work - 1e-9) { failures++; printf("FAIL random %d: makespan %g < work %g\n", it, t.an.sim.makespan, work); }
      nvalid++;
    } else {
      ninvalid++;
    }
    t_end(&t);
  }
  check_true("random orders: some valid", nvalid > 0);
  check_true("random orders: some invalid", ninvalid > 0);
}

/* The executor alone (exec.c), on IR built here and indexed as verify indexes it: the
 * rendezvous model where a device's first op is a recv, and the repair hook's contract
 * (exec.h: ExecRepair, ExecStall). */
typedef struct ExecT { AnaIndex ix; SimLinks L; SimResult r; } ExecT;
static int exec_on(T *t, ExecT *x, ExecModel *m) {
  ib_done(&t->b);
  if (ana_index(&t->a, t->s, &x->ix)) return -2;
  sim_links(&t->a, t->s, &x->ix, &x->L);
  return exec_run(&t->a, t->s, &x->ix, &x->L, m, &x->r);
}
/* A hook that picks as the contract allows (lower.c's repair_pick checks the same):
 * the lowest device stuck at a send whose recv is matched, unmoved and unposted; the
 * recv goes where its device stands (repair_pick goes past a group standing there;
 * any position up to the recv's is allowed). It records each call's ExecStall.ran. */
typedef struct Hook { int calls, first[4], nran[4], ran[4][8]; } Hook;
static int hook_pick(void *ctx, const ExecStall *st, int *pos) {
  Hook *h = ctx;
  if (h->calls < 4) {
    h->first[h->calls] = st->first;
    h->nran[h->calls] = st->nran;
    for (int q = 0; q < st->nran && q < 8; q++) h->ran[h->calls][q] = st->ran[q];
  }
  h->calls++;
  for (int d = 0; d < st->ix->ndev; d++) {
    int32_t o = st->stuck[d];
    if (st->pc[d] >= st->s->devs[d].nops || o < 0 || ANA_KIND(st->ix->kf[o]) != IR_SEND) continue;
    const ExecPeer *pe = &st->peer[o];
    if (pe->dev < 0 || pe->need < 0 || st->pc[pe->dev] >= pe->need) continue;
    *pos = st->pc[pe->dev];
    return d;
  }
  return -1;
}
static IrOp *grouped(IrOp *op) { op->flags |= IR_FLAG_GROUP; return op; }

static void test_exec_model(void) {
  /* device 0 starts with recv A (device 0: recv A, F, send B); its send on device 1
   * comes after recv B (device 1: recv B, F, send A), which waits for device 0's send
   * B: with rendezvous sends (as with buffered ones) both wait, device 0 at its first
   * op, for device 1's send A */
  {
    T t;
    t_begin(&t, 2, 1, 1, 1, 1, 0, 0);
    IB *b = &t.b;
    ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
    ib_op(b, 0, IR_F, 0, 0);
    ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1);
    ib_comm(b, 1, IR_RECV, IR_XFER_ACT, 0, 0, 0);
    ib_op(b, 1, IR_F, 0, 1);
    ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
    ExecT x;
    ExecModel m = {0};
    m.rendezvous = 1;
    int ok = exec_on(&t, &x, &m);
    check_true("exec: a recv at device 0's first op waits for its send's group", ok == 0);
    if (ok == 0) {
      check_true("exec: device 0 stops at its first op", x.r.stuck_at[0] == 0);
      check_true("exec: ... waiting for device 1's send", x.r.wait_op[0] == x.ix.off[1] + 2);
      check_true("exec: device 1 stops at recv B", x.r.stuck_at[1] == x.ix.off[1]);
    }
    t_end(&t);
  }
  /* the repair: device 0 stops at send A, whose recv on device 1 comes after send B
   * and a later op. The hook moves recv A to where device 1 stands:
   *  - merged: device 1 waits at a collective right after its send B, whose group the
   *    moved recv joins: the run goes to the end but did not model that group (ok -1:
   *    lowering moves and runs again);
   *  - else device 1 stands at its send B (after a pass): recv A is posted in that
   *    group, which the run models: it is the proof (ok 1).
   * Either way ExecStall.ran lists each device that ran since the last call, once. */
  for (int merged = 0; merged < 2; merged++) {
    T t;
    t_begin(&t, 2, 1, 1, 1, 1, 0, 0);
    IB *b = &t.b;
    if (merged) {   /* device 0: [recv B, send A] coll; device 1: [send B] coll [recv A] */
      ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
      grouped(ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1));
      ib_op(b, 0, IR_COLL, 0, -1)->coll = IR_COLL_INPUT_FWD;
      ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
      ib_op(b, 1, IR_COLL, 0, -1)->coll = IR_COLL_INPUT_FWD;
      ib_comm(b, 1, IR_RECV, IR_XFER_ACT, 0, 0, 0);
    } else {        /* device 0: [send A] F [recv B]; device 1: F [send B] F [recv A] */
      ib_comm(b, 0, IR_SEND, IR_XFER_ACT, 0, 0, 1);
      ib_op(b, 0, IR_F, 0, 0);
      ib_comm(b, 0, IR_RECV, IR_XFER_GRAD, 0, 1, 1);
      ib_op(b, 1, IR_F, 0, 1);
      ib_comm(b, 1, IR_SEND, IR_XFER_GRAD, 0, 1, 0);
      ib_op(b, 1, IR_F, 1, 1);
      ib_comm(b, 1, IR_RECV, IR_XFER_ACT, 0, 0, 0);
    }
    ExecT x;
    Hook h = {0};
    ExecModel m = {0};
    m.rendezvous = 1;
    m.repair = hook_pick;
    m.repair_ctx = &h;
    ib_done(&t.b);
    ana_index(&t.a, t.s, &x.ix);
    m.moved = arena_alloc_fill(&t.a, sizeof(int32_t) * (size_t)(x.ix.total + 1), 0xff);
    sim_links(&t.a, t.s, &x.ix, &x.L);
    int ok = exec_run(&t.a, t.s, &x.ix, &x.L, &m, &x.r);
    int32_t ra = x.ix.off[1] + (merged ? 2 : 3);   /* recv A */
    if (merged) {
      check_true("exec repair: a recv moved next to a send's group: ok -1", ok == -1);
      check_true("exec repair: recv A moved to after send B", m.moved[ra] == 1);
    } else {
      check_true("exec repair: a recv moved into the group its device stands at: ok 1", ok == 1);
      check_true("exec repair: recv A moved to send B's group", m.moved[ra] == 1);
    }
    check_true("exec repair: one repair, then the hook's last call", h.calls == 2);
    check_true("exec repair: the first call says so", h.first[0] == 1 && h.first[1] == 0);
    for (int c = 0; c < 2 && c < h.calls; c++) {
      /* both devices ran before the first call, and again after the repair (device 0
       * released, then device 1 woken by it) */
      int seen[2] = {0, 0}, okr = h.nran[c] == 2;
      for (int q = 0; q < h.nran[c] && q < 8; q++) {
        int d = h.ran[c][q];
        if (d < 0 || d > 1 || seen[d]++) okr = 0;
      }
      if (!okr) printf("  call %d: nran %d\n", c, h.nran[c]);
      check_true("exec repair: ran lists each device that ran since the last call, once", okr);
    }
    t_end(&t);
  }
}

int main(void) {
  test_1f1b_closed_form();
  test_reference_figures();
  test_tc();
  test_deadlock_explicit();
  test_deadlock_compute();
  test_posted_recv();
  test_memory_limit();
  test_expect();
  test_missing();
  test_misplaced();
  test_overlap_errors();
  test_offload();
  test_vocab();
  test_vocab_clean();
  test_vocab_fused();
  test_vocab_broadcast_blocks();
  test_reports();
  test_random_orders();
  test_exec_model();
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
