/* model_gpt.c: the `gpt` model: a GPT-style decoder split into pipeline stages, with
 * the input embedding and the output layer either on the first/last stage or split by
 * vocabulary rows over all devices (Vocab-1 / Vocab-2 of "Balancing Pipeline
 * Parallelism with Vocabulary Parallelism", MLSys 2025). docs/models.md is the full
 * description; in short, with h = --hidden, N = micro_batch * seq tokens:
 *
 *   input   x0 = tok[ids] + pos[t]                         (tok [V, h], pos [seq, h])
 *   layer   x1 = x + proj(attn(LN1(x)))                    (pre-LN, causal, GQA:
 *           y  = x1 + fc2(gelu(fc(LN2(x1))))                --heads query heads,
 *                                                           --query-groups kv heads, 4h MLP)
 *   output  logits = LN_f(y) out^T (out [V, h], untied); loss = mean softmax cross-entropy
 *   Llama's layer (--arch llama, or each part alone: --mlp swiglu: hact = silu(gate) * up
 *           of FC1 = [gate | up] [h, 2f]; --norm rmsnorm: x rstd gamma, no beta, rstd
 *           kept alone; --position rope: q and k heads rotated after QKV, no pos table;
 *           --bias off: no linear biases; --ffn-hidden f; docs/models.md)
 *   QK norm --qk-layernorm: each query and key head normalised (the layer's norm, gains [D]
 *           qnorm.g, knorm.g) after QKV, before RoPE (Qwen3; see qkn_f_in below)
 *   MoE     --num-experts E: the MLP a mixture of E experts, each token routed to its top K
 *           (runtime/moe.c: router, permutation, experts, combine; their F/B/W parts);
 *           --moe-shared-ffn-hidden S adds a shared expert, this file's dense MLP of width S
 *           on every token, its output added to the experts' before the dropout:
 *           y = x1 + drop(experts(LN2(x1)) + fc2(act(fc(LN2(x1))))) (params moe.shared.*);
 *           --moe-shared-expert-gate scales the shared expert's output (its FC2 bias included)
 *           per token by sigmoid(LN2(x1) . wg), wg [h] (moe.shared.gate.w, whole on every rank;
 *           Megatron-Core's gate_weight; see shared_gate_f/_b/_w below)
 *   data    ids seeded per (seed, microbatch); target[t] = (ids[t] + ids[t-1]) mod V
 *
 * Passes: F forward (saves what the backward needs, plus a gradient area for B); B the
 * input gradient only, leaving the output gradients of every matrix product and layer
 * norm for W in forward buffers it no longer needs and in that area, so B neither frees
 * nor adds counted memory (b_free = 0); W every weight gradient (dW = X^T dY, biases, LN
 * gamma/beta, embeddings), recomputing the LN outputs, then releases the stage; BW = B
 * then W. act_bytes(stage) is exactly what F saves. A linear layer's product and its
 * bias (+ GeLU), GeLU gradient or bias gradient run as one GEMM where the backend fuses
 * that epilogue (backend.h gemm_ep; CUDA: PPSRT_CUDA_EPILOGUE), into the same buffers.
 * Vocabulary passes (vocab_mode 1|2, shard of device d = rows [d V/P, (d+1) V/P)):
 *   IF  e_d = tok_d[ids] (+ pos on device 0);       coll input_fwd: e = sum_d e_d -> F(mb,0)
 *   S   X = LN_f(y) broadcast from the last stage's device; logits_d = X out_d^T;
 *       local max m_d, sumexp s_d, target logit; Vocab-2 also A_d = softmax_d(logits_d) out_d
 *       and G_d = out_d[target] (zero outside the shard);
 *   coll output_fwd: M = allreduce max(m_d); S = allreduce sum(s_d exp(m_d - M)), target
 *       logit summed; Vocab-2: dX = allreduce sum(((s_d exp(m_d - M) / S) A_d - G_d) / (N nmb))
 *   T   dlogits_d = (softmax - onehot) / (N nmb); d out_d += dlogits_d^T X;
 *       Vocab-1 also dX_d = dlogits_d out_d;   coll output_bwd (Vocab-1): dX = sum_d dX_d
 *   B(mb, S-1) takes dX as the gradient of LN_f's output;
 *   B(mb, 0) leaves dx0 in the IO box; coll input_bwd broadcasts it from stage 0's device;
 *   IB  d tok_d += scatter of dx0 over ids in the shard (device 0 also d pos).
 *
 * Tensor parallelism (--tensor-parallel T, Megatron-LM's layout): rank t of a group holds
 * query heads [t Hq/T, (t+1) Hq/T) and key/value groups [t Hkv/T, ...) of every layer
 * (the columns of QKV and its bias), the matching rows of the projection, the columns
 * [t 4h/T, ...) of FC1 and its bias, the matching rows of FC2 (tp_slice, model.h); the
 * projection's and FC2's biases and the layer norms are whole on every rank. F sums the
 * projection's and FC2's partial products over the group (gemm_tp_sum: in F32,
 * ppsrt_tp_allreduce), then adds the residual and the bias; B sums the input gradients
 * of QKV and FC1 (LN1's and LN2's output gradients) the same way; W needs no
 * communication. Without a vocabulary-parallel schedule (tpv) the input and output
 * layers are split by vocabulary rows [lo, hi) = [t V/T, (t+1) V/T) (Megatron's
 * VocabParallelEmbedding and vocab-parallel cross-entropy): stage 0's F looks up each
 * token in the rank's rows of tok (zero elsewhere) and sums over the group (tp_embed),
 * then adds pos (whole); the last stage's logits are the rank's V/T columns, their max
 * and sum of exponentials combined over the group (ppsrt_tp_allreduce_max, then the
 * rescaled sums and the target logits summed), its B sums dlogits_t out_t over the
 * group; W takes the rank's rows of tok's and out's gradients. With a vocabulary-
 * parallel schedule (vtp) the device's rows are split again: rank t holds [lo, hi) =
 * [d V/P + t V/(P T), + V/(P T)) of tok and out (a slice of the device's rows, model.h),
 * and the passes combine over the group what the collectives then combine over the P
 * devices exactly as at T = 1: IF sums e_d over the group (pos added on rank 0 only),
 * S combines the softmax's statistics over the group into the device's m_d, s_d and
 * target logit (softmax_combine, tp_reduce) and with Vocab-2 sums A_d and G_d, T with
 * Vocab-1 sums dX_d; IB and T's weight gradient take the rank's rows. (The group's
 * sums run on the device's thread and the tensor-parallel transport, so a collective
 * on the lane never needs the group.) Every rank of a group computes the same
 * activations outside the split, the same loss and the same gradients of the whole
 * tensors.
 * Sequence parallelism (--sequence-parallel, with T > 1; Korthikanti et al. 2022): with
 * n = N/T, rank t holds the residual stream's token rows [r0, r0 + n), r0 = t n: the
 * stage input and output, ln1, x1, ln2, y, the LN statistics and the gradient slots
 * are n rows, the layer norms, residual and bias adds run on them. F all-gathers LN1's
 * and LN2's outputs (sp_gather, into an uncounted [N, h] buffer) before QKV and FC1 and
 * reduce-scatters the projection's and FC2's partial products (gemm_tp_sum) to the
 * rank's rows; B all-gathers dy and dx1 before the products with Wfc2 and Wproj and
 * reduce-scatters QKV's and FC1's input gradients; W all-gathers dy, dx1 and the
 * recomputed LN outputs again (the bias gradients of proj and FC2 then whole), and
 * adds the LN gammas' and betas' gradients of its rows, which sp_sync sums over the
 * group once an iteration. Stage 0 embeds
 * its rows only (tp_embed reduce-scatters the summed embeddings; W all-gathers dx0 for
 * the embeddings' gradients); the last stage all-gathers y and runs LN_f and the output
 * layer on all N rows, as without it (B keeps its rows of LN_f's input gradient).
 * Pipeline messages: n rows.
 *
 * With a vocabulary-parallel schedule, stage 0's F takes its rows of the reduced
 * embedding and its B all-gathers the input gradient for input_bwd and IB (all N rows).
 *
 * Tied embeddings (--embeddings tied): out is tok, one parameter where one device holds
 * stage 0 and the last stage, else a copy whose gradient tie_sync sums with tok's.
 * Dropout (--hidden-dropout, --attention-dropout; Megatron-LM's places): on the
 * embedding's output (stage 0, x0 = drop(tok[ids] + pos)), on the attention
 * probabilities, and on the attention block's and the MLP's outputs before the residual
 * add, with the bias (bias-dropout-add: x1 = x + drop(att Wproj + b), y = x1 + drop(hact
 * Wfc2 + b)). Masks are never stored: every pass regenerates them from dropout.h's hash
 * of (seed, step, global microbatch, global layer, site, global element index), so B,
 * W, a recomputed F, the tensor-/sequence-parallel ranks and the --check reference drop
 * the same elements; rate 0 runs none of it (the kernels of a run without dropout).
 *
 * What it does not: the broadcast of LN_f(y) to
 * every device before S is issued by S itself through the run's transport (see vocab_s),
 * since no collective precedes S. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "moe.h"

#define CS PPSRT_STREAM_COMPUTE

/* layer parameters */
enum { LN1G, LN1B, QKVW, QKVB, PROJW, PROJB, LN2G, LN2B, FCW, FCB, FC2W, FC2B, SGW, QNG, QNB, KNG, KNB, NLP };
static const char *const lp_names[NLP] = {"ln1.g", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                                          "ln2.g", "ln2.b", "fc.w", "fc.b", "fc2.w", "fc2.b", "gate.w",
                                          "qnorm.g", "qnorm.b", "knorm.g", "knorm.b"};
/* what F saves per layer (activation store entries) */
enum { FE_LN1, FE_ST, FE_QKV, FE_LSE, FE_ATT, FE_X1, FE_LN2, FE_HPRE, FE_HACT, FE_MOE, FE_SG, FE_Y, FE_QKN, NFE };
/* (hpre, hact: the dense MLP's, or with --num-experts the shared expert's, -1 without one;
 * FE_MOE the experts' entry, moe.h, -1 without experts; FE_SG the shared expert's gate,
 * -1 without --moe-shared-expert-gate: sg_bytes; FE_QKN --qk-layernorm's, -1 without:
 * qkn_bytes) */

/* Store indices of one (mb, stage), recorded as F saves them. B saves nothing and frees
 * nothing (b_free = 0): it writes the gradients W needs into buffers whose forward
 * values are dead after B (hpre <- dhpre, qkv <- dqkv, ln2 <- dln2, ln1 <- dln1, lnf <-
 * dlnf) and into the stage's gradient area `grad`, which F reserves: Nh-sized slots
 * for the stage's output gradient, each layer's dx1 and the input gradient of every
 * layer but the first (and the first's too on stage 0 without vocabulary parallelism,
 * for the embeddings' W). W recomputes LN1/LN2/LN_f outputs (cheap) and releases all. */
typedef struct sidx {
  int in, fst, flnf, fdl, grad;
  int *lf;   /* [L * NFE] */
} sidx;

/* Vocabulary-parallel buffers of one microbatch, outside the store (like the IO box). */
typedef struct vstate {
  float *emb;     /* IF output, F32 [N, h]: reduced by input_fwd, consumed by F(mb, 0) */
  float *st;      /* [5N]: lmax | lsum | gmax | gsum | gtgt, from S until T */
  float *A, *G;   /* Vocab-2: F32 [N, h] */
  float *dx;      /* F32 [N, h]: gradient of LN_f's output, for B(mb, S-1) */
} vstate;

typedef struct gpt {
  int h, Hq, Hkv, D, T, Bm, N, V, L, S, P, mode, rank, nc, q;
  int tp, tpr;             /* --tensor-parallel: group size, this rank (Hq, Hkv, q, ha, f: its share) */
  int tpv;                 /* --tensor-parallel without a vocabulary-parallel schedule: the input and output
                              layers split by vocabulary rows [lo, hi) over the group (Megatron's) */
  int vtp;                 /* --tensor-parallel under a vocabulary-parallel schedule: the device's rows
                              [vlo, vlo + V/P) split again over the group, this rank's [lo, hi) */
  int ha, f;               /* attention output width Hq D, MLP width ffn_hidden / tp */
  int F, fw;               /* ffn_hidden (whole); FC1's output width here: 2f with SwiGLU, else f */
  int sw, rms, rope, nb;   /* --mlp swiglu, --norm rmsnorm, --position rope, --bias off */
  int qkn;                 /* --qk-layernorm: query and key heads normalised before RoPE (QNG..KNB, FE_QKN) */
  float eps;               /* --norm-epsilon: every norm's (the layer's two, the final, the query/key heads') */
  int tie;                 /* --embeddings tied: out is tok (the same parameter, or on another device a copy) */
  int nst;                 /* F32 statistics a norm keeps a row: 2 (mean, rstd), RMS norm 1 (rstd) */
  int kidx[NLP], nlp;      /* layer parameter j's index in a layer's block, -1 when absent; present ones */
  float *rcs;              /* --position rope: device F32 [seq, D/2, 2] cosines and sines (rope_table) */
  int sp, n, r0;           /* --sequence-parallel: on; this rank's token rows [r0, r0 + n) (else 0, N) */
  int cp, cpr, Tl;         /* --context-parallel: group size, this rank, its tokens of a sequence T / cp (cp.c) */
  size_t es;
  int nlocal, *local, first, last;
  int lo, hi;              /* vocabulary rows held */
  int vlo;                 /* a vocabulary-parallel schedule: the device's first row (its group's rows) */
  int lpbase;              /* index of the first layer parameter in m->params */
  ppsrt_param *tok, *pos, *out, *lnfg, *lnfb;
  int32_t *ids, *tgt, *posid;   /* device: [nmb*N], [nmb*N], [N] */
  sidx *ix;                /* [nmb * nlocal] */
  int *ixpool;
  vstate *vs;              /* [nmb] */
  float *hst;              /* host scratch [3N * nmb] */
  uint32_t dth, dta;       /* dropout thresholds (dropout.h): hidden, attention; 0 = none */
  float dsh, dsa;          /* their scales 1 / (1 - p) */
  int64_t step;            /* this iteration's global step (cfg.step0 + it + 1): the masks' counter */
  int moe_on, lpb;         /* --num-experts: every layer's MLP is experts (moe.c); a layer's parameters */
  int mlp;                 /* the layer has the dense MLP (fc, fc2): without experts, or with --num-experts the
                            * shared expert of --moe-shared-ffn-hidden (F, f, fw its widths) */
  int sg;                  /* --moe-shared-expert-gate: the shared expert's output gated (SGW, FE_SG) */
  int32_t *sgi;            /* with sg, device int32 [2n]: 0 .. n-1 (the gate's rows, moe_unpermute's pos), then
                            * n zeros (its one "expert", moe_route_bwd's idx) */
  ppsrt_moe moe;
  float *lst;              /* device: [nmb][3N] loss statistics (the device reporting the loss) */
  int nl;                  /* slots of lst filled this iteration */
  double loss;
} gpt;

static ppsrt_param *LP(ppsrt_model *m, int loc, int l, int k) {
  gpt *g = m->impl;
  return g->kidx[k] < 0 ? NULL : &m->params[g->lpbase + ((size_t)loc * g->L + l) * g->lpb + g->kidx[k]];
}
/* --num-experts: layer l's MoE parameters (the router, then the experts', moe.h), after its others */
static ppsrt_param *MP(ppsrt_model *m, int loc, int l) {
  gpt *g = m->impl;
  return &m->params[g->lpbase + ((size_t)loc * g->L + l) * g->lpb + g->nlp];
}
/* the layer's slot of the MoE routing counts */
static int moe_slot(const gpt *g, int mb, int loc, int l) { return (mb * g->nlocal + loc) * g->L + l; }
/* an optional parameter's data or gradient (NULL when absent: no bias, no beta) */
static const void *PD(const ppsrt_param *p) { return p ? p->param.data : NULL; }
static float *PG(ppsrt_param *p) { return p ? p->grad : NULL; }
/* A norm's statistics in st (F32, `rows` a value): norm k's mean and rstd at rows 2k and
 * 2k + 1 of st, or with RMS norms (no mean) its rstd at row k. */
static float *nmean(const gpt *g, float *st, int k, int rows) { return g->rms ? NULL : st + (size_t)2 * k * rows; }
static float *nrstd(const gpt *g, float *st, int k, int rows) { return st + (size_t)(g->rms ? k : 2 * k + 1) * rows; }
static sidx *IX(gpt *g, int mb, int loc) { return &g->ix[(size_t)mb * g->nlocal + loc]; }
/* The dropout of one site (dropout.h) in this iteration: microbatch mb (global: mb0 + mb,
 * as the data), global layer `layer` (stage L + l; -1 the embedding); base as dropout.h.
 * Hidden sites index [N, h] (element (row, c) = row h + c: base r0 h for this rank's rows),
 * the attention site [batch, heads, T, T] (base: the rank's first query head). */
static ppsrt_dropout drop_site(const ppsrt_model *m, int mb, int layer, int site, uint64_t base) {
  const gpt *g = m->impl;
  int at = site == PPSRT_DROP_ATTN, on = !m->eval;   /* evaluation: none (threshold 0, scale 1) */
  ppsrt_dropout d = {on ? (at ? g->dta : g->dth) : 0, on ? (at ? g->dsa : g->dsh) : 1.0f,
                     ppsrt_drop_key(m->cfg.seed, g->step, (int64_t)m->cfg.mb0 + mb, layer, site), base,
                     at ? g->Hq * g->tp : 0, 0};
  return d;
}

/* --hidden-dropout on this rank's n rows [r0, r0 + n) of its N (bias_dropout_add's
 * y = a + drop(x + bias), each a [n, h] or NULL): one kernel whose base is r0 h, or
 * under --context-parallel one for each run of rows consecutive in the whole
 * micro-batch (a chunk of a sequence), based at its first row's global index
 * (b T + position) h, so that every element keeps C = 1's mask. */
static int drop_rows(const ppsrt_model *m, int mb, int layer, int site, void *y, const void *a, const void *x,
                     const void *bias) {
  const gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int Tc = g->T / (2 * g->cp);
  for (int i = 0; i < g->n;) {
    int u = g->r0 + i, b = u / g->Tl, lu = u % g->Tl, seg = g->cp > 1 ? Tc - lu % Tc : g->n;
    if (seg > g->n - i) seg = g->n - i;
    int64_t row = g->cp > 1 ? (int64_t)b * g->T + ppsrt_cp_pos(g->T, g->cp, g->cpr, lu) : u;
    ppsrt_dropout d = drop_site(m, mb, layer, site, (uint64_t)row * g->h);
    size_t off = (size_t)i * g->h * g->es;
    int rc = be->bias_dropout_add(be, CS, (char *)y + off, a ? (const char *)a + off : NULL, (const char *)x + off, bias,
                                  seg, g->h, &d);
    if (rc) return rc;
    i += seg;
  }
  return 0;
}

#define TRY(e)                   \
  do {                           \
    int rc_ = (e);               \
    if (rc_) return rc_;         \
  } while (0)
/* a kernel: skipped with --no-compute */
#define K(e)                     \
  do {                           \
    if (!g->nc) TRY(e);          \
  } while (0)
#define AT be->act_dtype

/* A linear layer's product with its epilogue fused where the backend offers it
 * (backend.h gemm_ep: bias, bias + GeLU keeping the GeLU input in aux, bias gradient),
 * else 1: the caller runs the unfused kernels (EPI). Same memory either way. */
static int fused(ppsrt_backend *be, int ep, int ta, int tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, float beta, void *C, ppsrt_dtype ct, int ldc, const void *bias, void *aux,
                 float *dbias) {
  if (!(be->epilogues & (unsigned)ep)) return 1;
  return be->gemm_ep(be, CS, ep, ta, tb, M, N, K, 1.0f, A, AT, lda, B, AT, ldb, beta, C, ct, ldc, bias, aux, dbias);
}
/* `call` (a fused()), or when it fused nothing the `unfused` kernels; skipped with --no-compute */
#define EPI(call, unfused)                \
  do {                                    \
    int r_ = g->nc ? 0 : (call);          \
    if (r_ < 0) return r_;                \
    if (r_) { unfused; }                  \
  } while (0)

