/* model.h: the interface a model of libppsrt implements (mlp in model_mlp.c, gpt in
 * model_gpt.c), internal to the library, and the services the runtime offers it.
 *
 * What it does: says how the interpreter (interp.c) drives one device's share of a
 * model: create it for the stages that device holds, run F / B / W / BW on one
 * (microbatch, stage), the vocabulary passes IF / IB / S / T and the collectives
 * between them, enumerate parameters and gradients (optimizer step, --check), report
 * the loss. What it does not: no scheduling (the op table decides the order), no
 * communication of its own (the interpreter moves boundary tensors; collectives go
 * through the ppsrt_comm handed to `collective`), no timing, no exit().
 *
 * Ownership rules a model follows:
 *
 *  1. Boundary tensors go through the IO box of the device (ppsrt_io_put/take/peek),
 *     keyed by (xfer, mb, stage) exactly like the SEND/RECV ops:
 *       (PPSRT_XFER_ACT,  mb, s)   the output of F(mb, s) (the input of F(mb, s+1));
 *       (PPSRT_XFER_GRAD, mb, s)   the input gradient made by B/BW(mb, s) (the output
 *                                  gradient B(mb, s-1) needs).
 *     The last stage's F (no vocabulary parallelism) computes the loss and puts the
 *     loss gradient under (GRAD, mb, nstage), which its own B then takes.
 *     A RECV allocates `xfer_bytes` bytes with be->alloc and puts them in the box; a
 *     SEND reads the box entry (and frees it when no later op of the device needs it).
 *     Tensors in the IO box are NOT counted as activation memory.
 *
 *  2. What F(mb, s) keeps for its backward goes into the ACTIVATION STORE
 *     (ppsrt_act_save / ppsrt_act_adopt), which counts its bytes per device (peak and
 *     units), offloads and reloads it when the schedule says so, and hands back the
 *     current device pointer with ppsrt_act_get (pointers change across an offload:
 *     never cache them between passes). B frees what W does not need
 *     (ppsrt_act_free), W (or BW) releases the rest (ppsrt_act_release). Entries are
 *     indexed 0, 1, 2, ... in the order F saved them. Vocabulary passes that keep
 *     memory (S until T) use stage = -1.
 *     Memory is counted in activation units per stage: a byte of stage s counts
 *     stages[s].act / act_bytes(s) units (stage -1: vocab_act_s / act_bytes(-1)), and
 *     the peak is sampled after each op. For the measured peak to equal `ppsc sim`'s
 *     prediction, what F(mb, s) keeps must total act_bytes(s) when F returns (the
 *     runtime checks after every F and notes the first difference in the memory
 *     report), B must leave (1 - b_free) of it, and W/BW nothing.
 *
 *  3. Weights, gradients and optimizer state are the model's; it lists them in
 *     `params` so the runtime can run the optimizer and --check can compare them.
 *     Initial values depend only on (seed, parameter name, element index), never on
 *     the device or on which stages a device holds, so a one-device reference model
 *     starts from the very same weights; synthetic data depends only on
 *     (seed, microbatch) (the same data every iteration, so the loss falls).
 *
 *  4. Gradients ACCUMULATE over the microbatches of an iteration and are scaled so
 *     that the iteration's loss is the MEAN over microbatches; the runtime zeroes them
 *     (the optimizer does) after the step.
 *
 * With cfg->no_compute the model skips every kernel (buffers still move, the store
 * still counts): the runtime-overhead benchmark uses it. */
#ifndef PPSRT_MODEL_H
#define PPSRT_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "ppsrt.h"
#include "transport.h"

