/* ir.h: the schedule IR, the one data structure every phase after parsing shares.
 *
 * Plain data: arrays of small structs indexed by integers, allocated in the
 * compilation's arena. Elaboration (elab.c) fills it from the AST: placement, costs,
 * memory model, policies, expectations and, per device, the ordered ops the file
 * wrote (compute passes, plus any send/recv/offload/reload/collective it wrote
 * itself). Lowering (lower.c) inserts the communication and copy ops the file left
 * out; verification (verify.c) proves the result executable; simulation (sim.c)
 * times it; emit_c.c turns it into C tables for libppsrt.
 *
 * Conventions shared by all phases:
 *  - devices 0..ndev, stages 0..nstage, microbatches 0..nmb (half-open);
 *  - every op keeps the Span of the source text that produced it; ops a phase
 *    inserts carry the span of the op that caused them and IR_FLAG_INSERTED;
 *  - times are in the file's cost unit; memory in "activations of one device share
 *    for one microbatch" unless the model/hardware blocks turn them into bytes. */
#ifndef PPS_IR_H
#define PPS_IR_H
#include <stdint.h>
#include "arena.h"
#include "diag.h"
#include "ppsrt_ops.h"   /* the op encoding shared with the runtime (runtime/ppsrt_ops.h) */

typedef enum IrKind {
  /* compute passes on (mb, stage) */
  IR_F = PPSRT_OP_F,           /* forward */
  IR_B = PPSRT_OP_B,           /* backward, input gradient only */
  IR_W = PPSRT_OP_W,           /* backward, weight gradient only */
  IR_BW = PPSRT_OP_BW,         /* full backward (B and W fused) */
  /* vocabulary-parallel passes on (mb), run by every device; stage = -1 */
  IR_IF = PPSRT_OP_IF,         /* input embedding forward (this device's vocabulary rows) */
  IR_IB = PPSRT_OP_IB,         /* input embedding backward */
  IR_S = PPSRT_OP_S,           /* output layer forward + local softmax statistics (Vocab-2: + input gradient) */
  IR_T = PPSRT_OP_T,           /* output layer weight gradient (Vocab-1: + input gradient) */
  /* activation copies on a copy engine */
  IR_OFFLOAD = PPSRT_OP_OFFLOAD, /* start copying the activation kept by F(mb, stage) to host */
  IR_RELOAD = PPSRT_OP_RELOAD, /* start copying it back before B(mb, stage) */
  /* communication */
  IR_SEND = PPSRT_OP_SEND,     /* send what the pass `xfer` of (mb, stage) produced to device `peer` */
  IR_RECV = PPSRT_OP_RECV,     /* receive it from device `peer` */
  IR_COLL = PPSRT_OP_COLL,     /* vocabulary collective `coll` for mb, issued by every device in the same order */
  IR_NKINDS = PPSRT_OP_NKINDS
} IrKind;

/* What a SEND/RECV carries (IrOp.xfer): the output of F(mb, stage), which goes to
 * the device of stage+1, or the input gradient of B/BW(mb, stage), which goes to the
 * device of stage-1. */
typedef enum IrXfer {
  IR_XFER_NONE = PPSRT_XFER_NONE,
  IR_XFER_ACT = PPSRT_XFER_ACT,  /* activation produced by F(mb, stage) -> device of stage+1 */
  IR_XFER_GRAD = PPSRT_XFER_GRAD  /* input gradient produced by B or BW(mb, stage) -> device of stage-1 */
} IrXfer;