/* C (act_dtype [M, Nc], row stride Nc) = A W + beta C (+ bias): A [M, K], W [K, Nc]; the
 * bias fused into the product where the backend offers it; without a bias (--bias off)
 * the product alone. Nothing with --no-compute. */
static int linear_f(const gpt *g, ppsrt_backend *be, int M, int Nc, int K, const void *A, const void *W, float beta,
                    void *C, const void *bias) {
  if (g->nc) return 0;
  if (bias) {
    int r = fused(be, PPSRT_EP_BIAS, 0, 0, M, Nc, K, A, K, W, Nc, beta, C, AT, Nc, bias, NULL, NULL);
    if (r <= 0) return r;
  }
  TRY(be->gemm(be, CS, 0, 0, M, Nc, K, 1.0f, A, AT, K, W, AT, Nc, beta, C, AT, Nc));
  return bias ? be->add_bias(be, CS, C, C, bias, M, Nc) : 0;
}
/* A linear layer's weight gradient: dW (F32 [K, Nc]) += X^T dY (X [M, K], dY [M, Nc]) and,
 * when the layer has a bias, db += the column sums of dY (fused where offered). */
static int linear_w(const gpt *g, ppsrt_backend *be, int M, int K, int Nc, const void *X, const void *dY, float *dW,
                    float *db) {
  if (g->nc) return 0;
  if (db) {
    int r = fused(be, PPSRT_EP_BGRAD, 1, 0, K, Nc, M, X, K, dY, Nc, 1.0f, dW, PPSRT_F32, Nc, NULL, NULL, db);
    if (r <= 0) return r;
  }
  TRY(be->gemm(be, CS, 1, 0, K, Nc, M, 1.0f, X, AT, K, dY, AT, Nc, 1.0f, dW, PPSRT_F32, Nc));
  return db ? be->bias_grad(be, CS, db, dY, M, Nc) : 0;
}

/* --context-parallel: this rank's attention shape (cp.c) */
static ppsrt_cp_shape cp_shape(const gpt *g) {
  return (ppsrt_cp_shape){g->Bm, g->T, g->cp, g->cpr, g->Hq, g->Hkv, g->D, g->q};
}

static int cp_attn_bwd(ppsrt_ctx *c, const gpt *g, const void *qkv, const void *att, const float *lse, const void *datt,
                       void *dqkv, const ppsrt_dropout *drop) {
  ppsrt_cp_shape s = cp_shape(g);
  return ppsrt_cp_attention_bwd(c, &s, qkv, att, lse, datt, dqkv, drop);
}

static int get(ppsrt_ctx *c, int mb, int stage, int idx, void **p) { return ppsrt_act_get(c, mb, stage, idx, p); }
static int save(ppsrt_ctx *c, int mb, int stage, size_t bytes, void **p, int *idx) {
  return ppsrt_act_save(c, mb, stage, bytes, p, idx);
}

/* ---- sizes ---- */

static size_t gpt_xfer_bytes(ppsrt_model *m, int xfer, int mb, int stage) {
  gpt *g = m->impl;
  if (xfer == PPSRT_XFER_GRAD && stage == g->S) return (size_t)g->N * g->V * g->es;   /* loss gradient */
  return (size_t)g->n * g->h * g->es;   /* --sequence-parallel: this rank's rows */
}

/* Slots of the gradient area of a stage (see sidx), in units of N*h elements. */
static int need_dx0(const gpt *g, int stage) { return stage == 0 && !g->mode; }
static int grad_slots(const gpt *g, int stage) { return 2 * g->L + need_dx0(g, stage); }
static int slot_dytop(void) { return 0; }
static int slot_dx1(const gpt *g, int l) { return 1 + l; }
static int slot_dx(const gpt *g, int l) { return l > 0 ? 1 + g->L + (l - 1) : 2 * g->L; }   /* l = 0: dx0 */

/* --moe-shared-expert-gate's store entry, this rank's n rows (its token rows under
 * --sequence-parallel, the rows the gate runs on, as Megatron-Core's): z = LN2 . wg
 * (F32 [n]) | s = sigmoid(z) (F32 [n]) | u, the shared expert's output before the gate
 * (act [n, h], for B's ds = dy . u) | dz, written by B for W (act [n]). */
static size_t sg_bytes(const gpt *g) { return (size_t)g->n * (2 * sizeof(float) + ((size_t)g->h + 1) * g->es); }
static float *sg_z(const gpt *g, void *e) { (void)g; return e; }
static float *sg_s(const gpt *g, void *e) { return (float *)e + g->n; }
static char *sg_u(const gpt *g, void *e) { return (char *)e + (size_t)g->n * 2 * sizeof(float); }
static char *sg_dz(const gpt *g, void *e) { return sg_u(g, e) + (size_t)g->n * g->h * g->es; }

/* --qk-layernorm (Qwen3, OLMo 2, Megatron-Core's qk_layernorm): every query head and
 * every key head of QKV's output, a row of D, normalised with the layer's norm (layer
 * or RMS norm, eps 1e-5) and gains [D] shared by the heads (qnorm.g, knorm.g; betas .b
 * with layer norms), before RoPE. The rows are the [N, Hq D] and [N, Hkv D] column
 * blocks of qkv viewed as [N Hq, D] and [N Hkv, D]: the row norm kernels with C = D.
 * F saves one entry, FE_QKN: the statistics (nst F32 a head row: the query heads' rows,
 * then the key heads'), the heads before the norm (the norm's input: [N Hq, D] then
 * [N Hkv, D], act_dtype) and an area of the same size where B leaves the gradient of
 * the norm's output for W's gains. Under --tensor-parallel the rank's heads only (the
 * gains whole: qkn_sync sums their gradients over the group). */
static size_t qkn_rows(const gpt *g) { return (size_t)g->N * (g->Hq + g->Hkv); }
static size_t qkn_bytes(const gpt *g) { return qkn_rows(g) * (g->nst * sizeof(float) + 2 * (size_t)g->D * g->es); }
static float *qkn_st(const gpt *g, void *e, int k) { return (float *)e + (k ? (size_t)g->nst * g->N * g->Hq : 0); }
static char *qkn_x(const gpt *g, void *e, int k) {
  return (char *)e + qkn_rows(g) * g->nst * sizeof(float) + (k ? (size_t)g->N * g->Hq * g->D * g->es : 0);
}
static char *qkn_dy(const gpt *g, void *e, int k) { return qkn_x(g, e, k) + qkn_rows(g) * g->D * g->es; }
/* head rows of part k (0 queries, 1 keys) and its column offset in a QKV row, bytes */
static int qkn_hr(const gpt *g, int k) { return g->N * (k ? g->Hkv : g->Hq); }
static size_t qkn_off(const gpt *g, int k) { return k ? (size_t)g->Hq * g->D * g->es : 0; }

/* F: the query and key heads of qkv ([N, q]) normalised in place; their input and
 * statistics into the entry e. tmp: scratch of qkn_rows D. */
static int qkn_f_in(const gpt *g, ppsrt_backend *be, ppsrt_param **p, void *qkv, void *e, void *tmp) {
  size_t es = g->es, ld = (size_t)g->q * es;
  for (int k = 0; k < 2; k++) {
    int R = qkn_hr(g, k), D = g->D;
    size_t w = (size_t)(R / g->N) * D * es;
    float *st = qkn_st(g, e, k);
    char *x = qkn_x(g, e, k), *y = (char *)tmp + (k ? (size_t)g->N * g->Hq * D * es : 0);
    TRY(ppsrt_copy_rows(be, x, w, (char *)qkv + qkn_off(g, k), ld, g->N, w));
    TRY(be->layernorm_fwd(be, CS, y, nmean(g, st, 0, R), nrstd(g, st, 0, R), x, PD(p[k ? KNG : QNG]),
                          PD(p[k ? KNB : QNB]), R, D, g->eps));
    TRY(ppsrt_copy_rows(be, (char *)qkv + qkn_off(g, k), ld, y, w, g->N, w));
  }
  return 0;
}

/* B: dq = the gradient of qkv's normalised heads (in place in dqkv, [N, q]) taken back
 * through the norms; the output gradients kept in e for W. tmp: scratch of qkn_rows D. */
static int qkn_b_in(const gpt *g, ppsrt_backend *be, ppsrt_param **p, void *dqkv, void *e, void *tmp) {
  size_t es = g->es, ld = (size_t)g->q * es;
  for (int k = 0; k < 2; k++) {
    int R = qkn_hr(g, k), D = g->D;
    size_t w = (size_t)(R / g->N) * D * es;
    float *st = qkn_st(g, e, k);
    char *dy = qkn_dy(g, e, k);
    TRY(ppsrt_copy_rows(be, dy, w, (char *)dqkv + qkn_off(g, k), ld, g->N, w));
    TRY(be->layernorm_bwd_input(be, CS, tmp, dy, qkn_x(g, e, k), nmean(g, st, 0, R), nrstd(g, st, 0, R),
                                p[k ? KNG : QNG]->param.data, R, D, 0));
    TRY(ppsrt_copy_rows(be, (char *)dqkv + qkn_off(g, k), ld, tmp, w, g->N, w));
  }
  return 0;
}

/* qkn_f_in (b 0) or qkn_b_in (b 1) with their scratch (uncounted) */
static int qkn_fb(const gpt *g, ppsrt_backend *be, ppsrt_param **p, void *qkv, void *e, int b) {
  void *t;
  TRY(be->alloc(be, qkn_rows(g) * g->D * g->es, &t));
  int rc = b ? qkn_b_in(g, be, p, qkv, e, t) : qkn_f_in(g, be, p, qkv, e, t);
  be->free(be, t);
  return rc;
}

/* W: the gains' (and the query norm's beta's) gradients of the rank's head rows. The key
 * norm's beta (layer norms) has none: it shifts every key of a head by the same vector,
 * which moves a query's scores all by the same amount, and the softmax does not see it;
 * its gradient stays 0 (computed, it is rounding noise, which --check compares). */
static int qkn_w(const gpt *g, ppsrt_backend *be, ppsrt_param **p, void *e) {
  for (int k = 0; k < 2; k++) {
    int R = qkn_hr(g, k);
    float *st = qkn_st(g, e, k);
    TRY(be->layernorm_bwd_weight(be, CS, p[k ? KNG : QNG]->grad, k ? NULL : PG(p[QNB]), qkn_dy(g, e, k),
                                 qkn_x(g, e, k), nmean(g, st, 0, R), nrstd(g, st, 0, R), R, g->D));
  }
  return 0;
}

/* Bytes F saves per layer, and per stage (mirrors gpt_f exactly). With
 * --sequence-parallel what lives on the residual stream (ln1, x1, ln2, y, the layer
 * norms' statistics, the stage input and the gradient slots) is this rank's n = N/T
 * rows; qkv, att, hpre, hact and lse are its heads' and columns' share of all N rows. */
static size_t layer_bytes(const gpt *g, int with_y) {
  size_t Nh = (size_t)g->n * g->h * g->es;
  return Nh                                  /* ln1 */
         + 2 * (size_t)g->nst * g->n * sizeof(float)   /* mean1, rstd1, mean2, rstd2 (RMS: rstd1, rstd2) */
         + (size_t)g->N * g->q * g->es       /* qkv */
         + (size_t)g->Bm * g->Hq * g->Tl * sizeof(float)   /* lse (--context-parallel: its rows') */
         + (size_t)g->N * g->ha * g->es      /* att */
         + 2 * Nh                            /* x1, ln2 */
         + (g->moe_on ? g->moe.bytes : 0)   /* the experts' entry (moe.h) */
         + (g->mlp ? (size_t)g->N * (g->fw + g->f) * g->es : 0)   /* hpre (SwiGLU: gate | up), hact (dense or shared) */
         + (g->sg ? sg_bytes(g) : 0)         /* the shared expert's gate */
         + (g->qkn ? qkn_bytes(g) : 0)       /* --qk-layernorm's heads */
         + (with_y ? Nh : 0);                /* y, the next layer's input */
}

static size_t gpt_act_bytes(ppsrt_model *m, int stage) {
  gpt *g = m->impl;
  size_t Nh = (size_t)g->N * g->h * g->es, nh = (size_t)g->n * g->h * g->es;
  if (stage < 0) return g->mode ? Nh + (size_t)g->N * (g->hi - g->lo) * g->es : 0;   /* S: X, logits */
  int last = stage == g->S - 1;
  size_t b = nh; /* stage input */
  for (int l = 0; l < g->L; l++) b += layer_bytes(g, l + 1 < g->L || last);
  /* LN_f stats, LN_f out, dlogits: all N rows (with --sequence-parallel too: the
   * output layer is whole, after an all-gather of y); the gradient area */
  if (last) b += (size_t)g->nst * g->N * sizeof(float) + Nh + (g->mode ? 0 : (size_t)g->N * (g->hi - g->lo) * g->es);
  return b + (size_t)grad_slots(g, stage) * nh;
}

/* ---- F32 <-> act_dtype around the vocabulary all-reduces ---- */

/* Returns a buffer of dtype `to` holding src's n values (dtype `from`); when the two
 * differ it converts into a new buffer and frees src, else it hands src back. */
static int convert_owned(ppsrt_backend *be, void *src, ppsrt_dtype from, ppsrt_dtype to, size_t n, void **out) {
  if (from == to) { *out = src; return 0; }
  void *d;
  TRY(be->alloc(be, n * ppsrt_dtype_size(to), &d));
  int rc = be->convert(be, CS, d, to, src, from, n);
  be->free(be, src);
  if (rc) { be->free(be, d); return rc; }
  *out = d;
  return 0;
}
static int f32_to_act(ppsrt_backend *be, float *src, size_t n, void **out) {
  return convert_owned(be, src, PPSRT_F32, AT, n, out);
}
static int act_to_f32(ppsrt_backend *be, void *src, size_t n, float **out) {
  void *p;
  int rc = convert_owned(be, src, AT, PPSRT_F32, n, &p);
  if (!rc) *out = p;
  return rc;
}

/* ---- --tensor-parallel: a row-parallel product summed over the group ----
 * C (act_dtype [M, N], ldc N) = A op(B) + the other ranks' partial products: this
 * rank's in F32, all-reduced (ppsrt_tp_allreduce), converted into C. With
 * --sequence-parallel reduce-scattered instead: C is [M/T, N], this rank's rows
 * [r0, r0 + M/T) of the sum (ppsrt_tp_reduce_scatter, in place in the F32 buffer). */
static int gemm_tp_reduce(ppsrt_ctx *c, const gpt *g, ppsrt_backend *be, int scatter, int ta, int tb, int M, int N, int K,
                          const void *A, int lda, const void *B, int ldb, void *C) {
  float *s, *mine;
  size_t n = (size_t)M * N, out = scatter ? n / g->tp : n;
  TRY(be->alloc(be, n * sizeof(float), (void **)&s));
  mine = s + (scatter ? (size_t)g->tpr * out : 0);
  int rc = be->gemm(be, CS, ta, tb, M, N, K, 1.0f, A, AT, lda, B, AT, ldb, 0.0f, s, PPSRT_F32, N);
  if (!rc) rc = scatter ? ppsrt_tp_reduce_scatter(c, s, mine, out) : ppsrt_tp_allreduce(c, s, n);
  if (!rc) rc = be->convert(be, CS, C, AT, mine, PPSRT_F32, out);
  be->free(be, s);
  return rc;
}
static int gemm_tp_sum(ppsrt_ctx *c, const gpt *g, ppsrt_backend *be, int ta, int tb, int M, int N, int K, const void *A,
                       int lda, const void *B, int ldb, void *C) {
  return gemm_tp_reduce(c, g, be, g->sp, ta, tb, M, N, K, A, lda, B, ldb, C);
}

/* --tensor-parallel, the input layer split by vocabulary rows: x (act_dtype [n, h]) =
 * the embeddings of this rank's rows of the microbatch: each rank looks up the tokens
 * of its rows [lo, hi) of tok (zeros elsewhere) for all N tokens, the group sums them in
 * F32 (with --sequence-parallel reduce-scatters them to each rank's n rows), then the
 * position embeddings (whole on every rank) are added. */
static int tp_embed(ppsrt_ctx *c, const gpt *g, ppsrt_backend *be, int mb, void *x) {
  size_t Nh = (size_t)g->N * g->h, nh = (size_t)g->n * g->h;
  void *e;
  float *s = NULL;
  TRY(be->alloc(be, Nh * g->es, &e));
  int rc = be->embedding_fwd(be, CS, e, g->ids + (size_t)mb * g->N, g->tok->param.data, g->N, g->h, g->lo, g->hi, 0);
  if (!rc) rc = act_to_f32(be, e, Nh, &s);
  else be->free(be, e);
  if (rc) return rc;
  float *mine = s + (g->sp ? (size_t)g->tpr * nh : 0);
  rc = g->sp ? ppsrt_tp_reduce_scatter(c, s, mine, nh) : ppsrt_tp_allreduce(c, s, Nh);
  if (!rc) rc = be->convert(be, CS, x, AT, mine, PPSRT_F32, nh);
  if (!rc && g->pos) rc = be->embedding_fwd(be, CS, x, g->posid + g->r0, g->pos->param.data, g->n, g->h, 0, g->T, 1);
  be->free(be, s);
  return rc;
}

/* The softmax over vocabulary shards (Vocab-1/2's devices, or a tensor-parallel group):
 * st = [lmax | lsum | gmax | gsum | gtgt] (F32, N each) holds the shard's maximum, sum
 * of exponentials and target logit (gtgt, 0 outside the shard); then gmax = M = max over
 * the shards, gsum = S = sum of lsum exp(lmax - M), gtgt summed, by `reduce` over the
 * shards (every shard makes the same calls; with --no-compute the rescale is skipped). */
typedef int (*shard_reduce)(void *ctx, float *buf, size_t n, ppsrt_redop op);
static int softmax_combine(const gpt *g, ppsrt_backend *be, float *st, shard_reduce reduce, void *ctx) {
  size_t N = (size_t)g->N;
  float *lmax = st, *lsum = st + N, *gmax = st + 2 * N, *gsum = st + 3 * N;
  TRY(be->memcpy_async(be, CS, gmax, lmax, N * sizeof(float), 0));
  TRY(reduce(ctx, gmax, N, PPSRT_MAX));
  TRY(be->memcpy_async(be, CS, gsum, lsum, N * sizeof(float), 0));
  K(be->softmax_rescale_f32(be, CS, gsum, lmax, NULL, gmax, NULL, (int)N, 1));
  return reduce(ctx, gsum, 2 * N, PPSRT_SUM);   /* gsum and gtgt together */
}
static int comm_reduce(void *ctx, float *buf, size_t n, ppsrt_redop op) {
  ppsrt_comm *cm = ctx;
  return cm->allreduce_f32(cm, buf, n, op);
}
static int tp_reduce(void *ctx, float *buf, size_t n, ppsrt_redop op) {
  return op == PPSRT_MAX ? ppsrt_tp_allreduce_max(ctx, buf, n) : ppsrt_tp_allreduce(ctx, buf, n);
}

/* --sequence-parallel: every rank's n rows of `mine` (act_dtype [n, C]) into all
 * ([N, C], rank t's at rows [t n, (t + 1) n)); without it `mine` itself. */
static int sp_gather(ppsrt_ctx *c, const gpt *g, const void *mine, void *all, int C, const void **out) {
  if (!g->sp) { *out = mine; return 0; }
  *out = all;
  return ppsrt_tp_allgather(c, mine, all, (size_t)g->n * C * g->es);
}

/* ---- loss: statistics kept on the device, summed on the host once per iteration ----
 * Each microbatch's F32 (max, sumexp, target logit) rows are copied (on the compute
 * stream, no host wait) into its slot of lst; gpt_end downloads the slots used in one
 * transfer and sums sum_n max + log(sumexp) - target per microbatch, in the order the
 * microbatches arrived, exactly as a per-microbatch download would (same double
 * arithmetic, same order), so the CPU backend's loss is unchanged bit for bit. */
