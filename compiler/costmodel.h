/* costmodel.h: seconds and bytes from the `model { }` and `hardware { }` blocks:
 * per-stage TF, TB, TW (and the vocabulary passes), TC and TOFF from transformer
 * FLOPs and bandwidths, the bytes of one activation unit, and the static bytes
 * (weights, gradients, optimizer state) of each device, with tensor parallelism (one
 * GPU of each device's tensor-parallel group; context and expert parallelism too),
 * and the data-parallel model
 * (dp_derive; its simulation is dp.c's). See costmodel.c. */
#ifndef PPS_COSTMODEL_H
#define PPS_COSTMODEL_H
#include "ir.h"

/* What the hardware block says of tensor parallelism (hardware { tensor_parallel = T }
 * > 1; NULL in IrDerived and CostModel when T = 1): each pipeline device is a group of
 * T GPUs, and every time and byte of the cost model is one GPU's (costmodel.c). */
typedef struct TpModel {
  int T;               /* GPUs of each tensor-parallel group (> 1) */
  int sp;              /* hardware sequence_parallel = 1 */
  double bandwidth;    /* tp_bandwidth (default peer_bandwidth; 0: neither, no times) */
  double latency;      /* tp_latency, seconds a ring step (default 0) */
  int times;           /* the communication times below are derived (seconds) */
  double f, b;         /* TP communication inside one device share's TF and TB (L / P
                          layers), s; W has none */
  double in_f, in_b;   /* inside the input layer's F and B (stage 0; under vocab parallel
                          in_f is inside TIF, in_b 0) */
  double out_f, out_b; /* inside the output layer's F and B (stage S-1; under vocab parallel
                          inside TS and TT) */
  int bytes;           /* the activation split below is derived (heads given) */
  double act_rep;      /* bytes of one layer's activation for one microbatch that every GPU
                          of the group holds whole (0 with sequence parallelism; with
                          context parallelism of the GPU's s / C tokens, as act_split) */
  double act_split;    /* the rest: each GPU holds 1/T of it */
} TpModel;

/* What the hardware block says of context parallelism (hardware { context_parallel = C }
> 1; NULL in IrDerived and CostModel when C = 1), Megatron-LM's --context-parallel-size
with --cp-comm-type all_gather: each pipeline device (each GPU of its tensor-parallel
group) is C GPUs, each holding 2 of 2C chunks of the sequence (c and 2C-1-c: balanced
under the causal mask), so every derived FLOP and activation byte is 1/C; a layer's F
all-gathers K and V over the C GPUs, its B all-gathers them again and reduce-scatters
their gradients (costmodel.c). */
typedef struct CpModel {
  int C;               /* GPUs of each context-parallel group (> 1) */
  double bandwidth;    /* cp_bandwidth (0: not given, no times) */
  double latency;      /* cp_latency, seconds a ring step (default 0) */
  int times;           /* the communication times below are derived (seconds) */
  double kv_bytes;     /* K and V of one layer for one microbatch, the whole sequence, one
                          tensor-parallel rank's key/value heads: 2 s b (g/T)(h/a) d */
  double f, b;         /* CP communication inside one device share's TF and TB (L / P
                          layers), s; W has none */
} CpModel;

/* What the hardware block says of expert parallelism (hardware { expert_parallel = X }
> 1 with model experts; NULL in IrDerived and CostModel when X = 1), Megatron-LM's
--expert-model-parallel-size X with --moe-token-dispatcher-type allgather: the X
consecutive data-parallel replicas of a pipeline device (same context and tensor rank)
form an EP group, rank j holding experts [j E/X, (j+1) E/X); the router whole. A MoE
layer's F all-gathers LN2's output and the routing and reduce-scatters the combined
outputs over the X GPUs, its B all-gathers dy and reduce-scatters the input gradient and
the routing weights' gradient, its W all-gathers LN2's output again (costmodel.c). The
experts' parameters, gradients and optimizer state are 1/X a GPU, their gradients
reduced over the D/X replicas of the same EP rank (x C: dp_derive). */
typedef struct EpModel {
  int X;               /* GPUs of each expert-parallel group (> 1) */
  int edp;             /* D / X: replicas of each expert-data-parallel group */
  double bandwidth;    /* ep_bandwidth (0: not given, no times) */
  double latency;      /* ep_latency, seconds a ring step (default 0) */
  int times;           /* the communication times below are derived (seconds) */
  double tokens;       /* N: tokens a GPU's MoE MLP sees a microbatch (s b / C) */
  double slots;        /* X N K: the routed slots the experts' entry is sized for */
  double f, b, w;      /* EP communication inside one device share's TF, TB and TW (L / P
                          layers), s */
  double layer_f, layer_b, layer_w; /* the same of one layer */
  int alltoall;        /* hardware ep_alltoall = 1: the all-to-all token dispatcher (else allgather) */
  double layer_bytes;  /* alltoall: the bytes a GPU sends in its EP group's all-to-alls for one layer and
                          microbatch (F, B and W; balanced routing assumed), else 0 */
  int bytes;           /* expert_bytes is derived */
  double expert_bytes; /* the experts' activation store entry of one layer a microbatch
                          (X N K slots, costmodel.c moe_bytes) */
  double *params;      /* [ndev] when the bytes are derived, else NULL: the experts'
                          parameters one GPU of each device holds (E / X experts a layer) */
} EpModel;

