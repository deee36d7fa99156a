/* moe.h: the mixture-of-experts MLP of the gpt model (--num-experts; runtime/moe.c),
 * internal to libppsrt. model_gpt.c owns the layer (norms, attention, residuals, the
 * activation store entries, dropout); moe.c computes what replaces the dense MLP: the
 * router, the permutation of tokens to experts, the experts and the weighted combine,
 * and their input and weight gradients, split as the gpt's F, B and W passes are.
 * docs/models.md ("Mixture of experts") gives the math. */
#ifndef PPSRT_MOE_H
#define PPSRT_MOE_H
#include "model.h"

typedef struct ppsrt_moe {
  int E, K;               /* experts, experts a token */
  int F, f, fw;           /* an expert's width (whole), this rank's share, its FC1's output width (SwiGLU: 2f) */
  int sw, bias, tp;       /* SwiGLU experts, linear biases, --tensor-parallel group size */
  int X, j, e0, El;       /* --expert-parallel group size, this rank in it, its experts [e0, e0 + El) */
  int N, n, r0, h;        /* tokens of a microbatch, this rank's residual rows [r0, r0 + n), hidden */
  int nc, nmb, nslot;     /* --no-compute, microbatches, layer slots (nmb x local stages x layers) */
  size_t es;              /* bytes of an act_dtype value */
  double coeff;           /* --moe-aux-loss-coeff */
  double zcoeff;          /* --moe-z-loss-coeff Z (0: none) */
  ppsrt_moe_router rt;    /* --moe-router-score-function, -pre-softmax, -topk-scaling-factor (bias, zcoef: per call) */
  /* --moe-router-enable-expert-bias (sigmoid): per layer of this device (nl = nslot / nmb,
   * layer slot % nl) the bias [E] (F32, host hbias and device dbias, the same values),
   * and the slots routed to each expert this iteration (this rank's own tokens, kept
   * after any dropping; hload [nl][E]); ppsrt_moe_update_bias moves the bias */
  int ebias, nl;
  double bias_rate;       /* --moe-router-bias-update-rate U */
  float *hbias, *dbias, *hload;
  ppsrt_backend *dbe;     /* the backend dbias was allocated on (NULL: not yet, the first F's routing does) */
  int cp, cpr;            /* --context-parallel: group size and rank (the load-balancing loss counts the group's tokens) */
  float *hcp;             /* host scratch [cp][2E] (cp > 1 with the load-balancing loss) */
  double aux_loss;        /* this iteration's load-balancing loss so far (each microbatch's / nmb), the z-loss's included */
  double z_loss;          /* the z-loss's part of it */
  uint64_t route_hash;    /* a hash of every routing decision of the iteration (tests: did a change move one?) */
  uint64_t *shash;        /* host [nslot]: a hash of each slot's routing by its last F, in token order (--check) */
  /* --check's replay (cfg->moe_record; docs/runtime.md "--check"): rec, host [nslot][N K],
   * this rank's own slots' decisions by each slot's last F (expert e, or E + e where the
   * capacity dropped the slot: shash's values); in the reference, replay ([nslot][N K],
   * rec's encoding, the caller's; NULL: its own top-K) is what its F routes, ohash [nslot]
   * the hash of its own choice (what it would have routed) and dforce one slot's forced
   * experts in the backend's memory (fbe's); orec ([nslot][N K], rec's encoding; only
   * where the reference records too, for a --context-parallel pipeline whose ranks hash
   * parts of its slots: model_gpt.c ppsrt_gpt_route_ohash) its own choice's decisions */
  int32_t *rec;
  const int32_t *replay;
  uint64_t *ohash;
  int32_t *orec;
  int32_t *dforce, *hforce;
  ppsrt_backend *fbe;
  int fault;              /* PPSRT_FAULT=route (cfg->moe_record 2, on the ranks its @replica=R or @context=C names;
                           * tests only): moe.c fault_route */
  int *cnt;               /* host [nslot][E]: gathered slots (X N K) routed to each expert by the slot's last F */
  int *ocnt;              /* host scratch [E]: this rank's own N K slots a expert (the load-balancing loss) */
  int cap, dpos;          /* --moe-expert-capacity-factor: slots an expert keeps of a rank's N K (0: dropless);
                           * --moe-token-drop-policy position (1) or probs (0) */
  int a2a;                /* --moe-token-dispatcher alltoall with X > 1: each kept slot's row sent to its expert's rank */
  int *acnt;              /* host [nslot][X][E] (a2a): rank q's kept slots routed to each expert, by the slot's last F */
  size_t *av;             /* host scratch [4X] (a2a): an all-to-all's send sizes and places, receive sizes and places */
  int M;                  /* rows of the row-indexed saved parts: X N K, or with a capacity min(X N K, E cap) */
  float *hw;              /* host scratch [X N K]: the routing weights (with a capacity) */
  struct ppsrt_moe_ord *hord;   /* host scratch [N K]: one rank's slots in keeping order (with a capacity) */
  int32_t *hidx, *hpos;   /* host scratch [X N K] */
  float *hstat, *hcoef;   /* host scratch [2E], [E] */
  /* a layer's saved buffer (one activation store entry): byte offsets of its parts */
  size_t o_hpre, o_hact, o_eout, o_w, o_idx, o_pos, o_lg, o_dlog, o_coef, bytes;
} ppsrt_moe;

