/* moe.c: the mixture-of-experts MLP of the gpt model (--num-experts E, --moe-topk K,
 * --moe-ffn-hidden F, --moe-aux-loss-coeff a; moe.h, docs/models.md "Mixture of experts").
 * The router's options (--moe-router-score-function, --moe-router-pre-softmax,
 * --moe-router-topk-scaling-factor, --moe-z-loss-coeff, --moe-router-enable-expert-bias:
 * docs/models.md "Router options") change the top-K and weights below inside the
 * moe_route kernels (router_of hands them over); this file adds the z-loss's value, and
 * keeps the expert bias per layer (host and device), its loads and its update after the
 * iteration (ppsrt_moe_update_bias).
 *
 * For the N tokens of a microbatch, with x = LN2's output [N, h]:
 *   router   logits = x Wr (Wr [h, E], no bias; F32 product), prob = softmax(logits)
 *   top-K    the K largest logits of each token (ties: the lower expert index), weights
 *            w = softmax over those K logits (Megatron-Core's default, no pre-softmax)
 *   permute  each token's K slots sorted by expert (stable: token order), xp [N K, h]
 *   experts  expert e on its rows: the model's MLP of width F (GeLU fc/fc2 with biases,
 *            or SwiGLU without), eout [N K, h]
 *   combine  out[n] = sum_k w[n, k] eout[slot (n, k)];  y = x1 + drop(out)
 *   aux      a E sum_e f_e P_e, f_e = slots routed to e / (N K), P_e = mean_n prob[n, e],
 *            added to the loss (mean over microbatches); its gradient reaches the router
 *            through P_e (f_e is a count: no gradient), Megatron's switch-style loss.
 * Dropless by default: every expert takes all the tokens routed to it. With a capacity
 * factor (--moe-expert-capacity-factor CF, --moe-token-drop-policy probs|position;
 * Megatron-Core's token dropping) each expert keeps at most cap = min(N, ceil(CF N K / E))
 * of a rank's own N K slots (before any expert-parallel dispatch): the largest w (ties:
 * the lower token) or the first in token order; route_host marks the others with
 * position -1, which the moe_* kernels skip (nothing combined, dw 0, no gradient), the
 * kept weights are not renormalised and the load-balancing loss counts the routing
 * before dropping. The row-indexed parts (hpre, hact, eout) then hold M = min(X N K,
 * E cap) rows (ppsrt_moe_rows; ppsc sim's moe_bytes). The routing runs on the
 * device (backend.h moe_route); its indices and per-expert counts are copied to the host
 * (one synchronisation of the compute stream per MoE layer per F), which builds the
 * permutation and sizes the per-expert GEMMs; B and W reuse the counts kept per layer
 * slot (the routing of a recomputed F is the same: the same kernels on the same input).
 * --check (cfg moe_record): route_host also keeps each slot's own decisions (rec), which
 * check.c gathers; the reference (ppsrt_moe_set_replay) forces them on its routing kernel
 * (replay_route: the weights from its own logits) and its drops (replay_drops), after
 * hashing its own choice (ohash; where it records too, orec: its decisions) for the report.
 *
 * F/B/W: F keeps in one store entry (ppsrt_moe.bytes) FC1's outputs hpre [N K, fw], the
 * activations hact [N K, f], the expert outputs eout [N K, h], w, the top-K indices and
 * the permutation (N K each; with a capacity M rows of the first three), prob [N, E],
 * room for dlogits [N, E] and (with a > 0) the load-balancing loss's coefficients [E];
 * B writes the
 * gradients over them (deout over eout, dhpre over hpre, dlogits) and the input gradient
 * (through the experts, the permutation and the router); W the expert and router weight
 * gradients, re-permuting x (recomputed by the caller). B frees and adds nothing counted.
 *
 * Tensor parallelism (expert tensor parallel = --tensor-parallel):
 * each expert's FC1 columns and FC2 rows are split over the group like the dense MLP's;
 * the router is whole on every rank, and every rank routes all N tokens identically. The
 * expert outputs' partial sums and the permuted input gradient's are all-reduced (F32).
 * With --sequence-parallel the caller hands all N rows of x and dy (gathered) and takes
 * this rank's rows of y and of the input gradient.
 *
 * Expert parallelism (--expert-parallel X, ep.c; Megatron's --expert-model-parallel-size
 * with the allgather dispatcher, the default; the all-to-all one below): EP rank j
 * (replica mod X) holds experts [e0, e0 + E/X), e0 = j E/X, named by their global index;
 * the router is whole. F routes this rank's N tokens (its indices and weights into block
 * j of the X N K slot-indexed parts), then all-gathers them and LN2's output over the group; the permutation puts the slots of
 * this rank's experts first (by expert, slot order kept), every other slot after them;
 * the local experts run on their rows only, the other rows of eout are zeroed, and each
 * gathered token's weighted sum (moe_unpermute over X N tokens, F32) is reduce-scattered
 * back to its rank. B all-gathers dy, runs the local experts' backward, zeroes the other
 * rows of the permuted input gradient and reduce-scatters both the tokens' input
 * gradient (F32 [X N, h]) and the routing weights' (F32 [X N K]: a slot's is nonzero on
 * the rank of its expert only) before the router's backward on the own tokens. W
 * all-gathers LN2's output again. The saved entry holds X N K slots (dropless routing may
 * send every gathered slot to one rank), so it grows with X; the load-balancing loss is
 * this rank's tokens' (as at X = 1). X = 1 is exactly the code path above (e0 = 0, all
 * experts local, no collective).
 * All-to-all dispatcher (--moe-token-dispatcher alltoall, X > 1; Megatron's
 * --moe-token-dispatcher-type alltoall): nothing is gathered. F routes this rank's N tokens
 * (block j of the slot-indexed parts, as above; the capacity drops this rank's own slots
 * first), and pos[block j] places each kept slot in this rank's send rows, sorted by expert
 * (so by destination rank; slot order kept; dropped -1). The kept counts a expert (E int32
 * a rank) are all-gathered (a second host synchronisation a MoE F: ep.c's acnt[slot] =
 * [X][E], kept per layer slot for B and W). Then:
 *   F  moe_permute own x -> send rows; alltoallv to the experts' ranks (rank q's rows of
 *      this rank's experts arrive by q, then expert); chunk copies put them in the
 *      experts' order (by expert, then q: the allgather path's row order exactly); the
 *      local experts as above; the outputs back into (q, expert) order, alltoallv back,
 *      landing in eout in this rank's send order: eout then holds the outputs of this
 *      rank's own slots (home), the combine is X = 1's (pos, w of block j), so B's
 *      routing-weight gradient is local too;
 *   B  moe_unpermute_bwd at home (dw of this rank's slots; deout = w dy over eout, in
 *      place); deout alltoallv to the experts' ranks, reordered into eout (experts' order:
 *      what W's FC2 gradient reads); the experts' backward; the input-gradient rows back
 *      to (q, expert) order, alltoallv home, moe_permute_bwd (each token's K slots summed
 *      in k order: X = 1's); the router's backward on block j;
 *   W  re-exchanges (nothing more saved): LN2's output (recomputed by the caller)
 *      permuted at home and sent to the experts' ranks again, as in F.
 * Each alltoallv moves act_dtype rows of h; a kept slot whose expert is on another rank
 * travels 5 times (F there and back, B there and back, W there), a local one is copied.
 * The saved entry is the allgather path's, byte for byte (ppsc sim's): eout's M rows hold
 * the expert side's rows (at most min(X N K, E cap)) and this rank's home rows (at most
 * min(N K, E cap)) in turn; w, idx and pos use block j only. Scratch (uncounted): the
 * rows sent [N K, h] and received [M, h] instead of the [X N, h] gathers and F32 sums.
 * Losses equal X = 1's and the allgather's (tests/runtime/ep_a2a.sh: 1e-6 on the CPU).
 * Not run on a GPU: the CUDA path has run only on the emulator (tests/gpu/moe_emu.sh).
 * What it does not: a capacity factor under --context-parallel
 * (refused: cli.c), padding to capacity, grouped GEMMs; the shared expert is the dense MLP's
 * code in model_gpt.c, beside this. */
#include "config.h"
#include "moe.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS PPSRT_STREAM_COMPUTE
#define TRY(e)                   \
  do {                           \
    int rc_ = (e);               \
    if (rc_) return rc_;         \
  } while (0)

int ppsrt_moe_topk(const ppsrt_model_config *cfg) { return cfg->moe_topk > 0 ? cfg->moe_topk : 2; }

int ppsrt_moe_ffn(const ppsrt_model_config *cfg) {
  if (cfg->moe_ffn_hidden > 0) return cfg->moe_ffn_hidden;
  if (cfg->ffn_hidden > 0) return cfg->ffn_hidden;
  int64_t h = cfg->hidden;   /* (ppsrt_gpt_ffn's defaults, without depending on model_gpt.c) */
  if (!cfg->swiglu) return 4 * h > INT32_MAX ? INT32_MAX : (int)(4 * h);
  int64_t f = 8 * h / 3 / 64 * 64;
  if (!f) f = 8 * h / 3 / 8 * 8;
  return f < 8 ? 8 : f > INT32_MAX ? INT32_MAX : (int)f;
}

