/* sim.h: the as-soon-as-possible simulator of a lowered schedule, and the order-based
 * memory accounting. See sim.c for the timing model. It reports nothing itself:
 * verify.c turns a stuck run into a deadlock error, report.c prints the figures. */
#ifndef PPS_SIM_H
#define PPS_SIM_H
#include "lower.h"

/* Links between ops that the executor and verify follow (by global id, -1 = none):
 * recv -> its send (the k-th send of the channel for the k-th recv); coll and S (a
 * broadcast) -> its sequence number among the device's collectives and S passes;
 * B/BW -> reload of (mb, stage); reload -> offload of (mb, stage). */
typedef struct SimLinks {
  int32_t *link;       /* [total] */
  int32_t *chan;       /* [total]: channel id of a send/recv, else -1 */
  int32_t *seq;        /* [total]: position of a send/recv in its channel */
  int nchan;
  int32_t *chan_src, *chan_dst;   /* [nchan] */
  int32_t *chan_nsend, *chan_nrecv; /* [nchan] */
  int32_t **chan_sends;           /* [nchan][nsend]: send ids in channel order */
  int32_t *ncoll;      /* [ndev] collectives and S passes on each device */
  /* posted recvs (IR_FLAG_POSTED; NULL when the schedule has none): the recv a
   * consumer waits for at its start, and each posted recv's consumer ([total], -1) */
  int32_t *postwait, *postcons;
} SimLinks;
void sim_links(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L);
/* Fills postwait/postcons (sim_links does when the schedule has posted recvs). */
void sim_link_posted(const IrSchedule *s, const AnaIndex *ix, SimLinks *L, Arena *a);

typedef struct SimDev {
  double busy;          /* compute time (F B W BW IF IB S T) */
  double idle;          /* makespan - busy */
  double first, last;   /* first compute start, last op end */
  double comm_wait;     /* time blocked in recv/coll */
  double copy_busy[2];  /* copy engine time: 0 = device->host, 1 = host->device */
  double copy_stall;    /* time B/BW waited for their reload's copy */
  double peak_order;    /* max running activation over program order */
  int32_t peak_order_op;
  double peak_time;     /* max over simulated time */
  int32_t peak_time_op;
  double peak;          /* max of the two */
  double host_peak;     /* max host (offloaded) memory, over program order */
  int32_t host_peak_op;
  double end_memory;    /* what is left at the end of the order (should be 0) */
  int64_t nops;
  /* memory over time (when asked): points (t[k], mem[k]), step function */
  double *mt, *mv; int nmem;
} SimDev;

typedef struct SimResult {
  int ok;               /* 1: every op ran; 0: the executor got stuck (deadlock) */
  double *start, *end;  /* [total]; copies: the copy interval; recv: arrival */
  SimDev *dev;          /* [ndev] */
  double makespan, ideal, bubble_rate, bubble_rate_span, span;
  double peak_memory; int peak_device;
  double host_memory;
  uint8_t *cancelled;   /* [total]: a reload issued while its offload was still being
                           copied, and that offload (the runtime cancels it); NULL = none */
  int64_t ncancelled;   /* such reloads */
  /* when stuck: each device's stuck position (global id) and what blocks it */
  int32_t *stuck_at;    /* [ndev]: global id of the op it waits at, -1 = finished */
  int32_t *wait_op;     /* [ndev]: send a stuck recv (or the consumer of a posted recv) waits
                           for, -1 = collective/S or never */
  struct DpResult *dp;  /* the data-parallel all-reduces (dp.c, set by analysis.c), else NULL */
} SimResult;

/* Order-based memory per device (fills dev[].peak_order, host_peak, end_memory);
 * works on any IR, valid or not. */
void sim_memory_order(const IrSchedule *s, const AnaIndex *ix, SimDev *dev);
/* Runs the executor; want_timeline fills memory-over-time points. Returns r->ok. */
int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
            SimResult *r, int want_timeline);
/* The same with the collectives' mode chosen: async = 1 runs them on their own lane
 * (`vocab async`), 0 as barriers that block the device (sim_run uses the schedule's
 * setting; verify also checks the blocking mode, the runtime's). */
int sim_run_mode(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                 SimResult *r, int want_timeline, int async);
/* Device time of one op (compute cost; 0 for send/recv/offload/reload issue). */
double sim_cost(const IrSchedule *s, const IrOp *op);
/* Under `vocab async`: how many collectives op waits for, their kinds in need[] (the
 * simulator's and the rendezvous model's one list): F(i, 0) input_fwd(i); T(i)
 * output_fwd(i); the last stage's B/BW(i) output_bwd(i) (Vocab-1) or output_fwd(i)
 * (Vocab-2); IB(i) input_bwd(i). */
int sim_coll_needs(const IrSchedule *s, const IrOp *op, int *need);
#endif