/* The MoE flags of cfg are usable (num_experts 0: nothing to check): 2 <= E <= 1024,
 * 1 <= K <= E, the expert width positive and divisible by --tensor-parallel, the
 * coefficient a finite number >= 0, every tensor within INT32_MAX elements; the router's:
 * pre-softmax with softmax only, the expert bias with sigmoid only, its rate with it, in
 * (0, 1], the scaling factor in (0, 1e6], the z-loss coefficient >= 0. 0, or
 * PPSRT_E_USAGE with a message naming the flag. */
int ppsrt_moe_check_config(const ppsrt_model_config *cfg);
/* The expert width of cfg (--moe-ffn-hidden, else the dense MLP's) and the top-K (default 2). */
int ppsrt_moe_ffn(const ppsrt_model_config *cfg);
int ppsrt_moe_topk(const ppsrt_model_config *cfg);

/* --moe-expert-capacity-factor: the slots an expert keeps of a rank's N tokens' N K,
 * ceil(CF N K / E) (at most N), 0 without a capacity factor; the rows of the experts'
 * saved parts, X N K, with a capacity min(X N K, E cap) (ppsc sim's moe_bytes too). */
int64_t ppsrt_moe_capacity(const ppsrt_model_config *cfg, int N);
int64_t ppsrt_moe_rows(const ppsrt_model_config *cfg, int N);
/* The dropping of one rank's NK slots (expert idx[s], weight w[s], s = n K + k): each
 * expert keeps at most cap of its slots, the largest w first (ties: the lower s), or with
 * by_pos the lowest s; mark[s] = 0 kept, -1 dropped. o: scratch of NK. */
struct ppsrt_moe_ord { int e, s; float w; };
void ppsrt_moe_drop(struct ppsrt_moe_ord *o, const int32_t *idx, const float *w, size_t NK, int cap, int by_pos,
                    int32_t *mark);
/* --moe-router-enable-expert-bias, after an iteration's last pass: the loads hload
 * summed over the gradients' group (the data- and context-parallel replicas: every rank
 * saw other tokens; ppsrt_replica_allreduce_host), then each layer's bias_e += U
 * sign(mean_e' load_e' - load_e), on the host and the device; the loads zeroed. Every rank
 * of the group ends with the same bias. 0 or an error. */
int ppsrt_moe_update_bias(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be);
/* The expert bias of layer l of this device (E floats, host): to save it, or after
 * writing it (a load) ppsrt_moe_bias_sync copies every layer's to the device. */
float *ppsrt_moe_bias(ppsrt_moe *mo, int l);
int ppsrt_moe_bias_sync(ppsrt_moe *mo, ppsrt_backend *be);
/* Sets up mo for one device (n, r0: its residual rows; nslot layer slots; cfg->ep,
 * cfg->ep_rank: its expert-parallel group and rank). */
int ppsrt_moe_init(ppsrt_moe *mo, const ppsrt_model_config *cfg, ppsrt_dtype at, int N, int n, int r0, int tp, int nslot);
void ppsrt_moe_free(ppsrt_moe *mo);
/* --check's reference (X = 1, C = 1): route every slot's tokens as rec ([nslot][N K], the
 * pipeline's decisions in mo->rec's encoding, kept by the caller until the reference's
 * last F) says: those experts, and with a capacity those drops; the weights and the
 * losses' statistics still from the reference's own logits. 0 or an error. */
int ppsrt_moe_set_replay(ppsrt_moe *mo, const int32_t *rec);

/* A layer's MoE parameters: 1 (the router) + E/X x (2, or 4 with biases): this rank's
 * experts only, named by their global index (moe.eE.*). Parameter j's
 * name suffix (after "sS.lL."), elements on this rank (*n) and of the whole tensor
 * (*full), tensor-parallel slice (sl, model.h; tp_split 0: whole), initial values
 * (*zero: zeros, else uniform in +-*scale; *out_layer: 1 for an expert's fc2.w, the
 * block's output layer, whose --init-method-std is scaled) and weight decay. */
int ppsrt_moe_nparams(const ppsrt_moe *mo);
void ppsrt_moe_param(const ppsrt_moe *mo, int j, int tpr, char *name, size_t len, size_t *n, size_t *full,
                     ppsrt_param *sl, int *zero, float *scale, int *out_layer, int *no_decay);

/* F of one layer's MoE MLP (slot: its layer slot): a = the MLP's input (LN2's output, all
 * N rows), x1 the residual (this rank's n rows); y = x1 + drop(moe(a)) (this rank's rows;
 * drop NULL: none). buf (mo->bytes, saved by the caller) keeps what B and W need.
 * count_loss: add this microbatch's load-balancing loss (not when recomputing). */
int ppsrt_moe_f(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *a,
                const void *x1, void *y, const ppsrt_dropout *drop, int count_loss);
/* B: dy = the gradient of moe(a) (all N rows, through the dropout mask already); writes
 * dln2 (this rank's n rows: the gradient of a, the router's part included) and leaves
 * in buf the gradients W needs (expert outputs', FC1's outputs', the router's logits'). */
int ppsrt_moe_b(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *dy,
                void *dln2);
/* 1: parameter j (of ppsrt_moe_nparams) is an expert's, held by this rank alone among its
 * expert-parallel group (X > 1); 0: the router, or X = 1. */
int ppsrt_moe_param_expert(const ppsrt_moe *mo, int j);
/* W: every MoE weight gradient, from buf and a (LN2's output recomputed, all N rows). */
int ppsrt_moe_w(ppsrt_moe *mo, ppsrt_ctx *c, ppsrt_backend *be, int slot, ppsrt_param *P, void *buf, const void *a);
#endif