/* The router's flags (Megatron-Core's rules: pre-softmax is the softmax's, the expert
 * bias the sigmoid's, the bias's update rate needs the bias). */
static int router_check(const ppsrt_model_config *cfg) {
  if (cfg->moe_router_sigmoid && cfg->moe_router_pre_softmax)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-pre-softmax applies the softmax before the top-K: it needs "
                      "--moe-router-score-function softmax, not sigmoid");
  if (cfg->moe_expert_bias && !cfg->moe_router_sigmoid)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-enable-expert-bias needs --moe-router-score-function sigmoid "
                      "(as Megatron-Core's)");
  if (cfg->moe_bias_rate != 0 && !cfg->moe_expert_bias)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-bias-update-rate sets the rate of --moe-router-enable-expert-bias: "
                      "add it");
  if (cfg->moe_router_scale != 0 && !(cfg->moe_router_scale > 0 && cfg->moe_router_scale <= 1e6))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-topk-scaling-factor must be a number above 0 (at most 1e6), "
                      "got %g", cfg->moe_router_scale);
  if (!(cfg->moe_z_coeff >= 0 && isfinite(cfg->moe_z_coeff)))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-z-loss-coeff must be a number from 0, got %g", cfg->moe_z_coeff);
  if (!(cfg->moe_bias_rate >= 0 && cfg->moe_bias_rate <= 1))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-bias-update-rate must be a number above 0 (at most 1), got %g",
                      cfg->moe_bias_rate);
  return 0;
}

int ppsrt_moe_check_config(const ppsrt_model_config *cfg) {
  int E = cfg->num_experts;
  if (!E) {
    if (cfg->moe_topk || cfg->moe_ffn_hidden || cfg->moe_aux_coeff != 0 || cfg->moe_capacity != 0)
      return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-topk, --moe-ffn-hidden, --moe-aux-loss-coeff and "
                        "--moe-expert-capacity-factor set up the experts of --num-experts\nhint: add --num-experts E (2 or more)");
    if (cfg->moe_router_sigmoid || cfg->moe_router_pre_softmax || cfg->moe_router_scale != 0 || cfg->moe_z_coeff != 0 ||
        cfg->moe_expert_bias || cfg->moe_bias_rate != 0)
      return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-router-score-function, --moe-router-pre-softmax, "
                        "--moe-router-topk-scaling-factor, --moe-z-loss-coeff and --moe-router-enable-expert-bias set up "
                        "the router of --num-experts\nhint: add --num-experts E (2 or more)");
    return 0;
  }
  if (E < 2 || E > 1024)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --num-experts must be from 2 to 1024, got %d", E);
  int K = ppsrt_moe_topk(cfg);
  if (K < 1 || K > E)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-topk must be from 1 to --num-experts %d, got %d", E, K);
  int F = ppsrt_moe_ffn(cfg);
  if (F <= 0) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-ffn-hidden must be positive, got %d", F);
  if (cfg->tp > 1 && F % cfg->tp)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --tensor-parallel %d must divide the experts' width %d (--moe-ffn-hidden): each "
                      "rank takes F/T of every expert's columns", cfg->tp, F);
  if (!(cfg->moe_aux_coeff >= 0 && isfinite(cfg->moe_aux_coeff)))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-aux-loss-coeff must be a number from 0, got %g", cfg->moe_aux_coeff);
  TRY(router_check(cfg));
  if (cfg->moe_capacity != 0 && !(cfg->moe_capacity > 0 && cfg->moe_capacity <= 1e6))
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --moe-expert-capacity-factor must be a number above 0 (at most 1e6), got %g",
                      cfg->moe_capacity);
  int64_t fw = (int64_t)F * (cfg->swiglu ? 2 : 1), w = fw > cfg->hidden ? fw : cfg->hidden;
  int64_t X = cfg->ep > 1 ? cfg->ep : 1, slots = (int64_t)cfg->seq * cfg->micro_batch * K * X;
  if (E % X)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --expert-parallel %lld must divide --num-experts %d: each rank of an "
                      "expert-parallel group holds E/X experts", (long long)X, E);
  if (w > 0 && slots > INT32_MAX / w)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --seq %d x --micro-batch %d tokens x --moe-topk %d x --expert-parallel %lld x "
                      "width %lld is over %d elements per tensor", cfg->seq, cfg->micro_batch, K, (long long)X, (long long)w,
                      INT32_MAX);
  if ((int64_t)cfg->seq * cfg->micro_batch > INT32_MAX / E || (int64_t)cfg->hidden * fw > INT32_MAX)
    return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: --num-experts %d with --hidden %d and width %d makes a tensor over %d elements", E,
                      cfg->hidden, F, INT32_MAX);
  return 0;
}

static size_t up(size_t b) { return (b + 255) / 256 * 256; }   /* parts of the saved buffer, 256-byte aligned */

int64_t ppsrt_moe_capacity(const ppsrt_model_config *cfg, int N) {
  if (!(cfg->moe_capacity > 0) || !cfg->num_experts) return 0;
  double c = ceil(cfg->moe_capacity * N * ppsrt_moe_topk(cfg) / cfg->num_experts);
  return c > (double)N ? N : (int64_t)c;   /* (a token takes an expert at most once: a cap above N drops nothing) */
}

int64_t ppsrt_moe_rows(const ppsrt_model_config *cfg, int N) {
  int64_t X = cfg->ep > 1 ? cfg->ep : 1, all = X * N * ppsrt_moe_topk(cfg), cap = ppsrt_moe_capacity(cfg, N);
  return cap > 0 && (int64_t)cfg->num_experts * cap < all ? (int64_t)cfg->num_experts * cap : all;
}

int ppsrt_moe_init(ppsrt_moe *mo, const ppsrt_model_config *cfg, ppsrt_dtype at, int N, int n, int r0, int tp, int nslot) {
  memset(mo, 0, sizeof *mo);
  mo->E = cfg->num_experts; mo->K = ppsrt_moe_topk(cfg); mo->F = ppsrt_moe_ffn(cfg);
  mo->cp = cfg->cp > 1 ? cfg->cp : 1; mo->cpr = mo->cp > 1 ? cfg->cp_rank : 0;
  mo->tp = tp > 1 ? tp : 1; mo->f = mo->F / mo->tp; mo->sw = cfg->swiglu != 0; mo->fw = mo->f * (mo->sw ? 2 : 1);
  mo->bias = !cfg->no_bias; mo->N = N; mo->n = n; mo->r0 = r0; mo->h = cfg->hidden; mo->nc = cfg->no_compute;
  mo->nmb = cfg->nmb; mo->nslot = nslot; mo->es = ppsrt_dtype_size(at); mo->coeff = cfg->moe_aux_coeff;
  mo->X = cfg->ep > 1 ? cfg->ep : 1; mo->j = mo->X > 1 ? cfg->ep_rank : 0;
  mo->El = mo->E / mo->X; mo->e0 = mo->j * mo->El;
  mo->cap = (int)ppsrt_moe_capacity(cfg, N); mo->dpos = cfg->moe_drop_position != 0;
  mo->M = (int)ppsrt_moe_rows(cfg, N);
  mo->a2a = cfg->moe_a2a && mo->X > 1;
  /* the row-indexed parts hold M rows: dropless the group's X N K gathered slots (every
   * one of them may be routed to this rank's experts), with a capacity at most E cap
   * (each of the X ranks sends an expert at most cap slots: X cap a local expert); the
   * slot-indexed ones (w, idx, pos) every gathered slot's routing */
  size_t NK = (size_t)N * mo->K * mo->X, NE = (size_t)N * mo->E, M = (size_t)mo->M, o = 0;
  mo->o_hpre = o; o += up(M * mo->fw * mo->es);
  mo->o_hact = o; o += up(M * mo->f * mo->es);
  mo->o_eout = o; o += up(M * mo->h * mo->es);
  mo->o_w = o; o += up(NK * sizeof(float));
  mo->o_idx = o; o += up(NK * sizeof(int32_t));
  mo->o_pos = o; o += up(NK * sizeof(int32_t));
  mo->o_lg = o; o += up(NE * sizeof(float));   /* (the logits: the routing's backward recomputes its scores) */
  mo->o_dlog = o; o += up(NE * mo->es);
  mo->o_coef = o; o += mo->coeff > 0 ? up((size_t)mo->E * sizeof(float)) : 0;
  mo->bytes = o;
  /* the router's options (ppsrt_moe_router; the expert bias per layer of the device) */
  mo->zcoeff = cfg->moe_z_coeff;
  mo->rt.sigmoid = cfg->moe_router_sigmoid != 0; mo->rt.pre_softmax = cfg->moe_router_pre_softmax != 0;
  mo->rt.scale = cfg->moe_router_scale > 0 ? (float)cfg->moe_router_scale : 1.0f;
  mo->ebias = cfg->moe_expert_bias != 0; mo->bias_rate = cfg->moe_bias_rate > 0 ? cfg->moe_bias_rate : 1e-3;
  mo->nl = cfg->nmb > 0 && nslot >= cfg->nmb ? nslot / cfg->nmb : 1;
  mo->cnt = calloc((size_t)(nslot > 0 ? nslot : 1) * mo->E, sizeof *mo->cnt);
  mo->shash = calloc((size_t)(nslot > 0 ? nslot : 1), sizeof *mo->shash);
  mo->hcp = malloc((size_t)mo->cp * (2 * mo->E + 1) * sizeof *mo->hcp);
  mo->hidx = malloc(NK * sizeof *mo->hidx);
  mo->hpos = malloc(NK * sizeof *mo->hpos);
  mo->hw = mo->cap > 0 ? malloc(NK * sizeof *mo->hw) : NULL;
  mo->hord = mo->cap > 0 ? malloc((size_t)N * mo->K * sizeof *mo->hord) : NULL;
  mo->hstat = malloc((3 * (size_t)mo->E + 1) * sizeof *mo->hstat);   /* stat [2E + 1], coef [E] */
  mo->hcoef = mo->hstat ? mo->hstat + 2 * mo->E + 1 : NULL;
  if (mo->ebias) {
    mo->hbias = calloc((size_t)mo->nl * mo->E, sizeof *mo->hbias);
    mo->hload = calloc((size_t)mo->nl * mo->E, sizeof *mo->hload);
  }
  mo->ocnt = calloc((size_t)mo->E, sizeof *mo->ocnt);
  mo->acnt = mo->a2a ? calloc((size_t)(nslot > 0 ? nslot : 1) * mo->X * mo->E, sizeof *mo->acnt) : NULL;
  mo->av = mo->a2a ? calloc(4 * (size_t)mo->X, sizeof *mo->av) : NULL;
  mo->fault = cfg->moe_record == 2 && (!cfg->moe_fault_replica || cfg->moe_fault_replica == cfg->replica + 1) &&
              (!cfg->moe_fault_cp || cfg->moe_fault_cp == cfg->cp_rank + 1);   /* (PPSRT_FAULT=route[@...], check.c) */
  mo->rec = cfg->moe_record ? malloc((size_t)(nslot > 0 ? nslot : 1) * mo->N * mo->K * sizeof *mo->rec) : NULL;
  if ((cfg->moe_record && !mo->rec) || !mo->cnt || !mo->shash || !mo->hcp || !mo->hidx || !mo->hpos || !mo->hstat || !mo->ocnt ||
      (mo->cap > 0 && (!mo->hw || !mo->hord)) || (mo->ebias && (!mo->hbias || !mo->hload)) ||
      (mo->a2a && (!mo->acnt || !mo->av))) {
    ppsrt_moe_free(mo);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory (experts)");
  }
  return 0;
}