/* Tied embeddings on two devices (model { tie_embeddings = 1 } without `vocab parallel`,
 * stage 0 and the last stage on different devices): after the iteration (and the
 * data-parallel gradient collectives of the two devices) the two exchange the matrix's
 * F32 gradient point to point, each sending and receiving `bytes` (the runtime's
 * tie_sync); NULL in CostModel and IrDerived otherwise, or without the model's hidden
 * and vocab. */
typedef struct TieModel {
  int dev[2];          /* stage 0's device, the last stage's */
  double bytes;        /* 4 h V / T: one GPU's F32 gradient of the matrix */
  double bandwidth;    /* peer_bandwidth (0: none given, the exchange is not timed) */
  double time;         /* bytes / bandwidth (0 when not timed) */
} TieModel;

typedef struct CostModel {
  int times;          /* TF TB TW (and TIF TIB TS TT) derived: layers, hidden, seq, micro_batch, flops */
  int bytes;          /* unit_bytes and static bytes derived: also heads */
  double tf, tb, tw;  /* one device share (L / P layers), seconds */
  double in_f, in_b, in_w, out_f, out_b, out_w; /* input layer (stage 0) and output layer (stage S-1) */
  double tif, tib, ts, tt;  /* vocabulary passes under `vocab parallel` (1/P of the layers) */
  int has_tc, has_toff;
  double tc, toff, treload; /* from peer_bandwidth; host link and copy engines */
  double flops_rate;  /* flops * efficiency */
  double act_layer;   /* bytes of one layer's activation for one microbatch */
  double unit_bytes;  /* one device share's activation for one microbatch */
  double *static_bytes; /* [ndev]: weights + gradients + optimizer state (sharded over the
                           data-parallel replicas by dp_derive under distributed_optimizer) */
  double *dev_params;   /* [ndev]: parameters each device holds (static_bytes / bytes a parameter) */
  double *stage_params; /* [nstage]: parameters of each stage (not the vocabulary-parallel
                           layers' shares); data-parallel gradient bytes (dp.c) */
  double *stage_expert_params; /* [nstage] with model experts, else NULL: the experts' part
                           of stage_params (1/X of them a GPU under expert parallelism;
                           their gradients reduced over the expert-data-parallel group) */
  double *dev_expert_params; /* [ndev] with model experts, else NULL: the experts' part of
                           dev_params (their optimizer state sharded over D/X x C) */
  double *vocab_params; /* [ndev] under `vocab parallel`, else NULL: the input and output
                           layers' rows each device holds (and the position table on
                           device 0); data-parallel gradient bytes (dp.c) */
  double dtype_bytes;   /* model dtype_bytes d (default 2): bytes of a weight */
  double memory;      /* hardware.memory, bytes (0: none) */
  Span memory_span;
  int link_devs;      /* hardware.devices_per_host_link (default 1) */
  double duplex;      /* hardware.duplex_bandwidth / host_bandwidth (default 1) */
  TpModel *tp;        /* hardware tensor_parallel > 1, else NULL */
  TieModel *tie;      /* tied embeddings on two devices, else NULL */
  CpModel *cp;        /* hardware context_parallel > 1, else NULL */
  EpModel *ep;        /* hardware expert_parallel > 1, else NULL */
} CostModel;

/* Reads s->model and s->hardware (s->ndev, s->nstage, s->vocab.mode must be set;
 * stage_dev[st] = device of stage st). Reports bad values (efficiency outside (0, 1],
 * non-positive sizes, a swiglu, rmsnorm, rope or bias other than 0 or 1, a
 * tensor_parallel that does not divide the heads) as errors at their key. Returns the
 * number of errors. */