/* Sizes and settings, from the executable's flags over the program's model { } block. */
typedef struct ppsrt_model_config {
  const char *name;       /* "mlp", "gpt" */
  int hidden;             /* --hidden */
  int heads;              /* --heads (gpt) */
  int query_groups;       /* --query-groups (gpt: KV heads) */
  int kv_channels;        /* --kv-channels D (gpt): each attention head's width, Megatron-LM's; 0: hidden / heads
                           * (ppsrt_gpt_kv_channels; cli.c stores the resolved value) */
  int seq;                /* --seq: tokens per sequence */
  int vocab;              /* --vocab (gpt) */
  int micro_batch;        /* --micro-batch: sequences per microbatch */
  int layers_per_stage;   /* --layers-per-stage */
  int nstage;             /* stages of the whole pipeline */
  int nmb;                /* microbatches per iteration (loss/gradient scale 1/nmb) */
  int ndev;               /* devices = vocabulary shards when vocab_mode != 0 */
  int vocab_mode;         /* 0 none, 1 Vocab-1, 2 Vocab-2 (the program's) */
  uint64_t seed;          /* --seed */
  int no_compute;         /* --no-compute: skip kernels */
  const struct ppsrt_tokens *data;  /* --data: real tokens (gpt), else synthetic (data.c) */
  long data0;             /* training sequences consumed before this run (--load): data position */
  int mb0;                /* data of microbatch mb: that of global microbatch mb0 + mb (--data-parallel:
                           * replica r's are r x nmb on, the --check reference's 0..D x nmb - 1) */
  int nrep;               /* replicas: an iteration consumes nrep x nmb microbatches of data (0 = 1) */
  int replica;            /* this model's replica, 0..nrep-1 */
  int distopt;            /* --distributed-optimizer: with nrep > 1, the optimizer state is sharded
                           * over the replicas (ppsrt_param_alloc, replica.c) */
  int tp;                 /* --tensor-parallel T (0 = 1): the gpt's layers split over T ranks */
  int tp_rank;            /* this model's rank in its tensor-parallel group, 0..tp-1 */
  int sp;                 /* --sequence-parallel (with tp > 1): the gpt's residual stream split by
                           * token rows over the group (model_gpt.c) */
  int cp;                 /* --context-parallel C (0 = 1): each sequence split over C ranks, in 2C
                           * chunks, rank cp_rank holding chunks cp_rank and 2C - 1 - cp_rank (model_gpt.c, cp.c) */
  int cp_rank;            /* this model's rank in its context-parallel group, 0..cp-1 */
  int ep;                 /* --expert-parallel X (0 = 1): each MoE layer's experts split over the X
                           * consecutive replicas of an expert-parallel group (moe.c) */
  int ep_rank;            /* this model's rank in its expert-parallel group, 0..ep-1 (replica mod X) */
  /* gpt architecture (--arch, --mlp, --norm, --position, --bias, --ffn-hidden, --rope-base, or the
   * model { } block's swiglu, rmsnorm, rope, bias, ffn_hidden keys; docs/models.md) */
  int ffn_hidden;         /* MLP width (0: 4 hidden, or with swiglu Megatron's 8h/3 rounded: ppsrt_gpt_ffn) */
  int swiglu;             /* 1: FC1 is [gate | up] (2 x ffn_hidden columns), silu(gate) * up */
  int rmsnorm;            /* 1: RMS norms (gamma only) instead of layer norms */
  int rope;               /* 1: rotary position embedding on q and k, no position table */
  int no_bias;            /* 1: the linear layers (QKV, projection, FC1, FC2) have no bias */
  int qkv_bias;           /* 1: --add-qkv-bias: with no_bias, the QKV projection alone keeps its bias (Qwen2's) */
  double init_method_std; /* --init-method-std S (gpt): Megatron-LM's initialisation, weights ~ Normal(0, S), the
                           * blocks' output layers Normal(0, S / sqrt(2 L)) (model_gpt.c init_scale; 0: the
                           * default, uniform with unit-variance outputs) */
  double norm_epsilon;    /* --norm-epsilon: added to every norm's variance (mean square) before the
                           * reciprocal square root (0: PPSRT_NORM_EPS) */
  int qk_layernorm;       /* 1: --qk-layernorm: each query and key head normalised (the layer's norm kind,
                           * gains [D] qnorm.g, knorm.g) before RoPE (Qwen3, Megatron's --qk-layernorm) */
  double rope_base;       /* RoPE's base (0: 10000) */
  /* RoPE's frequency scaling (--rope-scaling; model_gpt.c rope_freq; read only when
   * rope_scaling is not PPSRT_ROPE_NONE, cli.c sets the defaults: Llama 3.1's) */
  int rope_scaling;       /* PPSRT_ROPE_NONE, _LINEAR (frequencies / factor) or _LLAMA3 */
  double rope_factor;     /* --rope-scaling-factor (8) */
  double rope_low_freq;   /* llama3: --rope-low-freq-factor (1) */
  double rope_high_freq;  /* llama3: --rope-high-freq-factor (4), above the low one */
  int rope_orig_max;      /* llama3: --rope-original-max-positions (8192) */
  int tie_embeddings;     /* --embeddings tied: the output layer is the input embedding's matrix */
  double hidden_dropout;  /* --hidden-dropout p (gpt): on the embedding's, the attention block's and the MLP's
                           * outputs (0: none; none while m->eval: evaluation, validate.c) */
  double attention_dropout;   /* --attention-dropout p (gpt): on the attention probabilities */
  long step0;             /* steps done before this run (--load): iteration it is step step0 + it + 1 (the
                           * dropout masks' counter, dropout.h) */
  /* mixture of experts (--num-experts, --moe-topk, --moe-ffn-hidden, --moe-aux-loss-coeff; runtime/moe.c):
   * num_experts 0 = a dense MLP; else every layer's MLP is num_experts experts of width moe_ffn_hidden
   * (0: ffn_hidden's), each token routed to moe_topk of them (0: 2) */
  int num_experts;
  int moe_topk;
  int moe_ffn_hidden;
  int moe_shared_ffn;     /* --moe-shared-ffn-hidden S (Megatron's --moe-shared-expert-intermediate-size): a dense
                           * MLP of width S (the experts' activation and biases) on every token, its output added
                           * to the routed experts' (0: none; needs num_experts) */
  int moe_shared_gate;    /* --moe-shared-expert-gate (Megatron's): the shared expert's output scaled per token by
                           * sigmoid(x . wg), x the MoE layer's input, wg [h] (moe.shared.gate.w; needs moe_shared_ffn) */
  double moe_aux_coeff;   /* the load-balancing loss's coefficient (0: none) */
  double moe_capacity;    /* --moe-expert-capacity-factor CF: each expert keeps at most ceil(CF N K / E) of a
                           * rank's N K slots, the rest dropped (0: dropless) */
  int moe_drop_position;  /* --moe-token-drop-policy position (1): keep the first in token order; 0 (probs):
                           * the largest routing weights */
  /* the router (Megatron-Core's --moe-router-* flags; moe.c, backend.h ppsrt_moe_router) */
  int moe_router_sigmoid;     /* --moe-router-score-function sigmoid (1) or softmax (0) */
  int moe_router_pre_softmax; /* --moe-router-pre-softmax: softmax over all experts, then the top-K */
  double moe_router_scale;    /* --moe-router-topk-scaling-factor S (0: none, i.e. 1) */
  double moe_z_coeff;         /* --moe-z-loss-coeff Z (0: none) */
  int moe_expert_bias;        /* --moe-router-enable-expert-bias (aux-loss-free load balancing) */
  double moe_bias_rate;       /* --moe-router-bias-update-rate U (0: 1e-3, Megatron-Core's) */
  int moe_record;         /* --check with experts: keep every slot's routing for the reference's replay (moe.c rec);
                           * 2: and PPSRT_FAULT=route moves one token's expert in each slot (tests; moe.c fault_route) */
  int moe_fault_replica;  /* PPSRT_FAULT=route@replica=R: R + 1, the fault on replica R's ranks alone (0: on every rank) */
  int moe_fault_cp;       /* PPSRT_FAULT=route@context=C: C + 1, the fault on context rank C's ranks alone (0: every) */
  int moe_a2a;            /* --moe-token-dispatcher alltoall (1; moe.c, ep.c); 0: allgather (the default) */
} ppsrt_model_config;
enum { PPSRT_ROPE_NONE, PPSRT_ROPE_LINEAR, PPSRT_ROPE_LLAMA3, PPSRT_ROPE_NSCALINGS };