void ppsrt_moe_free(ppsrt_moe *mo) {
  if (mo->dbias && mo->dbe) mo->dbe->free(mo->dbe, mo->dbias);
  free(mo->hbias); free(mo->hload); mo->hbias = mo->dbias = mo->hload = NULL;
  free(mo->hw); free(mo->hord); mo->hw = NULL; mo->hord = NULL;
  free(mo->acnt); free(mo->av); mo->acnt = NULL; mo->av = NULL;
  free(mo->cnt); free(mo->shash); free(mo->hcp); mo->hcp = NULL; free(mo->hidx); free(mo->hpos); free(mo->hstat); free(mo->ocnt);
  mo->cnt = mo->ocnt = NULL; mo->shash = NULL; mo->hidx = mo->hpos = NULL; mo->hstat = mo->hcoef = NULL;
  if (mo->dforce && mo->fbe) mo->fbe->free(mo->fbe, mo->dforce);
  free(mo->rec); free(mo->ohash); free(mo->hforce); free(mo->orec);
  mo->rec = mo->dforce = mo->hforce = mo->orec = NULL; mo->ohash = NULL; mo->replay = NULL;
}

int ppsrt_moe_set_replay(ppsrt_moe *mo, const int32_t *rec) {
  if (mo->X > 1 || mo->cp > 1) return PPSRT_FAIL(PPSRT_E_USAGE, "gpt: the routing's replay is --check's reference's (X = C = 1)");
  size_t NK = (size_t)mo->N * mo->K;
  for (size_t i = 0; i < (size_t)mo->nslot * NK; i++)
    if (rec[i] < 0 || rec[i] >= 2 * mo->E)
      return PPSRT_FAIL(PPSRT_E_USAGE, "--check: the pipeline's routing to replay names expert %d of %d", rec[i], mo->E);
  free(mo->ohash); free(mo->hforce); free(mo->orec);
  mo->ohash = calloc((size_t)(mo->nslot > 0 ? mo->nslot : 1), sizeof *mo->ohash);
  mo->hforce = malloc(NK * sizeof *mo->hforce);
  mo->orec = mo->rec ? calloc((size_t)(mo->nslot > 0 ? mo->nslot : 1) * NK, sizeof *mo->orec) : NULL;
  if (!mo->ohash || !mo->hforce || (mo->rec && !mo->orec)) return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory (experts)");
  mo->replay = rec;
  return 0;
}

/* ---- parameters: router.w, then per expert fc.w, (fc.b,) fc2.w, (fc2.b) ---- */

static int per_expert(const ppsrt_moe *mo) { return mo->bias ? 4 : 2; }
int ppsrt_moe_nparams(const ppsrt_moe *mo) { return 1 + mo->El * per_expert(mo); }
int ppsrt_moe_param_expert(const ppsrt_moe *mo, int j) { return j > 0 && mo->X > 1; }

/* Which parameter j is: the router (-1), else expert *e's (global index) kind 0 fc.w, 1
 * fc.b, 2 fc2.w, 3 fc2.b. */
static int param_kind(const ppsrt_moe *mo, int j, int *e) {
  if (j == 0) { *e = -1; return -1; }
  int pe = per_expert(mo), k = (j - 1) % pe;
  *e = mo->e0 + (j - 1) / pe;
  return mo->bias ? k : 2 * k;
}

void ppsrt_moe_param(const ppsrt_moe *mo, int j, int tpr, char *name, size_t len, size_t *n, size_t *full,
                     ppsrt_param *sl, int *zero, float *scale, int *out_layer, int *no_decay) {
  int e, k = param_kind(mo, j, &e), T = mo->tp;
  size_t h = (size_t)mo->h, F = (size_t)mo->F, fw = F * (mo->sw ? 2 : 1);
  static const char *const kn[4] = {"fc.w", "fc.b", "fc2.w", "fc2.b"};
  memset(sl, 0, sizeof *sl);
  *zero = k == 1 || k == 3;
  *no_decay = *zero;
  *scale = sqrtf(3.0f / (float)(k == 2 ? F : h));   /* uniform(+-sqrt(3 / fan_in)) */
  *out_layer = k == 2;
  if (k < 0) {
    snprintf(name, len, "moe.router.w");
    *n = *full = h * (size_t)mo->E;
    return;
  }
  snprintf(name, len, "moe.e%d.%s", e, kn[k]);
  size_t sizes[4] = {h * fw, fw, F * h, h};
  *n = *full = sizes[k];
  if (T == 1 || k == 3) return;
  if (k <= 1) {   /* FC1 by output columns (SwiGLU: rank t's of the gate, then of the up half) */
    sl->tp_split = 2; sl->tp_n = mo->sw ? 2 : 1; sl->tp_R = k == 0 ? h : 1; sl->tp_C = fw;
    sl->tp_lo[0] = tpr * F / T; sl->tp_len[0] = F / T;
    if (mo->sw) { sl->tp_lo[1] = F + tpr * F / T; sl->tp_len[1] = F / T; }
    *n = sl->tp_R * (size_t)mo->fw;
  } else {        /* FC2 by input rows */
    sl->tp_split = 1; sl->tp_n = 1; sl->tp_R = F; sl->tp_C = h;
    sl->tp_lo[0] = tpr * F / T; sl->tp_len[0] = F / T;
    *n = (F / T) * h;
  }
}

/* expert e's (global index, one of this rank's) parameter of kind k (0 fc.w, 1 fc.b, 2
 * fc2.w, 3 fc2.b; NULL: no biases) */
static ppsrt_param *EP(const ppsrt_moe *mo, ppsrt_param *P, int e, int k) {
  if (!mo->bias && (k & 1)) return NULL;
  return &P[1 + (e - mo->e0) * per_expert(mo) + (mo->bias ? k : k / 2)];
}

/* ---- helpers ---- */

/* local expert e's first permuted row (the counts of this rank's experts before it) */
static int first_row(const ppsrt_moe *mo, const int *cnt, int e) {
  int o = 0;
  for (int j = mo->e0; j < e; j++) o += cnt[j];
  return o;
}
/* the rows of this rank's experts (the permuted buffer's first rows; the other experts'
 * slots follow, their rows zero in eout and in the input gradient) */
