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
/* Runs the executor; want_timeline fills memory-over-time points. Returns r->ok. */
int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
            SimResult *r, int want_timeline);
/* Adds the memory-over-time points to the figures of a run sim_run finished without
 * them (verification's), without running it again: r gets its own copy of the
 * per-device figures, computed again with the points (the same figures). */
void sim_timeline(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimResult *r);
/* The same with the collectives' mode chosen: async = 1 runs them on their own lane
 * (`vocab async`), 0 as barriers that block the device (sim_run uses the schedule's
 * setting; verify also checks the blocking mode, the runtime's). */
int sim_run_mode(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                 SimResult *r, int want_timeline, int async);
#endif
