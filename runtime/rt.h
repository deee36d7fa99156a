/* rt.h: internal declarations shared by the runtime core's files (not installed):
 * parsed flags, the per-run and per-device state, the activation store, the IO box,
 * timing records. What it does not: nothing here is visible to generated code (that
 * is ppsrt.h) or to models (model.h). */
#ifndef PPSRT_RT_H
#define PPSRT_RT_H
#include <pthread.h>
#include <stdio.h>
#include "ppsrt.h"
#include "backend.h"
#include "transport.h"
#include "model.h"

/* ---- flags of the executable (cli.c) ---- */
typedef struct rt_opts {
  const char *model;             /* "mlp" (default) or "gpt" */
  ppsrt_model_config cfg;        /* sizes */
  int iterations;
  double lr;
  int optimizer;                 /* 0 sgd, 1 adam */
  int check;                     /* --check: numerics and memory */
  int check_memory;              /* --check-memory: memory only */
  const char *trace;             /* --trace OUT.json */
  int json;
  int allow_nonfinite;           /* --allow-nonfinite-loss: a NaN/inf loss is not an error */
  const char *backend;           /* "cpu", "cuda" */
  const char *transport;         /* "threads", "mpi", "nccl" */
  double timeout_s;
  int no_compute;
  int quiet;
  double peak_flops;             /* --peak-flops: peak FLOP/s per device, 0 = not given */
  /* test hooks (documented in docs/runtime.md): make rank die_rank fail at its
   * die_op-th op (die_hard: the process/thread aborts without cleanup under MPI), only at
   * tensor rank die_tp when that is >= 0 */
  int die_rank, die_op, die_hard, die_tp;
  long die_save;                 /* --die-in-save STEP: device 0 is killed while writing that step's index */
  const char *profile;           /* --profile FILE: measured per-stage costs (metrics.c) */
  int blocking_coll;             /* --blocking-collectives: no collective lane */
  /* training data and checkpoints (data.c, checkpoint.c) */
  const char *data;              /* --data FILE */
  int data_format;               /* --data-format: 0 auto, 1 tokens, 2 bytes, 3 indexed */
  int data_shuffle_on;           /* --data-shuffle SEED given (or restored from a --load checkpoint) */
  unsigned long long data_shuffle;   /* its seed (data.c ppsrt_tokens_shuffle) */
  int split_on;                  /* --split A,B,C given */
  double split[3];               /* its weights, normalized (data.c ppsrt_tokens_split) */
  const char *save, *load;       /* --save FILE, --load FILE */
  int save_every;                /* --save-every N: also after every N-th step (0: at the end only) */
  int data_parallel;             /* --data-parallel D: replicas of the pipeline (1: none; replica.c) */
  int tensor_parallel;           /* --tensor-parallel T: each device's layers split over T ranks (1: none; replica.c) */
  int sequence_parallel;         /* --sequence-parallel: with T > 1, the gpt's residual stream split by token rows */
  int context_parallel;          /* --context-parallel C: each sequence split over C ranks (1: none; cp.c) */
  int expert_parallel;           /* --expert-parallel X: each MoE layer's experts split over X replicas (1: none; ep.c) */
  int distopt;                   /* --distributed-optimizer: optimizer state sharded over the replicas (param.c) */
  /* learning rate and gradients (interp.c rt_lr_at, rt_optimizer_step) */
  int lr_schedule;               /* --lr-schedule: RT_LR_* */
  int warmup;                    /* --warmup N: linear from lr/N to lr over steps 1..N */
  double min_lr;                 /* --min-lr X: where cosine and linear end, the floor of inverse-square-root */
  long decay_steps;              /* --lr-decay-steps N: the step where cosine/linear reach min_lr (0: the run's last) */
  double clip_grad;              /* --clip-grad X: global gradient norm limit, 0 = none */
  double weight_decay;           /* --weight-decay X: decoupled, on the parameters without no_decay (0) */
  double beta1, beta2, eps;      /* --adam-beta1/--adam-beta2/--adam-eps (0.9, 0.999, 1e-8) */
  unsigned given;                /* RT_GIVEN_*: set on the command line (a --load does not restore those) */
  const char *val_data;          /* --val-data FILE */
  int val_every;                 /* --val-every N (default 10; and after the last iteration) */
  int eval_iters;                /* --eval-iters K (default 1): batches a validation evaluates (validate.c) */
} rt_opts;
enum { RT_GIVEN_LR = 1, RT_GIVEN_SCHEDULE = 2, RT_GIVEN_WARMUP = 4, RT_GIVEN_MIN_LR = 8, RT_GIVEN_DECAY = 16,
       RT_GIVEN_CLIP = 32, RT_GIVEN_WD = 64, RT_GIVEN_BETA1 = 128, RT_GIVEN_BETA2 = 256, RT_GIVEN_EPS = 512,
       RT_GIVEN_OPTIMIZER = 1024, RT_GIVEN_ROPE_BASE = 2048 };