/* Which vocabulary collective an IR_COLL is (IrOp.coll). */
typedef enum IrColl {
  IR_COLL_NONE = PPSRT_COLL_NONE,
  IR_COLL_INPUT_FWD = PPSRT_COLL_INPUT_FWD,  /* all-reduce of the IF outputs; F(mb, 0) needs it */
  IR_COLL_OUTPUT_FWD = PPSRT_COLL_OUTPUT_FWD, /* all-reduce (max, sum) of S's softmax statistics; last stage's B needs it */
  IR_COLL_OUTPUT_BWD = PPSRT_COLL_OUTPUT_BWD, /* Vocab-1 only: all-reduce of T's input gradient; last stage's B needs it */
  IR_COLL_INPUT_BWD = PPSRT_COLL_INPUT_BWD   /* broadcast of B(mb, 0)'s input gradient to every device; IB needs it */
} IrColl;

/* The op flag bits (their numbers are the runtime's, runtime/ppsrt_ops.h) */
enum { IR_FLAG_INSERTED = PPSRT_FLAG_INSERTED /* added by a compiler phase, not written in the file */ };
/* Overlapped forward and backward (`overlap { F(i, s) BW(j, t) }`, DualPipe's F&B):
 * set on the first op of a pair; its partner is the next op of the device (lowering
 * keeps the two adjacent: the pair's recvs go before it, its sends and offloads after
 * it). The pair runs as one unit of time (overlap.c: overlap_cost). */
enum { IR_FLAG_OVERLAP = PPSRT_FLAG_OVERLAP };
/* Point-to-point groups: a send or recv flagged IR_FLAG_GROUP is issued in the same
 * group as the op before it on its device (which is a send or recv too). A group is
 * posted at once: the runtime issues it between its transport's group_begin and
 * group_end (NCCL: ncclGroupStart/End), and the verifier's rendezvous model lets a
 * send complete only once its recv is posted, unless both are in groups that are
 * posted. Lowering (lower.c: lower_groups) makes every maximal run of consecutive
 * sends and recvs of a device one group, so the flag follows from the order and
 * `ppsc expand`'s output, read back, gets the same groups. */
enum { IR_FLAG_GROUP = PPSRT_FLAG_GROUP };
/* Posted receive: a recv the lowering moved up for the rendezvous model (lower.c,
 * lower_rendezvous) is posted where it stands, so that its peer's send can complete,
 * and its data is waited for only where its consumer runs (for an activation of
 * (mb, s): F(mb, s+1); for a gradient of (mb, s): B or BW(mb, s-1); the pair holding
 * it when overlapped), as ncclRecv and MPI_Irecv allow. Written recvs never get it:
 * a recv the file wrote blocks where the file wrote it. */
enum { IR_FLAG_POSTED = PPSRT_FLAG_POSTED };

/* 32 bytes: schedules of millions of ops keep an array of these per device. kind and
 * flags, read everywhere, are whole bytes; xfer, coll and peer (a device index, at
 * most 65535, in 17 signed bits) are bit-fields, which leaves 26 bits, in two
 * pieces, for the op's loop bindings (ir_op_frame) without growing the op. */
typedef struct IrOp {
  uint8_t kind;          /* IrKind */
  uint8_t flags;         /* IR_FLAG_* */
  uint16_t xfer : 2;     /* IrXfer for SEND/RECV, else 0 */
  uint16_t coll : 3;     /* IrColl for IR_COLL, else 0 */
  uint16_t frame_hi : 11;
  int32_t peer : 17;     /* SEND/RECV: the other device; else -1 */
  uint32_t frame_lo : 15;
  int32_t mb;     /* microbatch */
  int32_t stage;  /* stage, or -1 for vocabulary passes and collectives */
  Span span;      /* where the file wrote it, or what caused it */
} IrOp;
_Static_assert(IR_COLL_INPUT_BWD < 8 && IR_XFER_GRAD < 4, "IrOp bit-fields too narrow");
_Static_assert(sizeof(IrOp) == 32, "IrOp is 32 bytes");

/* The loop bindings elaboration was in when it wrote the op: an index into
 * IrSchedule's frames, 0 = none. An op a phase inserts has the frame of the op it
 * serves when both are on one device. */