static int loss_flush(ppsrt_model *m) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N;
  if (!g->nl) return 0;
  int nl = g->nl;
  g->nl = 0;
  TRY(be->download_f32(be, g->hst, (ppsrt_tensor){g->lst, (size_t)3 * N * nl, PPSRT_F32}));
  for (int k = 0; k < nl; k++) {
    const float *h = g->hst + (size_t)3 * N * k;
    double s = 0;
    for (int n = 0; n < N; n++) s += (double)h[n] + log((double)h[N + n]) - h[2 * N + n];
    g->loss += s / ((double)N * m->cfg.nmb);
  }
  return 0;
}

static int add_loss(ppsrt_model *m, const float *mx, const float *se, const float *tg) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N;
  if (!g->lst) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: loss on a device that does not compute it");
  if (g->nl == m->cfg.nmb) TRY(loss_flush(m));   /* more losses than microbatches (not in a pass order) */
  float *d = g->lst + (size_t)3 * N * g->nl;
  if (se == mx + N && tg == mx + 2 * N) {
    TRY(be->memcpy_async(be, CS, d, mx, (size_t)3 * N * sizeof(float), 0));
  } else {
    TRY(be->memcpy_async(be, CS, d, mx, (size_t)N * sizeof(float), 0));
    TRY(be->memcpy_async(be, CS, d + N, se, (size_t)N * sizeof(float), 0));
    TRY(be->memcpy_async(be, CS, d + 2 * N, tg, (size_t)N * sizeof(float), 0));
  }
  g->nl++;
  return 0;
}

/* ---- one transformer layer ---- */

/* --moe-shared-expert-gate (Megatron-Core's SharedExpertMLP gate) on the existing MoE
 * kernels: the sigmoid is a router of one expert, top-1 (moe_route: w = s = sigmoid(z),
 * no renormalisation with K = 1; moe_route_bwd: dz = ds s (1 - s)), the row scaling a
 * combine of one slot a row (moe_unpermute: o = s u; its backward du = s dy and
 * ds = dy . u); z = x . wg a product of N = 1 column. The gate runs on this rank's n
 * rows, wg is whole on every rank: under --sequence-parallel its gradient (of the
 * rank's rows) is summed over the group by sp_sync, as the norms'; without, every rank
 * computes the same whole gradient. */
static ppsrt_moe_router sg_router(void) {
  ppsrt_moe_router r;
  memset(&r, 0, sizeof r);
  r.sigmoid = 1;
  return r;
}
/* F: z = ln2 wg (ln2 this rank's n rows), s = sigmoid(z), into the entry e */
static int sg_scores(const gpt *g, ppsrt_backend *be, const void *ln2, const ppsrt_param *w, void *e) {
  int n = g->n;
  ppsrt_moe_router r = sg_router();
  void *t;   /* moe_route's idx (int32 [n], all 0) and statistics (F32 [3]), unused */
  TRY(be->gemm(be, CS, 0, 0, n, 1, g->h, 1.0f, ln2, AT, g->h, w->param.data, AT, 1, 0.0f, sg_z(g, e), PPSRT_F32, 1));
  TRY(be->alloc(be, (size_t)n * sizeof(int32_t) + 3 * sizeof(float), &t));
  int rc = be->moe_route(be, CS, sg_z(g, e), n, 1, 1, &r, t, sg_s(g, e), (float *)((int32_t *)t + n));
  be->free(be, t);
  return rc;
}
/* F: o (the shared expert's output, n rows, without FC2's bias) <- s (o + b), keeping
 * u = o + b in the entry for B */
static int sg_apply(const gpt *g, ppsrt_backend *be, ppsrt_param **p, void *o, void *e) {
  int n = g->n, h = g->h;
  char *u = sg_u(g, e);
  if (p[FC2B]) TRY(be->add_bias(be, CS, u, o, p[FC2B]->param.data, n, h));
  else TRY(be->memcpy_async(be, CS, u, o, (size_t)n * h * g->es, 0));
  return be->moe_unpermute(be, CS, o, NULL, u, g->sgi, sg_s(g, e), n, 1, h);
}
/* B: from dym (the gradient of the gated output, n rows, through the dropout's mask):
 * du = s dym (the shared expert's output gradient) and the entry's dz = (dym . u) s (1 - s) */
static int sg_b(const gpt *g, ppsrt_backend *be, const void *dym, void *e, void *du) {
  int n = g->n, h = g->h;
  ppsrt_moe_router r = sg_router();
  float *ds;
  TRY(be->alloc(be, (size_t)n * sizeof(float), (void **)&ds));
  int rc = be->moe_unpermute_bwd(be, CS, du, ds, dym, sg_u(g, e), g->sgi, sg_s(g, e), n, 1, h);
  if (!rc) rc = be->moe_route_bwd(be, CS, sg_dz(g, e), ds, sg_z(g, e), g->sgi + n, &r, NULL, n, 1, 1);
  be->free(be, ds);
  return rc;
}

/* The MLP's FC2 in F: y = res + drop(hact Wfc2 + b) on this rank's n rows (tensor
 * parallel: the partial products summed over the group, or reduce-scattered, first; the
 * bias added once after). res is x1 for the dense MLP, or y itself for the shared
 * expert (y then holds x1 + drop(experts): the product goes to a scratch first). sge:
 * the shared expert's gate entry (--moe-shared-expert-gate, else NULL): y = res +
 * drop(s (hact Wfc2 + b)). */
static int fc2_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int gl, ppsrt_param **p, const void *hact, const void *res,
                 void *y, void *sge) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N, n = g->n, h = g->h, f = g->f;
  size_t nh = (size_t)n * h, es = g->es;
  if (g->nc) return 0;
  if (res != y && !g->dth && g->tp == 1) {
    TRY(be->memcpy_async(be, CS, y, res, nh * es, 0));
    return linear_f(g, be, N, h, f, hact, p[FC2W]->param.data, 1.0f, y, PD(p[FC2B]));
  }
  if (res == y && !g->dth && g->tp == 1 && !sge) return linear_f(g, be, N, h, f, hact, p[FC2W]->param.data, 1.0f, y, PD(p[FC2B]));
  void *o = y;   /* the product (the group's sum): into y, or a scratch when y holds the residual */
  if (res == y) TRY(be->alloc(be, (size_t)N * h * es, &o));   /* (N rows: the product before any scatter) */
  int rc = g->tp > 1 ? gemm_tp_sum(c, g, be, 0, 0, N, h, f, hact, f, p[FC2W]->param.data, h, o)
                     : be->gemm(be, CS, 0, 0, N, h, f, 1.0f, hact, AT, f, p[FC2W]->param.data, AT, h, 0.0f, o, AT, h);
  const void *bias = sge ? NULL : PD(p[FC2B]);   /* (the gate: the bias added before it) */
  if (!rc && sge) rc = sg_apply(g, be, p, o, sge);
  if (!rc && g->dth) rc = drop_rows(m, mb, gl, PPSRT_DROP_FC2, y, res, o, bias);
  else if (!rc) {
    rc = be->add(be, CS, y, o, res, nh);
    if (!rc && bias) rc = be->add_bias(be, CS, y, y, bias, n, h);
  }
  if (o != y) be->free(be, o);
  return rc;
}

/* F of layer l of local stage loc: reads x, writes *yout (a store entry when keep_y,
 * else a plain buffer for the IO box). With --sequence-parallel x, y and what lives on
 * the residual stream are this rank's n rows; G (an uncounted [N, h] buffer) receives
 * the all-gathered LN1 and LN2 outputs, the inputs of QKV and FC1. */
static int layer_f_in(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, int loc, int l, void *x, int keep_y,
                      void **yout, void *G) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N, n = g->n, h = g->h, q = g->q, D = g->D, ha = g->ha, f = g->f;
  size_t es = g->es, nh = (size_t)n * h;
  int *fi = IX(g, mb, loc)->lf + (size_t)l * NFE;
  void *ln1, *qkv, *att, *x1, *ln2, *hpre = NULL, *hact = NULL, *mbuf = NULL, *sge = NULL, *qke = NULL, *y;
  const void *a;   /* the input of QKV or FC1: ln1 / ln2, all N rows */
  float *st, *lse;
  TRY(save(c, mb, stage, nh * es, &ln1, &fi[FE_LN1]));
  TRY(save(c, mb, stage, 2 * (size_t)g->nst * n * 4, (void **)&st, &fi[FE_ST]));
  TRY(save(c, mb, stage, (size_t)N * q * es, &qkv, &fi[FE_QKV]));
  TRY(save(c, mb, stage, (size_t)g->Bm * g->Hq * g->Tl * 4, (void **)&lse, &fi[FE_LSE]));
  TRY(save(c, mb, stage, (size_t)N * ha * es, &att, &fi[FE_ATT]));
  TRY(save(c, mb, stage, nh * es, &x1, &fi[FE_X1]));
  TRY(save(c, mb, stage, nh * es, &ln2, &fi[FE_LN2]));
  fi[FE_MOE] = fi[FE_HPRE] = fi[FE_HACT] = -1;
  if (g->moe_on) TRY(save(c, mb, stage, g->moe.bytes, &mbuf, &fi[FE_MOE]));   /* one entry for the experts */
  if (g->mlp) {   /* the dense MLP's, or the shared expert's */
    TRY(save(c, mb, stage, (size_t)N * g->fw * es, &hpre, &fi[FE_HPRE]));
    TRY(save(c, mb, stage, (size_t)N * f * es, &hact, &fi[FE_HACT]));
  }
  fi[FE_SG] = -1;
  if (g->sg) TRY(save(c, mb, stage, sg_bytes(g), &sge, &fi[FE_SG]));   /* the shared expert's gate */
  fi[FE_QKN] = -1;
  if (g->qkn) TRY(save(c, mb, stage, qkn_bytes(g), &qke, &fi[FE_QKN]));   /* --qk-layernorm's heads */
  if (keep_y) TRY(save(c, mb, stage, nh * es, &y, &fi[FE_Y]));
  else {
    fi[FE_Y] = -1;
    TRY(be->alloc(be, nh * es, &y));
  }
  *yout = y;
  ppsrt_param *p[NLP];
  for (int k = 0; k < NLP; k++) p[k] = LP(m, loc, l, k);
  char *qb = qkv;
  /* ln1 = LN(x); qkv = ln1 Wqkv + b (sequence parallel: ln1 all-gathered first);
   * --qk-layernorm normalises its query and key heads, then RoPE rotates them in place;
   * att = attention(q, k, v) */
  K(be->layernorm_fwd(be, CS, ln1, nmean(g, st, 0, n), nrstd(g, st, 0, n), x, PD(p[LN1G]), PD(p[LN1B]), n, h, g->eps));
  K(sp_gather(c, g, ln1, G, h, &a));
  TRY(linear_f(g, be, N, q, h, a, p[QKVW]->param.data, 0.0f, qkv, PD(p[QKVB])));
  if (g->qkn) K(qkn_fb(g, be, p, qkv, qke, 0));
  if (g->rope) K(be->rope(be, CS, qkv, q, g->posid, g->rcs, N, g->Hq + g->Hkv, D, 0));
  int gl = stage * g->L + l;   /* the global layer (dropout masks) */
  ppsrt_dropout da = drop_site(m, mb, gl, PPSRT_DROP_ATTN, (uint64_t)g->tpr * g->Hq);
  if (g->cp > 1) {   /* --context-parallel: the group's keys and values gathered (cp.c) */
    ppsrt_cp_shape cs = cp_shape(g);
    K(ppsrt_cp_attention_fwd(c, &cs, qkv, att, lse, g->dta ? &da : NULL));
  } else
    K(be->attention_fwd(be, CS, att, lse, qb, q, qb + (size_t)g->Hq * D * es, q, qb + (size_t)(g->Hq + g->Hkv) * D * es,
                        q, g->Bm, g->T, g->Hq, g->Hkv, D, g->dta ? &da : NULL));
  /* x1 = x + att Wproj + b (tensor parallel: the partial products summed over the group
   * first, or reduce-scattered to this rank's rows, the bias added once after); with
   * --hidden-dropout x1 = x + drop(att Wproj + b), bias and dropout in one kernel */
  if (g->dth) {
    if (g->tp > 1) K(gemm_tp_sum(c, g, be, 0, 0, N, h, ha, att, ha, p[PROJW]->param.data, h, x1));
    else K(be->gemm(be, CS, 0, 0, N, h, ha, 1.0f, att, AT, ha, p[PROJW]->param.data, AT, h, 0.0f, x1, AT, h));
    K(drop_rows(m, mb, gl, PPSRT_DROP_PROJ, x1, x, x1, PD(p[PROJB])));
  } else if (g->tp > 1) {
    K(gemm_tp_sum(c, g, be, 0, 0, N, h, ha, att, ha, p[PROJW]->param.data, h, x1));
    K(be->add(be, CS, x1, x1, x, nh));
    if (p[PROJB]) K(be->add_bias(be, CS, x1, x1, p[PROJB]->param.data, n, h));
  } else {
    K(be->memcpy_async(be, CS, x1, x, nh * es, 0));
    TRY(linear_f(g, be, N, h, ha, att, p[PROJW]->param.data, 1.0f, x1, PD(p[PROJB])));
  }
  /* ln2 = LN(x1); hpre = ln2 Wfc + b (ln2 all-gathered first); hact = gelu(hpre), or
   * with SwiGLU silu(gate) * up of hpre = [gate | up]; y = x1 + hact Wfc2 + b */
  K(be->layernorm_fwd(be, CS, ln2, nmean(g, st, 1, n), nrstd(g, st, 1, n), x1, PD(p[LN2G]), PD(p[LN2B]), n, h, g->eps));
  K(sp_gather(c, g, ln2, G, h, &a));
  if (g->moe_on) {   /* y = x1 + drop(experts(ln2)) (moe.c) */
    ppsrt_dropout d = drop_site(m, mb, gl, PPSRT_DROP_FC2, (uint64_t)g->r0 * h);
    TRY(ppsrt_moe_f(&g->moe, c, be, moe_slot(g, mb, loc, l), MP(m, loc, l), mbuf, a, x1, y, g->dth ? &d : NULL,
                    !ppsrt_recomputing(c)));
    if (!g->mlp) return 0;
  }
  /* (with experts the shared expert, below: y += drop(its output), the same mask, so that
   * y = x1 + drop(experts + shared); with its gate y = x1 + drop(experts + s shared), s
   * from this rank's rows of ln2) */
  if (g->sg) K(sg_scores(g, be, ln2, p[SGW], sge));
  if (!g->sw && p[FCB]) {
    EPI(fused(be, PPSRT_EP_BIAS_GELU, 0, 0, N, f, h, a, h, p[FCW]->param.data, f, 0.0f, hact, AT, f,
              p[FCB]->param.data, hpre, NULL),
        K(be->gemm(be, CS, 0, 0, N, f, h, 1.0f, a, AT, h, p[FCW]->param.data, AT, f, 0.0f, hpre, AT, f));
        K(be->add_bias_gelu(be, CS, hact, hpre, hpre, p[FCB]->param.data, N, f)));
  } else {
    TRY(linear_f(g, be, N, g->fw, h, a, p[FCW]->param.data, 0.0f, hpre, PD(p[FCB])));
    K(g->sw ? be->swiglu_fwd(be, CS, hact, hpre, N, f) : be->gelu_fwd(be, CS, hact, hpre, (size_t)N * f));
  }
  return fc2_f(m, c, mb, gl, p, hact, g->moe_on ? y : x1, y, sge);
}
static int layer_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, int loc, int l, void *x, int keep_y,
                   void **yout) {
  gpt *g = m->impl;
  void *G = NULL;
  if (g->sp) TRY(m->be->alloc(m->be, (size_t)g->N * g->h * g->es, &G));
  int rc = layer_f_in(m, c, mb, stage, loc, l, x, keep_y, yout, G);
  m->be->free(m->be, G);
  return rc;
}

/* Pointers to layer l's saved input x (stage input or the layer below's output). */
static int layer_input(ppsrt_ctx *c, gpt *g, int mb, int stage, int loc, int l, void **x) {
  sidx *e = IX(g, mb, loc);
  return get(c, mb, stage, l == 0 ? e->in : e->lf[(size_t)(l - 1) * NFE + FE_Y], x);
}

static char *slot(gpt *g, void *area, int k) { return (char *)area + (size_t)k * g->n * g->h * g->es; }

/* --hidden-dropout's backward: *out = the gradient src (this rank's n rows) through the
 * site's mask (the forward's, regenerated), in dst; src itself without dropout. */
static int hdrop(ppsrt_model *m, int mb, int layer, int site, const void *src, void *dst, const void **out) {
  gpt *g = m->impl;
  *out = src;
  if (!g->dth) return 0;
  *out = dst;
  return drop_rows(m, mb, layer, site, dst, NULL, src, NULL);
}

/* The MLP's B (dense, or the shared expert's): dhact = dy Wfc2^T (dy all N rows); dhpre
 * = dhact * gelu'(hpre) written over hpre (no copy; with SwiGLU [dgate | dup],
 * swiglu_bwd); dln2 = dhpre Wfc^T -> ln2's buffer (tensor parallel: summed over the
 * group, or reduce-scattered to this rank's rows), or with acc added to what it holds
 * (the experts' part). tmp: scratch of N f. With the GeLU gradient fused in the product
 * (PPSRT_EP_DGELU), hpre is first copied to tmp, the product's GeLU input: its output
 * must not overlap it. */
static int mlp_b(ppsrt_ctx *c, const gpt *g, ppsrt_backend *be, ppsrt_param **p, const void *dyf, void *hpre, void *ln2,
                 void *tmp, int acc) {
  int N = g->N, h = g->h, f = g->f, fw = g->fw;
  if (!g->sw && (be->epilogues & PPSRT_EP_DGELU)) {
    TRY(be->memcpy_async(be, CS, tmp, hpre, (size_t)N * f * g->es, 0));
    TRY(be->gemm_ep(be, CS, PPSRT_EP_DGELU, 0, 1, N, f, h, 1.0f, dyf, AT, h, p[FC2W]->param.data, AT, h, 0.0f, hpre, AT,
                    f, NULL, tmp, NULL));
  } else {
    TRY(be->gemm(be, CS, 0, 1, N, f, h, 1.0f, dyf, AT, h, p[FC2W]->param.data, AT, h, 0.0f, tmp, AT, f));
    TRY(g->sw ? be->swiglu_bwd(be, CS, hpre, tmp, hpre, N, f) : be->gelu_bwd(be, CS, hpre, tmp, hpre, (size_t)N * f));
  }
  if (g->tp == 1)
    return be->gemm(be, CS, 0, 1, N, h, fw, 1.0f, hpre, AT, fw, p[FCW]->param.data, AT, fw, acc ? 1.0f : 0.0f, ln2, AT, h);
  if (!acc) return gemm_tp_sum(c, g, be, 0, 1, N, h, fw, hpre, fw, p[FCW]->param.data, fw, ln2);
  size_t nh = (size_t)g->n * h;   /* the group's sum into tmp (N f >= n h is not given: its own scratch) */
  void *s;
  TRY(be->alloc(be, nh * g->es, &s));
  int rc = gemm_tp_sum(c, g, be, 0, 1, N, h, fw, hpre, fw, p[FCW]->param.data, fw, s);
  if (!rc) rc = be->add(be, CS, ln2, ln2, s, nh);
  be->free(be, s);
  return rc;
}

/* B of layer l: from dy (the gradient of the layer's output) to dx (the gradient of its
 * input). Leaves for W: dhpre in hpre's buffer, dln2 in ln2's, dx1 in its slot, dqkv in
 * qkv's, dln1 in ln1's. Allocates only a transient scratch (not counted). With
 * --sequence-parallel dy, dx, dx1, dln1 and dln2 are this rank's rows: dy and dx1 are
 * all-gathered (the conjugate of F's reduce-scatters) before the products with Wfc2 and
 * Wproj, and the input gradients of FC1 and QKV reduce-scattered (of F's all-gathers). */