static int local_rows(const ppsrt_moe *mo, const int *cnt) { return first_row(mo, cnt, mo->e0 + mo->El); }

/* the buffers of a layer's saved entry */
typedef struct mbuf {
  char *hpre, *hact, *eout, *dlog;
  float *w, *lg, *coef;   /* lg: the router's logits (F32 [N, E]); coef: NULL without the load-balancing loss */
  int32_t *idx, *pos;
} mbuf;
static mbuf parts(const ppsrt_moe *mo, void *buf) {
  char *b = buf;
  mbuf m = {b + mo->o_hpre, b + mo->o_hact, b + mo->o_eout, b + mo->o_dlog, (float *)(b + mo->o_w),
            (float *)(b + mo->o_lg), mo->coeff > 0 ? (float *)(b + mo->o_coef) : NULL, (int32_t *)(b + mo->o_idx),
            (int32_t *)(b + mo->o_pos)};
  return m;
}

/* rows x expert e's out columns: C = A W (+ bias), A [rows, K] at row r0, per expert */
static int expert_gemm(ppsrt_backend *be, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B,
                       int ldb, float beta, void *C, ppsrt_dtype ct, int ldc) {
  if (M <= 0) return 0;
  return be->gemm(be, CS, ta, tb, M, N, K, 1.0f, A, be->act_dtype, lda, B, be->act_dtype, ldb, beta, C, ct, ldc);
}

/* --context-parallel with the load-balancing loss or the z-loss: every rank's own slot
 * counts a expert, score sums and z-loss sum (2E + 1 floats) all-gathered over the group
 * into mo->hcp ([C][2E + 1]). */
static int cp_counts(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, const int *own) {
  int E = mo->E;
  size_t blk = (2 * (size_t)E + 1) * sizeof(float);
  float *mine = mo->hcp + (size_t)mo->cpr * (2 * E + 1), *d;
  for (int e = 0; e < E; e++) { mine[e] = (float)own[e]; mine[E + e] = mo->hstat[E + e]; }
  mine[2 * E] = mo->hstat[2 * E];
  TRY(be->alloc(be, blk * mo->cp, (void **)&d));
  int rc = be->memcpy_async(be, CS, (char *)d + mo->cpr * blk, mine, blk, 1);
  if (!rc) rc = ppsrt_cp_allgather(c, (char *)d + mo->cpr * blk, d, blk);
  if (!rc) rc = be->memcpy_async(be, CS, mo->hcp, d, blk * mo->cp, 2);
  if (!rc) rc = be->stream_sync(be, CS);
  be->free(be, d);
  return rc;
}

/* ---- capacity: which slots an expert over its capacity drops ---- */

static int by_probs(const void *a_, const void *b_) {   /* by expert, the largest weight first, ties the lower slot */
  const struct ppsrt_moe_ord *a = a_, *b = b_;
  if (a->e != b->e) return a->e < b->e ? -1 : 1;
  if (a->w != b->w) return a->w > b->w ? -1 : 1;
  return (a->s > b->s) - (a->s < b->s);
}
static int by_position(const void *a_, const void *b_) {   /* by expert, then token order */
  const struct ppsrt_moe_ord *a = a_, *b = b_;
  if (a->e != b->e) return a->e < b->e ? -1 : 1;
  return (a->s > b->s) - (a->s < b->s);
}

/* With a capacity: each rank's block of the X N K gathered slots (its own N tokens', as
 * Megatron-Core drops before the dispatch) keeps at most cap slots an expert, in
 * mo->hpos: 0 kept, -1 dropped. The same on every rank of the group (the same gathered
 * indices and weights). Slot s = n K + k: slot order is token order. */
void ppsrt_moe_drop(struct ppsrt_moe_ord *o, const int32_t *idx, const float *w, size_t NK, int cap, int by_pos,
                    int32_t *mark) {
  for (size_t i = 0; i < NK; i++) { o[i].e = idx[i]; o[i].s = (int)i; o[i].w = w[i]; }
  qsort(o, NK, sizeof *o, by_pos ? by_position : by_probs);
  for (size_t i = 0, run = 0; i < NK; i++) {
    run = i && o[i].e == o[i - 1].e ? run + 1 : 0;
    mark[o[i].s] = run < (size_t)cap ? 0 : -1;
  }
}
static void drop_over_capacity(ppsrt_moe *mo) {
  size_t NK = (size_t)mo->N * mo->K;
  for (int q = mo->a2a ? mo->j : 0; q < (mo->a2a ? mo->j + 1 : mo->X); q++)   /* (alltoall: this rank's block alone) */
    ppsrt_moe_drop(mo->hord, mo->hidx + NK * q, mo->hw + NK * q, NK, mo->cap, mo->dpos, mo->hpos + NK * q);
}

/* --check's reference (mo->replay): the capacity's drops as the pipeline's (X = 1: one block) */
static void replay_drops(ppsrt_moe *mo, int slot) {
  size_t NK = (size_t)mo->N * mo->K;
  const int32_t *r = mo->replay + (size_t)slot * NK;
  for (size_t s = 0; s < NK; s++) mo->hpos[s] = r[s] >= mo->E ? -1 : 0;
}

/* The hash of one rank's routing (FNV-1a over its N K slots in token order: expert e, or
 * E + e dropped), shash's. */
static uint64_t route_hash_of(const int32_t *idx, const int32_t *pos, size_t NK, int E) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t s = 0; s < NK; s++) h = (h ^ ((uint64_t)idx[s] + (pos[s] < 0 ? (uint64_t)E : 0))) * 0x100000001b3ull;
  return h;
}

/* ---- the all-to-all dispatcher (--moe-token-dispatcher alltoall, X > 1) ---- */

/* The routing's exchange: cnt (this rank's kept slots a expert) gives the positions of
 * this rank's own slots in its dispatch's send rows (by expert, so by destination rank;
 * slot order kept; a dropped slot -1), uploaded to b->pos block j; then every rank's
 * counts are all-gathered (X x E int32, one more synchronisation) into acnt[slot], and
 * cnt becomes the group's kept slots a expert (this rank's experts' rows). */
static int a2a_route(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, mbuf *b) {
  int E = mo->E, X = mo->X, *cnt = mo->cnt + (size_t)slot * E, *ac = mo->acnt + (size_t)slot * X * E, next[1024];
  size_t NK = (size_t)mo->N * mo->K, j0 = NK * mo->j, blk = (size_t)E * sizeof(int32_t);
  int away = 0;   /* (the kept slots that leave this rank: --json's ep_alltoall) */
  for (int e = 0, o = 0; e < E; e++) {
    next[e] = o;
    o += cnt[e];
    if (e < mo->e0 || e >= mo->e0 + mo->El) away += cnt[e];
  }
  ppsrt_ep_count_slots(c, away);
  for (size_t s = j0; s < j0 + NK; s++) mo->hpos[s] = mo->hpos[s] >= 0 ? next[mo->hidx[s]]++ : -1;
  TRY(be->memcpy_async(be, CS, b->pos + j0, mo->hpos + j0, NK * sizeof(int32_t), 1));
  int32_t *h = malloc(blk * X), *d = NULL;
  if (!h) return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory (experts)");
  for (int e = 0; e < E; e++) h[(size_t)mo->j * E + e] = cnt[e];
  int rc = be->alloc(be, blk * X, (void **)&d);
  if (!rc) rc = be->memcpy_async(be, CS, (char *)d + mo->j * blk, h + (size_t)mo->j * E, blk, 1);
  if (!rc) rc = ppsrt_ep_allgather(c, (char *)d + mo->j * blk, d, blk);
  if (!rc) rc = be->memcpy_async(be, CS, h, d, blk * X, 2);
  if (!rc) rc = be->stream_sync(be, CS);
  if (d) be->free(be, d);
  for (int e = 0; e < E && !rc; e++) {
    cnt[e] = 0;
    for (int q = 0; q < X; q++) cnt[e] += ac[(size_t)q * E + e] = h[(size_t)q * E + e];
  }
  free(h);
  return rc;
}

/* The sizes (bytes: rows of `row` bytes) of a dispatch from the slots' ranks to their
 * experts' (ret 0), or of its return (ret 1), into mo->av (send sizes [X], places [X],
 * receive sizes [X], places [X]): the slot's ranks send each rank q their slots of q's
 * experts, by expert; the experts' rank receives from each q its slots of this rank's
 * experts, by expert. */