enum { IR_FRAME_BITS = 26 };
static inline uint32_t ir_op_frame(const IrOp *op) { return (uint32_t)op->frame_hi << 15 | op->frame_lo; }
static inline void ir_op_set_frame(IrOp *op, uint32_t f) {
  op->frame_hi = (uint16_t)(f >> 15 & 0x7ff);
  op->frame_lo = f & 0x7fff;
}

/* Loop bindings (issue 12: which iteration of a loop wrote a failing op). Each
 * iteration of a `for` that writes an op gets one frame, chained to the frame of
 * the enclosing loop's iteration: an op's frame names every loop variable in force,
 * innermost first. Diagnostics at an op print them outermost first in a note:
 * "in device 3, d = 3, i = 7" (ir_note_op). */
typedef struct IrLoop {
  const char *name;   /* the loop variable */
  Span span;          /* the `for` statement */
  const char *use;    /* not a loop but `use NAME(...)` at span: the ops the used schedule
                         writes chain to its frame (value unused), so a diagnostic at one
                         of them notes the user's line ("in schedule 'zb_v', used here") */
} IrLoop;
typedef struct IrFrame {
  int64_t value;      /* the variable's value in this iteration */
  uint32_t parent;    /* the enclosing loop's frame, 0 = none */
  uint32_t loop;      /* index into IrSchedule.loops */
} IrFrame;

typedef struct IrDevice {
  IrOp *ops;      /* program order */
  int nops, capops;
  Span span;      /* the first `device d { ... }` block for d (file == 0: none); verify
                     reports passes missing from d here, else at the schedule header */
} IrDevice;

/* Metrics an `expect` statement can name. */
typedef enum IrMetric {
  IR_METRIC_MAKESPAN,
  IR_METRIC_BUBBLE_RATE,       /* 1 - m(TF+TB+TW)/makespan */
  IR_METRIC_BUBBLE_RATE_SPAN,  /* same over the longest device's first-start..last-end span */
  IR_METRIC_PEAK_MEMORY,       /* max over devices (or one device: IrExpect.device) */
  IR_METRIC_HOST_MEMORY,       /* peak host (offload) memory, max over devices */
  IR_METRIC_OPS,               /* total ops after lowering */
  IR_METRIC_IDLE,              /* makespan - busy time, max over devices (or one device) */
  IR_NMETRICS
} IrMetric;

typedef enum IrCmp { IR_CMP_LT, IR_CMP_LE, IR_CMP_EQ, IR_CMP_NE, IR_CMP_GE, IR_CMP_GT } IrCmp;

typedef struct IrExpect {
  uint8_t metric;   /* IrMetric */
  uint8_t cmp;      /* IrCmp */
  int32_t device;   /* -1: the metric over all devices */
  double value;     /* right-hand side, evaluated at elaboration */
  Span span;        /* the whole statement */
} IrExpect;

/* Per-stage costs (time units) and memory, after defaults and overrides. Defaults:
 * a stage that holds 1/v of its device's share (v = stages on that device) costs
 * TF/v, TB/v, TW/v, BW = (TB+TW)/v and keeps act = 1/v. */
typedef struct IrStage {
  int32_t device;     /* placement */
  double tf, tb, tw, tbw;
  double act;         /* activation units added by F */
  double b_free;      /* fraction of act that B frees (W frees the rest); default 0 */
  double offload;     /* fraction of act the offload policy moves to host; 0 = none */
  double offload_time;/* time to copy this stage's whole activation one way */
  Span span;          /* placement statement (or override) */
  double reload_time; /* host-to-device copy time of the whole activation (the H2D
                         engine's own bandwidth, `TRELOAD`); 0 = offload_time */
  double recompute;   /* the recompute policy's ratio for this stage (recompute.c: the
                         first ceil(ratio x layers) layers are recomputed); 0 = none */
  double input;       /* the stage input's share of act (`memory input`): what a fully
                         recomputed F keeps */
  double layer;       /* the share of act one layer keeps, its output included (`memory
                         layer`, default 1 / layers per stage): what a partially
                         recomputed F drops per recomputed layer */
} IrStage;

