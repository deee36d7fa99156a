/* dp.h: data parallelism in `ppsc sim`: D replicas of the pipeline, each stage's
 * gradients all-reduced across its D replicas (hardware { data_parallel; dp_bandwidth;
 * dp_latency; dp_stage_bytes }; with context_parallel = C across D x C GPUs), or, with
 * distributed_optimizer = 1, reduce-scattered and the updated weights all-gathered. dp_derive (costmodel.h) reads the keys at
 * elaboration, dp_run adds the collectives to a finished simulation. See dp.c for the
 * model. */
#ifndef PPS_DP_H
#define PPS_DP_H
#include "costmodel.h"
#include "sim.h"

/* After a simulation: each stage's all-reduce and the iteration with them. */
typedef struct DpResult {
  const DpModel *m;             /* NULL: no data parallelism (tie only) */
  double *ready, *start, *end;  /* [nstage]: last W/BW end, all-reduce (m->dist: reduce-
                                   scatter) start and end */
  double *gstart, *gend;        /* [nstage], m->dist only (else NULL): the weights'
                                   all-gather start and end */
  double *vstart, *vend;        /* [ndev] under `vocab parallel` (else NULL): the vocabulary
                                   rows' all-reduce (reduce-scatter) */
  double *vgstart, *vgend;      /* [ndev], m->dist and `vocab parallel` only: their all-gather */
  const TieModel *tie;          /* tied embeddings on two devices (costmodel.h), else NULL */
  double tie_start, tie_end;    /* tie: its exchange, after both holders' last op and
                                   gradient collectives (before the all-gathers) */
  double iteration;    /* max(makespan, last all-reduce, reduce-scatter, exchange or all-gather end) */
  double exposed;      /* iteration - makespan: collective time the pipeline did not hide */
  double next;         /* when the next iteration starts: every device done with its last op,
                          gradient collectives and the tied exchange (not the all-gathers) */
  /* m->dist only (else 0): the all-gathers overlapping the next iteration (dp.c
   * steady_state): the period of the steady state, from one iteration's start to the
   * next's, what the all-gathers add to it (steady - next), and the pipeline runs it
   * took (0: the all-gathers end before any pass needs them) */
  double steady, steady_wait;
  int steady_runs;
} DpResult;

/* The report's lines (report.c): the text section and the JSON key "data_parallel". */
struct StrBuf;
void dp_report_text(struct StrBuf *b, const IrSchedule *s, const DpResult *x);
void dp_report_json(struct StrBuf *b, const IrSchedule *s, const DpResult *x);
/* The JSON key "tied_embeddings" (nothing without a TieModel). */
void dp_report_tie_json(struct StrBuf *b, const DpResult *x);
/* Adds the all-reduces (or reduce-scatters and all-gathers) and the tied embeddings'
 * exchange to a finished simulation r of s (NULL when s has neither a DpModel nor a
 * TieModel); under the distributed optimizer, with L (the links r ran with), also the
 * steady state of the all-gathers overlapping the next iteration (runs the pipeline
 * again). */
DpResult *dp_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const SimResult *r);
#endif
