/* sim.h: the simulation's figures of a lowered schedule (makespan, bubble, memory
 * over program order and over time). The run is the executor's (exec.h, exec.c state
 * the timing model). It reports nothing itself: verify.c turns a stuck run into a
 * deadlock error, report.c prints the figures. */
#ifndef PPS_SIM_H
#define PPS_SIM_H
#include "exec.h"

/* Order-based memory per device (fills dev[].peak_order, host_peak, end_memory);
 * works on any IR, valid or not. */
void sim_memory_order(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimDev *dev);
/* The executor's timed run (collectives as the schedule says: on their lane under
 * `vocab async`) and its figures, without the memory-over-time points (sim_timeline
 * adds them). Returns r->ok. */
int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r);
/* Adds the memory-over-time points to the figures of a run sim_run finished without
 * them (verification's), without running it again: r gets its own copy of the
 * per-device figures, computed again with the points (the same figures). */
void sim_timeline(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimResult *r);
#endif