/* --norm-epsilon's default (Megatron-LM's and GPT-2's 1e-5; Qwen2 and Llama 2 use 1e-6) */
#define PPSRT_NORM_EPS 1e-5

/* Training tokens (data.c), mapped once per process and shared read-only by its devices:
 * an llm.c token file (256 int32 header: magic 20240520, version 1, count; then count
 * uint16 tokens), a Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin, any integer
 * dtype; its sequences concatenated in index order) or any file read as bytes
 * (vocabulary 256). The stream's n tokens are read through the mappings, never copied. */
typedef struct ppsrt_tokens {
  size_t n;                     /* tokens in the stream */
  int width, sgn;               /* bytes per token, signed */
  const char *dtype;            /* "uint16", "int32", ... (static) */
  int bytes;                    /* read as plain bytes */
  int indexed;                  /* a Megatron-LM indexed dataset */
  int vocab;                    /* tokens must be below it */
  size_t scan_max;              /* streams of at most this many bytes were checked whole at load */
  const unsigned char *map;     /* the token file (the .bin) mapped, map_size bytes */
  size_t map_size;
  const unsigned char *base;    /* the stream's first token when it lies back to back in map */
  const unsigned char *imap;    /* indexed: the .idx mapped, imap_size bytes */
  size_t imap_size;
  size_t nseq;                  /* indexed: the index's sequences */
  size_t *cum;                  /* indexed, sequences not back to back in the .bin: the stream
                                 * position of each one's first token, [nseq + 1]; else NULL */
  char *path;                   /* the token file (indexed: PREFIX.bin) */
  char *idx_path;               /* indexed: PREFIX.idx */
  void *blend;                  /* a blend ("W1 PATH1 W2 PATH2 ..."): its datasets and sampling
                                 * state (data.c); n is then their tokens together */
  int shuffled;                 /* --data-shuffle: each epoch's windows in a seeded order */
  uint64_t seed;
  size_t lo, len;               /* the part the windows are cut from: stream positions [lo, lo + len)
                                 * (the whole stream, or one part of --split; a blend: its datasets') */
} ppsrt_tokens;
/* path: a file, or a blend "W1 PATH1 W2 PATH2 ..." (names no file, starts with a number;
 * each PATH read with format). format: 0 auto (NAME.idx, or NAME.bin with NAME.idx beside it, or a PREFIX that is not a
 * file itself with PREFIX.idx beside it: indexed; else a name ending in .bin is an llm.c
 * token file, anything else bytes), 1 llm.c token file, 2 bytes, 3 indexed (PREFIX, or
 * PREFIX.bin or PREFIX.idx). Fails (PPSRT_E_USAGE, a message naming the file and what is
 * wrong: not a regular file, wrong magic, unsupported version or dtype, truncated, a size
 * or pointer past the end of the .bin, a token >= vocab in a stream of at most
 * PPSRT_DATA_SCAN bytes (default 1 GiB), too short for one sequence of seq + 1 tokens). */