/* RoPE's scaling (--rope-scaling and its parameters; restored by --load unless given) */
enum { RT_GIVEN_ROPE_SCALING = 1 << 16, RT_GIVEN_ROPE_FACTOR = 1 << 17, RT_GIVEN_ROPE_LOW = 1 << 18,
       RT_GIVEN_ROPE_HIGH = 1 << 19, RT_GIVEN_ROPE_ORIG = 1 << 20,
       RT_GIVEN_ROPE_PARAMS = RT_GIVEN_ROPE_FACTOR | RT_GIVEN_ROPE_LOW | RT_GIVEN_ROPE_HIGH | RT_GIVEN_ROPE_ORIG };
/* --rope-scaling's names (PPSRT_ROPE_*), as the command line, a checkpoint's metadata
 * and --json spell them (rt_util.c) */
extern const char *const rt_rope_scaling_names[PPSRT_ROPE_NSCALINGS];
int rt_rope_scaling_parse(const char *name);   /* PPSRT_ROPE_*, or -1 */
/* A scaling parameter given (RT_GIVEN_ROPE_* in `given`) that cfg's scaling does not
 * take: "FLAG needs --rope-scaling ...", or NULL */
const char *rt_rope_param_unused(const ppsrt_model_config *cfg, unsigned given);
/* --lr-schedule's decay after the warm-up (rt_lr_at); the names, as on the command line
 * and in a checkpoint's metadata, in rt_lr_schedule_names (rt_util.c) */
enum { RT_LR_CONSTANT, RT_LR_COSINE, RT_LR_LINEAR, RT_LR_INVSQRT, RT_LR_NSCHEDULES };
extern const char *const rt_lr_schedule_names[RT_LR_NSCHEDULES];
int rt_lr_schedule_parse(const char *name);   /* RT_LR_*, or -1 */

/* ---- timing records (metrics.c) ---- */
/* A copy-engine event of a cancelled offload (its D2H copy ran, its reload did not). */
enum { RT_TRACK_CANCELLED = 8, RT_TRACK_RECOMPUTE = 16 };   /* RECOMPUTE: a B/BW running F again (compute track) */
typedef struct rt_event {
  double t0, t1;          /* seconds since the run's epoch */
  int32_t op;             /* index in the device's op table */
  int16_t track;          /* 0 compute/comm, 1 copy engine d2h, 2 copy engine h2d; | RT_TRACK_CANCELLED */
  int16_t it;             /* iteration */
} rt_event;

/* ---- activation store (actstore.c, offload.c) ---- */
enum { RT_ACT_NONE, RT_ACT_DEV, RT_ACT_OFFLOADING, RT_ACT_HOST, RT_ACT_RELOADING };
typedef struct rt_act {
  void *dev, *host;
  void *rest;             /* split offload: device copy of bytes [hbytes, bytes) */
  void *old;              /* cancelled offload: the buffer its D2H copy still reads */
  size_t bytes;
  size_t hbytes;          /* bytes [0, hbytes) went to the host (offloaded or offloading) */
  double units;           /* bytes in activation units of its stage */
  uint8_t state;          /* RT_ACT_* */
  uint8_t moved;          /* part of the last offload */
  uint8_t cancelled;      /* its reload cancelled the offload still in flight: `dev` is a
                           * device-side copy, and `old` (the buffer the D2H copy reads),
                           * `host` and `rest` are freed once `ev` fires */
  ppsrt_event *ev;        /* completion of the copy in flight */
} rt_act;
typedef struct rt_slot { rt_act *e; int n, cap, mark; } rt_slot;   /* mark: recompute.c (partial) */