static void a2a_sizes(ppsrt_moe *mo, int slot, size_t row, int ret) {
  int E = mo->E, X = mo->X, El = mo->El;
  const int *ac = mo->acnt + (size_t)slot * X * E, *mine = ac + (size_t)mo->j * E;
  size_t *home = mo->av + (ret ? 2 * X : 0), *exp = mo->av + (ret ? 0 : 2 * X), oh = 0, ox = 0;
  for (int q = 0; q < X; q++) {
    size_t nh = 0, nx = 0;
    for (int e = 0; e < El; e++) { nh += (size_t)mine[q * El + e]; nx += (size_t)ac[(size_t)q * E + mo->e0 + e]; }
    home[q] = nh * row; home[X + q] = oh; oh += home[q];
    exp[q] = nx * row; exp[X + q] = ox; ox += exp[q];
  }
}
static int a2a(ppsrt_moe *mo, ppsrt_ctx *c, int slot, size_t row, int ret, const void *send, void *recv) {
  size_t X = (size_t)mo->X, *v = mo->av;
  a2a_sizes(mo, slot, row, ret);
  return ppsrt_ep_alltoallv(c, send, v, v + X, recv, v + 2 * X, v + 3 * X);
}

/* The rows received (by source rank, then by local expert) to the experts' order (by
 * local expert, then source rank: each expert's rows contiguous, first_row's), back 0;
 * or back (1). Chunk copies on the compute stream. */
static int a2a_reorder(ppsrt_moe *mo, ppsrt_backend *be, int slot, char *dst, const char *src, int back) {
  int E = mo->E, X = mo->X, e1 = mo->e0 + mo->El;
  const int *ac = mo->acnt + (size_t)slot * X * E, *cnt = mo->cnt + (size_t)slot * E;
  size_t row = (size_t)mo->h * mo->es, at = 0;
  for (int q = 0; q < X; q++)
    for (int e = mo->e0; e < e1; e++) {
      size_t n = (size_t)ac[(size_t)q * E + e], r = (size_t)first_row(mo, cnt, e);
      if (!n) continue;
      for (int p = 0; p < q; p++) r += (size_t)ac[(size_t)p * E + e];
      TRY(be->memcpy_async(be, CS, dst + (back ? at : r) * row, src + (back ? r : at) * row, n * row, 0));
      at += n;
    }
  return 0;
}

/* The routing of the slot's tokens: with --expert-parallel the group's top-K indices and
 * weights all-gathered first (this rank's in block j); device indices to the host,
 * counts (of the gathered slots, and of this rank's own for the load-balancing loss),
 * the permutation (this rank's experts first, each in slot order, then every other
 * slot in slot order) and the load-balancing loss's gradient coefficients back to the
 * device (kept for B: no transfer there); the load-balancing loss and the z-loss; with
 * the expert bias the kept slots of this rank's tokens counted in the layer's loads. */
static int route_host(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, mbuf *b, const float *stat,
                      int count_loss) {
  int N = mo->N, K = mo->K, E = mo->E, *cnt = mo->cnt + (size_t)slot * E, *own = mo->ocnt;
  size_t NK = (size_t)N * K, XNK = NK * mo->X, j0 = NK * mo->j;
  /* the slots this rank sees: the group's (allgather), this rank's own (alltoall, X = 1) */
  size_t s0 = mo->a2a ? j0 : 0, s1 = mo->a2a ? j0 + NK : XNK;
  if (mo->X > 1 && !mo->a2a) {   /* (in place: this rank's block) */
    TRY(ppsrt_ep_allgather(c, b->idx + j0, b->idx, NK * sizeof(int32_t)));
    TRY(ppsrt_ep_allgather(c, b->w + j0, b->w, NK * sizeof(float)));
  }
  TRY(be->memcpy_async(be, CS, mo->hidx + s0, b->idx + s0, (s1 - s0) * sizeof(int32_t), 2));
  TRY(be->memcpy_async(be, CS, mo->hstat, stat, (2 * (size_t)E + 1) * sizeof(float), 2));
  if (mo->cap > 0) TRY(be->memcpy_async(be, CS, mo->hw + s0, b->w + s0, (s1 - s0) * sizeof(float), 2));
  TRY(be->stream_sync(be, CS));   /* the one synchronisation: the GEMMs' sizes */
  memset(cnt, 0, (size_t)E * sizeof *cnt);
  memset(own, 0, (size_t)E * sizeof *own);
  for (size_t s = s0; s < s1; s++) {
    int e = mo->hidx[s];
    if (e < 0 || e >= E) return PPSRT_FAIL(PPSRT_E_BACKEND, "gpt: routing gave expert %d of %d (not a number in the router's logits?)", e, E);
    if (s >= j0 && s < j0 + NK) own[e]++;   /* (before any dropping: the load-balancing loss's, as Megatron's) */
  }
  if (mo->ebias)   /* the load-balancing loss counts the routing without the bias (Megatron-Core's) */
    for (int e = 0; e < E; e++) own[e] = (int)mo->hstat[e];
  if (mo->cap > 0 && mo->replay) replay_drops(mo, slot);
  else if (mo->cap > 0) drop_over_capacity(mo);
  else memset(mo->hpos + s0, 0, (s1 - s0) * sizeof *mo->hpos);
  for (size_t s = s0; s < s1; s++)
    if (mo->hpos[s] >= 0) cnt[mo->hidx[s]]++;   /* the kept slots: the experts' rows */
  float *load = mo->ebias && count_loss ? mo->hload + (size_t)(slot % mo->nl) * E : NULL;
  for (size_t s = j0; load && s < j0 + NK; s++)   /* the expert bias's loads: this rank's tokens' kept slots */
    if (mo->hpos[s] >= 0) load[mo->hidx[s]] += 1.0f;
  uint64_t sh = 0xcbf29ce484222325ull;   /* the slot's own tokens' hash (FNV-1a), for --check's routing comparison */
  for (size_t s = j0; s < j0 + NK; s++) {
    /* (a dropped slot counts as expert E + e: the reference must drop the same) */
    uint64_t v = (uint64_t)mo->hidx[s] + (mo->hpos[s] < 0 ? (uint64_t)E : 0);
    mo->route_hash = (mo->route_hash ^ v) * 0x100000001b3ull;   /* FNV-1a step */
    sh = (sh ^ v) * 0x100000001b3ull;
    if (mo->rec) mo->rec[(size_t)slot * NK + (s - j0)] = (int32_t)v;   /* (--check's replay) */
  }
  mo->shash[slot] = sh;
  if (mo->a2a) TRY(a2a_route(mo, c, be, slot, b));   /* (alltoall: the send rows' positions, the counts exchanged) */
  else {
    /* positions: this rank's experts' kept slots first (by expert, slot order kept); every
     * other slot dropless after them (rows zeroed), with a capacity -1 (the kernels skip
     * it: no row, nothing combined, no gradient), as a dropped slot is */
    int next[1024], rest = local_rows(mo, cnt), e1 = mo->e0 + mo->El;
    for (int e = mo->e0, o = 0; e < e1; e++) { next[e] = o; o += cnt[e]; }
    for (size_t s = 0; s < XNK; s++) {
      int e = mo->hidx[s], kept = mo->hpos[s] >= 0;
      mo->hpos[s] = kept && e >= mo->e0 && e < e1 ? next[e]++ : mo->cap > 0 ? -1 : rest++;
    }
    TRY(be->memcpy_async(be, CS, b->pos, mo->hpos, XNK * sizeof(int32_t), 1));
  }
  /* the load-balancing loss's f_e (slots routed to e over all slots) and P_e (mean
   * probability of e): of this rank's N tokens, or with --context-parallel of the C ranks'
   * C N tokens of the same sequences (as at C = 1: every rank's loss is the whole one) */
  double *fe = mo->coeff > 0 ? calloc(2 * (size_t)E, sizeof *fe) : NULL, *pe = fe ? fe + E : NULL, zs = 0;
  if (mo->coeff > 0 && !fe) return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory (experts)");
  if (mo->cp > 1 && (fe || mo->zcoeff > 0)) {
    int rc = cp_counts(mo, c, be, own);
    if (rc) { free(fe); return rc; }
  }
  for (int q = 0; q < mo->cp; q++) {   /* the z-loss's sum_n lse_n^2 over the C N tokens */
    const float *r = mo->cp > 1 ? mo->hcp + (size_t)q * (2 * E + 1) : mo->hstat;
    zs += r[2 * E];
  }
  if (fe) {
    for (int e = 0; e < E; e++)
      for (int q = 0; q < mo->cp; q++) {
        const float *r = mo->cp > 1 ? mo->hcp + (size_t)q * (2 * E + 1) : NULL;
        fe[e] += (r ? r[e] : own[e]) / ((double)NK * mo->cp);
        pe[e] += (r ? r[E + e] : mo->hstat[E + e]) / ((double)N * mo->cp);
      }
  }
  if (b->coef) {   /* d(a E sum_e f_e P_e) / d prob[n, e], the loss a mean over microbatches (and the C ranks) */
    for (int e = 0; e < E; e++) mo->hcoef[e] = (float)(mo->coeff * E * fe[e] / N / mo->nmb);
    TRY(be->memcpy_async(be, CS, b->coef, mo->hcoef, (size_t)E * sizeof(float), 1));
  }
  /* (no wait for these uploads: hpos and hcoef are written again only by the next
   * routing, after its synchronisation above has drained the stream, uploads included) */
  if (count_loss && fe) {
    double s = 0;
    for (int e = 0; e < E; e++) s += fe[e] * pe[e];
    mo->aux_loss += mo->coeff * E * s / mo->nmb;
  }
  /* the z-loss Z mean_n lse_n^2 (the C N tokens'), a mean over microbatches as the
   * load-balancing loss (its gradient: moe_route_bwd's zcoef) */
  if (count_loss && mo->zcoeff > 0) {
    double z = mo->zcoeff * zs / ((double)N * mo->cp) / mo->nmb;
    mo->z_loss += z;
    mo->aux_loss += z;
  }
  free(fe);
  return 0;
}