int ppsrt_tokens_load(const char *path, int format, int vocab, int seq, ppsrt_tokens **out);
void ppsrt_tokens_free(ppsrt_tokens *t);
/* Sequence `sample` (0, 1, ...): T inputs and their T next tokens, from consecutive
 * windows of T + 1 tokens (stride T), wrapping around at the end of the stream. Fails
 * (PPSRT_E_USAGE) on a token >= vocab, naming the file, its position and the sequence. */
int ppsrt_tokens_window(const ppsrt_tokens *t, long sample, int T, int32_t *ids, int32_t *tgt);
/* --data-shuffle SEED: sequence k of epoch e = k / W (W windows) becomes window
 * perm_e(k mod W), a seeded permutation of the W windows, new each epoch (a blend's
 * datasets each in their own; data.c and docs/models.md give the permutation). */
void ppsrt_tokens_shuffle(ppsrt_tokens *t, uint64_t seed);
/* --split A,B,C (Megatron-LM's): the weights normalized; the stream cut into train,
 * validation and test parts at w[0] and w[0] + w[1] of its documents (an indexed
 * dataset: the index's documents; any other file: its tokens), by Megatron-LM's rounding
 * (each boundary the previous one plus round(w_i size), ties to even, all shifted so that
 * the last is the size); a blend: each dataset so. Restricts t to part `part` (0 train,
 * 1 validation, 2 test). Fails (PPSRT_E_USAGE) when the part of a dataset is shorter than
 * one sequence of seq + 1 tokens, naming the file, the part and its documents. */
int ppsrt_tokens_split(ppsrt_tokens *t, const double w[3], int part, int seq);

/* One device's runtime context (interp.c): the store, the IO box, the backend. */
typedef struct ppsrt_ctx ppsrt_ctx;

/* The collectives a model may issue inside `collective` (bound to the caller's rank
 * and the compute stream); every rank issues the same calls in the same order. */
typedef struct ppsrt_comm {
  int rank, nranks;
  int (*allreduce_f32)(struct ppsrt_comm *c, float *buf, size_t n, ppsrt_redop op);
  int (*broadcast)(struct ppsrt_comm *c, void *buf, size_t bytes, int root);
  void *impl;
} ppsrt_comm;

/* A parameter tensor, for the optimizer and --check. Vocabulary shards name the FULL
 * tensor (same name on every device) and give the slice they hold: elements
 * [offset, offset + numel) of a full tensor of full_numel elements. */