typedef struct rt_store {
  rt_slot *slots;         /* [nmb * ncol]: only the stages this device keeps memory for */
  int nmb, nstage;
  int *col, ncol;         /* [nstage + 1]: column of stage s at [s + 1], -1 = none (owned);
                           * col NULL: slots [nmb * (nstage + 1)], every stage (hand-built) */
  size_t cur, peak;       /* counted bytes (program order), now and peak at op boundaries */
  double ucur, upeak;     /* the same in activation units (per-stage normalised) */
  const double *upb;      /* [nstage + 1]: units per byte of stage s at [s + 1]; NULL = 0 */
  size_t host_cur, host_peak;
  size_t resident, resident_peak; /* bytes really on the device (offload freed at completion) */
  long ncancel;           /* reloads that cancelled an offload still in flight, this run */
  /* copies in flight, polled at op boundaries */
  /* dir 0 offload, 1 reload, 2 an offload whose reload cancelled it */
  struct rt_pending { int mb, stage, idx; uint8_t dir; double t0; int32_t op; } *pend;
  int npend, cappend;
} rt_store;

/* ---- IO box (interp.c) ---- */
typedef struct rt_box { void *buf; size_t bytes; } rt_box;

typedef struct ppsrt_run ppsrt_run;

/* ---- --data-parallel's buffers (replica.c): one a stage (and, with
 * --distributed-optimizer, one for a tied tensor): its tensors' gradients (F32) and with
 * --distributed-optimizer their weights (act dtype) at the same element offsets, each
 * tensor's offset a multiple of RT_DP_ALIGN elements, n elements in all (a multiple of
 * D with --distributed-optimizer; replica r owns [r C, (r + 1) C), C = n / D) ---- */
enum { RT_DP_ALIGN = 128 };
typedef struct rt_dp_bucket {
  int stage;
  int expert;        /* --expert-parallel: this rank's experts' gradients (summed over ctx etr) */
  float *grad;
  void *w;
  size_t n, C;
  ppsrt_event *ev;   /* GPU: recorded after the weights' all-gather on the DP stream */
  int pending;       /* that all-gather not yet waited for by the compute stream */
} rt_dp_bucket;