/* The router's options for the layer of `slot`: the flags', its expert bias (the device
 * copy, made on the first call), the z-loss's gradient factor 2 Z / (N nmb) (the loss a
 * mean over the microbatches; under --context-parallel as the load-balancing loss's: per
 * rank's N tokens). */
static int router_of(ppsrt_moe *mo, ppsrt_backend *be, int slot, ppsrt_moe_router *r) {
  *r = mo->rt;
  r->zcoef = mo->zcoeff > 0 ? (float)(2.0 * mo->zcoeff / ((double)mo->N * mo->nmb)) : 0.0f;
  if (!mo->ebias) return 0;
  if (!mo->dbias) TRY(ppsrt_moe_bias_sync(mo, be));
  r->bias = mo->dbias + (size_t)(slot % mo->nl) * mo->E;
  return 0;
}

float *ppsrt_moe_bias(ppsrt_moe *mo, int l) { return mo->hbias ? mo->hbias + (size_t)l * mo->E : NULL; }

int ppsrt_moe_bias_sync(ppsrt_moe *mo, ppsrt_backend *be) {
  size_t bytes = (size_t)mo->nl * mo->E * sizeof(float);
  if (!mo->ebias) return 0;
  if (!mo->dbias) {
    TRY(be->alloc(be, bytes, (void **)&mo->dbias));
    mo->dbe = be;
  }
  TRY(be->memcpy_async(be, CS, mo->dbias, mo->hbias, bytes, 1));
  return be->stream_sync(be, CS);
}

int ppsrt_moe_update_bias(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be) {
  int E = mo->E;
  if (!mo->ebias) return 0;
  TRY(ppsrt_replica_allreduce_host(c, mo->hload, (size_t)mo->nl * E));
  for (int l = 0; l < mo->nl; l++) {
    const float *load = mo->hload + (size_t)l * E;
    float *bias = mo->hbias + (size_t)l * E;
    double mean = 0;
    for (int e = 0; e < E; e++) mean += load[e];
    mean /= E;
    for (int e = 0; e < E; e++) {   /* an expert over the mean gets its bias lowered */
      double off = mean - load[e];
      bias[e] += (float)(mo->bias_rate * (off > 0 ? 1 : off < 0 ? -1 : 0));
    }
  }
  memset(mo->hload, 0, (size_t)mo->nl * E * sizeof *mo->hload);
  return ppsrt_moe_bias_sync(mo, be);
}

/* --expert-parallel: rows (Nx = X N gathered tokens) of act_dtype values in `all` summed
 * over the group in F32 (through f32 [Nx, h]), this rank's N rows into `mine`. */
static int ep_sum_rows(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, const void *all, float *f32, void *mine) {
  size_t Nh = (size_t)mo->N * mo->h;
  TRY(be->convert(be, CS, f32, PPSRT_F32, all, be->act_dtype, Nh * mo->X));
  float *blk = f32 + Nh * mo->j;   /* (in place: this rank's block) */
  TRY(ppsrt_ep_reduce_scatter(c, f32, blk, Nh));
  return be->convert(be, CS, mine, be->act_dtype, blk, PPSRT_F32, Nh);
}

/* ---- F ---- */

/* scratch of F beyond today's: the gathered input ag [X N, h], the combine's rows
 * comb [X N, h] and their F32 sums [X N, h] (X > 1 only) */
typedef struct fscr { float *logits; char *xp; float *part; char *tmp, *ag, *comb; float *sum; } fscr;

/* The routing of this rank's slots (block j0) with mo->hforce's experts forced on the
 * kernel (moe_router.h force: the weights, probabilities and counts still from these
 * logits): hforce uploaded, the kernel run, the stream synchronised (hforce is written
 * again by the next slot's routing). --check's replay and PPSRT_FAULT=route. */
static int forced_route(ppsrt_moe *mo, ppsrt_backend *be, mbuf *b, size_t j0, ppsrt_moe_router *ro, float *stat) {
  size_t NK = (size_t)mo->N * mo->K;
  if (!mo->dforce) {
    TRY(be->alloc(be, NK * sizeof(int32_t), (void **)&mo->dforce));
    mo->fbe = be;
  }
  TRY(be->memcpy_async(be, CS, mo->dforce, mo->hforce, NK * sizeof(int32_t), 1));
  ro->force = mo->dforce;
  int rc = be->moe_route(be, CS, b->lg, mo->N, mo->E, mo->K, ro, b->idx + j0, b->w + j0, stat);
  ro->force = NULL;
  return rc ? rc : be->stream_sync(be, CS);
}

/* --check's reference (mo->replay; X = 1): the reference's own choice first (its hash,
 * with its own drops, into ohash: the report's "the reference's own choice differed"),
 * then the pipeline's experts forced on the routing kernel (moe_router.h force), whose
 * weights, probabilities and counts come from this run's logits for them. */
static int replay_route(ppsrt_moe *mo, ppsrt_backend *be, int slot, mbuf *b, ppsrt_moe_router *ro, float *stat) {
  int N = mo->N, K = mo->K, E = mo->E;
  size_t NK = (size_t)N * K;
  const int32_t *r = mo->replay + (size_t)slot * NK;
  TRY(be->moe_route(be, CS, b->lg, N, E, K, ro, b->idx, b->w, stat));
  TRY(be->memcpy_async(be, CS, mo->hidx, b->idx, NK * sizeof(int32_t), 2));
  if (mo->cap > 0) TRY(be->memcpy_async(be, CS, mo->hw, b->w, NK * sizeof(float), 2));
  TRY(be->stream_sync(be, CS));
  if (mo->cap > 0) ppsrt_moe_drop(mo->hord, mo->hidx, mo->hw, NK, mo->cap, mo->dpos, mo->hpos);
  else memset(mo->hpos, 0, NK * sizeof *mo->hpos);
  mo->ohash[slot] = route_hash_of(mo->hidx, mo->hpos, NK, E);
  for (size_t s = 0; mo->orec && s < NK; s++)   /* (a --context-parallel pipeline's: its ranks' parts hashed) */
    mo->orec[(size_t)slot * NK + s] = mo->hidx[s] + (mo->hpos[s] < 0 ? E : 0);
  for (size_t s = 0; s < NK; s++) mo->hforce[s] = r[s] >= E ? r[s] - E : r[s];
  return forced_route(mo, be, b, 0, ro, stat);
}

/* PPSRT_FAULT=route (check.c; tests only): the pipeline's first token of every slot
 * routed, as its first choice, to the lowest expert it did not choose, forced on the
 * routing kernel as the replay forces (its weights and statistics from the logits), and
 * recorded so: the reference replays the wrong choice too, so its gradients agree and in
 * F32 only "the reference's own choice differed" can fail the check (tests/runtime/
 * moe_replay.sh): the guard on a wrong top-K that the replay would copy. */
static int fault_route(ppsrt_moe *mo, ppsrt_backend *be, mbuf *b, ppsrt_moe_router *ro, float *stat) {
  int N = mo->N, K = mo->K, e = 0;
  size_t NK = (size_t)N * K, j0 = NK * mo->j;
  if (!mo->hforce && !(mo->hforce = malloc(NK * sizeof *mo->hforce)))
    return PPSRT_FAIL(PPSRT_E_NOMEM, "gpt: out of host memory (experts)");
  TRY(be->memcpy_async(be, CS, mo->hforce, b->idx + j0, NK * sizeof(int32_t), 2));
  TRY(be->stream_sync(be, CS));
  for (int k = 0; k < K; k = mo->hforce[k] == e ? (e++, 0) : k + 1) {}   /* (K < E: one is left) */
  mo->hforce[0] = e;
  return forced_route(mo, be, b, j0, ro, stat);
}

