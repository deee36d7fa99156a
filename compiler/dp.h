/* dp.h: data parallelism in `ppsc sim`: D replicas of the pipeline, each stage's
 * gradients all-reduced across its D replicas (hardware { data_parallel; dp_bandwidth;
 * dp_latency; dp_stage_bytes }). dp_derive reads the keys at elaboration, dp_run adds
 * the all-reduces to a finished simulation. See dp.c for the model. */
#ifndef PPS_DP_H
#define PPS_DP_H
#include "costmodel.h"
#include "sim.h"

/* What the hardware block says of data parallelism (NULL in IrDerived: D = 1). */
typedef struct DpModel {
  int D;               /* replicas (> 1) */
  double bandwidth;    /* bytes/s of each device's link to its replicas */
  double latency;      /* seconds per ring step */
  double *bytes;       /* [nstage]: F32 gradient bytes of each stage */
  double *time;        /* [nstage]: ring all-reduce time of each stage alone */
} DpModel;

/* After a simulation: each stage's all-reduce and the iteration with them. */
typedef struct DpResult {
  const DpModel *m;
  double *ready, *start, *end;  /* [nstage]: last W/BW end, all-reduce start and end */
  double iteration;    /* max(makespan, last all-reduce end) */
  double exposed;      /* iteration - makespan: all-reduce time the pipeline did not hide */
} DpResult;

/* Reads the data-parallel keys of s->hardware (cm: what costmodel_derive found, for
 * the stage parameters). Errors at their key. Returns NULL when D = 1 or on error. */
DpModel *dp_derive(Arena *a, Diag *dg, const IrSchedule *s, const CostModel *cm);
/* The ring all-reduce time of `bytes` over D replicas: 2(D-1)/D bytes / bandwidth +
 * 2(D-1) latency. */
double dp_ring_time(int D, double bytes, double bandwidth, double latency);
/* The report's lines (report.c): the text section and the JSON key "data_parallel". */
struct StrBuf;
void dp_report_text(struct StrBuf *b, const IrSchedule *s, const DpResult *x);
void dp_report_json(struct StrBuf *b, const IrSchedule *s, const DpResult *x);
/* Adds the all-reduces to a finished simulation r of s (NULL when s has no DpModel). */
DpResult *dp_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimResult *r);
#endif
