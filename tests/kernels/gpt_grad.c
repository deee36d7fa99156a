/* gpt_grad.c: the gpt model's gradients against central finite differences of its loss,
 * on one device holding every stage (the split into stages, F/B/W and the activation
 * store and IO box are exercised; the transports and the interpreter are not).
 *
 * `--check` compares a pipelined run with the unpipelined reference, which share this
 * model's backward code; this test checks that backward itself: it runs F, B and W
 * (and, with vocabulary parallelism on a single shard, IF / S / T / IB and the
 * collectives through a one-rank comm), reads every gradient, then for a spread of
 * elements of every parameter re-runs the forward with the element moved by +-eps and
 * compares (L+ - L-) / 2 eps with the gradient:
 *
 *     |grad - fd| <= 1e-4 + 1e-2 * |fd|      (eps = 1e-2; F32 model, loss summed in double)
 *
 * printing the max difference per tensor and the first failure. Modes: 0, 1, 2
 * (vocabulary parallelism with one shard), each with GPT-2's layer and with Llama's
 * (SwiGLU, RMS norms, RoPE, no linear biases), and each of those four alone (mode 0).
 * With dropout (--hidden-dropout 0.3 --attention-dropout 0.3; modes 0 and 2, both
 * layers): the masks depend on (seed, step, microbatch, layer, site, element) only, so
 * the loss is a deterministic function of the weights and finite differences apply;
 * the loss must differ from the run without dropout (the masks do something). What it
 * does not: several devices (see gpt_e2e.sh, tests/runtime/dropout.sh), BF16.
 * Mixture of experts (--num-experts 4, top 2 and top 1, with and without the load-balancing
 * loss, GeLU and Llama's layer; runtime/moe.c): the router's, every expert's and the other
 * weights' gradients the same way. The top-K choice is piecewise constant in the weights:
 * an element whose +-eps or +-eps/4 moves a token to another expert (a hash of the routing,
 * ppsrt_gpt_route_hash, changes) is skipped, and at most 1 in 10 may be. These cases
 * take eps = 1e-3 and |grad - fd| <= 3e-4 + 1e-2 |fd| (the expert paths curve more).
 * With a capacity factor 0.5 (--moe-expert-capacity-factor, both drop policies, both
 * layers) the same, dropped slots included (a change of the drops changes the hash too);
 * and the capacity's choice itself (ppsrt_moe_drop) on slots made up here, both policies,
 * against the kept sets worked out by hand (test_moe_drop). With a shared expert
 * (--moe-shared-ffn-hidden 6, both layers, also with dropout): its fc/fc2 gradients and
 * the rest's the same way (its part of the input gradient included); and with its gate
 * (--moe-shared-expert-gate, both layers, also with dropout): the gate weight's
 * gradient (moe.shared.gate.w) and the rest's through the gate. */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "gpt.h"
#include "moe.h"

static ppsrt_backend *be;
static ppsrt_model *m;
static ppsrt_ctx ctx;

static int noop_allreduce(ppsrt_comm *c, float *buf, size_t n, ppsrt_redop op) { return 0; }
static int noop_broadcast(ppsrt_comm *c, void *buf, size_t bytes, int root) { return 0; }
static ppsrt_comm comm = {0, 1, noop_allreduce, noop_broadcast, NULL};