struct ppsrt_ctx {
  ppsrt_run *run;
  int rank;               /* device */
  ppsrt_backend *be;
  ppsrt_model *model;
  ppsrt_transport *tr;
  int iteration;
  int reference;          /* the --check reference context (no transport) */
  rt_store store;
  rt_box *box;            /* [2 * nmb * nbcol] */
  int *bcol, nbcol;       /* [nstage + 2]: box column of key stage s at [s + 1], -1 = none;
                           * bcol NULL: box [2 * nmb * (nstage + 2)], every key (hand-built) */
  ppsrt_event *mark;      /* compute-stream marker the offload copies wait for (reused) */
  ppsrt_event *xev;       /* orders SEND after COMPUTE and COMPUTE after RECV (reused) */
  int devtime;            /* time compute ops with backend events (asynchronous backends) */
  ppsrt_event **tev;      /* [2 * nops + 1]: start/end of compute op i, base at 2 * nops */
  int nmb, nstage;
  int32_t cur_op;         /* op being executed, for messages */
  const ppsrt_op *ops; int nops;
  uint8_t *free_after;    /* [nops]: SEND whose box entry no later op needs */
  int grp_open;           /* inside a point-to-point group (transport group hooks) */
  int32_t grp0;           /* its first op */
  /* posted receives (ppsrt.h op flag 8, interp.c): post_due[j] is the first posted recv
   * completed right before op j (j = nops: at the iteration's end), post_next chains
   * the others due there, -1 ends; NULL when the table has none. pst: those posted
   * and not yet completed, in posting order. */
  int32_t *post_due;      /* [nops + 1] */
  int32_t *post_next;     /* [nops] */
  struct rt_posted { int32_t op; void *buf; size_t bytes; void *h; } *pst;
  int npst, cappst;
  rt_event *ev; int nev, capev;
  double *busy;           /* [iterations] compute seconds */
  double *span;           /* [iterations] wall seconds of the iteration */
  double *loss;           /* [iterations] (rank-summed) */
  size_t *peak_bytes;     /* [iterations] store peak per iteration */
  size_t act_unit;        /* bytes of one device share for one microbatch (first held stage) */
  double *upb;            /* [nstage + 1] units per byte, per stage (stage -1 first) */
  double *peak_units;     /* [iterations] */
  double max_units;       /* over the iterations so far */
  int act_mismatch;       /* F kept other than act_bytes(stage): first case below */
  int am_mb, am_stage; size_t am_got, am_want;
  int check_failed;
  int status;             /* 0 or the PPSRT_E* that stopped it */
  char errmsg[2048];
  char *check_text;       /* --check lines of this rank, printed in rank order (malloc) */
  struct rt_lane *lane;   /* the collective lane (coll_lane.c), NULL: collectives block */
  ppsrt_transport *lane_tr;   /* the lane's transport: run->lane_tr, or with --data-parallel this
                               * replica's view of it (run->lane_views); NULL: no lane */
  unsigned nonce; int nonce_set;   /* --save: the run's shard-name nonce (checkpoint.c) */
  /* --data-parallel (replica.c): tr is the replica's view, wtr the world transport */
  int replica;            /* 0..D-1 */
  ppsrt_transport *wtr;   /* the world transport (P x D x T ranks) */
  int wrank;              /* rank in it: (replica * P + rank) * T + tp_rank */
  ppsrt_transport *gtr;   /* this device's D replicas (rank = replica): the gradient all-reduce */
  int tp_rank;            /* --tensor-parallel: 0..T-1 in the group of this (replica, device) */
  ppsrt_transport *ttr;   /* that group (rank = tp_rank), NULL without tensor parallelism */
  /* --context-parallel C (cp.c): world rank ((replica P + rank) C + cp_rank) T + tp_rank */
  int cp_rank;            /* 0..C-1 in the group of this (replica, device, tensor rank) */
  ppsrt_transport *ctr;   /* that group (rank = cp_rank), NULL without context parallelism */
  int grank;              /* rank in gtr, the gradients' group: replica C + cp_rank (D x C ranks) */
  /* --expert-parallel X (ep.c): replica r = q X + ep_rank is rank ep_rank of expert-parallel
   * group q (the X replicas q X .. q X + X - 1 of this device, context and tensor rank) */
  int ep_rank;            /* 0..X-1 */
  ppsrt_transport *xtr;   /* that group (rank = ep_rank), NULL without expert parallelism */
  double ep_a2a_sent;     /* --moe-token-dispatcher alltoall: bytes this rank's all-to-alls sent to the others, */
  double ep_a2a_slots;    /* and its own kept slots routed to the others' experts, this iteration (ep.c) */
  ppsrt_transport *etr;   /* the expert-data-parallel group: the D/X x C ranks (q, cp_rank) with this
                           * ep_rank, device and tensor rank, which sum the experts' gradients (rank
                           * erank = q C + cp_rank); NULL when it is one rank */
  int erank;
  /* activation recomputation (recompute.c): while F runs again before B */
  int recomputing;
  void *rc_in; size_t rc_bytes; int rc_mb, rc_stage;   /* the kept input, until F takes it */
  int rc_fill;            /* a partial rebuild: the next entry its saves refill, else -1 */
  ppsrt_event **rcev;     /* [2 * nops]: start/end of the rebuild in B/BW op i (devtime), else NULL */
  double rc_time;         /* this iteration: seconds spent rebuilding (host clock or events) */
  long rc_count;          /* this iteration: rebuilds run */
  int rc_mismatch;        /* a recomputed F kept other than its predicted share of its act: first case */
  int rm_stage; double rm_got, rm_want;
  ppsrt_event *dp_ev[2];  /* --data-parallel on a GPU: compute -> DP stream, DP -> compute (replica.c) */
  int dp_pending;         /* all-reduces queued on the DP stream this iteration */
  rt_dp_bucket *dp_b;     /* --data-parallel: this device's gradient buffers (replica.c), dp_nb of them */
  int dp_nb;
};

