/* synth.h: schedule synthesis (`synthesize;`): the compiler chooses every device's pass
 * order for the placement, costs and memory limit the file states, and proves a lower
 * bound on the makespan of any order. Elaboration calls synth_run once the stage costs
 * are known; the result is ordinary per-device compute ops, so lowering, verify, sim,
 * expand, emit-c and build see a file like any other. See synth.c and docs/synth.md. */
#ifndef PPS_SYNTH_H
#define PPS_SYNTH_H
#include "ir.h"

typedef struct SynthOptions {
  double time_limit;  /* seconds; <= 0: none (the search is bounded by `effort` alone) */
  int effort;         /* 0..4 (default 2): how many candidate orders the search may try */
  int fused;          /* 1: full backward BW only; 0: the search also tries B and W apart */
  Span span;          /* the synthesize statement */
  const char *stdlib_dir; /* where the standard schedules are (seeds); NULL: none */
  int offload_auto;   /* `offload auto;`: also choose which activations to offload */
} SynthOptions;

/* What the synthesiser found (IrSchedule.synth; `ppsc synth` prints it). Times are in
 * the file's cost unit, memory in activation units. */
typedef struct SynthInfo {
  double makespan;        /* of the chosen order, by the synthesiser's model (= sim's) */
  double peak;            /* its peak activation memory (max over devices) */
  double limit;           /* the memory limit searched under (< 0: none stated) */
  double lower_bound;     /* no order of this placement, costs and limit is faster */
  double gap;             /* makespan / lower_bound - 1 (0: proven optimal) */
  double lb_path, lb_work, lb_ramp, lb_cool, lb_drain, lb_memory; /* the terms of the bound */
  const char *lb_which;   /* the term that gives the bound */
  int lb_device;          /* the device of a per-device term, else -1 */
  double min_limit;       /* the least limit any order can meet */
  double seconds;         /* search time (wall clock) */
  long candidates;        /* orders simulated */
  int fused;              /* the chosen order uses BW (B and W fused) */
  int timed_out;          /* the time limit cut the search (the best so far is kept) */
  char policy[160];       /* the winning candidate, in words */
} SynthInfo;

/* Fills s->devs with the synthesised order (ops spanned at o->span) and sets s->synth.
 * Needs s->stages built. Returns 0, or -1 after reporting an error (a limit no order
 * can meet, a schedule too large to synthesise). */
int synth_run(Arena *a, Diag *d, IrSchedule *s, const SynthOptions *o);
/* `cost profile "FILE";` (profile.c): measured per-stage costs replace the stated ones
 * (s->stages built; relative paths from the directory of the file that says it, at).
 * Returns 0, or -1 after reporting an error. */
int elab_profile(Arena *a, Diag *d, IrSchedule *s, const char *path, Span at);
#endif