#define OK(e)                                                               \
  do {                                                                      \
    if ((e)) {                                                              \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #e, ppsrt_last_error()); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

/* One iteration's forward (and, with backward = 1, the whole backward); returns the loss. */
static double run(int backward) {
  int S = m->cfg.nstage, M = m->cfg.nmb, vm = m->cfg.vocab_mode;
  double loss = 0;
  OK(m->begin_iteration(m, &ctx, 0));
  for (int i = 0; i < M; i++) {
    if (vm) {
      OK(m->vocab_pass(m, &ctx, PPSRT_OP_IF, i));
      OK(m->collective(m, &ctx, PPSRT_COLL_INPUT_FWD, i, &comm));
    }
    for (int s = 0; s < S; s++) OK(m->f(m, &ctx, i, s));
    if (vm) {
      OK(m->vocab_pass(m, &ctx, PPSRT_OP_S, i));
      OK(m->collective(m, &ctx, PPSRT_COLL_OUTPUT_FWD, i, &comm));
    }
    if (!backward) {
      for (int s = -1; s < S; s++) OK(ppsrt_act_release(&ctx, i, s));
      continue;
    }
    if (vm) {
      OK(m->vocab_pass(m, &ctx, PPSRT_OP_T, i));
      if (vm == 1) OK(m->collective(m, &ctx, PPSRT_COLL_OUTPUT_BWD, i, &comm));
    }
    for (int s = S - 1; s >= 0; s--) {
      OK(m->b(m, &ctx, i, s));
      OK(m->w(m, &ctx, i, s));
    }
    if (vm) {
      OK(m->collective(m, &ctx, PPSRT_COLL_INPUT_BWD, i, &comm));
      OK(m->vocab_pass(m, &ctx, PPSRT_OP_IB, i));
    }
  }
  OK(m->end_iteration(m, &ctx, &loss));
  return loss;
}

/* arch: the Llama-style variants, bits: 1 SwiGLU, 2 RMS norm, 4 RoPE, 8 no linear biases,
 * 16 --qk-layernorm (the query and key heads normalised; with layer norms 2 heads, 1 group:
 * D = 4, as a layer norm of 2 values is +-1, its derivative a spike where they meet) */
static double loss_nodrop;   /* the last case's loss without dropout */
static int moe_E, moe_K;     /* the MoE cases' --num-experts, --moe-topk (0: a dense MLP) */
static double moe_a;         /* and --moe-aux-loss-coeff */
static double moe_cf;        /* and --moe-expert-capacity-factor (0: dropless) */
static int moe_pos;          /* and --moe-token-drop-policy position (1) */
static int moe_sig, moe_pre; /* and the router: --moe-router-score-function sigmoid, --moe-router-pre-softmax */
static double moe_s, moe_z;  /* --moe-router-topk-scaling-factor (0: none), --moe-z-loss-coeff */
static int moe_S;            /* and --moe-shared-ffn-hidden (0: none) */
static int moe_G;            /* and --moe-shared-expert-gate */
static int kv_ch;            /* --kv-channels D (0: hidden / heads) */
static int test_mode_drop(int vm, int arch, double drop) {
  ppsrt_model_config cfg = {0};
  cfg.name = "gpt";
  cfg.hidden = 8; cfg.heads = 4; cfg.query_groups = 2; cfg.seq = 5; cfg.vocab = 11; cfg.micro_batch = 2;
  cfg.layers_per_stage = 2; cfg.nstage = 2; cfg.nmb = 2; cfg.ndev = 1; cfg.vocab_mode = vm; cfg.seed = 7;
  cfg.swiglu = arch & 1; cfg.rmsnorm = (arch >> 1) & 1; cfg.rope = (arch >> 2) & 1; cfg.no_bias = (arch >> 3) & 1;
  cfg.qk_layernorm = (arch >> 4) & 1;
  if (cfg.qk_layernorm && !cfg.rmsnorm) cfg.heads = 2, cfg.query_groups = 1;
  cfg.kv_channels = kv_ch;
  if (cfg.swiglu) cfg.ffn_hidden = 12;
  if (cfg.rope) cfg.rope_base = 3;   /* large angles at these few positions */
  cfg.hidden_dropout = cfg.attention_dropout = drop;
  cfg.num_experts = moe_E; cfg.moe_topk = moe_K; cfg.moe_aux_coeff = moe_a;
  cfg.moe_capacity = moe_cf; cfg.moe_drop_position = moe_pos; cfg.moe_shared_ffn = moe_S;
  cfg.moe_shared_gate = moe_G;
  cfg.moe_router_sigmoid = moe_sig; cfg.moe_router_pre_softmax = moe_pre; cfg.moe_router_scale = moe_s;
  cfg.moe_z_coeff = moe_z;
  int stages[2] = {0, 1};
  memset(&ctx, 0, sizeof ctx);
  ctx.be = be; ctx.nmb = cfg.nmb; ctx.nstage = cfg.nstage;
  ctx.box = calloc((size_t)2 * cfg.nmb * (cfg.nstage + 2), sizeof *ctx.box);
  ctx.store.slots = calloc((size_t)cfg.nmb * (cfg.nstage + 1), sizeof *ctx.store.slots);
  ctx.store.nmb = cfg.nmb; ctx.store.nstage = cfg.nstage;
  OK(ppsrt_gpt_create(&cfg, be, 0, stages, 2, &m));
  ctx.model = m;
  /* --qk-layernorm: gains other than 1 (and betas other than 0), different per column, so
   * that the norm does not commute with RoPE's rotation and each gain's gradient differs */
  for (int i = 0; i < m->nparams; i++)
    if (strstr(m->params[i].name, "norm.")) {
      int beta = strstr(m->params[i].name, "norm.b") != NULL;
      for (size_t k = 0; k < m->params[i].numel; k++)
        m->params[i].master[k] = beta ? 0.1f * (float)k - 0.15f : 0.6f + 0.3f * (float)((k + (size_t)i) % 4);
    }
  double L0 = run(1);
  uint64_t h0 = ppsrt_gpt_route_hash(m);   /* the routing of the weights as they are */
  int skipped = 0, sampled = 0;
  /* analytic gradients, then finite differences of the loss */
  int bad = 0;
  /* MoE: a smaller step (the expert paths curve more: eps 1e-2's second-order error is
   * near the tolerance), so F32 rounding of the loss weighs more: atol 3e-4; the same
   * with --qk-layernorm (a norm of D = 2 values curves as much) and --kv-channels (at
   * eps 1e-2 D = 1's scores and D = 6's with dropout miss by 1.5e-4 to 7e-3, truncation:
   * at 1e-3 within 1.5e-4) */
  int small = moe_E || cfg.qk_layernorm || kv_ch;
  const double eps = small ? 1e-3 : 1e-2, atol = small ? 3e-4 : 1e-4, rtol = 1e-2;
  double worst = 0, big = 0;
  for (int k = 0; k < m->nparams; k++) {
    ppsrt_param *p = &m->params[k];
    float *g = malloc(p->numel * sizeof *g);
    memcpy(g, p->grad, p->numel * sizeof *g);
    float *w = p->master;   /* == param.data on the CPU backend */
    size_t picks = p->numel < 6 ? p->numel : 6;
    double maxd = 0;
    for (size_t j = 0; j < picks; j++) {
      size_t i = j * p->numel / picks + (p->numel / picks) / 2;
      sampled++;
      float w0 = w[i];
      double e = eps, lp, lm;
      int moved = 0;
      for (int t = 0; t < 2; t++, e /= 4) {   /* MoE: a step that moves a token to another expert is no derivative */
        w[i] = (float)(w0 + e);
        lp = run(0);
        moved = ppsrt_gpt_route_hash(m) != h0;
        w[i] = (float)(w0 - e);
        lm = run(0);
        moved |= ppsrt_gpt_route_hash(m) != h0;
        w[i] = w0;
        if (!moved) break;
      }
      if (moved) { skipped++; continue; }
      double fd = (lp - lm) / (2 * e), d = fabs(g[i] - fd);
      if (fabs(fd) > big) big = fabs(fd);
      if (d > maxd) maxd = d;
      if (!(d <= atol + rtol * fabs(fd))) {
        if (!bad) printf("FAIL vocab %d arch %d: %s[%zu]: grad %.7g, finite difference %.7g, |diff| %.3g > %.0e + %.0e*|fd|\n",
                         vm, arch, p->name, i, (double)g[i], fd, d, atol, rtol);
        bad++;
      }
    }
    if (maxd > worst) worst = maxd;
    free(g);
  }
  char moe[192] = "";
  if (moe_E) snprintf(moe, sizeof moe, " experts %d top %d aux %g cf %g%s%s%s scale %g z %g shared %d%s (%d of %d skipped)",
                      moe_E, moe_K, moe_a, moe_cf, moe_pos ? " position" : "", moe_sig ? " sigmoid" : "",
                      moe_pre ? " pre-softmax" : "", moe_s, moe_z, moe_S, moe_G ? " gated" : "", skipped, sampled);
  char kvc[32] = "";
  if (kv_ch) snprintf(kvc, sizeof kvc, " kv-channels %d", kv_ch);
  printf("%s gpt gradients vs finite differences, vocab mode %d, %s%s%s%s%s%s%s%s: %d tensors, loss %.6f, max |fd| %.3g, "
         "max |grad - fd| %.3g (tol %.0e + %.0e*|fd|)\n", bad ? "FAIL" : "ok  ", vm, cfg.swiglu ? "swiglu" : "gelu",
         cfg.rmsnorm ? " rmsnorm" : " layernorm", cfg.rope ? " rope" : " learned", cfg.no_bias ? " no-bias" : "",
         cfg.qk_layernorm ? " qk-layernorm" : "", kvc, drop > 0 ? " dropout 0.3" : "", moe, m->nparams, L0, big, worst, atol, rtol);
  if (skipped * 10 > sampled) {
    printf("FAIL: %d of %d sampled elements moved the routing at every step tried\n", skipped, sampled);
    bad++;
  }
  if (drop > 0 && L0 == loss_nodrop) {
    printf("FAIL vocab %d arch %d: the loss with dropout %g is the loss without (%.9g): no element was dropped\n", vm,
           arch, drop, L0);
    bad++;
  }
  if (drop == 0) loss_nodrop = L0;
  for (int i = 0; i < ctx.nmb; i++)
    for (int s = -1; s < ctx.nstage; s++) ppsrt_act_release(&ctx, i, s);
  for (size_t i = 0; i < (size_t)2 * ctx.nmb * (ctx.nstage + 2); i++)
    if (ctx.box[i].buf) be->free(be, ctx.box[i].buf);
  for (size_t i = 0; i < (size_t)ctx.nmb * (ctx.nstage + 1); i++) free(ctx.store.slots[i].e);
  free(ctx.store.slots);
  free(ctx.store.pend);
  free(ctx.box);
  m->destroy(m);
  return bad;
}

static int test_mode(int vm, int arch) { return test_mode_drop(vm, arch, 0); }

/* --moe-expert-capacity-factor's choice (runtime/moe.c ppsrt_moe_drop) on slots made up
 * here: expert 0 gets slots 0, 2, 4, 5 (weights .5 .8 .8 .9), expert 1 slots 1, 3; cap 2.
 * probs keeps the largest (5, then the tie 2 / 4 to the lower: 2), position the first two
 * (0, 2); expert 1's two slots are kept by both. */
static int test_moe_drop(void) {
  const int32_t idx[6] = {0, 1, 0, 1, 0, 0};
  const float w[6] = {0.5f, 0.9f, 0.8f, 0.5f, 0.8f, 0.9f};
  static const int32_t want[2][6] = {{-1, 0, 0, 0, -1, 0}, {0, 0, 0, 0, -1, -1}};
  struct ppsrt_moe_ord o[6];
  int bad = 0;
  for (int pol = 0; pol < 2; pol++) {
    int32_t mark[6];
    ppsrt_moe_drop(o, idx, w, 6, 2, pol, mark);
    int ok = !memcmp(mark, want[pol], sizeof mark);
    printf("%s moe capacity 2, policy %s: marks %d %d %d %d %d %d\n", ok ? "ok  " : "FAIL", pol ? "position" : "probs",
           mark[0], mark[1], mark[2], mark[3], mark[4], mark[5]);
    bad += !ok;
  }
  return bad;
}

/* --moe-router-enable-expert-bias's update (moe.c ppsrt_moe_update_bias) on loads made up
 * here, two layers, U = 0.25: layer 0's loads 10 2 2 2 (mean 4) lower expert 0's bias and
 * raise the others'; layer 1's 4 4 4 4 move nothing (sign 0); the loads are zeroed after,
 * and a second update with layer 0's loads 1 3 3 5 (mean 3) adds +U, 0, 0, -U. */
static int test_expert_bias(void) {
  ppsrt_model_config cfg = {0};
  cfg.hidden = 8; cfg.seq = 4; cfg.micro_batch = 1; cfg.nmb = 1; cfg.num_experts = 4; cfg.moe_topk = 2;
  cfg.moe_router_sigmoid = 1; cfg.moe_expert_bias = 1; cfg.moe_bias_rate = 0.25;
  ppsrt_moe mo;
  ppsrt_ctx c0;
  memset(&c0, 0, sizeof c0);
  OK(ppsrt_moe_init(&mo, &cfg, PPSRT_F32, 4, 4, 0, 1, 2));
  static const float l1[2][4] = {{10, 2, 2, 2}, {4, 4, 4, 4}}, l2[4] = {1, 3, 3, 5};
  static const float want1[2][4] = {{-0.25f, 0.25f, 0.25f, 0.25f}, {0, 0, 0, 0}}, want2[4] = {0, 0.25f, 0.25f, 0};
  memcpy(mo.hload, l1, sizeof l1);
  OK(ppsrt_moe_update_bias(&mo, &c0, be));
  int bad = memcmp(ppsrt_moe_bias(&mo, 0), want1[0], sizeof want1[0]) || memcmp(ppsrt_moe_bias(&mo, 1), want1[1], sizeof want1[1]);
  for (int e = 0; e < 8; e++) bad += mo.hload[e] != 0;
  memcpy(mo.hload, l2, sizeof l2);
  OK(ppsrt_moe_update_bias(&mo, &c0, be));
  bad += memcmp(ppsrt_moe_bias(&mo, 0), want2, sizeof want2) != 0;
  const float *b = ppsrt_moe_bias(&mo, 0);
  printf("%s moe expert bias update (U 0.25): layer 0 after loads 10 2 2 2, then 1 3 3 5: %g %g %g %g\n", bad ? "FAIL" : "ok  ",
         (double)b[0], (double)b[1], (double)b[2], (double)b[3]);
  ppsrt_moe_free(&mo);
  return bad != 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int bad0 = test_moe_drop();
  OK(ppsrt_cpu_backend_create(0, &be));
  int bad = test_expert_bias();
  for (int vm = 0; vm <= 2; vm++) bad += test_mode(vm, 0) + test_mode(vm, 15);   /* GPT-2's layer, Llama's */
  for (int a = 1; a <= 8; a *= 2) bad += test_mode(0, a);                         /* each change alone */
  for (int vm = 0; vm <= 2; vm += 2)                                                /* dropout, both layers */
    for (int a = 0; a <= 15; a += 15) bad += test_mode(vm, a) + test_mode_drop(vm, a, 0.3);
  /* mixture of experts: E = 4, top 2 and top 1, with and without the load-balancing loss */
  for (int a = 0; a <= 15; a += 15)
    for (moe_K = 2; moe_K >= 1; moe_K--)
      for (int x = 0; x < 2; x++) {
        moe_E = 4; moe_a = x ? 0.5 : 0;
        bad += test_mode(0, a);
      }
  moe_E = 4; moe_K = 2; moe_a = 0.5;
  bad += test_mode_drop(0, 0, 0.3);   /* with dropout on the experts' output */
  /* a capacity factor 0.5 (ceil(0.5 x 10 x 2 / 4) = 3 slots an expert of 20: some dropped),
   * both drop policies, both layers */
  for (int a = 0; a <= 15; a += 15)
    for (moe_pos = 0; moe_pos <= 1; moe_pos++) {
      moe_cf = 0.5;
      bad += test_mode(0, a);
    }
  moe_cf = 0; moe_pos = 0;
  /* the router's options (moe.c, backend.h moe_route): sigmoid scores (renormalised at
   * K = 2, not at K = 1) with a scaling factor, the z-loss (its value and its gradient),
   * pre-softmax; both layers (the expert bias starts at 0: nothing to differentiate) */
  for (int a = 0; a <= 15; a += 15) {
    moe_E = 4; moe_a = 0.5;
    moe_sig = 1; moe_s = 2.5; moe_z = 0.3;
    for (moe_K = 2; moe_K >= 1; moe_K--) bad += test_mode(0, a);
    moe_sig = 0; moe_s = 0; moe_pre = 1; moe_K = 2;
    bad += test_mode(0, a);
    moe_pre = 0; moe_a = 0; moe_z = 0.3;
    bad += test_mode(0, a);   /* the z-loss alone, softmax over the top-K */
    moe_z = 0;
  }
  /* a shared expert of width 6 (--moe-shared-ffn-hidden), both layers, and with dropout */
  moe_S = 6;
  for (int a = 0; a <= 15; a += 15) bad += test_mode(0, a);
  bad += test_mode_drop(0, 0, 0.3);
  /* and its gate (--moe-shared-expert-gate), both layers, and with dropout */
  moe_G = 1;
  for (int a = 0; a <= 15; a += 15) bad += test_mode(0, a);
  bad += test_mode_drop(0, 0, 0.3);
  moe_S = moe_G = 0;
  moe_E = moe_K = 0; moe_a = 0;
  /* --qk-layernorm: GPT-2's layer (layer norms) and Llama's (RMS norms, then RoPE; with
   * dropout), and with the experts */
  for (int a = 16; a <= 31; a += 15) bad += test_mode(0, a) + test_mode(2, a);
  bad += test_mode_drop(0, 31, 0.3);
  moe_E = 4; moe_K = 2;
  bad += test_mode(0, 31);
  moe_E = moe_K = 0;
  /* --kv-channels: heads of D = 3 (a D = 12 > hidden 8; GPT-2's layer) and D = 6 and 1
   * (Llama's: RoPE over D = 6; D = 1 without it: a D = 4 < 8), with --qk-layernorm
   * (gains [D]) and the experts */
  kv_ch = 3; bad += test_mode(0, 0) + test_mode(2, 0);
  kv_ch = 6; bad += test_mode(0, 15) + test_mode(0, 31) + test_mode_drop(0, 15, 0.3);
  kv_ch = 1; bad += test_mode(0, 11);
  moe_E = 4; moe_K = 2; kv_ch = 6;
  bad += test_mode(0, 15);
  moe_E = moe_K = 0; kv_ch = 0;
  be->destroy(be);
  return bad || bad0 ? 1 : 0;
}