typedef struct ppsrt_param {
  const char *name;       /* unique in the whole model, e.g. "s3.l1.w", "vocab.out.w" */
  int stage;              /* stage it belongs to, -1 for vocabulary layers */
  size_t numel, offset, full_numel;
  ppsrt_tensor param;     /* act_dtype copy used by the kernels */
  float *master;          /* F32 master weights (may equal param.data on CPU) */
  float *grad;            /* F32 gradient, accumulated */
  float *m, *v;           /* Adam state (allocated by the model, zeroed) */
  int no_decay;           /* --weight-decay leaves it alone: biases and norm gains (one-dimensional
                           * tensors, as Megatron-LM's default); matrices and embeddings decay */
  /* --distributed-optimizer over D = cfg->nrep replicas (Megatron-LM's distributed
   * optimizer; replica.c lays out the buffers, ppsrt_param_shard moves a tensor in):
   * the tensor's weights and gradient are elements [flat_off, flat_off + numel) of its
   * stage's contiguous buffers (weights in the model's dtype, gradient F32), padded to
   * D x chunk elements; replica r owns [r chunk, (r + 1) chunk) of the buffer, and the
   * tensor's shard is the intersection: its elements [sh_lo, sh_lo + sh_n) (possibly
   * none, possibly a middle part). m, v and the F32 master (when it is not param
   * itself) hold only the shard: m[i] is element sh_lo + i's. Unsharded: chunk 0, sh_lo
   * 0, sh_n numel (flat_off: the place in the gradient buffer of plain --data-parallel). */
  size_t chunk, sh_lo, sh_n, flat_off;
  /* 1: a copy of a parameter another device of the pipeline holds too (the gpt's tied
   * embedding on the last stage's device): the model sums the two gradients before the
   * step, so the copies stay equal; counted once in norms, written once (by the
   * original's device) in checkpoints. */
  int shared;
  /* 1: the original or the copy of a tensor two devices of the pipeline hold (shared
   * above, and the original it copies), whose gradients the model sums after the
   * data-parallel reduction: --distributed-optimizer gives it a buffer of its own
   * (replica.c), so that both copies' shards are the same elements. */
  int tied;
  /* 1: grad (param.data) points into a buffer the runtime owns (replica.c's per-stage
   * gradient (weight) buffer): ppsrt_param_free leaves it alone. */
  int grad_view, param_view;
  /* --tensor-parallel (model_gpt.c): the tensor is rank tp_rank's slice of the group's
   * tensor [tp_R, tp_C] (row-major), elements [offset, offset + tp_R x tp_C) of the full
   * tensor `name`: the full tensor itself (offset 0, full_numel = tp_R x tp_C), or under
   * a vocabulary-parallel schedule the device's V/P rows of vocab.tok and vocab.out,
   * which its group splits again (offset its first row's element). tp_split 1 holds
   * the rows of the ranges [tp_lo[k], tp_lo[k] + tp_len[k]) (k < tp_n), every column;
   * 2 every row, the columns of those ranges; in that order, row-major. 0: whole, the
   * same on every rank of the group (biases after a reduction, norms). */
  int tp_split, tp_n;
  size_t tp_R, tp_C, tp_lo[3], tp_len[3];
  /* 1: one of this rank's experts under --expert-parallel X > 1 (moe.c): the other ranks of
   * its expert-parallel group hold other experts, so its gradient is summed over the
   * expert-data-parallel group only (replica.c), its norm over the expert-parallel group,
   * and checkpoints gather it from the group (checkpoint.c). */
  int expert;
} ppsrt_param;

/* The elements a tensor-parallel group holds together, from offset on (tp_R x tp_C),
 * or without a split the tensor's own numel. */
static inline size_t ppsrt_param_group_numel(const ppsrt_param *q) {
  return q->tp_split ? q->tp_R * q->tp_C : q->numel;
}

/* Element i of q (its numel) in its full tensor: offset + i, or offset + its index in
 * the group's tensor through the tensor-parallel slice. */
static inline size_t ppsrt_param_full_index(const ppsrt_param *q, size_t i) {
  if (!q->tp_split) return q->offset + i;
  size_t w = 0;
  for (int k = 0; k < q->tp_n; k++) w += q->tp_len[k];
  size_t r = q->tp_split == 2 ? i / w : i / q->tp_C, col = q->tp_split == 2 ? i % w : i % q->tp_C;
  size_t *x = q->tp_split == 2 ? &col : &r;   /* the index along the split dimension */
  size_t at = 0;
  for (int k = 0; k < q->tp_n; k++) {
    if (*x < q->tp_len[k]) { at = q->tp_lo[k] + *x; break; }
    *x -= q->tp_len[k];
  }
  return q->offset + (q->tp_split == 2 ? r * q->tp_C + at : at * q->tp_C + col);
}

/* A parameter's buffers (param.c), for the models: after name, stage, numel, offset and
 * full_numel are set, ppsrt_param_alloc allocates param, master, grad, m and v on be
 * (sharded per cfg->distopt, zeroed) and ppsrt_param_set writes the weights (host F32,
 * numel values: param, and the master's part); ppsrt_param_free releases them. */
