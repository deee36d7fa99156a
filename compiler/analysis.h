/* analysis.h: the analysis pipeline behind `check` and `sim` (lower, verify,
 * simulate, evaluate expectations), callable on an IR built in memory (tests, emit-c).
 * It prints nothing but diagnostics; the commands print the reports. */
#ifndef PPS_ANALYSIS_H
#define PPS_ANALYSIS_H
#include "lower.h"
#include "report.h"
#include "verify.h"

typedef struct Analysis {
  int64_t inserted_ops;
  int verified;          /* verification ran */
  int valid;             /* no error anywhere (front end included) */
  VerifyResult vr;
  SimResult sim;
  int simulated;         /* sim holds figures */
  ExpectResult *expects; /* [s->nexpects] */
} Analysis;

/* Lowers s in place, verifies it and, when it is valid, simulates it and evaluates
 * its expectations (errors through dg). want_timeline keeps memory-over-time points.
 * Returns 1 when valid. */
int analysis_run(Arena *a, Diag *dg, IrSchedule *s, Analysis *out, int want_timeline);
/* The synthesizer's check of a candidate order (synth.h, SynthCheckFn): analysis_run
 * with its diagnostics kept to itself; the driver hands it to the order phase. */
int analysis_candidate(Arena *a, IrSchedule *t, double fig[3], const char **why);
/* The value an `expect` names, from a simulation; returns 0 if it has none. */
int analysis_metric(const IrSchedule *s, const SimResult *r, int metric, int device, double *out);
#endif