/* The whole run, shared by the device threads of one process. */
struct ppsrt_run {
  const ppsrt_program *prog;
  rt_opts o;
  ppsrt_transport *tr;
  ppsrt_transport *lane_tr;  /* tr's dup for the collective lanes, NULL: collectives block */
  int nlocal;             /* device contexts in this process */
  int first_rank;         /* rank of ctx[0] */
  ppsrt_ctx *ctx;         /* [nlocal] */
  double epoch;           /* rt_now() at start */
  FILE *out;              /* stdout */
  pthread_mutex_t print_lock;
  ppsrt_model_create_fn create;
  /* figures of every device, kept by the context that prints (rank 0, or the MPI rank) */
  double *dev_busy, *dev_span;      /* [iterations * ndev] seconds */
  size_t *dev_peak;                 /* [iterations * ndev] counted peak bytes */
  size_t *dev_resident, *dev_host, *dev_unit;   /* [ndev], of the last iteration */
  size_t *dev_params;               /* [2 ndev]: a rank's parameter elements, and its experts' of them (replica 0's) */
  size_t *dev_mem;                  /* [iterations * ndev] peak of every device allocation (mem_stats) */
  long *dev_cancel;                 /* [ndev] offloads cancelled by their reload, so far */
  double *dev_rctime;               /* [iterations * ndev] seconds B/BW spent running F again (recompute.c) */
  long *dev_rccount;                /* [iterations * ndev] rebuilds (recomputed B/BW) */
  double *dev_a2a;                  /* [2 ndev] --moe-token-dispatcher alltoall: the bytes the X ranks of each device's
                                     * first expert-parallel group sent each other, and their slots routed to another
                                     * rank's experts, over the run (interp.c; --json's ep_alltoall) */
  double *dev_units;                /* [iterations * ndev] measured peak units */
  int *dev_membad;                  /* [ndev] measured != predicted (decided by the rank, in double) */
  int *dev_actbad;                  /* [ndev] F kept other than act_bytes */
  double *loss;                     /* [iterations] */
  long check_mismatches;            /* --check: values outside the tolerance, all ranks */
  int check_loss_bad;               /* --check: the loss differs */
  double check_k, check_k_loss;    /* --check: the tolerances (check.c) */
  int memory_mismatch;              /* measured units != predicted on some device */
  double check_maxdiff;            /* --check: the largest relative norm difference of a tensor */
  int iterations_done;
  char first_error[2048];
  /* FLOPs (cli.c counts them from the op tables and the model's pass FLOPs; metrics.c
   * reports achieved FLOP/s = FLOPs / iteration time and MFU = achieved / (ndev x peak)) */
  int flops_known;                  /* 0 with --no-compute (no kernels ran) */
  double *dev_flops;                /* [ndev] FLOPs of one iteration per device */
  double flops_total;               /* sum over devices */
  double peak_flops;                /* peak FLOP/s per device, 0 = unknown (MFU n/a) */
  const char *peak_source;          /* "--peak-flops", "hardware", NULL */
  const ppsrt_tokens *val_tokens;   /* --val-data (validate.c) */
  long step0;                       /* steps done before this run (--load): iteration it is step step0 + it + 1 */
  long data0;                       /* training sequences consumed before this run (--load) */
  struct rt_ckpt *ck;               /* --load: the checkpoint (checkpoint.c) */
  int nrep;                         /* --data-parallel D (1: none) */
  ppsrt_transport **views;          /* [nrep] with D > 1: each replica's view of tr */
  ppsrt_transport **lane_views;     /* [nrep] with D > 1 and a lane: each replica's view of lane_tr */
  ppsrt_transport **groups;         /* with D > 1, each (device, tensor rank)'s replicas (threads: [ndev x T]; MPI: [0], this process's) */
  int ntp;                          /* --tensor-parallel T (1: none); world rank (replica x P + device) x T + tensor rank */
  ppsrt_transport **tgroups;        /* with T > 1, each (replica, device)'s tensor-parallel group (threads: [D x P]; MPI: [0]) */
  int ncp;                          /* --context-parallel C (1: none); world rank ((replica x P + device) x C + cp) x T + tensor rank */
  int ngrad;                        /* D x C: the ranks that sum a device's gradients (gtr; Megatron's data-parallel group with context parallelism) */
  ppsrt_transport **cgroups;        /* with C > 1, each (replica, device, tensor rank)'s context-parallel group (threads: [D x P x T]; MPI: [0]) */
  int nep;                          /* --expert-parallel X (1: none); replica r = q X + j: EP rank j of group q */
  ppsrt_transport **xgroups;        /* with X > 1, each (group q, device, cp, tensor rank)'s expert-parallel group
                                     * (threads: [D/X x P x C x T], index ((q P + d) C + c) T + t; MPI: [0]) */
  ppsrt_transport **egroups;        /* with X > 1 and D/X x C > 1, each (j, device, tensor rank)'s expert-data-
                                     * parallel group (threads: [X x P x T], index (j P + d) T + t; MPI: [0]) */
  ppsrt_transport **pgroups;        /* with D T > 1: each pipeline's P ranks, its view's collectives (threads: [D x T]; MPI: [0]) */
  ppsrt_transport **lane_pgroups;   /* the same for the collective lane's views (NULL: no lane, or not made: host-staged) */
  double *lr_it, *gnorm_it;         /* [iterations]: learning rate used, gradient norm (--clip-grad) */
  double *val_loss;                 /* [iterations]: validation loss where computed */
  int (*validate_step)(ppsrt_ctx *c, int it);   /* rt_validate_step, set by cli.c (interp.c calls it after
                                                 * each iteration; validate.c calls interp.c's
                                                 * rt_eval_forward: the calls go one way) */
  double *val_time;                 /* [iterations]: its wall seconds (in no iteration's time) */
  size_t *dev_val_peak, *dev_val_mem;   /* [ndev]: the largest counted activation peak and device memory
                                     * peak of an evaluation (validate.c), like dev_peak and dev_mem */
  long val_seqs;                    /* sequences one validation evaluates (all replicas) */
  int ck_data;                      /* --load: the checkpoint's run trained on a --data file (its "data" field) */
};