static int layer_b(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, int loc, int l, const void *dy, void *dx) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N, n = g->n, h = g->h, q = g->q, D = g->D, ha = g->ha, f = g->f;
  size_t es = g->es, nh = (size_t)n * h;
  sidx *e = IX(g, mb, loc);
  int *fi = e->lf + (size_t)l * NFE;
  void *x, *ln1, *qkv, *att, *x1, *ln2, *hpre = NULL, *mbuf = NULL, *sge = NULL, *qke = NULL, *du = NULL, *area, *tmp;
  const void *dyf, *dx1f;   /* dy, dx1: all N rows */
  float *st, *lse;
  TRY(layer_input(c, g, mb, stage, loc, l, &x));
  TRY(get(c, mb, stage, fi[FE_LN1], &ln1));
  TRY(get(c, mb, stage, fi[FE_ST], (void **)&st));
  TRY(get(c, mb, stage, fi[FE_QKV], &qkv));
  TRY(get(c, mb, stage, fi[FE_LSE], (void **)&lse));
  TRY(get(c, mb, stage, fi[FE_ATT], &att));
  TRY(get(c, mb, stage, fi[FE_X1], &x1));
  TRY(get(c, mb, stage, fi[FE_LN2], &ln2));
  if (fi[FE_HPRE] >= 0) TRY(get(c, mb, stage, fi[FE_HPRE], &hpre));
  if (fi[FE_MOE] >= 0) TRY(get(c, mb, stage, fi[FE_MOE], &mbuf));
  if (fi[FE_SG] >= 0) TRY(get(c, mb, stage, fi[FE_SG], &sge));
  if (fi[FE_QKN] >= 0) TRY(get(c, mb, stage, fi[FE_QKN], &qke));
  TRY(get(c, mb, stage, e->grad, &area));
  void *dx1 = slot(g, area, slot_dx1(g, l));
  ppsrt_param *p[NLP];
  for (int k = 0; k < NLP; k++) p[k] = LP(m, loc, l, k);
  if (g->nc) return 0;
  size_t t1 = (size_t)N * (f > ha ? f : ha);   /* dhact, then datt */
  TRY(be->alloc(be, (t1 + (size_t)N * q + (g->sp ? (size_t)N * h : 0) + (g->dth ? nh : 0)) * es, &tmp));
  char *t2 = (char *)tmp + t1 * es, *qb = qkv, *G = t2 + (size_t)N * q * es;
  char *dd = G + (g->sp ? (size_t)N * h * es : 0);   /* --hidden-dropout: dy, then dx1, through the masks */
  const void *dym, *dx1m;
  int gl = stage * g->L + l;
  ppsrt_dropout da = drop_site(m, mb, gl, PPSRT_DROP_ATTN, (uint64_t)g->tpr * g->Hq);
  size_t ko = (size_t)g->Hq * D * es, vo = (size_t)(g->Hq + g->Hkv) * D * es;
  int rc;
  /* MLP: dln2 (mlp_b, moe.c) -> ln2's buffer; dx1 = dy + LN2_bwd(dln2) */
  rc = hdrop(m, mb, gl, PPSRT_DROP_FC2, dy, dd, &dym);
  if (!rc) rc = sp_gather(c, g, dym, G, h, &dyf);
  /* the experts and the router (moe.c): dln2 -> ln2's buffer; then the dense MLP's (or
   * the shared expert's, added to the experts') */
  if (!rc && g->moe_on) rc = ppsrt_moe_b(&g->moe, c, be, moe_slot(g, mb, loc, l), MP(m, loc, l), mbuf, dyf, ln2);
  /* the shared expert's gate: its output's gradient s dy (all-gathered again) for its
   * MLP; dz for W; then dln2 (this rank's rows) += dz wg^T */
  if (!rc && sge && !(rc = be->alloc(be, nh * es, &du)) && !(rc = sg_b(g, be, dym, sge, du)))
    rc = sp_gather(c, g, du, G, h, &dyf);
  if (!rc && g->mlp) rc = mlp_b(c, g, be, p, dyf, hpre, ln2, tmp, g->moe_on);
  if (!rc && sge)
    rc = be->gemm(be, CS, 0, 0, n, h, 1, 1.0f, sg_dz(g, sge), AT, 1, p[SGW]->param.data, AT, h, 1.0f, ln2, AT, h);
  be->free(be, du);
  if (rc ||
      (rc = be->memcpy_async(be, CS, dx1, dy, nh * es, 0)) ||
      (rc = be->layernorm_bwd_input(be, CS, dx1, ln2, x1, nmean(g, st, 1, n), nrstd(g, st, 1, n), p[LN2G]->param.data,
                                    n, h, 1)) ||
      /* attention: datt = dx1 Wproj^T (dx1 all-gathered first); dqkv = attention_bwd
       *            (RoPE: its query and key heads rotated back; --qk-layernorm: then
       *            through the heads' norms) -> qkv's buffer;
       *            dln1 = dqkv Wqkv^T -> ln1's buffer (summed over the group);
       *            dx = dx1 + LN1_bwd(dln1) */
      (rc = hdrop(m, mb, gl, PPSRT_DROP_PROJ, dx1, dd, &dx1m)) ||
      (rc = sp_gather(c, g, dx1m, G, h, &dx1f)) ||
      (rc = be->gemm(be, CS, 0, 1, N, ha, h, 1.0f, dx1f, AT, h, p[PROJW]->param.data, AT, h, 0.0f, tmp, AT, ha)) ||
      (rc = g->cp > 1 ? cp_attn_bwd(c, g, qkv, att, lse, tmp, t2, g->dta ? &da : NULL)
                      : be->attention_bwd(be, CS, t2, t2 + ko, t2 + vo, q, tmp, att, lse, qb, q, qb + ko, q, qb + vo, q,
                                          g->Bm, g->T, g->Hq, g->Hkv, D, g->dta ? &da : NULL)) ||
      (g->rope && (rc = be->rope(be, CS, t2, q, g->posid, g->rcs, N, g->Hq + g->Hkv, D, 1))) ||
      (qke && (rc = qkn_fb(g, be, p, t2, qke, 1))) ||
      (rc = be->memcpy_async(be, CS, qkv, t2, (size_t)N * q * es, 0)) ||
      (rc = g->tp > 1 ? gemm_tp_sum(c, g, be, 0, 1, N, h, q, qkv, q, p[QKVW]->param.data, q, ln1)
                      : be->gemm(be, CS, 0, 1, N, h, q, 1.0f, qkv, AT, q, p[QKVW]->param.data, AT, q, 0.0f, ln1, AT, h)) ||
      (rc = be->memcpy_async(be, CS, dx, dx1, nh * es, 0)) ||
      (rc = be->layernorm_bwd_input(be, CS, dx, ln1, x, nmean(g, st, 0, n), nrstd(g, st, 0, n), p[LN1G]->param.data, n,
                                    h, 1))) {
    be->free(be, tmp);
    return rc;
  }
  be->free(be, tmp);
  return 0;
}

/* W of layer l: every weight gradient of the layer (dW = X^T dY into the F32 gradients,
 * db = colsum dY, LN gamma/beta); LN1 and LN2 outputs are recomputed from x, x1.
 * scratch [N, h] and sst [2N] are uncounted buffers. With --sequence-parallel the
 * recomputed LN outputs, dy and dx1 are all-gathered into G ([N, h]) for the products
 * (and the projection's and FC2's bias gradients, then whole), and the norms' gamma
 * and beta gradients are of this rank's rows only: sp_sync sums them over the group
 * once, at the end of the iteration. */
static int layer_w(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, int loc, int l, void *scratch, float *sst,
                   void *G, void *dd) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N, n = g->n, h = g->h, q = g->q, ha = g->ha, f = g->f, fw = g->fw;
  sidx *e = IX(g, mb, loc);
  int *fi = e->lf + (size_t)l * NFE;
  void *x, *dln1, *dqkv, *att, *x1, *dln2, *dhpre = NULL, *hact = NULL, *mbuf = NULL, *sge = NULL, *qke = NULL, *area;
  const void *a;
  float *st;
  TRY(layer_input(c, g, mb, stage, loc, l, &x));
  TRY(get(c, mb, stage, fi[FE_LN1], &dln1));
  TRY(get(c, mb, stage, fi[FE_ST], (void **)&st));
  TRY(get(c, mb, stage, fi[FE_QKV], &dqkv));
  TRY(get(c, mb, stage, fi[FE_ATT], &att));
  TRY(get(c, mb, stage, fi[FE_X1], &x1));
  TRY(get(c, mb, stage, fi[FE_LN2], &dln2));
  if (fi[FE_HPRE] >= 0) TRY(get(c, mb, stage, fi[FE_HPRE], &dhpre));
  if (fi[FE_HACT] >= 0) TRY(get(c, mb, stage, fi[FE_HACT], &hact));
  if (fi[FE_MOE] >= 0) TRY(get(c, mb, stage, fi[FE_MOE], &mbuf));
  if (fi[FE_SG] >= 0) TRY(get(c, mb, stage, fi[FE_SG], &sge));
  if (fi[FE_QKN] >= 0) TRY(get(c, mb, stage, fi[FE_QKN], &qke));
  TRY(get(c, mb, stage, e->grad, &area));
  void *dy = slot(g, area, l + 1 < g->L ? slot_dx(g, l + 1) : slot_dytop()), *dx1 = slot(g, area, slot_dx1(g, l));
  ppsrt_param *p[NLP];
  for (int k = 0; k < NLP; k++) p[k] = LP(m, loc, l, k);
  float *g2g = p[LN2G]->grad, *g2b = PG(p[LN2B]), *g1g = p[LN1G]->grad, *g1b = PG(p[LN1B]);
  const void *dm;   /* dy, dx1 through --hidden-dropout's masks (into dd [n, h]) */
  int gl = stage * g->L + l;
  if (g->mlp) {   /* the dense MLP's FC2 (or the shared expert's; with its gate from s dy, as B's) */
    void *du = NULL;
    K(hdrop(m, mb, gl, PPSRT_DROP_FC2, dy, dd, &dm));
    if (sge && !g->nc) {
      TRY(be->alloc(be, (size_t)n * h * g->es, &du));
      int rc = be->moe_unpermute(be, CS, du, NULL, dm, g->sgi, sg_s(g, sge), n, 1, h);
      if (rc) { be->free(be, du); return rc; }
      dm = du;
    }
    int rc = g->nc ? 0 : sp_gather(c, g, dm, G, h, &a);
    if (!rc) rc = linear_w(g, be, N, f, h, hact, a, p[FC2W]->grad, PG(p[FC2B]));
    be->free(be, du);
    if (rc) return rc;
  }
  /* from LN2's output recomputed: FC1's, and the experts' and the router's (moe.c) */
  K(be->layernorm_fwd(be, CS, scratch, nmean(g, sst, 0, n), nrstd(g, sst, 0, n), x1, PD(p[LN2G]), PD(p[LN2B]), n, h, g->eps));
  K(sp_gather(c, g, scratch, G, h, &a));
  if (g->mlp) TRY(linear_w(g, be, N, h, fw, a, dhpre, p[FCW]->grad, PG(p[FCB])));
  /* the shared expert's gate: d wg += ln2^T dz over this rank's n rows (scratch: before the gather) */
  if (sge) K(be->gemm(be, CS, 1, 0, h, 1, n, 1.0f, scratch, AT, h, sg_dz(g, sge), AT, 1, 1.0f, p[SGW]->grad, PPSRT_F32, 1));
  if (g->moe_on) K(ppsrt_moe_w(&g->moe, c, be, moe_slot(g, mb, loc, l), MP(m, loc, l), mbuf, a));
  K(be->layernorm_bwd_weight(be, CS, g2g, g2b, dln2, x1, nmean(g, st, 1, n), nrstd(g, st, 1, n), n, h));
  K(hdrop(m, mb, gl, PPSRT_DROP_PROJ, dx1, dd, &dm));
  K(sp_gather(c, g, dm, G, h, &a));
  TRY(linear_w(g, be, N, ha, h, att, a, p[PROJW]->grad, PG(p[PROJB])));
  K(be->layernorm_fwd(be, CS, scratch, nmean(g, sst, 0, n), nrstd(g, sst, 0, n), x, PD(p[LN1G]), PD(p[LN1B]), n, h, g->eps));
  K(sp_gather(c, g, scratch, G, h, &a));
  TRY(linear_w(g, be, N, h, q, a, dqkv, p[QKVW]->grad, PG(p[QKVB])));
  K(be->layernorm_bwd_weight(be, CS, g1g, g1b, dln1, x, nmean(g, st, 0, n), nrstd(g, st, 0, n), n, h));
  if (qke) K(qkn_w(g, be, p, qke));   /* --qk-layernorm's gains: of the rank's heads (qkn_sync) */
  return 0;
}

/* ---- compute passes ---- */

static int check_stage(ppsrt_model *m, const char *pass, int mb, int stage) {
  gpt *g = m->impl;
  if (stage < 0 || stage >= g->S || g->local[stage] < 0 || mb < 0 || mb >= m->cfg.nmb)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: %s(%d, %d): this device does not hold stage %d (or mb out of range)", pass,
                      mb, stage, stage);
  return 0;
}

static int gpt_head_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, void *x);

/* --hidden-dropout on the embedding's output x (this rank's n rows of [N, h], in place):
 * F's, and B's on the gradient of stage 0's input (the same mask); nothing without it
 * or with --no-compute. */
static int embed_drop(ppsrt_model *m, int mb, void *x) {
  gpt *g = m->impl;
  if (!g->dth || g->nc) return 0;
  return drop_rows(m, mb, -1, PPSRT_DROP_EMBED, x, NULL, x, NULL);
}

/* F: stage input (embedding on stage 0), L layers, and on the last stage LN_f and
 * (without vocabulary parallelism) the output layer, loss and loss gradient. */
static int gpt_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  TRY(check_stage(m, "F", mb, stage));
  int loc = g->local[stage], N = g->N, h = g->h, last = stage == g->S - 1, rc;
  size_t Nh = (size_t)N * h, nh = (size_t)g->n * h, es = g->es;
  sidx *e = IX(g, mb, loc);
  void *x;
  if (!ppsrt_recomputing(c)) e->fst = e->flnf = e->fdl = e->grad = -1;   /* a partial rebuild keeps them */
  /* the stage input, kept for LN1's backward */
  if (stage == 0 && g->mode && ppsrt_recomputing(c)) {   /* F again: the kept input (the reduced embedding) */
    size_t got = 0;
    TRY(ppsrt_io_take(c, PPSRT_XFER_ACT, mb, -1, &x, &got));
    if ((rc = ppsrt_act_adopt(c, mb, stage, x, got, &e->in))) { be->free(be, x); return rc; }
  } else if (stage == 0 && g->mode) {
    vstate *v = &g->vs[mb];
    if (!v->emb)
      return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: F(%d, 0) before the input embedding's all-reduce\n"
                        "hint: IF(%d) and coll input_fwd(%d) must come first", mb, mb, mb);
    if (g->sp) {   /* --sequence-parallel: this rank's rows of the reduced embedding */
      if (!(rc = be->alloc(be, nh * es, &x)) &&
          (rc = be->convert(be, CS, x, AT, v->emb + (size_t)g->r0 * h, PPSRT_F32, nh)))
        be->free(be, x);
      be->free(be, v->emb);
    } else {
      rc = f32_to_act(be, v->emb, Nh, &x);
    }
    v->emb = NULL;
    TRY(rc);
    if ((rc = embed_drop(m, mb, x))) { be->free(be, x); return rc; }
    if ((rc = ppsrt_act_adopt(c, mb, stage, x, nh * es, &e->in))) { be->free(be, x); return rc; }
  } else if (stage == 0 && g->tpv) {   /* the input layer split by vocabulary rows over the group */
    TRY(save(c, mb, stage, nh * es, &x, &e->in));
    K(tp_embed(c, g, be, mb, x));
    TRY(embed_drop(m, mb, x));
  } else if (stage == 0) {   /* (sequence parallel: the embeddings of this rank's rows) */
    TRY(save(c, mb, stage, nh * es, &x, &e->in));
    K(be->embedding_fwd(be, CS, x, g->ids + (size_t)mb * N + g->r0, g->tok->param.data, g->n, h, 0, g->V, 0));
    if (g->pos) K(be->embedding_fwd(be, CS, x, g->posid + g->r0, g->pos->param.data, g->n, h, 0, g->T, 1));
    TRY(embed_drop(m, mb, x));
  } else {
    size_t got = 0;
    TRY(ppsrt_io_take(c, PPSRT_XFER_ACT, mb, stage - 1, &x, &got));
    if (got != nh * es) {
      be->free(be, x);
      return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: input of F(%d, %d) has %zu bytes, expected %zu", mb, stage, got, nh * es);
    }
    if ((rc = ppsrt_act_adopt(c, mb, stage, x, nh * es, &e->in))) { be->free(be, x); return rc; }
  }
  for (int l = 0; l < g->L; l++) {
    void *y = NULL;
    int keep = l + 1 < g->L || last;
    if ((rc = layer_f(m, c, mb, stage, loc, l, x, keep, &y))) {
      if (!keep && y) be->free(be, y);
      return rc;
    }
    x = y;
    if (ppsrt_layer_end(c, mb, stage, l)) return 0;   /* a partial rebuild ends here (model.h) */
  }
  if (!last) {
    if ((rc = ppsrt_io_put(c, PPSRT_XFER_ACT, mb, stage, x, nh * es))) { be->free(be, x); return rc; }
  } else if (g->sp) {   /* LN_f and the output layer on all N rows, y all-gathered (transient) */
    void *yf;
    TRY(be->alloc(be, Nh * es, &yf));
    rc = ppsrt_tp_allgather(c, x, yf, nh * es);
    if (!rc) rc = gpt_head_f(m, c, mb, stage, yf);
    be->free(be, yf);
    TRY(rc);
  } else {
    TRY(gpt_head_f(m, c, mb, stage, x));
  }
  /* the gradient area B fills for W */
  void *area;
  return save(c, mb, stage, (size_t)grad_slots(g, stage) * nh * es, &area, &e->grad);
}

/* The last stage's head in F: LN_f of y (all N rows); then the output layer here, or
 * (vocabulary parallelism) its input to S. */
static int gpt_head_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage, void *x) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int N = g->N, h = g->h, rc;
  size_t Nh = (size_t)N * h, es = g->es;
  sidx *e = IX(g, mb, g->local[stage]);
  float *fst;
  void *lnf;
  TRY(save(c, mb, stage, (size_t)g->nst * N * sizeof(float), (void **)&fst, &e->fst));
  TRY(save(c, mb, stage, Nh * es, &lnf, &e->flnf));
  if (g->mode) {
    void *o;
    TRY(be->alloc(be, Nh * es, &o));
    if (!g->nc && (rc = be->layernorm_fwd(be, CS, o, nmean(g, fst, 0, N), nrstd(g, fst, 0, N), x, g->lnfg->param.data,
                                          PD(g->lnfb), N, h, g->eps))) {
      be->free(be, o);
      return rc;
    }
    if ((rc = ppsrt_io_put(c, PPSRT_XFER_ACT, mb, stage, o, Nh * es))) { be->free(be, o); return rc; }
  } else {
    void *dl;
    float *sm;
    const int32_t *tg = g->tgt + (size_t)mb * N;
    int Vs = g->hi - g->lo;   /* --tensor-parallel: this rank's vocabulary rows */
    TRY(save(c, mb, stage, (size_t)N * Vs * es, &dl, &e->fdl));
    K(be->layernorm_fwd(be, CS, lnf, nmean(g, fst, 0, N), nrstd(g, fst, 0, N), x, g->lnfg->param.data, PD(g->lnfb), N, h, g->eps));
    TRY(be->alloc(be, 5 * (size_t)N * sizeof(float), (void **)&sm));
    /* logits = LN_f(y) out^T; statistics and loss; dlogits in place, scaled 1/(N nmb).
     * Split by vocabulary over the group: each rank's logits of its rows, the softmax's
     * max and sum of exponentials combined over the group (M = max_t m_t, S = sum_t s_t
     * exp(m_t - M), the target logit summed: Megatron's vocab-parallel cross-entropy) */
    float *mx = sm, *se = sm + N, *tl = sm + 4 * N;
    if (!g->nc &&
        ((rc = be->gemm(be, CS, 0, 1, N, Vs, h, 1.0f, lnf, AT, h, g->out->param.data, AT, h, 0.0f, dl, AT, Vs)) ||
         (rc = be->softmax_stats(be, CS, sm, sm + N, tl, dl, tg, N, Vs, g->lo)))) {
      be->free(be, sm);
      return rc;
    }
    if (!g->nc && g->tpv) {
      mx = sm + 2 * N; se = sm + 3 * N;
      if ((rc = softmax_combine(g, be, sm, tp_reduce, c))) {
        be->free(be, sm);
        return rc;
      }
    }
    if (!g->nc &&
        ((!ppsrt_recomputing(c) && (rc = add_loss(m, mx, se, tl))) ||   /* once per microbatch */
         (rc = be->softmax_xent_bwd(be, CS, dl, dl, mx, se, tg, N, Vs, g->lo, (float)(1.0 / ((double)N * m->cfg.nmb)))))) {
      be->free(be, sm);
      return rc;
    }
    be->free(be, sm);
  }
  return 0;
}