/* Vocabulary parallelism settings (vocab parallel 1|2). */
typedef struct IrVocab {
  int mode;           /* 0 = off, 1 = Vocab-1, 2 = Vocab-2 */
  double t_if, t_ib, t_s, t_t, t_coll;  /* costs of IF, IB, S, T and of one collective */
  double act_s;       /* activation units S keeps until T frees them (per device) */
  Span span;
  int async;          /* `vocab async true`: a collective runs on its own lane (does not
                         block the device); only its consumers wait for it (sim.c) */
} IrVocab;

/* The offload policy as written (lowering turns it into ops). */
typedef struct IrOffload {
  int enabled;
  double ratio;       /* fraction of each chosen activation */
  int32_t stage_lo, stage_hi;  /* chosen stages [lo, hi); default all */
  int32_t mb_lo, mb_hi;        /* chosen microbatches [lo, hi); default all */
  double host_limit;  /* host memory bound in units; < 0 = none */
  Span span;
} IrOffload;

/* The recompute policy as written (recompute.c models it; IrStage.recompute holds
 * the fraction per stage). */
typedef struct IrRecompute {
  int enabled;
  double ratio;                /* fraction of each chosen stage's layers recomputed */
  int32_t stage_lo, stage_hi;  /* chosen stages [lo, hi); default all */
  Span span;
} IrRecompute;

/* model { ... } and hardware { ... }: named numbers, kept for byte/FLOP derivation
 * and passed to the runtime as defaults. Unknown keys are an elaboration error. */
typedef struct IrKeyVal { const char *key; double value; Span span; } IrKeyVal;

/* What costmodel.c derived from model { } and hardware { } (seconds and bytes). */
typedef struct IrDerived {
  int times;            /* the costs are seconds derived from FLOPs (where not given) */
  int bytes;            /* unit_bytes and static_bytes are known */
  double unit_bytes;    /* bytes of one activation unit (one device share, one microbatch) */
  double *static_bytes; /* [ndev]: weights + gradients + optimizer state */
  double memory;        /* hardware.memory in bytes, 0 = none */
  Span memory_span;
  /* host links (sim.c): devices d with the same d / link_devs share one; a direction
   * copies at duplex times its speed while the other runs too (1: no loss). Sharing
   * is modelled when link_devs > 1 or duplex < 1 */
  int link_devs;
  double duplex;
  struct DpModel *dp;   /* hardware data_parallel x context_parallel > 1 (dp.c), else NULL */
  struct TpModel *tp;   /* hardware tensor_parallel > 1 (costmodel.c), else NULL */
  struct CpModel *cp;   /* hardware context_parallel > 1 (costmodel.c), else NULL */
  struct EpModel *ep;   /* hardware expert_parallel > 1 (costmodel.c), else NULL */
  struct TieModel *tie; /* tied embeddings on two devices (costmodel.c; simulated in dp.c), else NULL */
} IrDerived;