int ppsrt_param_alloc(ppsrt_backend *be, const ppsrt_model_config *cfg, ppsrt_param *q);
int ppsrt_param_set(ppsrt_backend *be, ppsrt_param *q, const float *h);
/* --distributed-optimizer (replica.c): q's weights and gradient move to elements
 * [off, off + numel) of its stage's buffers w (act dtype) and grad (F32) of D x C
 * elements, and its optimizer state shrinks to replica r's shard (model.h). */
int ppsrt_param_shard(ppsrt_backend *be, ppsrt_param *q, void *w, float *grad, size_t off, size_t C, int r);
void ppsrt_param_free(ppsrt_backend *be, ppsrt_param *q);
/* The F32 master of element sh_lo (the optimizer's view of the shard). */
static inline float *ppsrt_param_master(const ppsrt_param *q) {
  return q->master == q->param.data ? q->master + q->sh_lo : q->master;
}

typedef struct ppsrt_model ppsrt_model;
struct ppsrt_model {
  const char *name;
  ppsrt_backend *be;
  ppsrt_model_config cfg;
  void *impl;
  /* 1 while the runtime evaluates (validate.c, forward passes only): no dropout (eval
   * mode), and end_iteration exchanges no gradients (none were computed) */
  int eval;

  /* Bytes of the boundary tensor (xfer, mb, stage) as defined in rule 1. */
  size_t (*xfer_bytes)(ppsrt_model *m, int xfer, int mb, int stage);
  /* Bytes F(mb, stage) keeps in the store (the same for every mb); 0 for stage -1
   * (vocabulary) when nothing is kept. */
  size_t (*act_bytes)(ppsrt_model *m, int stage);

  /* Compute passes (rule 1 and 2). bw may be NULL: the runtime then runs b then w. */
  int (*f)(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage);
  int (*b)(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage);
  int (*w)(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage);
  int (*bw)(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage);

  /* Vocabulary passes: kind is PPSRT_OP_IF, _IB, _S or _T. NULL when the model has no
   * vocabulary parallelism (the runtime then refuses programs with vocab_mode != 0). */
  int (*vocab_pass)(ppsrt_model *m, ppsrt_ctx *c, int kind, int mb);
  /* A vocabulary collective (ppsrt_coll) for mb: the model reduces its own buffers
   * through `comm` (e.g. max then sum for OUTPUT_FWD). It may run on the device's
   * collective lane (coll_lane.c), a second thread, while the device runs passes other
   * than its consumers: it may touch only mb's vocabulary state, the IO box entry of
   * B(mb, 0)'s input gradient and the backend's alloc/free (locked then). */
  int (*collective)(ppsrt_model *m, ppsrt_ctx *c, int coll, int mb, ppsrt_comm *comm);

  /* Called before the first op of an iteration (it = 0, 1, ...) and after the last;
   * end_iteration returns through *loss this device's share of the iteration's loss
   * (the runtime sums the shares over devices: the mean loss over microbatches). */
  int (*begin_iteration)(ppsrt_model *m, ppsrt_ctx *c, int it);
  int (*end_iteration)(ppsrt_model *m, ppsrt_ctx *c, double *loss);

  /* The parameters this device holds (valid until destroy). */
  ppsrt_param *params;
  int nparams;
  /* State this device holds that is no parameter (no gradient, no optimizer: the MoE
   * router's expert bias, moe.c), saved in checkpoints as a parameter is (an F32 tensor
   * under its name's key; the same on every replica, written by replica 0): nstate
   * tensors; state(i) gives tensor i's host copy, its name ("sS.lL.REST") and size;
   * after a load wrote them, state_sync copies them to the device. 0 / NULL: none. */
  int nstate;
  float *(*state)(ppsrt_model *m, int i, char *name, size_t cap, size_t *n);
  int (*state_sync)(ppsrt_model *m);

  /* FLOPs of one F / B / W of one stage for one microbatch (for MFU); may be 0. */
  double flops_f, flops_b, flops_w;

  void (*destroy)(ppsrt_model *m);
};

/* Creates the model `cfg->name` for one device holding `stages` (ascending, nstages
 * of them; vocabulary shard = `device` of cfg->ndev when vocab_mode != 0). The --check
 * reference calls it with every stage, device 0, ndev = 1, vocab_mode = 0. */
typedef int (*ppsrt_model_create_fn)(const ppsrt_model_config *cfg, ppsrt_backend *be, int device,
                                     const int *stages, int nstages, ppsrt_model **out);
/* The mlp's sizes can exist (positive, each tensor under 2^31 elements); else the error
 * (PPSRT_E_USAGE). cli.c asks before any rank starts, so bad sizes are bad flags (exit 2). */