/* B: input gradient only; see sidx for where it leaves what W needs. */
static int gpt_b(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  TRY(check_stage(m, "B", mb, stage));
  int loc = g->local[stage], N = g->N, h = g->h, last = stage == g->S - 1, rc;
  size_t Nh = (size_t)N * h, nh = (size_t)g->n * h, es = g->es;
  sidx *e = IX(g, mb, loc);
  void *area, *dytop;
  TRY(get(c, mb, stage, e->grad, &area));
  dytop = slot(g, area, slot_dytop());
  if (last) {
    void *dlnf, *y;
    float *fst;
    TRY(get(c, mb, stage, e->flnf, &dlnf));
    TRY(get(c, mb, stage, e->lf[(size_t)(g->L - 1) * NFE + FE_Y], &y));
    TRY(get(c, mb, stage, e->fst, (void **)&fst));
    if (g->mode) {   /* dlnf = the all-reduced input gradient of the output layer */
      vstate *v = &g->vs[mb];
      if (!v->dx)
        return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: B(%d, %d) before the output layer's input gradient\n"
                          "hint: S(%d), T(%d) and their collectives must come first", mb, stage, mb, mb);
      rc = g->nc ? 0 : be->convert(be, CS, dlnf, AT, v->dx, PPSRT_F32, Nh);
      be->free(be, v->dx);
      v->dx = NULL;
      TRY(rc);
    } else {         /* dlnf = dlogits out */
      void *dl;
      int Vs = g->hi - g->lo;
      TRY(get(c, mb, stage, e->fdl, &dl));
      if (g->tpv)   /* each rank's vocabulary rows' share, summed over the group (all N rows) */
        K(gemm_tp_reduce(c, g, be, 0, 0, 0, N, h, Vs, dl, Vs, g->out->param.data, h, dlnf));
      else
        K(be->gemm(be, CS, 0, 0, N, h, Vs, 1.0f, dl, AT, Vs, g->out->param.data, AT, h, 0.0f, dlnf, AT, h));
    }
    if (g->sp && !g->nc) {   /* y all-gathered again; this rank's rows of LN_f's input gradient */
      void *t;
      TRY(be->alloc(be, 2 * Nh * es, &t));
      char *yf = t, *dyf = yf + Nh * es;
      if (!(rc = ppsrt_tp_allgather(c, y, yf, nh * es)) &&
          !(rc = be->layernorm_bwd_input(be, CS, dyf, dlnf, yf, nmean(g, fst, 0, N), nrstd(g, fst, 0, N),
                                         g->lnfg->param.data, N, h, 0)))
        rc = be->memcpy_async(be, CS, dytop, dyf + (size_t)g->r0 * h * es, nh * es, 0);
      be->free(be, t);
      TRY(rc);
    } else
      K(be->layernorm_bwd_input(be, CS, dytop, dlnf, y, nmean(g, fst, 0, N), nrstd(g, fst, 0, N), g->lnfg->param.data, N,
                                h, 0));
  } else {
    void *dy;
    size_t got = 0;
    TRY(ppsrt_io_take(c, PPSRT_XFER_GRAD, mb, stage + 1, &dy, &got));
    rc = got != nh * es ? PPSRT_FAIL(PPSRT_E_USAGE, "gpt: output gradient of B(%d, %d) has %zu bytes, expected %zu", mb,
                                     stage, got, nh * es)
                        : g->nc ? 0 : be->memcpy_async(be, CS, dytop, dy, nh * es, 0);
    be->free(be, dy);
    TRY(rc);
  }
  const void *dy = dytop;
  void *dx = NULL;
  for (int l = g->L - 1; l >= 0; l--) {
    if (l > 0 || need_dx0(g, stage)) dx = slot(g, area, slot_dx(g, l));
    else TRY(be->alloc(be, nh * es, &dx));
    if ((rc = layer_b(m, c, mb, stage, loc, l, dy, dx))) {
      if (l == 0 && !need_dx0(g, stage)) be->free(be, dx);
      return rc;
    }
    dy = dx;
  }
  /* stage 0: the gradient of the embedding's output through its dropout */
  if (stage == 0 && (rc = embed_drop(m, mb, dx))) {
    if (!need_dx0(g, stage)) be->free(be, dx);
    return rc;
  }
  if (need_dx0(g, stage)) return 0;   /* layer 0's dx stays for the embeddings' W */
  /* the stage input's gradient: to the previous stage, or (vocabulary parallelism, stage
   * 0) to coll input_bwd and IB, which take all N rows (--sequence-parallel: gathered) */
  if (stage == 0 && g->mode && g->sp) {
    void *all;
    if ((rc = be->alloc(be, Nh * es, &all))) { be->free(be, dx); return rc; }
    rc = ppsrt_tp_allgather(c, dx, all, nh * es);
    be->free(be, dx);
    if (rc) { be->free(be, all); return rc; }
    dx = all;
    nh = Nh;
  }
  if ((rc = ppsrt_io_put(c, PPSRT_XFER_GRAD, mb, stage, dx, nh * es))) be->free(be, dx);
  return rc;
}

/* W: every weight gradient of the stage, then the stage's entries are released. */
static int gpt_w(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  TRY(check_stage(m, "W", mb, stage));
  int loc = g->local[stage], N = g->N, h = g->h, rc = 0;
  size_t Nh = (size_t)N * h, nh = (size_t)g->n * h;
  sidx *e = IX(g, mb, loc);
  void *scratch, *G = NULL, *dd = NULL;
  float *sst;
  /* uncounted: scratch [N, h], sst [2N]; sequence parallel: G [N, h]; hidden dropout: dd [n, h] */
  TRY(be->alloc(be, Nh * g->es, &scratch));
  if ((rc = be->alloc(be, 2 * (size_t)N * sizeof(float), (void **)&sst))) { be->free(be, scratch); return rc; }
  if (g->sp) rc = be->alloc(be, Nh * g->es, &G);
  if (!rc && g->dth) rc = be->alloc(be, nh * g->es, &dd);
  for (int l = g->L - 1; l >= 0 && !rc; l--) rc = layer_w(m, c, mb, stage, loc, l, scratch, sst, G, dd);
  if (!rc && stage == g->S - 1) {
    void *y, *dlnf, *area;
    float *fst;
    if (!(rc = get(c, mb, stage, e->lf[(size_t)(g->L - 1) * NFE + FE_Y], &y)) && !(rc = get(c, mb, stage, e->fst, (void **)&fst)) &&
        !(rc = get(c, mb, stage, e->flnf, &dlnf)) && !(rc = get(c, mb, stage, e->grad, &area)) && !g->nc &&
        !(rc = g->sp ? ppsrt_tp_allgather(c, y, G, nh * g->es) : 0)) {
      if (g->sp) y = G;   /* sequence parallel: LN_f on all N rows, y all-gathered again (whole gradients) */
      rc = be->layernorm_bwd_weight(be, CS, g->lnfg->grad, PG(g->lnfb), dlnf, y, nmean(g, fst, 0, N), nrstd(g, fst, 0, N),
                                    N, h);
      if (!rc && !g->mode) {   /* d out += dlogits^T LN_f(y), LN_f(y) recomputed */
        void *dl;
        if (!(rc = get(c, mb, stage, e->fdl, &dl)) &&
            !(rc = be->layernorm_fwd(be, CS, scratch, nmean(g, sst, 0, N), nrstd(g, sst, 0, N), y, g->lnfg->param.data,
                                     PD(g->lnfb), N, h, g->eps)))
          rc = be->gemm(be, CS, 1, 0, g->hi - g->lo, h, N, 1.0f, dl, AT, g->hi - g->lo, scratch, AT, h, 1.0f, g->out->grad,
                        PPSRT_F32, h);
      }
    }
  }
  if (!rc && need_dx0(g, stage)) {
    void *area;
    const void *dx0;
    /* sequence parallel: dx0 all-gathered, the embeddings' gradients of all N rows (whole) */
    if (!(rc = get(c, mb, stage, e->grad, &area)) && !g->nc && !(rc = sp_gather(c, g, slot(g, area, slot_dx(g, 0)), G, h, &dx0))) {
      rc = be->embedding_bwd(be, CS, g->tok->grad, dx0, g->ids + (size_t)mb * N, N, h, g->lo, g->hi);
      if (!rc && g->pos) rc = be->embedding_bwd(be, CS, g->pos->grad, dx0, g->posid, N, h, 0, g->T);
    }
  }
  be->free(be, scratch);
  be->free(be, sst);
  be->free(be, G);
  be->free(be, dd);
  if (rc) return rc;
  return ppsrt_act_release(c, mb, stage);
}

/* ---- vocabulary passes and collectives ---- */

/* Device holding stage s (the run's placement). */
static int stage_device(ppsrt_ctx *c, int s) {
  return c->run && c->run->prog ? c->run->prog->stages[s].device : 0;
}

static int vocab_if(ppsrt_model *m, ppsrt_ctx *c, int mb) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  vstate *v = &g->vs[mb];
  size_t Nh = (size_t)g->N * g->h;
  void *e;
  if (v->emb) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: IF(%d) ran twice", mb);
  TRY(be->alloc(be, Nh * g->es, &e));
  int rc = 0;
  if (!g->nc) {
    rc = be->embedding_fwd(be, CS, e, g->ids + (size_t)mb * g->N, g->tok->param.data, g->N, g->h, g->lo, g->hi, 0);
    /* the position table (device 0's) once in the sums: summed over the group, on its rank 0 */
    if (!rc && g->pos && (!g->vtp || !g->tpr)) rc = be->embedding_fwd(be, CS, e, g->posid, g->pos->param.data, g->N, g->h, 0, g->T, 1);
  }
  if (rc) { be->free(be, e); return rc; }
  TRY(act_to_f32(be, e, Nh, &v->emb));
  /* --tensor-parallel: the group's rows summed, every rank then holds the device's e_d
   * (a token's row is on one rank: the others add zeros) */
  if (g->vtp) K(ppsrt_tp_allreduce(c, v->emb, Nh));
  return 0;
}

/* S: the last stage's LN_f output reaches every device, then the shard's logits and
 * local statistics (and, Vocab-2, the local input-gradient terms A_d and G_d). */
static int vocab_s(ppsrt_model *m, ppsrt_ctx *c, int mb) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  vstate *v = &g->vs[mb];
  int N = g->N, h = g->h, Vs = g->hi - g->lo, rc;
  size_t Nh = (size_t)N * h, es = g->es;
  void *X, *logits;
  int ix, il;
  if (g->last) {
    size_t got = 0;
    TRY(ppsrt_io_take(c, PPSRT_XFER_ACT, mb, g->S - 1, &X, &got));
  } else {
    TRY(be->alloc(be, Nh * es, &X));
  }
  /* No collective precedes S, and every device runs the S passes in the same order, so
   * S broadcasts X itself on the run's transport (model.h's comm is only handed to
   * collectives). */
  if (g->P > 1) {
    if (!c->tr) { be->free(be, X); return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: S(%d) needs a transport", mb); }
    if ((rc = c->tr->broadcast(c->tr, c->rank, be, CS, X, Nh * es, stage_device(c, g->S - 1)))) {
      be->free(be, X);
      return rc;
    }
  }
  if ((rc = ppsrt_act_adopt(c, mb, -1, X, Nh * es, &ix))) { be->free(be, X); return rc; }
  TRY(save(c, mb, -1, (size_t)N * Vs * es, &logits, &il));
  if (ix != 0 || il != 1) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: S(%d) ran twice before T", mb);
  TRY(be->alloc(be, 5 * (size_t)N * sizeof(float), (void **)&v->st));
  float *lmax = v->st, *lsum = v->st + N, *gtgt = v->st + 4 * N;
  const int32_t *tg = g->tgt + (size_t)mb * N;
  K(be->gemm(be, CS, 0, 1, N, Vs, h, 1.0f, X, AT, h, g->out->param.data, AT, h, 0.0f, logits, AT, Vs));
  K(be->softmax_stats(be, CS, lmax, lsum, gtgt, logits, tg, N, Vs, g->lo));
  if (g->vtp && !g->nc) {
    /* --tensor-parallel: the device's statistics over its group's rows (the maximum, the
     * rescaled sums of exponentials, the target logit summed), then as at T = 1 */
    TRY(softmax_combine(g, be, v->st, tp_reduce, c));
    TRY(be->memcpy_async(be, CS, lmax, v->st + 2 * N, (size_t)N * sizeof(float), 0));
    TRY(be->memcpy_async(be, CS, lsum, v->st + 3 * N, (size_t)N * sizeof(float), 0));
  }
  if (g->mode == 2) {
    /* A_d = softmax_d(logits_d) out_d with the shard's own max and sum (the shifted lo
     * puts every target outside, so nothing is subtracted); G_d = out_d[target] */
    void *pr, *Gd;
    TRY(be->alloc(be, (size_t)N * Vs * es, &pr));
    if ((rc = be->alloc(be, Nh * sizeof(float), (void **)&v->A))) { be->free(be, pr); return rc; }
    if (!g->nc &&
        ((rc = be->softmax_xent_bwd(be, CS, pr, logits, lmax, lsum, tg, N, Vs, -(Vs + 1), 1.0f)) ||
         (rc = be->gemm(be, CS, 0, 0, N, h, Vs, 1.0f, pr, AT, Vs, g->out->param.data, AT, h, 0.0f, v->A, PPSRT_F32, h)))) {
      be->free(be, pr);
      return rc;
    }
    be->free(be, pr);
    TRY(be->alloc(be, Nh * es, &Gd));
    if (!g->nc && (rc = be->embedding_fwd(be, CS, Gd, tg, g->out->param.data, N, h, g->lo, g->hi, 0))) {
      be->free(be, Gd);
      return rc;
    }
    TRY(act_to_f32(be, Gd, Nh, &v->G));
    if (g->vtp) {   /* --tensor-parallel: the device's A_d and G_d, summed over its group's rows */
      K(ppsrt_tp_allreduce(c, v->A, Nh));
      K(ppsrt_tp_allreduce(c, v->G, Nh));
    }
  }
  return 0;
}

/* T: the shard's weight gradient (and, Vocab-1, its partial input gradient). */
static int vocab_t(ppsrt_model *m, ppsrt_ctx *c, int mb) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  vstate *v = &g->vs[mb];
  int N = g->N, h = g->h, Vs = g->hi - g->lo;
  void *X, *dl;
  if (!v->st) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: T(%d) before S(%d)", mb, mb);
  TRY(get(c, mb, -1, 0, &X));
  TRY(get(c, mb, -1, 1, &dl));
  K(be->softmax_xent_bwd(be, CS, dl, dl, v->st + 2 * N, v->st + 3 * N, g->tgt + (size_t)mb * N, N, Vs, g->lo,
                         (float)(1.0 / ((double)N * m->cfg.nmb))));
  K(be->gemm(be, CS, 1, 0, Vs, h, N, 1.0f, dl, AT, Vs, X, AT, h, 1.0f, g->out->grad, PPSRT_F32, h));
  if (g->mode == 1) {
    TRY(be->alloc(be, (size_t)N * h * sizeof(float), (void **)&v->dx));
    K(be->gemm(be, CS, 0, 0, N, h, Vs, 1.0f, dl, AT, Vs, g->out->param.data, AT, h, 0.0f, v->dx, PPSRT_F32, h));
    if (g->vtp) K(ppsrt_tp_allreduce(c, v->dx, (size_t)N * h));   /* the device's dX_d: its group's rows summed */
  }
  be->free(be, v->st);
  v->st = NULL;
  return ppsrt_act_release(c, mb, -1);
}

static int vocab_ib(ppsrt_model *m, ppsrt_ctx *c, int mb) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  void *dx0;
  size_t got = 0;
  TRY(ppsrt_io_take(c, PPSRT_XFER_GRAD, mb, 0, &dx0, &got));
  int rc = 0;
  if (!g->nc) {
    rc = be->embedding_bwd(be, CS, g->tok->grad, dx0, g->ids + (size_t)mb * g->N, g->N, g->h, g->lo, g->hi);
    if (!rc && g->pos) rc = be->embedding_bwd(be, CS, g->pos->grad, dx0, g->posid, g->N, g->h, 0, g->T);
  }
  be->free(be, dx0);
  return rc;
}

static int gpt_vocab_pass(ppsrt_model *m, ppsrt_ctx *c, int kind, int mb) {
  gpt *g = m->impl;
  if (!g->mode) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: vocabulary pass without vocabulary parallelism");
  if (mb < 0 || mb >= m->cfg.nmb) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: microbatch %d out of range", mb);
  switch (kind) {
  case PPSRT_OP_IF: return vocab_if(m, c, mb);
  case PPSRT_OP_S: return vocab_s(m, c, mb);
  case PPSRT_OP_T: return vocab_t(m, c, mb);
  case PPSRT_OP_IB: return vocab_ib(m, c, mb);
  default: return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: unknown vocabulary pass %d", kind);
  }
}

static int gpt_collective(ppsrt_model *m, ppsrt_ctx *c, int coll, int mb, ppsrt_comm *cm) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  vstate *v = &g->vs[mb];
  int N = g->N, h = g->h;
  size_t Nh = (size_t)N * h;
  if (!g->mode) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: vocabulary collective without vocabulary parallelism");
  if (mb < 0 || mb >= m->cfg.nmb) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: microbatch %d out of range", mb);
  switch (coll) {
  case PPSRT_COLL_INPUT_FWD:   /* e = sum_d e_d, kept by stage 0's device for F(mb, 0) */
    if (!v->emb) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: coll input_fwd(%d) before IF(%d)", mb, mb);
    TRY(cm->allreduce_f32(cm, v->emb, Nh, PPSRT_SUM));
    if (!g->first) { be->free(be, v->emb); v->emb = NULL; }
    return 0;
  case PPSRT_COLL_OUTPUT_FWD: {
    if (!v->st) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: coll output_fwd(%d) before S(%d)", mb, mb);
    float *lmax = v->st, *lsum = v->st + N, *gmax = v->st + 2 * N, *gsum = v->st + 3 * N, *gtgt = v->st + 4 * N;
    /* online softmax: M = max_d m_d; S = sum_d s_d exp(m_d - M); target logit summed */
    TRY(softmax_combine(g, be, v->st, comm_reduce, cm));
    if (cm->rank == 0 && !g->nc) TRY(add_loss(m, gmax, gsum, gtgt));
    if (g->mode == 2) {
      /* dX = sum_d ((s_d exp(m_d - M) / S) A_d - G_d) / (N nmb) */
      K(be->softmax_rescale_f32(be, CS, v->A, lmax, lsum, gmax, gsum, N, h));
      K(be->axpy_f32(be, CS, v->A, v->G, -1.0f, Nh));
      K(be->scale_f32(be, CS, v->A, (float)(1.0 / ((double)N * m->cfg.nmb)), Nh));
      be->free(be, v->G);
      v->G = NULL;
      TRY(cm->allreduce_f32(cm, v->A, Nh, PPSRT_SUM));
      if (g->last) v->dx = v->A;
      else be->free(be, v->A);
      v->A = NULL;
    }
    return 0;
  }
  case PPSRT_COLL_OUTPUT_BWD:   /* Vocab-1: dX = sum_d dX_d, for B(mb, S-1) */
    if (g->mode != 1 || !v->dx) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: coll output_bwd(%d) without T(%d) in Vocab-1", mb, mb);
    TRY(cm->allreduce_f32(cm, v->dx, Nh, PPSRT_SUM));
    if (!g->last) { be->free(be, v->dx); v->dx = NULL; }
    return 0;
  case PPSRT_COLL_INPUT_BWD: {  /* B(mb, 0)'s input gradient from stage 0's device to all */
    void *buf;
    size_t bytes = Nh * g->es;
    if (g->first) {
      TRY(ppsrt_io_peek(c, PPSRT_XFER_GRAD, mb, 0, &buf, NULL));
      return cm->broadcast(cm, buf, bytes, stage_device(c, 0));
    }
    TRY(be->alloc(be, bytes, &buf));
    int rc = cm->broadcast(cm, buf, bytes, stage_device(c, 0));
    if (!rc) rc = ppsrt_io_put(c, PPSRT_XFER_GRAD, mb, 0, buf, bytes);
    if (rc) be->free(be, buf);
    return rc;
  }
  default: return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: unknown collective %d", coll);
  }
}