static int moe_f_in(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, mbuf *b, const void *a,
                    const void *x1, void *y, const ppsrt_dropout *drop, int count_loss, const fscr *z) {
  int N = mo->N, K = mo->K, E = mo->E, h = mo->h, f = mo->f, fw = mo->fw, X = mo->X, e1 = mo->e0 + mo->El;
  int NK = N * K;
  ppsrt_dtype AT = be->act_dtype;
  size_t es = mo->es;
  const int *cnt = mo->cnt + (size_t)slot * E;
  float *stat = z->logits, *part = z->part;
  char *xp = z->xp, *tmp = z->tmp;
  /* router: logits (F32) = a Wr; top-K, weights, probabilities, counts (this rank's tokens,
   * into block j of the slot-indexed parts) */
  TRY(be->gemm(be, CS, 0, 0, N, E, h, 1.0f, a, AT, h, P[0].param.data, AT, E, 0.0f, b->lg, PPSRT_F32, E));
  ppsrt_moe_router ro;
  TRY(router_of(mo, be, slot, &ro));
  if (mo->replay) TRY(replay_route(mo, be, slot, b, &ro, stat));
  else TRY(be->moe_route(be, CS, b->lg, N, E, K, &ro, b->idx + (size_t)NK * mo->j, b->w + (size_t)NK * mo->j, stat));
  if (mo->fault && !mo->replay) TRY(fault_route(mo, be, b, &ro, stat));
  TRY(route_host(mo, c, be, slot, b, stat, count_loss));
  int R = local_rows(mo, cnt);
  /* the group's tokens (--expert-parallel), permuted; each local expert's FC1 (+ bias) on
   * its rows; the activation on those rows */
  size_t j0 = (size_t)NK * mo->j;
  if (mo->a2a) {
    /* alltoall: this rank's kept slots' rows (by expert: by destination rank) to their
     * experts' ranks; there the rows received in the experts' order */
    TRY(be->moe_permute(be, CS, z->ag, a, b->pos + j0, N, K, h));
    TRY(a2a(mo, c, slot, (size_t)h * es, 0, z->ag, z->comb));
    TRY(a2a_reorder(mo, be, slot, xp, z->comb, 0));
  } else {
    const void *ag = a;
    if (X > 1) { TRY(ppsrt_ep_allgather(c, a, z->ag, (size_t)N * h * es)); ag = z->ag; }
    TRY(be->moe_permute(be, CS, xp, ag, b->pos, N * X, K, h));
  }
  for (int e = mo->e0; e < e1; e++) {
    int r = first_row(mo, cnt, e);
    ppsrt_param *w1 = EP(mo, P, e, 0), *b1 = EP(mo, P, e, 1);
    if (!cnt[e]) continue;
    TRY(expert_gemm(be, 0, 0, cnt[e], fw, h, xp + (size_t)r * h * es, h, w1->param.data, fw, 0.0f,
                    b->hpre + (size_t)r * fw * es, AT, fw));
    if (b1) TRY(be->add_bias(be, CS, b->hpre + (size_t)r * fw * es, b->hpre + (size_t)r * fw * es, b1->param.data, cnt[e], fw));
  }
  if (R) TRY(mo->sw ? be->swiglu_fwd(be, CS, b->hact, b->hpre, R, f) : be->gelu_fwd(be, CS, b->hact, b->hpre, (size_t)R * f));
  /* FC2: the partial products summed over the tensor-parallel group (F32), then the biases */
  for (int e = mo->e0; e < e1; e++) {
    int r = first_row(mo, cnt, e);
    if (!cnt[e]) continue;
    const void *w2 = EP(mo, P, e, 2)->param.data, *A = b->hact + (size_t)r * f * es;
    if (part) TRY(expert_gemm(be, 0, 0, cnt[e], h, f, A, f, w2, h, 0.0f, part + (size_t)r * h, PPSRT_F32, h));
    else TRY(expert_gemm(be, 0, 0, cnt[e], h, f, A, f, w2, h, 0.0f, b->eout + (size_t)r * h * es, AT, h));
  }
  if (part) {
    TRY(ppsrt_tp_allreduce(c, part, (size_t)R * h));
    if (R) TRY(be->convert(be, CS, b->eout, AT, part, PPSRT_F32, (size_t)R * h));
  }
  for (int e = mo->e0; e < e1 && mo->bias; e++) {
    int r = first_row(mo, cnt, e);
    char *o = b->eout + (size_t)r * h * es;
    if (cnt[e]) TRY(be->add_bias(be, CS, o, o, EP(mo, P, e, 3)->param.data, cnt[e], h));
  }
  if (mo->a2a) {
    /* alltoall: the outputs back to their slots' ranks, into eout in the dispatch's order
     * (this rank's own slots' outputs: the combine and B's routing-weight gradient local) */
    TRY(a2a_reorder(mo, be, slot, z->comb, b->eout, 1));
    TRY(a2a(mo, c, slot, (size_t)h * es, 1, z->comb, b->eout));
  } else if (X > 1) {
    /* the other experts' rows add nothing here; each gathered token's sum over this rank's
     * slots, summed over the group (F32), this rank's N rows back: then as X = 1 */
    if (R < mo->M) TRY(be->memset0(be, CS, b->eout + (size_t)R * h * es, (size_t)(mo->M - R) * h * es));
    TRY(be->moe_unpermute(be, CS, z->comb, NULL, b->eout, b->pos, b->w, N * X, K, h));
    TRY(ep_sum_rows(mo, c, be, z->comb, z->sum, z->comb));
    const char *out = z->comb + (size_t)mo->r0 * h * es;
    if (!drop) return be->add(be, CS, y, x1, out, (size_t)mo->n * h);
    return be->bias_dropout_add(be, CS, y, x1, out, NULL, mo->n, h, drop);
  }
  /* combine this rank's rows: y = x1 + sum_k w eout (or x1 + drop(sum_k w eout)) */
  size_t s0 = (mo->a2a ? j0 : 0) + (size_t)mo->r0 * K;
  if (!drop) return be->moe_unpermute(be, CS, y, x1, b->eout, b->pos + s0, b->w + s0, mo->n, K, h);
  TRY(be->moe_unpermute(be, CS, tmp, NULL, b->eout, b->pos + s0, b->w + s0, mo->n, K, h));
  return be->bias_dropout_add(be, CS, y, x1, tmp, NULL, mo->n, h, drop);
}

int ppsrt_moe_f(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *a,
                const void *x1, void *y, const ppsrt_dropout *drop, int count_loss) {
  if (mo->nc) return 0;
  mbuf b = parts(mo, buf);
  size_t X = (size_t)mo->X, NK = (size_t)mo->N * mo->K * X, Nxh = X * mo->N * mo->h;
  /* uncounted scratch: stat F32 [2E + 1], xp [X N K, h], (tensor parallel) F32 partial sums [X N K, h], (dropout)
   * [n, h], (expert parallel) the gathered input and the combine's rows [X N, h], their F32 sums */
  size_t bl = (2 * (size_t)mo->E + 1) * sizeof(float), bx = NK * mo->h * mo->es, bp = mo->tp > 1 ? NK * mo->h * sizeof(float) : 0,
         bt = drop ? (size_t)mo->n * mo->h * mo->es : 0, be1 = X > 1 ? up(Nxh * mo->es) : 0,
         be2 = X > 1 ? up(Nxh * sizeof(float)) : 0, be3 = be1;
  if (mo->a2a) {   /* (alltoall: the rows sent [N K, h], the rows received and returned [M, h]) */
    be1 = up(NK / X * mo->h * mo->es);
    be3 = up((size_t)mo->M * mo->h * mo->es);
    be2 = 0;
  }
  char *s;
  TRY(be->alloc(be, up(bl) + up(bx) + up(bp) + up(bt) + be1 + be3 + be2, (void **)&s));
  char *o = s;
  fscr z;
  z.logits = (float *)o; o += up(bl);
  z.xp = o; o += up(bx);
  z.part = bp ? (float *)o : NULL; o += up(bp);
  z.tmp = o; o += up(bt);
  z.ag = be1 ? o : NULL; o += be1;
  z.comb = be3 ? o : NULL; o += be3;
  z.sum = be2 ? (float *)o : NULL;
  int rc = moe_f_in(mo, c, be, slot, P, &b, a, x1, y, drop, count_loss, &z);
  be->free(be, s);
  return rc;
}

/* ---- B ---- */