int ppsrt_mlp_check_config(const ppsrt_model_config *cfg);
int ppsrt_mlp_create(const ppsrt_model_config *cfg, ppsrt_backend *be, int device,
                     const int *stages, int nstages, ppsrt_model **out);
int ppsrt_gpt_create(const ppsrt_model_config *cfg, ppsrt_backend *be, int device,
                     const int *stages, int nstages, ppsrt_model **out);   /* model_gpt.c */

/* ---- services of the runtime to the model (interp.c, actstore.c) ---- */
/* --tensor-parallel: buf (n F32 values in the backend's memory, on the compute stream)
 * summed over this rank's tensor-parallel group, in place; nothing without one. */
int ppsrt_tp_allreduce(ppsrt_ctx *c, float *buf, size_t n);
/* The same, the maximum over the group (the output layer's split softmax). */
int ppsrt_tp_allreduce_max(ppsrt_ctx *c, float *buf, size_t n);
/* --sequence-parallel: each rank's `bytes` at send land in recv (T x bytes) at block
 * tp_rank on every rank of the group (send may be recv's own block); a plain copy
 * without a group. */
int ppsrt_tp_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes);
/* --sequence-parallel: send (T x count F32) summed over the group, block tp_rank of the
 * sum into recv (count F32; recv may be send's own block); a plain copy without a group.
 * Both in the backend's memory, on the compute stream, like ppsrt_tp_allreduce. */
int ppsrt_tp_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count);
/* n F32 values in host memory summed over the gradients' group of this rank (its
 * data-parallel replicas x context ranks, replica.c; nothing without one): the MoE
 * expert bias's loads (moe.c). */
int ppsrt_replica_allreduce_host(ppsrt_ctx *c, float *buf, size_t n);
/* --context-parallel (cp.c): each rank's `bytes` at send land in recv (C x bytes) at block
 * cp_rank on every rank of the context-parallel group; send (C x count F32) summed over
 * the group, block cp_rank of the sum into recv (count F32). Backend memory, compute
 * stream; without a group a plain copy. */
int ppsrt_cp_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes);
int ppsrt_cp_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count);
/* --context-parallel's attention (cp.c, Megatron-LM's --cp-comm-type all_gather) on one
 * microbatch of Bm sequences of T tokens, of which this rank (cp of C) holds chunks cp
 * and 2C - 1 - cp of T / 2C rows each: qkv (act_dtype [Bm, T/C, ld]: the sequence's local
 * rows in that order, query heads at column 0, keys at Hq D, values at (Hq + Hkv) D).
 * fwd all-gathers the group's keys and values, puts them in sequence order and runs each
 * local chunk's queries against the keys up to their own positions: att [Bm T/C, Hq D],
 * lse (F32 Bm Hq T/C). bwd gathers them again, computes dq of the local rows into dqkv
 * (same layout as qkv) and every key's and value's gradient, reduce-scattered back to
 * their owners' rows of dqkv. drop (NULL: none): --attention-dropout's site, indexed
 * by the global positions in the whole sequence as at C = 1 (dropout.h). */
typedef struct ppsrt_cp_shape { int Bm, T, C, cp, Hq, Hkv, D, ld; } ppsrt_cp_shape;
/* rows rows of w bytes from src (row stride ss bytes) to dst (stride ds bytes) on the
 * compute stream: one memcpy when contiguous, else the backend's copy_rows (cp.c) */
int ppsrt_copy_rows(ppsrt_backend *be, void *dst, size_t ds, const void *src, size_t ss, size_t rows, size_t w);
int ppsrt_cp_attention_fwd(ppsrt_ctx *c, const ppsrt_cp_shape *s, const void *qkv, void *att, float *lse,
                           const ppsrt_dropout *drop);
int ppsrt_cp_attention_bwd(ppsrt_ctx *c, const ppsrt_cp_shape *s, const void *qkv, const void *att, const float *lse,
                           const void *datt, void *dqkv, const ppsrt_dropout *drop);
/* The global position of local row u (0 <= u < T/C) of rank cp of C (sequence of T). */
static inline int ppsrt_cp_pos(int T, int C, int cp, int u) {
  int Tc = T / (2 * C), j = u / Tc;
  return (j ? 2 * C - 1 - cp : cp) * Tc + u % Tc;
}
/* --expert-parallel (replica.c): each rank's `bytes` at send land in recv (X x bytes) at
 * block ep_rank on every rank of the expert-parallel group; send (X x count F32) summed
 * over the group, block ep_rank of the sum into recv (count F32). Backend memory,
 * compute stream; without a group a plain copy. */