/* ---- iterations ---- */

static void free_vstate(ppsrt_model *m) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  if (!g->vs) return;
  for (int i = 0; i < m->cfg.nmb; i++) {
    vstate *v = &g->vs[i];
    be->free(be, v->emb); be->free(be, v->st); be->free(be, v->A); be->free(be, v->G); be->free(be, v->dx);
    memset(v, 0, sizeof *v);
  }
}

static int load_tokens(ppsrt_model *m, long first);   /* sequences first, first + 1, ... */

static int gpt_begin(ppsrt_model *m, ppsrt_ctx *c, int it) {
  gpt *g = m->impl;
  g->loss = 0;
  g->moe.aux_loss = g->moe.z_loss = 0;
  g->moe.route_hash = 0;
  if (g->moe.hload && !m->eval)   /* the expert bias's loads: this iteration's (evaluation's routing not counted) */
    memset(g->moe.hload, 0, (size_t)g->moe.nl * g->moe.E * sizeof *g->moe.hload);
  g->nl = 0;
  g->step = (int64_t)m->cfg.step0 + it + 1;   /* the dropout masks' (a resumed run goes on with the same) */
  free_vstate(m);   /* leftovers of a failed iteration */
  (void)c;
  /* --data: this iteration's sequences (after --load, from its data position) */
  long global = (long)m->cfg.nmb * (m->cfg.nrep > 1 ? m->cfg.nrep : 1);   /* microbatches of an iteration, all replicas */
  if (m->cfg.data) return load_tokens(m, m->cfg.data0 + ((long)it * global + m->cfg.mb0) * g->Bm);
  return 0;
}

/* --embeddings tied with stage 0 and the last stage on different devices: each holds
 * the matrix (the last stage's a copy, `shared`), and the two gradients are summed here,
 * after the iteration's last pass (and the data-parallel all-reduce), before the step,
 * by the two holders alone (Megatron-LM all-reduces over an "embedding group" of the
 * first and last stages): each sends its gradient to the other over the pipeline's
 * point-to-point channel (empty by now: the iteration's transfers are all received)
 * and adds the one it receives, a + b on one side and b + a on the other, the same
 * floats. The send goes from a copy (a send's buffer is written again only through the
 * allocator, transport.h); the receive lands in the gradient, the copy is added to it.
 * The other devices take no part. Vocabulary-parallel schedules and V shapes hold both
 * on one device: nothing to do. */
static int tie_sync(ppsrt_model *m, ppsrt_ctx *c) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  if (!g->tie || g->mode || (g->first && g->last) || (!g->first && !g->last) ||
      stage_device(c, 0) == stage_device(c, g->S - 1))
    return 0;
  if (!c->tr) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: tied embeddings on two devices need a transport");
  size_t n = (size_t)(g->hi - g->lo) * g->h, bytes = n * sizeof(float);
  float *grad = g->first ? g->tok->grad : g->out->grad, *mine = NULL;
  int peer = stage_device(c, g->first ? g->S - 1 : 0), grp = c->tr->group_begin && c->tr->group_end;
  TRY(be->alloc(be, bytes, (void **)&mine));
  int rc = be->memcpy_async(be, CS, mine, grad, bytes, 0);
  int open = !rc && grp && !(rc = c->tr->group_begin(c->tr, c->rank));
  if (!rc) rc = c->tr->send(c->tr, c->rank, be, CS, mine, bytes, peer, PPSRT_TIE_TAG);
  if (!rc) rc = c->tr->recv(c->tr, c->rank, be, CS, grad, bytes, peer, PPSRT_TIE_TAG);
  if (open) {
    int re = c->tr->group_end(c->tr, c->rank);
    if (!rc) rc = re;
  }
  if (!rc) rc = be->axpy_f32(be, CS, grad, mine, 1.0f, n);
  be->free(be, mine);
  return rc;
}

/* sp_sync's and qkn_sync's collective: the gradients of every local layer's parameters
 * of the kinds ks (those the layer has; each `width` F32 values) summed over the
 * tensor-parallel group in one all-reduce: packed, summed, unpacked. */
static int tp_sum_grads(ppsrt_model *m, ppsrt_ctx *c, const int *ks, int nk, size_t width) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  size_t n = 0, at;
  for (int loc = 0; loc < g->nlocal; loc++)
    for (int l = 0; l < g->L; l++)
      for (int k = 0; k < nk; k++) n += LP(m, loc, l, ks[k]) ? width : 0;
  if (!n) return 0;
  float *buf;
  TRY(be->alloc(be, n * sizeof(float), (void **)&buf));
  int rc = 0;
  for (int pass = 0; pass < 2 && !rc; pass++) {   /* pack, all-reduce, unpack */
    if (pass && (rc = ppsrt_tp_allreduce(c, buf, n))) break;
    at = 0;
    for (int loc = 0; loc < g->nlocal && !rc; loc++)
      for (int l = 0; l < g->L && !rc; l++)
        for (int k = 0; k < nk && !rc; k++) {
          ppsrt_param *q = LP(m, loc, l, ks[k]);
          if (!q) continue;
          rc = pass ? be->memcpy_async(be, CS, q->grad, buf + at, width * sizeof(float), 0)
                    : be->memcpy_async(be, CS, buf + at, q->grad, width * sizeof(float), 0);
          at += width;
        }
  }
  be->free(be, buf);
  return rc;
}

/* --sequence-parallel: each rank's W added the norms' gamma and beta gradients of its
 * own token rows; summed over the tensor-parallel group here, once an iteration (after
 * the data-parallel all-reduce, before the step: Megatron-LM's all-reduce of the
 * sequence-parallel parameters' gradients), in one collective of every layer's norms. */
static int sp_sync(ppsrt_model *m, ppsrt_ctx *c) {
  gpt *g = m->impl;
  if (!g->sp || g->nc || !g->nlocal) return 0;
  static const int ks[5] = {LN1G, LN1B, LN2G, LN2B, SGW};   /* (SGW: the shared expert's gate, of its rows too) */
  return tp_sum_grads(m, c, ks, 5, (size_t)g->h);
}

/* --qk-layernorm under --tensor-parallel: each rank's W added the query and key norms'
 * gain (and beta) gradients of its own heads; summed over the tensor-parallel group
 * here, once an iteration (as sp_sync), in one collective of every layer's. */
static int qkn_sync(ppsrt_model *m, ppsrt_ctx *c) {
  gpt *g = m->impl;
  if (!g->qkn || g->tp == 1 || g->nc || !g->nlocal) return 0;
  static const int ks[4] = {QNG, QNB, KNG, KNB};
  return tp_sum_grads(m, c, ks, 4, (size_t)g->D);
}

static int gpt_end(ppsrt_model *m, ppsrt_ctx *c, double *loss) {
  gpt *g = m->impl;
  int rs = m->eval ? 0 : tie_sync(m, c);   /* (evaluation: no gradients to sum) */
  if (!rs && !m->eval) rs = sp_sync(m, c);
  if (!rs && !m->eval) rs = qkn_sync(m, c);
  if (rs) { free_vstate(m); return rs; }
  /* the loss is reported once: by the last stage's device, or rank 0 with vocabulary
   * parallelism (every device has the merged statistics there); its statistics are
   * downloaded here, once per iteration */
  int rc = loss_flush(m);
  *loss = (g->mode ? g->rank == 0 : g->last) ? g->loss : 0.0;
  /* --moe-aux-loss-coeff: the load-balancing loss of this device's layers (evaluation:
   * the language model's loss alone, Megatron's validation loss) */
  if (!m->eval) *loss += g->moe.aux_loss;
  /* --moe-router-enable-expert-bias: the bias moves after the iteration's last pass */
  if (!rc && !m->eval && g->moe_on) rc = ppsrt_moe_update_bias(&g->moe, c, m->be);
  free_vstate(m);
  return rc;
}

/* model.h state: the expert bias of each MoE layer of this device (loc, l), in layer
 * order, named as its router's weight is ("sS.lL.moe.router.expert_bias") */
static float *gpt_state(ppsrt_model *m, int i, char *name, size_t cap, size_t *n) {
  gpt *g = m->impl;
  int loc = i / g->L, l = i % g->L, s = 0;
  while (s < g->S && g->local[s] != loc) s++;
  snprintf(name, cap, "s%d.l%d.moe.router.expert_bias", s, l);
  *n = (size_t)g->moe.E;
  return ppsrt_moe_bias(&g->moe, i);
}
static int gpt_state_sync(ppsrt_model *m) {
  gpt *g = m->impl;
  return ppsrt_moe_bias_sync(&g->moe, m->be);
}

uint64_t ppsrt_gpt_route_hash(const ppsrt_model *m) {
  const gpt *g = m->impl;
  return g->moe_on ? g->moe.route_hash : 0;
}

/* The reference's token (its microbatch's b T + position: whole sequences) of this
 * rank's token i (b Tl + u: --context-parallel, its rows u of each sequence b are chunks
 * cpr and 2C - 1 - cpr, ppsrt_cp_pos; else i itself). */
static size_t ref_token(const gpt *g, int i) {
  if (g->cp <= 1) return (size_t)i;
  return (size_t)(i / g->Tl) * g->T + (size_t)ppsrt_cp_pos(g->T, g->cp, g->cpr, i % g->Tl);
}

/* --context-parallel: the hash of the reference's decisions `dec` (one slot, [Bm T][K],
 * the reference's token order) over this rank's tokens in its own order, as route_host
 * hashes this rank's slot (moe.c shash: FNV-1a over expert e, or E + e dropped) */
static uint64_t cp_slot_hash(const gpt *g, const int32_t *dec) {
  int K = g->moe.K;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < g->N; i++)
    for (int k = 0; k < K; k++) h = (h ^ (uint64_t)dec[ref_token(g, i) * K + k]) * 0x100000001b3ull;
  return h;
}

/* Slot (mb, s, l)'s hash in ref as this rank routes it: ref's hash `h` of the whole
 * slot, or with --context-parallel that of its decisions `dec` ([nslot][Bm T K]) over
 * this rank's tokens. */
static uint64_t ref_slot_hash(const gpt *g, const gpt *r, const uint64_t *h, const int32_t *dec, int rslot) {
  if (g->cp <= 1) return h[rslot];
  return cp_slot_hash(g, dec + (size_t)rslot * r->moe.N * r->moe.K);
}

int ppsrt_gpt_route_compare(const ppsrt_model *m, const ppsrt_model *ref, int mb0, long *n, long *ndiff) {
  const gpt *g = m->impl, *r = ref->impl;
  *n = *ndiff = 0;
  if (!g->moe_on || !r->moe_on || (g->cp > 1 && !r->moe.rec) || r->L != g->L) return -1;
  for (int mb = 0; mb < m->cfg.nmb; mb++)
    for (int s = 0; s < g->S && s < r->S; s++) {
      if (g->local[s] < 0 || r->local[s] < 0 || mb0 + mb >= ref->cfg.nmb) continue;
      for (int l = 0; l < g->L; l++) {
        (*n)++;
        *ndiff += g->moe.shash[moe_slot(g, mb, g->local[s], l)] !=
                  ref_slot_hash(g, r, r->moe.shash, r->moe.rec, moe_slot(r, mb0 + mb, r->local[s], l));
      }
    }
  return 0;
}

int ppsrt_gpt_route_ohash(const ppsrt_model *m, const ppsrt_model *ref, int mb0, long *ndiff) {
  const gpt *g = m->impl, *r = ref->impl;
  *ndiff = 0;
  if (!g->moe_on || !r->moe_on || !r->moe.ohash || (g->cp > 1 && !r->moe.orec) || r->L != g->L) return -1;
  for (int mb = 0; mb < m->cfg.nmb; mb++)
    for (int s = 0; s < g->S && s < r->S; s++) {
      if (g->local[s] < 0 || r->local[s] < 0 || mb0 + mb >= ref->cfg.nmb) continue;
      for (int l = 0; l < g->L; l++)
        *ndiff += g->moe.shash[moe_slot(g, mb, g->local[s], l)] !=
                  ref_slot_hash(g, r, r->moe.ohash, r->moe.orec, moe_slot(r, mb0 + mb, r->local[s], l));
    }
  return 0;
}

int ppsrt_gpt_route_record(const ppsrt_model *m, int mb0, int nmb, float *tab) {
  const gpt *g = m->impl;
  if (!g->moe_on || !g->moe.rec) return -1;
  int K = g->moe.K;
  size_t NK = (size_t)g->moe.N * K, rNK = (size_t)g->Bm * g->T * K;   /* this rank's slot, the reference's */
  for (int mb = 0; mb < m->cfg.nmb && mb0 + mb < nmb; mb++)
    for (int s = 0; s < g->S; s++) {
      if (g->local[s] < 0) continue;
      for (int l = 0; l < g->L; l++) {
        const int32_t *src = g->moe.rec + (size_t)moe_slot(g, mb, g->local[s], l) * NK;
        float *dst = tab + (((size_t)(mb0 + mb) * g->S + s) * g->L + l) * rNK;
        for (int i = 0; i < g->moe.N; i++)   /* (--context-parallel: its tokens at their places in whole sequences) */
          for (int k = 0; k < K; k++) dst[ref_token(g, i) * K + k] = (float)src[(size_t)i * K + k] + 1.0f;
      }
    }
  return 0;
}

int ppsrt_gpt_route_replay(ppsrt_model *ref, const int32_t *rec) {
  gpt *r = ref->impl;
  if (!r->moe_on) return 0;
  if (r->nlocal != r->S) return PPSRT_FAIL(PPSRT_E_USAGE, "--check: the routing's replay needs the whole model on the reference");
  return ppsrt_moe_set_replay(&r->moe, rec);
}

/* ---- FLOPs (Vocabulary Parallelism paper's counts, b = micro_batch, s = seq) ---- */

double ppsrt_gpt_pass_flops(const ppsrt_model_config *cfg, int kind, int stage) {
  /* --tensor-parallel T: one rank's share, 1/T of the layers and of the input and output
   * layers' vocabulary rows (of the whole vocabulary, or under a vocabulary-parallel
   * schedule of each device's V/P rows); without such a schedule the input layer's FLOPs
   * are counted whole (a lookup of every token on every rank) */
  double T = cfg->tp > 1 ? (double)cfg->tp : 1;
  /* --context-parallel C: a rank's s / C tokens; its attention is its two query chunks
   * of c = s / 2C rows against the keys each sees, (k + 1) c for chunk k: chunks c' and
   * 2C - 1 - c' give (2C + 1) c^2 query-key pairs on every rank, where C = 1 (one block
   * of s queries, s keys) counts s^2 */
  double C = cfg->cp > 1 ? (double)cfg->cp : 1, ch = (double)cfg->seq / (2 * C);
  double b = cfg->micro_batch, s = cfg->seq / C, h = cfg->hidden, V = cfg->vocab / (cfg->vocab_mode ? 1 : T), L = cfg->layers_per_stage / T;
  /* a vocabulary-parallel schedule: one rank's rows, V / (P T) (its device's split over the group) */
  double P = cfg->vocab_mode ? (cfg->ndev > 0 ? cfg->ndev : 1) * T : 1;
  double ss = C > 1 ? (2 * C + 1) * ch * ch : s * s;   /* query-key pairs of a sequence on this rank */
  double bsh = b * s * h, a = cfg->heads > 0 ? cfg->heads : 1, gq = cfg->query_groups > 0 ? cfg->query_groups : a;
  double f = ppsrt_gpt_ffn(cfg);
  /* the attention's width a D (D: --kv-channels, default h/a, where a D = h) */
  double ad = cfg->kv_channels ? a * cfg->kv_channels : h;
  /* a layer's matrix products 2bs (h a D (1 + 2g/a) + a D h + c h f), c = 3 (SwiGLU) or 2: 24 bsh h
   * for a 4h GeLU MLP, g = a and a D = h; attention 4 b s^2 a D forward, twice that backward */
  double M = 2 * b * s * (h * ad * (1 + 2 * gq / a) + ad * h + (cfg->swiglu ? 3 : 2) * h * f);
  if (cfg->num_experts > 0) {   /* MoE: each token through K experts of width F (not E), and the router's
                                 * product (whole on every rank: T x its share of the layers' 1/T) */
    double K = ppsrt_moe_topk(cfg), Fe = ppsrt_moe_ffn(cfg), E = cfg->num_experts, n = b * s;
    /* with a capacity factor: a balanced routing's kept slots, min(n K, E cap) (ppsc sim's) */
    if (cfg->moe_capacity > 0 && n > 0 && n <= INT32_MAX) K = fmin(n * K, E * (double)ppsrt_moe_capacity(cfg, (int)n)) / n;
    /* (--moe-shared-ffn-hidden S: every token through the shared expert too, split as the dense MLP) */
    M = 2 * b * s * (h * ad * (1 + 2 * gq / a) + ad * h + (K * Fe + cfg->moe_shared_ffn) * (cfg->swiglu ? 3 : 2) * h + T * h * E);
    /* --moe-shared-expert-gate: z = x . wg (F), dx += dz wg, dwg += x^T dz (B, W) on every
     * rank's rows: all of them (T x the share), or with --sequence-parallel its own */
    if (cfg->moe_shared_ffn && cfg->moe_shared_gate) M += 2 * b * s * h * (cfg->sp && T > 1 ? 1 : T);
  }
  int first = stage == 0, last = stage == cfg->nstage - 1, vm = cfg->vocab_mode;
  switch (kind) {
  /* transformer layer F M + 4bs^2h, B M + 8bs^2h, W M (bsh(24h + 4s), bsh(24h + 8s), 24bsh h
   * for GPT's layer); input layer 3bsh (F bsh, W 2bsh); output layer 6bshV (F, B, W 2bshV each) */
  case PPSRT_OP_F:
    return L * (M + 4 * b * ad * ss) + (!vm && first ? bsh : 0) + (!vm && last ? 2 * bsh * V : 0);
  case PPSRT_OP_B: return L * (M + 8 * b * ad * ss) + (!vm && last ? 2 * bsh * V : 0);
  case PPSRT_OP_W: return L * M + (!vm && first ? 2 * bsh : 0) + (!vm && last ? 2 * bsh * V : 0);
  case PPSRT_OP_BW:
    return ppsrt_gpt_pass_flops(cfg, PPSRT_OP_B, stage) + ppsrt_gpt_pass_flops(cfg, PPSRT_OP_W, stage);
  /* vocabulary passes, one device's shard (V/P rows) */
  case PPSRT_OP_IF: return bsh / P;
  case PPSRT_OP_IB: return 2 * bsh / P;
  case PPSRT_OP_S: return (vm == 2 ? 4 : 2) * bsh * V / P;
  case PPSRT_OP_T: return (vm == 1 ? 4 : 2) * bsh * V / P;
  default: return 0;
  }
}