static int moe_b_in(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, mbuf *b, const void *dy,
                    void *dln2, float *dw, char *dhact, char *dxp, float *part, char *dfull, char *dyg, float *sum) {
  int N = mo->N, K = mo->K, E = mo->E, h = mo->h, f = mo->f, fw = mo->fw, X = mo->X, e1 = mo->e0 + mo->El;
  int NK = N * K;
  ppsrt_dtype AT = be->act_dtype;
  size_t es = mo->es, j0 = (size_t)NK * mo->j;
  const int *cnt = mo->cnt + (size_t)slot * E;
  int R = local_rows(mo, cnt);
  /* the combine's backward on the group's tokens (dy all-gathered): dw, and deout = w dy
   * over eout (the other experts' rows of eout are zero: their dw is 0 here) */
  if (mo->a2a) {
    /* alltoall: the combine's backward at home (this rank's slots: dw, deout = w dy over
     * their outputs in eout); deout to the experts' ranks, there in the experts' order */
    TRY(be->moe_unpermute_bwd(be, CS, b->eout, dw + j0, dy, b->eout, b->pos + j0, b->w + j0, N, K, h));
    TRY(a2a(mo, c, slot, (size_t)h * es, 0, b->eout, dyg));
    TRY(a2a_reorder(mo, be, slot, b->eout, dyg, 0));
  } else {
    const void *dyx = dy;
    if (X > 1) { TRY(ppsrt_ep_allgather(c, dy, dyg, (size_t)N * h * es)); dyx = dyg; }
    TRY(be->moe_unpermute_bwd(be, CS, b->eout, dw, dyx, b->eout, b->pos, b->w, N * X, K, h));
  }
  /* the experts: dhact = deout Wfc2^T; dhpre over hpre; dxp = dhpre Wfc^T (summed over the group) */
  for (int e = mo->e0; e < e1; e++) {
    int r = first_row(mo, cnt, e);
    if (cnt[e])
      TRY(expert_gemm(be, 0, 1, cnt[e], f, h, b->eout + (size_t)r * h * es, h, EP(mo, P, e, 2)->param.data, h, 0.0f,
                      dhact + (size_t)r * f * es, AT, f));
  }
  if (R)
    TRY(mo->sw ? be->swiglu_bwd(be, CS, b->hpre, dhact, b->hpre, R, f)
               : be->gelu_bwd(be, CS, b->hpre, dhact, b->hpre, (size_t)R * f));
  for (int e = mo->e0; e < e1; e++) {
    int r = first_row(mo, cnt, e);
    if (!cnt[e]) continue;
    const void *A = b->hpre + (size_t)r * fw * es, *w1 = EP(mo, P, e, 0)->param.data;
    if (part) TRY(expert_gemm(be, 0, 1, cnt[e], h, fw, A, fw, w1, fw, 0.0f, part + (size_t)r * h, PPSRT_F32, h));
    else TRY(expert_gemm(be, 0, 1, cnt[e], h, fw, A, fw, w1, fw, 0.0f, dxp + (size_t)r * h * es, AT, h));
  }
  if (part) {
    TRY(ppsrt_tp_allreduce(c, part, (size_t)R * h));
    if (R) TRY(be->convert(be, CS, dxp, AT, part, PPSRT_F32, (size_t)R * h));
  }
  void *dx = dfull ? (void *)dfull : dln2;   /* all N rows */
  if (mo->a2a) {
    /* alltoall: the input gradients' rows back to their slots' ranks (into `sum`, rows of
     * act_dtype in the dispatch's order), summed over each token's slots there */
    TRY(a2a_reorder(mo, be, slot, dyg, dxp, 1));
    TRY(a2a(mo, c, slot, (size_t)h * es, 1, dyg, sum));
    TRY(be->moe_permute_bwd(be, CS, dx, sum, b->pos + j0, N, K, h, 0));
  } else if (X > 1) {
    /* the gathered tokens' input gradients through this rank's experts (the other slots'
     * rows zero), summed over the group: this rank's N rows; the routing weights'
     * gradients (each slot's nonzero on one rank) too: this rank's N K */
    if (R < mo->M) TRY(be->memset0(be, CS, dxp + (size_t)R * h * es, (size_t)(mo->M - R) * h * es));
    TRY(be->moe_permute_bwd(be, CS, dyg, dxp, b->pos, N * X, K, h, 0));   /* (dyg is free again) */
    TRY(ep_sum_rows(mo, c, be, dyg, sum, dx));
    TRY(ppsrt_ep_reduce_scatter(c, dw, dw + j0, (size_t)NK));
  } else {
    TRY(be->moe_permute_bwd(be, CS, dx, dxp, b->pos, N, K, h, 0));
  }
  /* the router: dlogits (the top-K softmax's and the load-balancing loss's), dx += dlogits Wr^T */
  ppsrt_moe_router ro;
  TRY(router_of(mo, be, slot, &ro));
  TRY(be->moe_route_bwd(be, CS, b->dlog, dw + j0, b->lg, b->idx + j0, &ro, b->coef, N, E, K));
  TRY(be->gemm(be, CS, 0, 1, N, h, E, 1.0f, b->dlog, AT, E, P[0].param.data, AT, E, 1.0f, dx, AT, h));
  if (dfull) TRY(be->memcpy_async(be, CS, dln2, dfull + (size_t)mo->r0 * h * es, (size_t)mo->n * h * es, 0));
  return 0;
}

int ppsrt_moe_b(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *dy,
                void *dln2) {
  if (mo->nc) return 0;
  mbuf b = parts(mo, buf);
  size_t X = (size_t)mo->X, NK = (size_t)mo->N * mo->K * X, h = (size_t)mo->h, es = mo->es, Nxh = X * mo->N * h;
  /* uncounted scratch: dw F32 [X N K], dhact [X N K, f], dxp [X N K, h], (tensor parallel) F32 [X N K, h],
   * (sequence parallel) the input gradient's N rows, (expert parallel) dy gathered [X N, h] and F32 [X N, h] */
  size_t s1 = up(NK * sizeof(float)), s2 = up(NK * mo->f * es), s3 = up(NK * h * es),
         s4 = mo->tp > 1 ? up(NK * h * sizeof(float)) : 0, s6 = mo->n < mo->N ? up((size_t)mo->N * h * es) : 0,
         s7 = X > 1 ? up(Nxh * es) : 0, s8 = X > 1 ? up(Nxh * sizeof(float)) : 0;
  if (mo->a2a) {   /* (alltoall: the rows received and sent [M, h], the input gradient's rows returned [N K, h]) */
    s7 = up((size_t)mo->M * h * es);
    s8 = up(NK / X * h * es);
  }
  char *s;
  TRY(be->alloc(be, s1 + s2 + s3 + s4 + s6 + s7 + s8, (void **)&s));
  char *o6 = s + s1 + s2 + s3 + s4, *o7 = o6 + s6;
  int rc = moe_b_in(mo, c, be, slot, P, &b, dy, dln2, (float *)s, s + s1, s + s1 + s2, s4 ? (float *)(s + s1 + s2 + s3) : NULL,
                    s6 ? o6 : NULL, s7 ? o7 : NULL, s8 ? (float *)(o7 + s7) : NULL);
  be->free(be, s);
  return rc;
}

/* ---- W ---- */

/* dW (F32 [Kd, Nc]) += X^T dY over M rows; db += colsum dY (db NULL: none) */
static int wgrad(ppsrt_backend *be, int M, int Kd, int Nc, const void *X, const void *dY, float *dW, float *db) {
  if (M <= 0) return 0;
  TRY(be->gemm(be, CS, 1, 0, Kd, Nc, M, 1.0f, X, be->act_dtype, Kd, dY, be->act_dtype, Nc, 1.0f, dW, PPSRT_F32, Nc));
  return db ? be->bias_grad(be, CS, db, dY, M, Nc) : 0;
}

int ppsrt_moe_w(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *a) {
  if (mo->nc) return 0;
  mbuf b = parts(mo, buf);
  int N = mo->N, K = mo->K, E = mo->E, h = mo->h, f = mo->f, fw = mo->fw, X = mo->X, e1 = mo->e0 + mo->El;
  size_t es = mo->es, bx = up((size_t)N * K * X * h * es), bg = X > 1 ? (size_t)N * X * h * es : 0;
  if (mo->a2a) bg = up((size_t)N * K * h * es) + (size_t)mo->M * h * es;   /* (alltoall: the rows sent, received) */
  const int *cnt = mo->cnt + (size_t)slot * E;
  char *xp;   /* uncounted: x permuted again [X N K, h]; (expert parallel) x gathered again [X N, h] */
  TRY(be->alloc(be, bx + bg, (void **)&xp));
  const void *ag = a;
  int rc = 0;
  if (mo->a2a) {   /* alltoall: the dispatch of F again (x to the experts' ranks) */
    char *xs = xp + bx, *xr = xs + up((size_t)N * K * h * es);
    rc = be->moe_permute(be, CS, xs, a, b.pos + (size_t)N * K * mo->j, N, K, h);
    if (!rc) rc = a2a(mo, c, slot, (size_t)h * es, 0, xs, xr);
    if (!rc) rc = a2a_reorder(mo, be, slot, xp, xr, 0);
  } else {
    if (X > 1) { rc = ppsrt_ep_allgather(c, a, xp + bx, (size_t)N * h * es); ag = xp + bx; }
    if (!rc) rc = be->moe_permute(be, CS, xp, ag, b.pos, N * X, K, h);
  }
  for (int e = mo->e0; e < e1 && !rc; e++) {
    int r = first_row(mo, cnt, e);
    ppsrt_param *w1 = EP(mo, P, e, 0), *b1 = EP(mo, P, e, 1), *w2 = EP(mo, P, e, 2), *b2 = EP(mo, P, e, 3);
    rc = wgrad(be, cnt[e], h, fw, xp + (size_t)r * h * es, b.hpre + (size_t)r * fw * es, w1->grad, b1 ? b1->grad : NULL);
    if (!rc)
      rc = wgrad(be, cnt[e], f, h, b.hact + (size_t)r * f * es, b.eout + (size_t)r * h * es, w2->grad, b2 ? b2->grad : NULL);
  }
  if (!rc) rc = wgrad(be, N, h, E, a, b.dlog, P[0].grad, NULL);   /* the router */
  be->free(be, xp);
  return rc;
}
