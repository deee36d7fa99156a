/* exec.h: the one executor of a lowered schedule, under an explicit model (exec.c):
 * sends buffered or rendezvous within groups, collectives at a barrier or on their
 * lane, timed or untimed, with a hook through which lowering repairs a stuck
 * rendezvous run. Lowering (its timing of the vocabulary and offload placement, its
 * rendezvous repair), verification (the deadlock proofs) and simulation (the figures,
 * sim.c) all run schedules through it; none has an executor of its own. */
#ifndef PPS_EXEC_H
#define PPS_EXEC_H
#include "opindex.h"

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
                           for; for a pass waiting for a lane collective (`vocab async`), that
                           collective on the first other device that has not issued it;
                           -1 = collective/S (a barrier) or never */
  struct DpResult *dp;  /* the data-parallel all-reduces (dp.c, set by analysis.c), else NULL */
} SimResult;

/* A stuck rendezvous run as the repair hook sees it (read only). */
/* A send/recv's peer in a rendezvous run: its match's device (-1: never matched) and
 * the local index of its match's group (-1: waits for nothing, its match or itself
 * having been moved by the repair, so posted) */
typedef struct ExecPeer { int32_t dev, need; } ExecPeer;
typedef struct ExecStall {
  const IrSchedule *s;
  const AnaIndex *ix;
  const SimLinks *L;
  const int32_t *pc;       /* [ndev]: each device's position (local index) */
  const int32_t *stuck;    /* [ndev]: global id of the send/recv (or consumer) it waits at, -1 */
  const int32_t *waitdev;  /* [ndev]: the device a point-to-point wait is on, -1 */
  const ExecPeer *peer;    /* [total]: each send/recv's peer, as the run sees it now */
  const int32_t *ran;      /* [nran]: the devices that ran since the last repair (or the
                              start): no other device's pc or waitdev changed since */
  int nran, first;         /* first: 1 at the run's first repair */
} ExecStall;
/* The repair hook: picks a device d stuck at a send whose recv can be posted where
 * the recv's device stands (matched, not moved yet: peer need >= 0, and not posted:
 * its device before the recv's group), and the position pos (local index on that
 * device, at most where the recv stands) to post it at; returns d, or -1 to stop (the
 * run then ends stuck). The executor trusts this: it moves that recv, and the
 * channel's earlier unposted ones, there (moved[]) and runs on; each repair moves at
 * least one recv, so a run ends. */
typedef int (*ExecRepair)(void *ctx, const ExecStall *st, int *pos);

typedef struct ExecModel {
  int rendezvous;   /* 0: a send never waits (buffered) and a recv waits for its send;
                       1: the ops of a group (IR_FLAG_GROUP) are posted together and
                       each waits until its peer reached the group holding its match */
  int async;        /* collectives on their own lane (`vocab async`), else barriers */
  int timed;        /* time every op (start/end, SimDev's busy, waits, copies);
                       else only whether every device finishes, and where they stop.
                       Buffered runs only: a rendezvous run is untimed */
  const double *dur;   /* timed: each copy's duration (link sharing), NULL: the copy alone */
  /* timed, NULL for none: a compute pass of stage st starts no earlier than
   * release[st] ([nstage]), and any compute pass of device d no earlier than
   * release_dev[d] ([ndev], or NULL): the previous iteration's weight all-gathers of the
   * distributed optimizer, which the next iteration's passes wait for (dp.c) */
  const double *release, *release_dev;
  /* rendezvous repair (lowering): NULL to prove */
  ExecRepair repair;
  void *repair_ctx;
  int32_t *moved;   /* [total], -1 each, with repair: where each moved recv goes */
} ExecModel;

/* Runs the schedule under the model. Returns r->ok: 1 when every device finishes;
 * 0 when stuck (r->stuck_at, r->wait_op say where and on what: found after the run,
 * never in its loop); with a repair hook,
 * -1 when it ran to the end but a move joined a group the run did not model (the
 * caller moves and runs again). Timed runs fill r->start, r->end and r->dev's run
 * figures (busy, comm_wait, copy_busy, copy_stall); sim.c adds the rest. */
int exec_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const ExecModel *m,
             SimResult *r);
/* The timed buffered run with the copies' durations settled under link sharing
 * (hardware devices_per_host_link, duplex_bandwidth: runs again with the durations
 * the links give until they settle). async as ExecModel's. Returns r->ok. */
int exec_timed(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r, int async);
/* exec_timed with release times (ExecModel's release and release_dev; NULL: none). */
int exec_timed_release(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r, int async,
                       const double *release, const double *release_dev);
/* A copy's time alone (offload/reload: the stage's copy time times its fraction). */
double exec_copy_work(const IrSchedule *s, const IrOp *op);
/* The schedule's own collective mode: 1 under `vocab async`. */
static inline int exec_async(const IrSchedule *s) { return s->vocab.mode && s->vocab.async; }
#endif