/* ---- creation ---- */

static void gpt_destroy(ppsrt_model *m) {
  if (!m) return;
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  for (int k = 0; k < m->nparams; k++) ppsrt_param_free(be, &m->params[k]);
  free(m->params);
  if (g) {
    free_vstate(m);
    be->free(be, g->ids);
    be->free(be, g->tgt);
    be->free(be, g->posid);
    be->free(be, g->sgi);
    be->free(be, g->rcs);
    be->free(be, g->lst);
    free(g->vs);
    free(g->local);
    free(g->ix);
    free(g->ixpool);
    free(g->hst);
    ppsrt_moe_free(&g->moe);
    free(g);
  }
  free(m);
}

enum { INIT_ZERO, INIT_ONE, INIT_UNIFORM, INIT_NORMAL };

/* A weight's initial distribution: by default uniform(-a, a), a = `uniform` (the
 * caller's sqrt(3 / fan_in) or table scale); with --init-method-std S Megatron-LM's
 * normal (init_method_normal): Normal(0, S), and for the blocks' output layers
 * (out_layer: the attention's projection, the dense, shared and experts' FC2) its
 * scaled_init_method_normal, Normal(0, S / sqrt(2 L)), L the WHOLE model's layers
 * (every stage's), not this stage's. Sets *scale; returns INIT_UNIFORM or INIT_NORMAL. */
static int init_weight(const ppsrt_model_config *cfg, int out_layer, float uniform, float *scale) {
  double S = cfg->init_method_std, L = (double)cfg->nstage * cfg->layers_per_stage;
  if (!(S > 0)) { *scale = uniform; return INIT_UNIFORM; }
  *scale = (float)(out_layer ? S / sqrt(2.0 * L) : S);
  return INIT_NORMAL;
}

/* A parameter: elements [offset, offset + n) of the full tensor `name` of full_n
 * elements, or with tp (its tp_* fields set) a tensor-parallel slice of it; values
 * depend only on (seed, name, element index in the full tensor). INIT_NORMAL
 * (--init-method-std) hashes the checkpoint key instead ("layer5.qkv.w" for "s2.l1.qkv.w"
 * at 2 layers a stage): its values do not depend on the split into stages either. */
static ppsrt_param *add_param_tp(ppsrt_model *m, int *rc, const char *name, int stage, size_t n, size_t offset,
                                 size_t full_n, int init, float scale, const ppsrt_param *tp) {
  ppsrt_backend *be = m->be;
  ppsrt_param *q = &m->params[m->nparams++];
  if (*rc) return q;
  q->name = strdup(name);
  q->stage = stage; q->numel = n; q->offset = offset; q->full_numel = full_n;
  if (tp && tp->tp_split) {
    q->tp_split = tp->tp_split; q->tp_n = tp->tp_n; q->tp_R = tp->tp_R; q->tp_C = tp->tp_C;
    memcpy(q->tp_lo, tp->tp_lo, sizeof q->tp_lo);
    memcpy(q->tp_len, tp->tp_len, sizeof q->tp_len);
  }
  if (!q->name) { *rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory"); return q; }
  size_t nn = n ? n : 1;
  if ((*rc = ppsrt_param_alloc(be, &m->cfg, q))) return q;
  float *hb = malloc(nn * sizeof *hb);
  if (!hb) { *rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory"); return q; }
  char key[96];
  rt_ckpt_layer_key(name, m->cfg.layers_per_stage, key, sizeof key);
  uint64_t stream = ppsrt_hash_str(init == INIT_NORMAL ? key : name);
  for (size_t i = 0; i < n; i++)
    hb[i] = init == INIT_ZERO     ? 0.0f
            : init == INIT_ONE    ? 1.0f
            : init == INIT_NORMAL ? scale * ppsrt_rand_normal(m->cfg.seed, stream, ppsrt_param_full_index(q, i))
                                  : scale * ppsrt_rand_uniform(m->cfg.seed, stream, ppsrt_param_full_index(q, i));
  *rc = ppsrt_param_set(be, q, hb);
  free(hb);
  return q;
}
static ppsrt_param *add_param(ppsrt_model *m, int *rc, const char *name, int stage, size_t n, size_t offset,
                              size_t full_n, int init, float scale) {
  return add_param_tp(m, rc, name, stage, n, offset, full_n, init, scale, NULL);
}

/* Layer parameter j's slice on tensor-parallel rank t of T (Megatron's split: QKV and
 * FC1 by output columns, the heads and key/value groups of rank t; the projection and
 * FC2 by input rows; their biases and the norms whole); its elements in *n. */
static ppsrt_param tp_slice(const gpt *g, int j, int T, int t, size_t *n) {
  ppsrt_param s;
  memset(&s, 0, sizeof s);
  size_t h = (size_t)g->h, D = (size_t)g->D, Hq = (size_t)g->Hq * T, Hkv = (size_t)g->Hkv * T, q = (Hq + 2 * Hkv) * D;
  switch (j) {
  case QKVW: case QKVB:   /* columns: rank t's query heads, then its K and V groups */
    s.tp_split = 2; s.tp_n = 3; s.tp_R = j == QKVW ? h : 1; s.tp_C = q;
    s.tp_lo[0] = t * Hq / T * D;               s.tp_len[0] = Hq / T * D;
    s.tp_lo[1] = Hq * D + t * Hkv / T * D;     s.tp_len[1] = Hkv / T * D;
    s.tp_lo[2] = (Hq + Hkv) * D + t * Hkv / T * D; s.tp_len[2] = Hkv / T * D;
    break;
  case FCW: case FCB:   /* columns: rank t's MLP columns (SwiGLU: of the gate, then of the up half) */
    s.tp_split = 2; s.tp_n = g->sw ? 2 : 1; s.tp_R = j == FCW ? h : 1; s.tp_C = (size_t)g->F * (g->sw ? 2 : 1);
    s.tp_lo[0] = t * (size_t)g->F / T; s.tp_len[0] = (size_t)g->F / T;
    if (g->sw) { s.tp_lo[1] = (size_t)g->F + t * (size_t)g->F / T; s.tp_len[1] = (size_t)g->F / T; }
    break;
  case PROJW: case FC2W:   /* rows: the inputs of rank t's heads or MLP columns */
    s.tp_split = 1; s.tp_n = 1; s.tp_R = j == PROJW ? Hq * D : (size_t)g->F; s.tp_C = h;
    s.tp_lo[0] = t * s.tp_R / T; s.tp_len[0] = s.tp_R / T;
    break;
  default: break;
  }
  *n = s.tp_split == 2 ? s.tp_R * (s.tp_len[0] + s.tp_len[1] + s.tp_len[2]) : (s.tp_len[0]) * s.tp_C;
  return s;
}

/* Uploads int32 host data to a new device buffer. */
static int upload_i32(ppsrt_backend *be, const int32_t *h, size_t n, int32_t **out) {
  TRY(be->alloc(be, n * sizeof(int32_t), (void **)out));
  TRY(be->memcpy_async(be, CS, *out, h, n * sizeof(int32_t), 1));
  return be->stream_sync(be, CS);
}

/* --context-parallel: nseq whole sequences of a (T each) become this rank's rows of
 * each (T / cp: its two chunks, ppsrt_cp_pos), in place; nothing without it. */
static void cp_local(const gpt *g, int32_t *a, size_t nseq) {
  if (g->cp <= 1) return;
  for (size_t k = 0; k < nseq; k++)   /* (a row only moves down: k Tl + u <= k T + pos(u)) */
    for (int u = 0; u < g->Tl; u++) a[k * g->Tl + u] = a[k * g->T + ppsrt_cp_pos(g->T, g->cp, g->cpr, u)];
}

/* Synthetic data of every microbatch: ids uniform in [0, V) from (seed, mb, token);
 * target[t] = (ids[t] + ids[t-1]) mod V within each sequence (ids[-1] = 0). */
static int make_data(ppsrt_model *m) {
  gpt *g = m->impl;
  size_t n = (size_t)m->cfg.nmb * g->Bm * g->T;   /* whole sequences (--context-parallel: cp_local keeps its rows) */
  int32_t *ids = malloc(n * sizeof *ids), *tg = malloc(n * sizeof *tg), *pos = malloc((size_t)g->N * sizeof *pos);
  int rc = 0;
  if (!ids || !tg || !pos) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory");
  uint64_t stream = ppsrt_hash_str("gpt.data.tokens");
  for (size_t i = 0; !rc && i < n; i++) {
    float u = ppsrt_rand_uniform(m->cfg.seed, stream, (size_t)m->cfg.mb0 * g->Bm * g->T + i);
    int id = (int)((u + 1.0f) * 0.5f * (float)g->V);
    ids[i] = id < 0 ? 0 : id >= g->V ? g->V - 1 : id;
  }
  for (size_t i = 0; !rc && i < n; i++) {
    int t = (int)(i % (size_t)g->T);
    tg[i] = (int32_t)(((int64_t)ids[i] + (t > 0 ? ids[i - 1] : 0)) % g->V);
  }
  for (int i = 0; !rc && i < g->N; i++) pos[i] = g->cp > 1 ? ppsrt_cp_pos(g->T, g->cp, g->cpr, i % g->Tl) : i % g->T;
  if (!rc) { cp_local(g, ids, n / g->T); cp_local(g, tg, n / g->T); n = (size_t)m->cfg.nmb * g->N; }
  if (!rc) rc = upload_i32(m->be, ids, n, &g->ids);
  if (!rc) rc = upload_i32(m->be, tg, n, &g->tgt);
  if (!rc) rc = upload_i32(m->be, pos, (size_t)g->N, &g->posid);
  if (!rc && g->sg) {   /* the shared expert's gate's rows 0 .. n-1, then n zeros (g->sgi) */
    int32_t *t = malloc(2 * (size_t)g->n * sizeof *t);
    if (!t) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory");
    for (int i = 0; !rc && i < g->n; i++) { t[i] = i; t[g->n + i] = 0; }
    if (!rc) rc = upload_i32(m->be, t, 2 * (size_t)g->n, &g->sgi);
    free(t);
  }
  free(ids); free(tg); free(pos);
  return rc;
}

/* --data: iteration `iter`'s microbatches from the token file: sequence
 * (iter * nmb + mb) * micro_batch + b of the file (data.c), targets the next tokens;
 * uploaded over the synthetic ids/targets (same sizes). */
static int load_tokens(ppsrt_model *m, long first) {
  gpt *g = m->impl;
  size_t n = (size_t)m->cfg.nmb * g->Bm * g->T;   /* whole sequences, then this rank's rows (cp_local) */
  int32_t *ids = malloc(n * sizeof *ids), *tg = malloc(n * sizeof *tg);
  int rc = 0;
  if (!ids || !tg) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory");
  for (long k = 0; !rc && k < (long)m->cfg.nmb * g->Bm; k++)
    rc = ppsrt_tokens_window(m->cfg.data, first + k, g->T, ids + (size_t)k * g->T, tg + (size_t)k * g->T);
  if (!rc) { cp_local(g, ids, n / g->T); cp_local(g, tg, n / g->T); n = (size_t)m->cfg.nmb * g->N; }
  if (!rc) rc = m->be->memcpy_async(m->be, CS, g->ids, ids, n * sizeof *ids, 1);
  if (!rc) rc = m->be->memcpy_async(m->be, CS, g->tgt, tg, n * sizeof *tg, 1);
  if (!rc) rc = m->be->stream_sync(m->be, CS);
  free(ids);
  free(tg);
  return rc;
}

/* The sizes of a configuration, before anything is allocated: positive, consistent,
 * every tensor within INT32_MAX elements (the kernels index with int) and the
 * parameter table within an int, each product checked by division so that it cannot
 * overflow itself. nstages: the most stages one device holds (cfg->nstage at most). */
static int gpt_check_sizes(const ppsrt_model_config *cfg, int nstages) {
  int Hkv = cfg->query_groups > 0 ? cfg->query_groups : cfg->heads;
  if (cfg->hidden <= 0 || cfg->heads <= 0 || cfg->seq <= 0 || cfg->micro_batch <= 0 || cfg->layers_per_stage <= 0 ||
      cfg->nstage <= 0 || cfg->vocab <= 0 || cfg->nmb <= 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: sizes must be positive (hidden %d, heads %d, seq %d, vocab %d, micro-batch %d, "
                      "layers-per-stage %d)", cfg->hidden, cfg->heads, cfg->seq, cfg->vocab, cfg->micro_batch,
                      cfg->layers_per_stage);
  if (cfg->kv_channels < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --kv-channels must be a positive head size, got %d", cfg->kv_channels);
  if ((!cfg->kv_channels && cfg->hidden % cfg->heads) || cfg->heads % Hkv)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --hidden %d must be a multiple of --heads %d (or --kv-channels give the head "
                      "size), and --heads of --query-groups %d", cfg->hidden, cfg->heads, Hkv);
  if (cfg->tp > 1 && Hkv % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d must divide --query-groups %d (and so --heads %d): each rank "
                      "takes whole key/value groups", cfg->tp, Hkv, cfg->heads);
  int F = ppsrt_gpt_ffn(cfg);
  if (F <= 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --ffn-hidden must be positive, got %d", cfg->ffn_hidden);
  if (cfg->tp > 1 && F % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d must divide the MLP's width %d (--ffn-hidden): each rank "
                      "takes F/T of its columns", cfg->tp, F);
  int S = cfg->moe_shared_ffn;   /* --moe-shared-ffn-hidden: the shared expert's width (0: none) */
  if (S && !cfg->num_experts)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-shared-ffn-hidden %d adds a shared expert to the experts of "
                      "--num-experts\nhint: add --num-experts E (2 or more)", S);
  if (S < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-shared-ffn-hidden must be positive, got %d", S);
  if (cfg->moe_shared_gate && !S)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-shared-expert-gate gates the shared expert of --moe-shared-ffn-hidden, "
                      "which this run has not\nhint: add --moe-shared-ffn-hidden S (and --num-experts E)");
  if (S && cfg->tp > 1 && S % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d must divide the shared expert's width %d "
                      "(--moe-shared-ffn-hidden): each rank takes S/T of its columns", cfg->tp, S);
  int D = ppsrt_gpt_kv_channels(cfg);
  if (cfg->rope && D % 2) {
    if (cfg->kv_channels)
      return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --position rope rotates pairs of a head's columns: the head size --kv-channels "
                        "%d must be even", D);
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --position rope rotates pairs of a head's columns: the head size --hidden %d / "
                      "--heads %d = %d must be even\nhint: give an even head size with --kv-channels", cfg->hidden,
                      cfg->heads, D);
  }
  if (!(cfg->hidden_dropout >= 0 && cfg->hidden_dropout < 1) || !(cfg->attention_dropout >= 0 && cfg->attention_dropout < 1))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --%s-dropout must be a rate from 0 to below 1, got %g",
                      !(cfg->hidden_dropout >= 0 && cfg->hidden_dropout < 1) ? "hidden" : "attention",
                      !(cfg->hidden_dropout >= 0 && cfg->hidden_dropout < 1) ? cfg->hidden_dropout : cfg->attention_dropout);
  if (!(cfg->init_method_std == 0 || (cfg->init_method_std > 0 && isfinite(cfg->init_method_std))))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --init-method-std must be a finite number above 0 (Megatron-LM's default 0.02), "
                      "got %g", cfg->init_method_std);
  if (!(cfg->norm_epsilon == 0 || (cfg->norm_epsilon > 0 && isfinite(cfg->norm_epsilon))))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --norm-epsilon must be a finite number above 0 (default %g), got %g", PPSRT_NORM_EPS,
                      cfg->norm_epsilon);
  if (cfg->rope && !(cfg->rope_base == 0 || (cfg->rope_base > 1 && isfinite(cfg->rope_base))))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --rope-base must be a number above 1 (default 10000), got %g", cfg->rope_base);
  if (cfg->rope && cfg->rope_scaling && !(cfg->rope_factor > 0 && isfinite(cfg->rope_factor)))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --rope-scaling-factor must be a number above 0, got %g", cfg->rope_factor);
  if (cfg->rope && cfg->rope_scaling == PPSRT_ROPE_LLAMA3 &&
      !(cfg->rope_low_freq > 0 && cfg->rope_high_freq > cfg->rope_low_freq && isfinite(cfg->rope_high_freq) &&
        cfg->rope_orig_max > 0))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --rope-scaling llama3 needs 0 < --rope-low-freq-factor < --rope-high-freq-factor "
                      "and --rope-original-max-positions above 0, got %g, %g and %d", cfg->rope_low_freq, cfg->rope_high_freq,
                      cfg->rope_orig_max);
  if (cfg->rope && (cfg->rope_scaling < 0 || cfg->rope_scaling >= PPSRT_ROPE_NSCALINGS))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: RoPE scaling %d is not none, linear or llama3", cfg->rope_scaling);
  if (cfg->tp > 1 && !cfg->vocab_mode && cfg->vocab % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d splits the input and output layers' --vocab %d rows over the "
                      "group: %d must divide them\nhint: pad the vocabulary to a multiple of %d, as Megatron-LM does "
                      "(--make-vocab-size-divisible-by)", cfg->tp, cfg->vocab, cfg->tp, cfg->tp);
  if (cfg->tp > 1 && cfg->vocab_mode && cfg->vocab % ((int64_t)(cfg->ndev > 0 ? cfg->ndev : 1) * cfg->tp)) {
    int P = cfg->ndev > 0 ? cfg->ndev : 1;
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d splits each device's rows of the vocabulary-parallel schedule "
                      "(--vocab %d over its %d devices) over the group: %d x %d = %lld must divide --vocab %d\nhint: pad the "
                      "vocabulary to a multiple of %lld, as Megatron-LM does (--make-vocab-size-divisible-by)", cfg->tp,
                      cfg->vocab, P, P, cfg->tp, (long long)P * cfg->tp, cfg->vocab, (long long)P * cfg->tp);
  }
  if (cfg->cp > 1 && cfg->seq % (2 * cfg->cp))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --context-parallel %d cuts each sequence into 2 x %d = %d chunks: --seq %d "
                      "must be a multiple of %d", cfg->cp, cfg->cp, 2 * cfg->cp, cfg->seq, 2 * cfg->cp);
  if (cfg->sp && cfg->tp > 1 && cfg->cp > 1 && ((int64_t)cfg->seq / cfg->cp * cfg->micro_batch) % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --sequence-parallel splits a context rank's --micro-batch %d x --seq %d / "
                      "--context-parallel %d = %lld tokens over --tensor-parallel %d ranks: %d must divide them",
                      cfg->micro_batch, cfg->seq, cfg->cp, (long long)cfg->seq / cfg->cp * cfg->micro_batch, cfg->tp, cfg->tp);
  if (cfg->sp && cfg->tp > 1 && ((int64_t)cfg->seq * cfg->micro_batch) % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --sequence-parallel splits the --micro-batch %d x --seq %d = %lld tokens of a "
                      "microbatch over --tensor-parallel %d ranks: %d must divide them", cfg->micro_batch, cfg->seq,
                      (long long)cfg->seq * cfg->micro_batch, cfg->tp, cfg->tp);
  int64_t fw = (int64_t)(F > S ? F : S) * (cfg->swiglu ? 2 : 1);   /* FC1's output width (dense or shared) */
  int64_t w = fw > cfg->vocab ? fw : cfg->vocab;                     /* MLP, logits */
  int64_t tokens = (int64_t)cfg->seq * cfg->micro_batch;   /* both < 2^31: no overflow */
  if (tokens > INT32_MAX / w)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --seq %d x --micro-batch %d tokens x width %lld is over %d elements per tensor",
                      cfg->seq, cfg->micro_batch, (long long)w, INT32_MAX);
  int64_t h = cfg->hidden, q = ((int64_t)cfg->heads + 2 * (int64_t)Hkv) * D, ha = (int64_t)cfg->heads * D;
  int64_t rows = fw > q ? fw : q;                            /* fc.w [h, fw], qkv.w [h, q] (proj.w [a D, h]) */
  if (q > INT32_MAX / tokens)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --seq %d x --micro-batch %d tokens x the QKV width (--heads %d + 2 x "
                      "--query-groups %d) x --kv-channels %d is over %d elements per tensor", cfg->seq, cfg->micro_batch,
                      cfg->heads, Hkv, D, INT32_MAX);
  if (rows > INT32_MAX / h || ha > INT32_MAX / h || cfg->vocab > INT32_MAX / h || cfg->seq > INT32_MAX / h)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --hidden %d with --vocab %d, --seq %d and %lld-wide layers makes a weight over %d elements",
                      cfg->hidden, cfg->vocab, cfg->seq, (long long)rows, INT32_MAX);
  int per_layer = NLP + (cfg->num_experts > 0 ? 1 + 4 * cfg->num_experts : 0);   /* (the experts' at most) */
  if ((int64_t)nstages * cfg->layers_per_stage > (INT32_MAX - 5) / per_layer)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: %d stages x --layers-per-stage %d is over %d parameter tensors", nstages,
                      cfg->layers_per_stage, (INT32_MAX - 5) / per_layer);
  return ppsrt_moe_check_config(cfg);
}