typedef struct IrSchedule {
  const char *name;         /* schedule name */
  const char *file;         /* main source path */
  Span span;                /* the schedule's header */
  int32_t ndev, nstage, nmb;
  IrStage *stages;          /* [nstage] */
  const char *placement;    /* "linear", "interleaved", "vshape", "explicit" */
  int32_t v;                /* stages per device where uniform, else 0 */
  double tf, tb, tw, tc;    /* the schedule-wide costs as stated (one device share) */
  double mem_limit;         /* activation units per device; < 0 = none */
  Span mem_limit_span;      /* where the limit was set (`memory limit = L;`, --memory) */
  IrVocab vocab;
  IrOffload offload;
  IrKeyVal *model;   int nmodel;
  IrKeyVal *hardware; int nhardware;
  IrExpect *expects; int nexpects, capexpects;
  IrDevice *devs;           /* [ndev] */
  int64_t total_ops;        /* sum of devs[d].nops */
  long max_ops;             /* --max-ops: the ops lowering inserts count too (0: no limit) */
  /* parameters after -D, in declaration order, for reports */
  struct IrParam { const char *name; double value; int is_int; int is_bool; /* value 0/1 */ } *params;
  int nparams;
  /* the schedule-wide memory statement and copy cost as stated (one device share),
   * before the 1/v scaling into IrStage; added by the front end for `expand` */
  double act, b_free, toff;
  struct SynthInfo *synth;  /* `synthesize;`: what the synthesiser found (synth.h), else NULL */
  /* overlapped F&B (overlap.c): TFB as stated (0: not given), the overlap
   * efficiency derived from it (0: a pair costs the sum of its passes), and the
   * number of pairs the file wrote */
  double tfb, overlap_eff;
  int64_t noverlap;
  IrDerived derived;        /* seconds and bytes from model/hardware (costmodel.c) */
  double treload;           /* TRELOAD as stated or derived (one device share); 0 = TOFF */
  int p2p_buffered;         /* ppsc --p2p buffered: check (and lower for) buffered sends only,
                               no rendezvous model (lower.c, verify.c) */
  int recv_wait_posted;     /* ppsc --transport nccl: the buffered runs wait for a posted recv's
                               data where it stands, as the nccl transport does by default
                               (docs/runtime.md), not at its consumer (exec.c) */
  /* loop bindings (see IrFrame), in chunks (ir_frame finds frame k); frame 0 is
   * unused (no bindings) */
  IrFrame **frames; uint32_t nframes; int capchunks;
  IrFrame *frame_next; uint32_t frame_left;  /* free room in the newest chunk */
  IrLoop *loops; int nloops, caploops;
  IrRecompute recompute;    /* the recompute policy (elab.c; recompute.c models it) */
  /* rendezvous proofs lowering's repair run made of the op arrays as they are
   * (lower.c; verify.c then does not run them again): IR_PROVED_* bits */
  int rdv_proved;
} IrSchedule;
#define IR_PROVED_RDV 1           /* with the schedule's collective mode */
#define IR_PROVED_RDV_BLOCKING 2  /* `vocab async` with blocking collectives */

/* Appends an op to device d's order (grows the array in the arena). */
IrOp *ir_push(Arena *a, IrSchedule *s, int d);
/* Short names: "F", "B", ..., "send", "recv", "coll". */
const char *ir_kind_name(IrKind k);
const char *ir_coll_name(IrColl c);
const char *ir_metric_name(IrMetric m);
/* Writes an op the way `ppsc expand` prints it: F(3) or F(3,1), send F(3,1)->2 ... */
int ir_format_op(const IrSchedule *s, const IrOp *op, char *buf, int size);
/* Appends a frame (loop `loop`, value, enclosing frame `parent`); returns its index,
 * or 0 when there are too many to index (2^IR_FRAME_BITS: those ops get no note). */
uint32_t ir_frame_push(Arena *a, IrSchedule *s, uint32_t loop, int64_t value, uint32_t parent);
const IrFrame *ir_frame(const IrSchedule *s, uint32_t frame);
/* Writes frame's bindings outermost first, "d = 3, i = 7" ("" for frame 0); returns
 * the length. */
int ir_format_frame(const IrSchedule *s, uint32_t frame, char *buf, int size);
/* The note under an error at op (on device d): "in device 3, d = 3, i = 7" at the
 * innermost loop that wrote op, else "in device 3" at the device's block (or at op
 * when the file has none). When the error's message names the device already
 * (named), it is printed only where op has loop bindings. */
void ir_note_op(Diag *dg, const IrSchedule *s, int d, const IrOp *op, int named);
#endif