/* checkpoint.c */
typedef struct rt_ckpt rt_ckpt;
/* Reads and checks the index and shard headers (once per process, before the devices
 * start): sets run->step0, run->data0 and the schedule settings not given. */
int rt_ckpt_open(ppsrt_run *run, const char *path, rt_ckpt **out);
void rt_ckpt_close(rt_ckpt *ck);
int rt_ckpt_load(ppsrt_ctx *c, const rt_ckpt *ck);   /* one device's tensors */
/* The checkpoint key of runtime parameter `name` ("s2.l1.qkv.w" with lps 2 layers per
 * stage: "layer5.qkv.w"; "s3.lnf.g": "lnf.g"; others unchanged) into out[cap]. */
void rt_ckpt_layer_key(const char *name, int lps, char *out, size_t cap);
/* Every device at once (collective): its shard, then device 0 the index. Every device
 * learns of a failure: *peer = 1 where another device failed (nothing to abort). */
int rt_ckpt_save(ppsrt_ctx *c, const char *path, long step, int *peer);
/* validate.c: after iteration it, the validation loss when it is due (every device calls it) */
int rt_validate_step(ppsrt_ctx *c, int it);
/* interp.c */
/* Forward-only evaluation (validate.c): `batches` batches of this device's microbatches
 * through the device's op table restricted to the forward passes; *loss the mean of the
 * batches' losses (end_iteration's share, summed over the pipeline as training's), *peak
 * the counted activation peak bytes over them, *dmem the device memory peak (mem_stats,
 * 0 without). Every device of the pipeline calls it with the same batches. */
int rt_eval_forward(ppsrt_ctx *c, int batches, double *loss, size_t *peak, size_t *dmem);
int rt_ctx_init(ppsrt_run *run, ppsrt_ctx *c, int rank);
void rt_ctx_fini(ppsrt_ctx *c);
int rt_run_device(ppsrt_ctx *c);                 /* all iterations of one device */
int rt_gather_events(ppsrt_ctx *c, int nw, rt_event **out, int *nout);   /* MPI trace: every world rank's */