int costmodel_derive(Arena *a, Diag *dg, const IrSchedule *s, const int32_t *stage_dev, CostModel *out);
/* After simulation: a device whose static bytes plus peak activation bytes exceed
 * hardware.memory is an error at the `memory` key. Returns errors reported. */
struct SimResult;
int costmodel_check_memory(Diag *dg, const IrSchedule *s, const struct SimResult *r);
/* Static bytes of one parameter at weight bytes d, its optimizer state (F32 master
 * weight when d < 4, Adam momentum and variance) sharded over `shards` replicas (1:
 * none): d + 4 + ((d < 4 ? 4 : 0) + 8) / shards. */
double costmodel_param_bytes(double d, int shards);

/* What the hardware block says of data parallelism (NULL in IrDerived: D x C = 1; the
 * simulation of it: dp.h). */
typedef struct DpModel {
  int D;               /* replicas (> 1, or 1 with context parallelism) */
  int C;               /* context-parallel GPUs of each replica (hardware context_parallel,
                          default 1) */
  int eranks;          /* (D / X) x C: the experts' gradient group under expert parallelism
                          (X = hardware expert_parallel; = ranks without it) */
  double *ebytes;      /* [nstage] with model experts' counts (cm->stage_expert_params) and no
                          dp_stage_bytes, else NULL: the experts' part of `bytes`, reduced
                          over `eranks` (its own ring after the dense part's) */
  int ranks;           /* D x C > 1: the gradient group (Megatron's data-parallel group
                          with context parallelism) every collective below spans and the
                          distributed optimizer shards over */
  int dist;            /* hardware distributed_optimizer = 1: gradients reduce-scattered,
                          optimizer state sharded, weights all-gathered (ZeRO-1) */
  double bandwidth;    /* bytes/s of each device's link to its replicas */
  double latency;      /* seconds per ring step */
  double *bytes;       /* [nstage]: F32 gradient bytes of each stage */
  double *time;        /* [nstage]: ring all-reduce time of each stage alone (dist: its
                          ring reduce-scatter's) */
  double *wbytes;      /* [nstage], dist only (else NULL): weight bytes all-gathered */
  double *wtime;       /* [nstage], dist only: ring all-gather time of each stage alone */
  double *tbytes;      /* [nstage], dist with a TieModel (and no dp_stage_bytes) only, else
                          NULL: the F32 gradient bytes of the tied matrix (or its copy) in
                          stage 0's and stage S-1's `bytes` (0 elsewhere), which have a
                          buffer of their own: time and wtime are then the sums of two
                          rings each, the stage's other parameters' and the matrix's */
  double *vbytes;      /* [ndev] under `vocab parallel`, else NULL: F32 gradient bytes of the
                          device's vocabulary-layer rows (all-reduced, or reduce-scattered,
                          at the end of the device's iteration, as the runtime does) */
  double *vtime;       /* [ndev]: their ring all-reduce (dist: reduce-scatter) time */
  double *vwbytes, *vwtime; /* [ndev], dist and `vocab parallel` only: their weights' all-gather */
  double *static_sharded; /* [ndev] when cm had static bytes, else NULL: each device's
                          static bytes with its optimizer state sharded over the D
                          replicas (under dist: cm->static_bytes; without: what
                          distributed_optimizer = 1 would give, the memory check's note) */
} DpModel;

/* Reads the data-parallel keys of s->hardware (cm: what costmodel_derive found, for
 * the stage parameters). Errors at their key. Under distributed_optimizer = 1 it
 * shards the optimizer state in cm->static_bytes (costmodel_param_bytes with D
 * shards). Returns NULL when D = 1 or on error (cm unchanged). */
DpModel *dp_derive(Arena *a, Diag *dg, const IrSchedule *s, CostModel *cm);
/* The ring all-reduce time of `bytes` over D replicas: 2(D-1)/D bytes / bandwidth +
 * 2(D-1) latency. */
double dp_ring_time(int D, double bytes, double bandwidth, double latency);
/* A ring reduce-scatter or all-gather of `bytes` (the whole tensor) over D replicas:
 * half an all-reduce, (D-1)/D bytes / bandwidth + (D-1) latency. */
double dp_half_ring_time(int D, double bytes, double bandwidth, double latency);
#endif