int ppsrt_gpt_check_config(const ppsrt_model_config *cfg) { return gpt_check_sizes(cfg, cfg->nstage); }

int ppsrt_gpt_kv_channels(const ppsrt_model_config *cfg) {
  if (cfg->kv_channels) return cfg->kv_channels;
  return cfg->heads > 0 ? cfg->hidden / cfg->heads : 0;
}

int ppsrt_gpt_ffn(const ppsrt_model_config *cfg) {
  if (cfg->ffn_hidden) return cfg->ffn_hidden;
  int64_t h = cfg->hidden;
  if (!cfg->swiglu) return 4 * h > INT32_MAX ? INT32_MAX : (int)(4 * h);
  int64_t f = 8 * h / 3 / 64 * 64;   /* Megatron-LM: int((4h 2/3) / 64) * 64 */
  if (!f) f = 8 * h / 3 / 8 * 8;
  return f < 8 ? 8 : f > INT32_MAX ? INT32_MAX : (int)f;
}

/* RoPE's frequency of pair i < D/2 (radians a position): base^(-2i/D), then scaled by
 * --rope-scaling (HF transformers' rope_type of the same name is the definition):
 *   linear: f / factor (positions divided by the factor);
 *   llama3 (Llama 3.1's): with r = original / wavelength = original f / 2 pi, the pairs
 *     of r above the high factor (short wavelengths) keep f, those below the low factor
 *     (long ones) take f / factor, and between the two f is blended,
 *     (1 - s) f / factor + s f with s = (r - low) / (high - low). */
static double rope_freq(const ppsrt_model_config *c, int i, int D) {
  double f = pow(c->rope_base > 0 ? c->rope_base : 10000.0, -2.0 * i / D);
  if (c->rope_scaling == PPSRT_ROPE_LINEAR) return f / c->rope_factor;
  if (c->rope_scaling != PPSRT_ROPE_LLAMA3) return f;
  double r = c->rope_orig_max * f / (2 * acos(-1.0));
  if (r > c->rope_high_freq) return f;
  if (r < c->rope_low_freq) return f / c->rope_factor;
  double s = (r - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
  return (1 - s) * f / c->rope_factor + s * f;
}

/* --position rope: the cosines and sines of every position t < seq and pair i < D/2,
 * angle t rope_freq(i), computed in double and stored F32 [seq, D/2, 2] on the device:
 * the one table both backends' rope kernels read (backend.h rope). */
static int rope_table(ppsrt_model *m) {
  gpt *g = m->impl;
  ppsrt_backend *be = m->be;
  int hd = g->D / 2;
  size_t n = (size_t)g->T * hd * 2;
  float *t = malloc(n * sizeof *t);
  if (!t) return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory");
  for (int p = 0; p < g->T; p++)
    for (int i = 0; i < hd; i++) {
      double ang = p * rope_freq(&m->cfg, i, g->D);
      t[((size_t)p * hd + i) * 2] = (float)cos(ang);
      t[((size_t)p * hd + i) * 2 + 1] = (float)sin(ang);
    }
  int rc = be->alloc(be, n * sizeof(float), (void **)&g->rcs);
  if (!rc) rc = be->upload_f32(be, (ppsrt_tensor){g->rcs, n, PPSRT_F32}, t);
  free(t);
  return rc;
}

int ppsrt_gpt_create(const ppsrt_model_config *cfg, ppsrt_backend *be, int device, const int *stages, int nstages,
                     ppsrt_model **out) {
  *out = NULL;
  int Hkv = cfg->query_groups > 0 ? cfg->query_groups : cfg->heads;
  int rc0 = gpt_check_sizes(cfg, nstages);
  if (rc0) return rc0;
  int P = cfg->vocab_mode ? (cfg->ndev > 0 ? cfg->ndev : 1) : 1;
  if (cfg->vocab_mode && (cfg->vocab_mode > 2 || cfg->vocab < P || device < 0 || device >= P))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: vocabulary parallelism needs mode 1 or 2 and --vocab %d >= devices %d",
                      cfg->vocab, P);
  if ((cfg->rope && !be->rope) || (cfg->swiglu && (!be->swiglu_fwd || !be->swiglu_bwd)))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: the %s backend has no %s kernels", be->name, cfg->rope && !be->rope ? "RoPE" : "SwiGLU");
  ppsrt_model *m = calloc(1, sizeof *m);
  gpt *g = calloc(1, sizeof *g);
  if (!m || !g) { free(m); free(g); return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory"); }
  m->name = "gpt"; m->be = be; m->cfg = *cfg; m->impl = g;
  m->xfer_bytes = gpt_xfer_bytes; m->act_bytes = gpt_act_bytes;
  m->f = gpt_f; m->b = gpt_b; m->w = gpt_w; m->bw = NULL;
  m->vocab_pass = cfg->vocab_mode ? gpt_vocab_pass : NULL;
  m->collective = cfg->vocab_mode ? gpt_collective : NULL;
  m->begin_iteration = gpt_begin; m->end_iteration = gpt_end; m->destroy = gpt_destroy;
  g->tp = cfg->tp > 1 ? cfg->tp : 1; g->tpr = g->tp > 1 ? cfg->tp_rank : 0;
  g->h = cfg->hidden; g->D = ppsrt_gpt_kv_channels(cfg); g->Hq = cfg->heads / g->tp; g->Hkv = Hkv / g->tp; g->T = cfg->seq;
  g->F = cfg->num_experts ? cfg->moe_shared_ffn : ppsrt_gpt_ffn(cfg); g->sw = cfg->swiglu != 0; g->rms = cfg->rmsnorm != 0; g->rope = cfg->rope != 0;
  g->nb = cfg->no_bias != 0; g->nst = g->rms ? 1 : 2; g->tie = cfg->tie_embeddings != 0; g->qkn = cfg->qk_layernorm != 0;
  g->eps = (float)(cfg->norm_epsilon > 0 ? cfg->norm_epsilon : PPSRT_NORM_EPS);
  g->ha = g->Hq * g->D; g->f = g->F / g->tp; g->fw = g->f * (g->sw ? 2 : 1);
  /* the layer parameters present: no linear biases with --bias off, no betas with RMS norms */
  for (int j = 0; j < NLP; j++) {
    int bias = j == QKVB || j == PROJB || j == FCB || j == FC2B, beta = j == LN1B || j == LN2B || j == QNB || j == KNB;
    int qkn = (j == QNG || j == QNB || j == KNG || j == KNB) && !g->qkn;   /* --qk-layernorm's: absent */
    int mlp = j == FCW || j == FCB || j == FC2W || j == FC2B;   /* (--num-experts: the shared expert's, if any) */
    int sgw = j == SGW && !(cfg->num_experts && cfg->moe_shared_gate && g->F);   /* the shared expert's gate: absent */
    if (j == QKVB && cfg->qkv_bias) bias = 0;   /* --add-qkv-bias: QKV's kept under --bias off (Qwen2's) */
    g->kidx[j] = (bias && g->nb) || (beta && g->rms) || (mlp && !g->F) || sgw || qkn ? -1 : g->nlp++;
  }
  g->cp = cfg->cp > 1 ? cfg->cp : 1; g->cpr = g->cp > 1 ? cfg->cp_rank : 0; g->Tl = g->T / g->cp;
  g->Bm = cfg->micro_batch; g->N = g->Bm * g->Tl; g->V = cfg->vocab; g->L = cfg->layers_per_stage;
  g->S = cfg->nstage; g->P = P; g->mode = cfg->vocab_mode; g->rank = device; g->nc = cfg->no_compute;
  g->q = (g->Hq + 2 * g->Hkv) * g->D;
  g->dth = ppsrt_drop_thr(cfg->hidden_dropout); g->dta = ppsrt_drop_thr(cfg->attention_dropout);
  g->dsh = g->dth ? (float)(1.0 / (1.0 - cfg->hidden_dropout)) : 1.0f;
  g->dsa = g->dta ? (float)(1.0 / (1.0 - cfg->attention_dropout)) : 1.0f;
  g->sp = cfg->sp && g->tp > 1;
  g->n = g->sp ? g->N / g->tp : g->N;
  g->r0 = g->sp ? g->tpr * g->n : 0;
  g->es = ppsrt_dtype_size(be->act_dtype);
  g->nlocal = nstages;
  g->tpv = g->tp > 1 && !g->mode;
  g->vtp = g->tp > 1 && g->mode;
  g->moe_on = cfg->num_experts > 0;
  g->mlp = g->F > 0;
  g->sg = g->kidx[SGW] >= 0;
  g->lpb = g->nlp;
  if (g->moe_on && (!be->moe_route || !be->moe_route_bwd || !be->moe_permute || !be->moe_permute_bwd ||
                    !be->moe_unpermute || !be->moe_unpermute_bwd)) {
    free(m); free(g);
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: the %s backend has no mixture-of-experts kernels (--num-experts)", be->name);
  }
  if (g->moe_on) {
    int rm = ppsrt_moe_init(&g->moe, cfg, be->act_dtype, g->N, g->n, g->r0, g->tp, cfg->nmb * nstages * g->L);
    if (rm) { free(m); free(g); return rm; }
    g->lpb += ppsrt_moe_nparams(&g->moe);
    if (g->moe.ebias) {   /* the expert bias: model.h state, checkpointed */
      m->nstate = g->moe.nl; m->state = gpt_state; m->state_sync = gpt_state_sync;
    }
  }
  /* vocabulary rows: device d's [d V/P, (d+1) V/P) under a vocabulary-parallel schedule
   * (--tensor-parallel: rank t's V/(P T) of them), else rank t's [t V/T, (t+1) V/T) or all */
  g->vlo = g->mode ? (int)((int64_t)device * g->V / P) : 0;
  if (g->vtp) {
    g->lo = g->vlo + g->tpr * (g->V / P / g->tp);
    g->hi = g->lo + g->V / P / g->tp;
  } else {
    g->lo = g->mode ? g->vlo : g->tpv ? g->tpr * (g->V / g->tp) : 0;
    g->hi = g->mode ? (int)((int64_t)(device + 1) * g->V / P) : g->tpv ? g->lo + g->V / g->tp : g->V;
  }
  /* per-stage FLOPs of the transformer layers (vocabulary layers: ppsrt_gpt_pass_flops) */
  {
    ppsrt_model_config c1 = *cfg;
    c1.nstage = 3;   /* a middle stage: layers only */
    m->flops_f = ppsrt_gpt_pass_flops(&c1, PPSRT_OP_F, 1);
    m->flops_b = ppsrt_gpt_pass_flops(&c1, PPSRT_OP_B, 1);
    m->flops_w = ppsrt_gpt_pass_flops(&c1, PPSRT_OP_W, 1);
  }
  int rc = 0;
  g->local = malloc((size_t)g->S * sizeof *g->local);
  g->ix = calloc((size_t)cfg->nmb * (nstages ? nstages : 1), sizeof *g->ix);
  g->ixpool = malloc((size_t)cfg->nmb * (nstages ? nstages : 1) * g->L * NFE * sizeof *g->ixpool);
  g->vs = calloc((size_t)cfg->nmb, sizeof *g->vs);
  g->hst = malloc(3 * (size_t)g->N * cfg->nmb * sizeof *g->hst);
  /* parameters: layers, LN_f, embeddings, output layer */
  int nparams = nstages * g->L * g->lpb + 2 + 3;
  m->params = calloc((size_t)nparams, sizeof *m->params);
  if (!g->local || !g->ix || !g->ixpool || !g->vs || !g->hst || !m->params) {
    rc = PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory");
    goto fail;
  }
  for (int s = 0; s < g->S; s++) g->local[s] = -1;
  for (int k = 0; k < nstages; k++) {
    if (stages[k] < 0 || stages[k] >= g->S) { rc = PPSRT_FAIL(PPSRT_E_USAGE, "gpt: stage %d out of range", stages[k]); goto fail; }
    g->local[stages[k]] = k;
  }
  for (size_t i = 0; i < (size_t)cfg->nmb * nstages; i++) {
    g->ix[i].lf = g->ixpool + i * g->L * NFE;
  }
  g->first = g->local[0] >= 0;
  g->last = g->local[g->S - 1] >= 0;
  /* In vocabulary parallel mode, `first`/`last` still mean "holds stage 0 / S-1". */
  g->lpbase = 0;
  int h = g->h, q = g->q;
  size_t F = (size_t)g->F, fw = F * (g->sw ? 2 : 1);   /* whole tensors' MLP widths */
  for (int k = 0; k < nstages && !rc; k++) {
    int s = stages[k];
    for (int l = 0; l < g->L && !rc; l++) {
      size_t D = (size_t)g->D, A = (size_t)g->ha * g->tp;   /* the attention's width a D (whole) */
      size_t sizes[NLP] = {h, h, (size_t)h * q, q, A * h, h, h, h, (size_t)h * fw, fw, F * h, h, h, D, D, D, D};
      for (int j = 0; j < NLP; j++) {
        if (g->kidx[j] < 0) continue;
        char name[64];
        int sh = g->moe_on && (j == FCW || j == FCB || j == FC2W || j == FC2B || j == SGW);   /* the shared expert's */
        snprintf(name, sizeof name, "s%d.l%d.%s%s", s, l, sh ? "moe.shared." : "", lp_names[j]);
        int init = j == LN1G || j == LN2G || j == QNG || j == KNG ? INIT_ONE
                   : (j == LN1B || j == LN2B || j == QNB || j == KNB || (j < QNG && j % 2 == 1)) ? INIT_ZERO : INIT_UNIFORM;
        /* uniform(-a, a) with a = sqrt(3 / fan_in): unit variance outputs (or init_weight's normal) */
        float fan_in = j == FC2W ? (float)F : j == PROJW ? (float)A : (float)h, sc = 0;
        if (init == INIT_UNIFORM) init = init_weight(cfg, j == PROJW || j == FC2W, sqrtf(3.0f / fan_in), &sc);
        size_t n = sizes[j];
        ppsrt_param sl = tp_slice(g, j, g->tp, g->tpr, &n);
        if (!sl.tp_split || g->tp == 1) { n = sizes[j]; sl.tp_split = 0; }
        ppsrt_param *pr = add_param_tp(m, &rc, name, s, n, 0, sl.tp_split ? sl.tp_R * sl.tp_C : n, init, sc, &sl);
        pr->no_decay = !(j == QKVW || j == PROJW || j == FCW || j == FC2W || j == SGW);   /* biases, norms */
      }
      for (int j = 0; g->moe_on && j < ppsrt_moe_nparams(&g->moe) && !rc; j++) {   /* the router, the experts */
        char name[96], sfx[48];
        size_t n, full;
        int zero, outl, nd;
        float usc, sc = 0;
        ppsrt_param sl;
        ppsrt_moe_param(&g->moe, j, g->tpr, sfx, sizeof sfx, &n, &full, &sl, &zero, &usc, &outl, &nd);
        snprintf(name, sizeof name, "s%d.l%d.%s", s, l, sfx);
        int init = zero ? INIT_ZERO : init_weight(cfg, outl, usc, &sc);   /* (the router: Normal(0, S), Megatron-Core's) */
        ppsrt_param *pr = add_param_tp(m, &rc, name, s, n, 0, full, init, sc, &sl);
        pr->no_decay = nd;
        pr->expert = ppsrt_moe_param_expert(&g->moe, j);   /* --expert-parallel: this rank's alone */
      }
    }
  }
  if (!rc && g->last) {
    char name[64];
    snprintf(name, sizeof name, "s%d.lnf.g", g->S - 1);
    g->lnfg = add_param(m, &rc, name, g->S - 1, h, 0, h, INIT_ONE, 0);
    g->lnfg->no_decay = 1;
    if (!g->rms) {
      snprintf(name, sizeof name, "s%d.lnf.b", g->S - 1);
      g->lnfb = add_param(m, &rc, name, g->S - 1, h, 0, h, INIT_ZERO, 0);
      g->lnfb->no_decay = 1;
    }
  }
  size_t Vs = (size_t)(g->hi - g->lo);
  /* --tensor-parallel: rows [lo, hi) of tok and out, a tensor-parallel slice (model.h) of
   * the whole tensor, or under a vocabulary-parallel schedule of the device's V/P rows
   * (the group's tensor, from row vlo on) */
  ppsrt_param vsl;
  memset(&vsl, 0, sizeof vsl);
  if (g->tpv || g->vtp) {
    vsl.tp_split = 1; vsl.tp_n = 1; vsl.tp_R = g->tpv ? (size_t)g->V : Vs * g->tp; vsl.tp_C = (size_t)h;
    vsl.tp_lo[0] = (size_t)(g->lo - g->vlo); vsl.tp_len[0] = Vs;
  }
  size_t voff = (size_t)g->vlo * h;
  /* tied: one matrix, initialised as the output layer (U(+-sqrt(3/h)), unit-variance
   * logits), its copy on the last stage's device when that is another one; with
   * --init-method-std S the token and position tables and the output layer, tied or
   * not, are Normal(0, S) (Megatron-LM's embedding and output layer init_method) */
  float tscale, pscale, oscale;
  int tinit = init_weight(cfg, 0, g->tie ? sqrtf(3.0f / (float)h) : 1.0f, &tscale);
  int pinit = init_weight(cfg, 0, 0.1f, &pscale);
  int oinit = init_weight(cfg, 0, sqrtf(3.0f / (float)h), &oscale);
  if (!rc && (g->mode || g->first))
    g->tok = add_param_tp(m, &rc, "vocab.tok", g->mode ? -1 : 0, Vs * h, voff, (size_t)g->V * h, tinit, tscale, &vsl);
  if (!rc && !g->rope && (g->mode ? device == 0 : g->first))
    g->pos = add_param(m, &rc, "vocab.pos", g->mode ? -1 : 0, (size_t)g->T * h, 0, (size_t)g->T * h, pinit, pscale);
  if (!rc && g->tie && g->tok && !g->mode && !g->last) g->tok->tied = 1;   /* its copy on the last stage's device */
  if (!rc && g->tie && g->tok && (g->mode || g->last))
    g->out = g->tok;
  else if (!rc && g->tie && g->last) {
    g->out = add_param_tp(m, &rc, "vocab.tok", g->S - 1, Vs * h, voff, (size_t)g->V * h, tinit, tscale, &vsl);
    g->out->shared = 1;
    g->out->tied = 1;   /* (and its original on stage 0's device, below) */
  } else if (!rc && (g->mode || g->last))
    g->out = add_param_tp(m, &rc, "vocab.out", g->mode ? -1 : g->S - 1, Vs * h, voff, (size_t)g->V * h,
                          oinit, oscale, &vsl);
  if (!rc) rc = make_data(m);
  if (!rc && g->rope && nstages) rc = rope_table(m);
  if (!rc && (g->mode ? device == 0 : g->last))
    rc = be->alloc(be, 3 * (size_t)g->N * cfg->nmb * sizeof(float), (void **)&g->lst);
  if (rc) goto fail;
  *out = m;
  return 0;
fail:
  gpt_destroy(m);
  return rc;
}