/* actstore.c / offload.c */
/* used[s + 1] != 0 for the stages (-1 .. nstage-1) that get slots; NULL = all. */
int rt_store_init(rt_store *s, int nmb, int nstage, const uint8_t *used);
void rt_store_fini(rt_store *s, ppsrt_backend *be);
void rt_store_reset_peak(rt_store *s);
void rt_store_sample(rt_store *s);   /* peak at an op boundary */
size_t rt_store_slot_bytes(ppsrt_ctx *c, int mb, int stage);
int rt_store_leftover(ppsrt_ctx *c, int *mb, int *stage);   /* entries still held */
/* recompute.c: after F of a recomputed stage, and before its B/BW */
int rt_recomputed(const ppsrt_ctx *c, int stage);
int rt_recompute_drop(ppsrt_ctx *c, int mb, int stage);
int rt_recompute_rebuild(ppsrt_ctx *c, int op, int mb, int stage);
int rt_recompute_check(const ppsrt_program *p, const char **why, int *stage);
/* actstore.c: frees every entry of (mb, stage) but entry 0 (keep_marked: only entries
 * 1 .. mark - 1, mark set by rt_act_mark at the end of the last recomputed layer);
 * takes entry 0 out of the store (uncounted, the caller owns the buffer) and empties
 * the slot (partial: leaves the rest, and the rebuild's saves refill 0 .. mark - 1,
 * which rt_act_refilled checks) */
void rt_act_mark(ppsrt_ctx *c, int mb, int stage);
int rt_act_keep_first(ppsrt_ctx *c, int mb, int stage);
int rt_act_keep_marked(ppsrt_ctx *c, int mb, int stage);
int rt_act_detach_first(ppsrt_ctx *c, int mb, int stage, int partial, void **buf, size_t *bytes);
int rt_act_refilled(ppsrt_ctx *c, int mb, int stage);
int rt_offload(ppsrt_ctx *c, int mb, int stage, double fraction);
int rt_reload(ppsrt_ctx *c, int mb, int stage);
int rt_poll_copies(ppsrt_ctx *c, int wait_all);
void rt_cancel_done(ppsrt_ctx *c, rt_act *e);
int rt_act_wait(ppsrt_ctx *c, int mb, int stage, int idx);
static inline double rt_part_units(const rt_act *e, size_t part) {
  return e->bytes ? e->units * ((double)part / (double)e->bytes) : 0;
}

/* metrics.c */
int rt_event_add(ppsrt_ctx *c, double t0, double t1, int32_t op, int track);
int rt_write_trace(ppsrt_run *run, const char *path);
/* --profile FILE: per-stage mean and spread of every pass kind, of one hop and of the
 * offload copies, in seconds (the format compiler/profile.c reads). */
int rt_write_profile(ppsrt_run *run, const char *path);
void rt_print_iteration(ppsrt_run *run, int it);
void rt_print_json(ppsrt_run *run, int status);
void rt_print_flops(ppsrt_run *run);   /* the FLOPs summary line */
/* FLOPs of one pass (kind, stage) of one microbatch, from the model's sizes */
typedef double (*rt_pass_flops_fn)(const ppsrt_model_config *cfg, int kind, int stage);
void rt_count_flops(ppsrt_run *run, rt_pass_flops_fn fn);
int rt_compare_memory(ppsrt_run *run, int print);

/* coll_lane.c: asynchronous vocabulary collectives */
typedef struct rt_lane rt_lane;
int rt_lane_start(ppsrt_ctx *c);
void rt_lane_stop(ppsrt_ctx *c);
int rt_lane_issue(ppsrt_ctx *c, int i);
int rt_lane_consume(ppsrt_ctx *c, int i, int *waited);
int rt_lane_drain(ppsrt_ctx *c);

/* check.c */
int rt_check_gradients(ppsrt_ctx *c, double pipeline_loss, int *mismatch);
/* PPSRT_FAULT and PPSRT_CHECK_K* (check.c; tests only): -1 to go on, else the exit status
 * (PPSRT_FAULT=list printed the tensors --check compares: 0; a bad value: 2). */
int rt_fault_setup(ppsrt_run *run, ppsrt_model_config *cfg, int check, const char *me);

/* error.c */
void ppsrt_error_set_rank(int rank);
void ppsrt_clear_error(void);

/* replica.c: the pipeline (replica r, tensor rank t)'s view of the world transport (P
 * ranks of its own; world rank (r P + d) T + t); after the backward passes, gradients
 * and loss averaged over the replicas */
int rt_replica_view(ppsrt_transport *world, ppsrt_transport *coll, int P, int D, int T, int r, int t, ppsrt_transport **out);
/* --tensor-parallel (replica.c): the sum of *x over this rank's group (host, a float
 * pair: every rank gets the same); the group's tensor of p's gathered slices, on tensor
 * rank 0 (host: `mine` its numel values, `full` its ppsrt_param_group_numel: the full
 * tensor, or a vocabulary-parallel device's rows; every rank of the group calls it;
 * full may be NULL on the others) */