int ppsrt_ep_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes);
int ppsrt_ep_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count);
/* --moe-token-dispatcher alltoall: the group's transport's alltoallv (transport.h; bytes,
 * backend memory, compute stream), counting the bytes sent to the other ranks; without a
 * group the self block copied. */
int ppsrt_ep_alltoallv(ppsrt_ctx *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                       const size_t *rcount, const size_t *rdispl);
/* ... and n more of this rank's kept slots routed to another rank's experts (--json) */
void ppsrt_ep_count_slots(ppsrt_ctx *c, double n);
ppsrt_backend *ppsrt_ctx_backend(ppsrt_ctx *c);
int ppsrt_ctx_rank(ppsrt_ctx *c);
int ppsrt_ctx_iteration(ppsrt_ctx *c);

/* IO box (rule 1). put takes ownership of a be->alloc'ed buffer; take gives it back to
 * the model (which must be->free it); peek leaves it in the box. take/peek of a
 * missing key fail with a message naming the key (a missing RECV). */
int ppsrt_io_put(ppsrt_ctx *c, int xfer, int mb, int stage, void *buf, size_t bytes);
int ppsrt_io_take(ppsrt_ctx *c, int xfer, int mb, int stage, void **buf, size_t *bytes);
int ppsrt_io_peek(ppsrt_ctx *c, int xfer, int mb, int stage, void **buf, size_t *bytes);

/* Activation store (rule 2). save allocates `bytes` of counted device memory for
 * (mb, stage) and returns its index through *index (may be NULL); adopt counts a
 * be->alloc'ed buffer the model already has (e.g. a received input it keeps). get
 * returns the entry's device pointer, waiting for a reload when there was one (and
 * failing, with a hint, when the entry is still on the host). free releases one
 * entry; release every remaining entry of (mb, stage). */
int ppsrt_act_save(ppsrt_ctx *c, int mb, int stage, size_t bytes, void **out, int *index);
int ppsrt_act_adopt(ppsrt_ctx *c, int mb, int stage, void *buf, size_t bytes, int *index);
int ppsrt_act_get(ppsrt_ctx *c, int mb, int stage, int index, void **out);
int ppsrt_act_free(ppsrt_ctx *c, int mb, int stage, int index);
int ppsrt_act_release(ppsrt_ctx *c, int mb, int stage);

/* Activation recomputation (runtime/recompute.c): for a recomputed stage the runtime
 * keeps only entry 0 of F(mb, s) (which must be the stage input: save or adopt it
 * first) and, before B/BW, runs F again. While it does, ppsrt_recomputing is 1,
 * ppsrt_io_take(ACT, mb, s - 1) returns the kept input (stage 0 may take it the same
 * way, key stage -1, instead of rebuilding its input), ppsrt_io_put discards what it
 * is given (frees it), and the model must not count the loss a second time. */
int ppsrt_recomputing(const ppsrt_ctx *c);
/* Partial recomputation (ratio R < 1: the first ceil(R L) of the stage's L layers):
 * F calls ppsrt_layer_end after layer l saved all it keeps (its output included, the
 * layers' entries one block after the stage input). When it returns 1, F is running
 * again for a partial rebuild and returns 0 at once: the layers above (and what F
 * keeps after them) are still in the store. A model that does not call it can only be
 * recomputed whole (ratio 1). */
int ppsrt_layer_end(ppsrt_ctx *c, int mb, int stage, int l);

/* Deterministic synthetic numbers shared by the models: uniform in [-1, 1) from
 * (seed, stream id, index); standard normal (mean 0, variance 1) from the same
 * (Box-Muller on the hashed uniforms of indices 2 index and 2 index + 1, computed on the
 * host in double); and a 64-bit hash to make stream ids from names. */
float ppsrt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index);
float ppsrt_rand_normal(uint64_t seed, uint64_t stream, uint64_t index);
uint64_t ppsrt_hash_str(const char *s);

/* FLOPs of one pass of the mlp model (model_mlp.c) for one microbatch, for MFU: every
 * linear of a stage costs 2 N h^2 per pass (N = seq x micro_batch), F, B and W alike
 * (BW both: 4 N h^2 per linear); the vocabulary passes (none in mlp) 0. Depends only
 * on cfg, so the device that reports can count every device's passes. The gpt model's
 * counterpart is ppsrt_gpt_pass_flops (gpt.h). */
double ppsrt_mlp_pass_flops(const ppsrt_model_config *cfg, int kind, int stage);
#endif