int rt_tp_sum(ppsrt_ctx *c, double *x);
/* --context-parallel (replica.c): the same over this rank's context-parallel group */
int rt_cp_sum(ppsrt_ctx *c, double *x);
int rt_tp_gather(ppsrt_ctx *c, const ppsrt_param *p, const float *mine, float *full);
int rt_replica_flatten(ppsrt_ctx *c);
/* ep.c (--expert-parallel): the sum of *x over this rank's expert-parallel group (host, a
 * float pair, like rt_tp_sum; nothing without one); p (one of this rank's experts) gathered
 * from the group: `all` (host, X x numel) holds rank u's tensor `mine` (host, numel values)
 * at block u, every rank of the group calls it; the name of rank u's counterpart of p
 * (its expert index moved by (u - ep_rank) E/X) into `out`. */
int rt_ep_sum(ppsrt_ctx *c, double *x);
int rt_ep_gather(ppsrt_ctx *c, const ppsrt_param *p, const float *mine, float *all);
int rt_ep_name(const ppsrt_ctx *c, const char *name, int u, char *out, size_t cap);
int rt_replica_after(ppsrt_ctx *c, int i);
int rt_replica_end(ppsrt_ctx *c);
void rt_replica_fini(ppsrt_ctx *c);
int rt_replica_loss(ppsrt_ctx *c, double *loss);
/* --distributed-optimizer (replica.c): after the optimizer updated this replica's shards,
 * each buffer's weights gathered from every replica (and its gradient cleared); the sum over
 * the device's replicas of *x (the gradient norm's sum of squares, one shard each); p's
 * sharded state `shard` (its master, m or v: sh_n values) gathered whole into host
 * memory out (numel values; every replica calls it, collectively). */
int rt_replica_gather_weights(ppsrt_ctx *c);
/* ... and on a GPU, where those all-gathers run on the DP stream: the compute stream waits
 * for stage `stage`'s (and the vocabulary rows', stage -1) before the stage's first pass
 * of the next iteration; all = 1: for every stage's (before --val-data, --save, the end) */
int rt_replica_weights_wait(ppsrt_ctx *c, int stage, int all);
int rt_replica_sum(ppsrt_ctx *c, double *x);
/* --expert-parallel: the same over the expert-data-parallel group (the experts' shards) */
int rt_replica_expert_sum(ppsrt_ctx *c, double *x);
int rt_replica_gather_state(ppsrt_ctx *c, const ppsrt_param *p, const float *shard, float *out);
/* interp.c: the optimizer step `step` (1-based, counted over resumed runs), with the
 * scheduled learning rate and --clip-grad; the rate of a step */
int rt_optimizer_step(ppsrt_ctx *c, int step, double *lr, double *gnorm);
double rt_lr_at(const rt_opts *o, long step);

/* rt_util.c: shared helpers below every other runtime file (they call none of them):
 * the clock (CLOCK_MONOTONIC seconds), an op's text as `ppsc expand` writes it, and a
 * few F32 values reduced over every rank (staged through backend memory) */
double rt_now(void);
/* How messages name context c's rank: "device 1", with "(replica 1, tensor rank 0)" or
 * either alone under --data-parallel / --tensor-parallel. */
const char *rt_who(const ppsrt_ctx *c, char *buf, size_t size);
int rt_format_op(const ppsrt_program *p, const ppsrt_op *op, char *buf, int size);
int rt_allreduce_host(ppsrt_ctx *c, float *v, size_t n, ppsrt_redop op);
int rt_allreduce_host_on(ppsrt_ctx *c, ppsrt_transport *tr, int rank, float *v, size_t n, ppsrt_redop op);

/* iobox.c: the device's IO box (ppsrt_io_* in model.h) */
/* Box columns for the keys the device's ops can touch (all = 1: every stage). */
int rt_box_init(ppsrt_ctx *c, int all);
int rt_box_clear(ppsrt_ctx *c);   /* frees what is left in it */
/* A one-device reference context beside device context c (--check): all
 * stages' box columns; on failure nothing is left allocated. */
int rt_ref_ctx_init(ppsrt_ctx *rx, ppsrt_run *run, const ppsrt_ctx *c);
#endif
