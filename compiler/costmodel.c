/* costmodel.c: seconds and bytes from `model { }` and `hardware { }`.
 *
 * The layer: a GPT block as the runtime's gpt builds it (runtime/model_gpt.c), with
 * Megatron-LM's Llama-style switches (model keys, 0 or 1): swiglu (default 0,
 *   --swiglu: FC1 one [h, 2f] matrix of gate and up columns, y = silu(gate) * up of
 *   width f, FC2 [f, h]), rmsnorm (0, --normalization RMSNorm: every norm gamma only,
 *   F32 rstd only), rope (0, --position-embedding-type rope: no position table) and
 *   bias (1; 0: --disable-bias-linear, no biases on QKV, projection, FC1, FC2),
 *   qkv_bias (0; 1 with bias = 0: --add-qkv-bias, QKV's bias alone) and norm_epsilon
 *   (every norm's epsilon, default 1e-5: checked, changes no figure).
 *   f = ffn_hidden, default 4h, with swiglu Megatron's floor(8h/3 / 64) x 64 (where
 *   that is 0: 8 max(1, floor(8h/3 / 8))): ffn_default. g = query_groups (default a).
 *   D = kv_channels (default h/a; Megatron-LM's --kv-channels, the runtime's; needs heads,
 *   even with rope): the head size, the attention's width a D. Wherever the formulas
 *   below write the attention's width as h they mean a D (equal at the default, where
 *   every figure is unchanged byte for byte): QKV [h, a D (1 + 2g/a)] and the projection
 *   [a D, h] weights, h a D (2 + 2g/a) (M's h^2 terms); their column biases a D (1 + 2g/a);
 *   the attention A = 4bs^2 a D; the activations qkv a D (1 + 2g/a) d and att a D d
 *   a token, (2 + 2g/a) a D d together; qk_layernorm's (1 + g/a)(2 a D d + ...) and its
 *   gains [D]; context parallelism's KV = 2 s b (g/T) D d; the rope table s D floats.
 * Times (seconds), when the model gives layers L, hidden h, seq s, micro_batch b and
 * the hardware flops (FLOP/s per device) and, optionally, efficiency e (0 < e <= 1,
 * default 1: the fraction of `flops` the passes achieve):
 *   FLOPs of one transformer layer for one microbatch (Yeung et al., Vocabulary
 *   Parallelism, MLSys 2025; Narayanan et al. 2021), the matrices 2 FLOPs a weight a
 *   token, M = 2bs[h^2(1 + 2g/a) + h^2 + hf(swiglu ? 3 : 2)] (QKV, projection, MLP;
 *   g/a = 1 without heads), the attention A = 4bs^2h (scores and values, as the paper
 *   counts them): F = M + A, B = M + 2A, W = M; at g = a, f = 4h, no swiglu
 *   F = bsh(24h + 4s), B = bsh(24h + 8s), W = 24bsh^2, together bsh(72h + 12s)
 *   (norms, biases, activation functions and rotary embedding not counted);
 *   output layer (vocab V): F = B = W = 2bshV (6bshV); input layer: 3bsh, taken as
 *   F = bsh, W = 2bsh (its input gradient is nothing).
 *   A stage holds L / S layers; TF, TB, TW of one device share are those of L / P
 *   layers, divided by flops * e. Without `vocab parallel` stage 0 also runs the input
 *   layer and stage S-1 the output layer; with it the vocabulary passes run 1/P of
 *   them: Vocab-1 TS = F, TT = B + W; Vocab-2 TS = F + B, TT = W (of the output layer,
 *   over P); TIF = F, TIB = W of the input layer over P.
 *   TC = bsh * dtype_bytes / peer_bandwidth (one boundary activation);
 *   TOFF = unit_bytes / d2h_bandwidth, TRELOAD = unit_bytes / h2d_bandwidth (one
 *   device share's activation, one way, on each copy engine; both default to
 *   host_bandwidth; when both are given and their sum exceeds host_bandwidth, the
 *   link they share is split between them in proportion to their bandwidths).
 * Bytes, when heads a is also given (dtype_bytes d, default 2):
 *   activation of one layer for one microbatch, with fused attention (no s x s
 *   scores, only its F32 softmax statistics) and no dropout masks (the runtime's
 *   dropout regenerates them from a hash: runtime/dropout.h), a token:
 *     ln1, x1, ln2, y and the two residual-branch gradients B leaves for W (held
 *     from F) 6hd, the two norms' F32 mean and rstd 16 (rstd alone with rmsnorm: 8),
 *     qkv h(1 + 2g/a)d, the attention's F32 softmax statistics 4a, att hd, hpre
 *     (FC1's output: gate and up, 2f, with swiglu) fd or 2fd, hact (GeLU's or
 *     SwiGLU's output) fd (rotary embedding is applied in place: nothing added):
 *   sb[h(8 + 2g/a)d + f(swiglu ? 3 : 2)d + (rmsnorm ? 8 : 16) + 4a] bytes, at
 *   f = 4h, no switches sbh(16 + 2g/a) d + sb(16 + 4a): Korthikanti et al.,
 *   "Reducing Activation Recomputation in Large Transformer Models", 2022, eq. 1
 *   (34sbh + 5as^2b at d = 2) without its s^2 terms (scores, softmax, dropout of
 *   attention) and dropout masks, K and V at g/a of Q, plus the F32 statistics and
 *   the residual gradients: what the runtime's gpt keeps (runtime/model_gpt.c,
 *   layer_bytes and grad_slots). One activation unit (a device share) is L / P of
 *   it. Not counted: the last stage's final-norm statistics (2 F32 a token, 1 with
 *   rmsnorm) and, with rope, the F32 cos/sin table (s h/a floats) of every device
 *   with layers: the prediction has no term for whole-device buffers other than
 *   parameters and activations (docs/language.md, "Bytes").
 *   qk_layernorm = 1 adds (1 + g/a)(2hd + a(rmsnorm ? 4 : 8)) a token (each query and
 *   key head's input and output gradient, h/a values each, and its F32 statistics;
 *   split by heads over a tensor-parallel group) and 2h/a parameters a layer (4h/a
 *   with layer norms: gains and betas), whole on every GPU.
 *   Parameters of one layer: QKV h^2(1 + 2g/a), projection h^2, MLP hf(swiglu ? 3 :
 *   2); with bias = 1 their biases h(1 + 2g/a) + h + f(swiglu ? 2 : 1) + h (bias = 0
 *   and qkv_bias = 1, Qwen2's: QKV's h(1 + 2g/a) alone); two
 *   norms 2h each (gamma, beta; h with rmsnorm); the input embedding hV and the
 *   position table sh (none with rope) on the devices of stage 0, the output layer
 *   hV and the final norm 2h (h with rmsnorm) on those of stage S-1 (under `vocab
 *   parallel` 2hV / P on every device, the positions on device 0; tie_embeddings = 1:
 *   the output layer is the embedding's matrix, not counted again where stage 0's
 *   device holds stage S-1, a copy where another does, hV / P under `vocab
 *   parallel`; the copies' gradient all-reduce after the iteration is not modelled); static
 *   bytes per parameter: weights d + F32 gradients 4 + mixed-precision Adam 12 (F32
 *   master weights, momentum, variance; the master is the weight itself at d = 4),
 *   no sharding of optimizer state (18 bytes at d = 2, as Megatron counts them);
 *   with hardware { data_parallel = D; distributed_optimizer = 1; } the optimizer
 *   state is sharded over the D replicas (ZeRO-1, Megatron's distributed optimizer):
 *   d + 4 + 12 / D (8 / D at d = 4; D x C with context parallelism): dp_derive,
 *   costmodel_param_bytes.
 * Mixture of experts (model experts = E, moe_topk = K (2), moe_ffn_hidden = Fe (f),
 *   moe_aux_loss (0/1); the runtime's --num-experts; expert parallelism below): the MLP's
 *   FLOPs hf(fc1 + 1) become K hFe(fc1 + 1) + T hE (the router whole on every GPU of a
 *   tensor-parallel group); its activation bytes (hpre, hact) the experts' store entry
 *   (moe_bytes, whole on every GPU, its widths Fe/T); its parameters E experts (FC2's
 *   bias whole) and the router hE (whole). With moe_shared_ffn_hidden = Sh (the
 *   runtime's --moe-shared-ffn-hidden) a shared expert, a dense MLP of width Sh on every
 *   token, split over a tensor-parallel group as the dense MLP (replicated under expert
 *   parallelism): FLOPs + hSh(fc1 + 1), bytes + its hpre and hact (Sh (fc1 + 1) a token,
 *   split), parameters + its FC1, FC2 and biases. With moe_shared_gate = 1 (the runtime's
 *   --moe-shared-expert-gate) its output gated per token by sigmoid(x . wg), wg [h]
 *   whole on every GPU: FLOPs + h a token in F, B and W each (T x under tensor
 *   parallelism, as the router; 1 x with sequence parallelism, each GPU its own rows),
 *   bytes + 8 + (h + 1) d a token kept whole (z and s F32, the shared output before
 *   the gate, dz; split by sequence parallelism), parameters + h (whole).
 *   docs/language.md "Mixture of experts".
 * Tensor parallelism (hardware tensor_parallel = T, whole, default 1; Megatron-LM's:
 *   Shoeybi et al. 2019, Korthikanti et al. 2022): each pipeline device is a group of
 *   T GPUs, P x D x T GPUs in all, and every figure above is one GPU's (T = 1: all
 *   unchanged, byte for byte). Megatron needs T to divide heads, query_groups and
 *   ffn_hidden (when given; with swiglu its default too): errors at tensor_parallel
 *   otherwise.
 *   FLOPs: the layers' F, B, W and the output layer's (a vocabulary-parallel LM
 *   head) divide by T, the input layer's not (every GPU of the group looks up every
 *   token in its vocabulary rows: counted whole, as the runtime counts it); under
 *   `vocab parallel` TS, TT, TIF, TIB divide by T.
 *   Communication, not overlapped (Megatron without --tp-comm-overlap), in the passes'
 *   times: rings over the T GPUs (dp_ring_time: all-reduce, dp_half_ring_time:
 *   reduce-scatter or all-gather) at tp_bandwidth (bytes/s of each GPU's link inside
 *   its group, default peer_bandwidth; one of them is needed when the times are
 *   derived) and tp_latency (s a ring step, default 0), of X = bsh d bytes:
 *     a layer's F: 2 all-reduces of X (the attention's and the MLP's row-parallel
 *       outputs); with sequence_parallel = 1: 2 all-gathers (the layer norms'
 *       outputs) and 2 reduce-scatters of X, the same ring time; its B the same (the
 *       conjugate collectives of the input gradient); its W none (with SP Megatron
 *       gathers the QKV and FC1 inputs again for the weight gradients, overlapped
 *       with the input-gradient GEMMs: not counted). TF, TB gain L / P of these;
 *     input layer (stage 0): F all-reduces its output X (SP: reduce-scatters it); B
 *       (SP only) all-gathers the gradient it receives;
 *     output layer (stage S-1): F all-gathers its input X (SP only) and all-reduces
 *       the vocabulary-parallel cross-entropy's max, sum of exponentials and target
 *       logit (3 rings of bs F32); B all-reduces its input gradient X (SP: reduce-
 *       scatters it);
 *     under `vocab parallel` (the runtime's model_gpt.c: each device's V/P rows split
 *       over its group, the group's sums inside the vocabulary passes, the schedule's
 *       collectives (TCOLL, from the file) over the P devices as at T = 1): TIF
 *       all-reduces the device's embeddings (bsh F32); TS the statistics (3 rings of bs
 *       F32) and with Vocab-2 the partial input gradient's two terms (2 x bsh F32); TT
 *       with Vocab-1 the input gradient (bsh F32); TIB none; all token rows, with
 *       sequence parallelism too.
 *   TC: with SP a GPU sends its s / T rows of the boundary activation (Megatron's p2p
 *   shape), X / T / peer_bandwidth; without it each GPU sends the whole X on its link.
 *   Activation of one layer for one microbatch, per GPU, from the runtime gpt's
 *   buffers (per token, x d unless F32) split as Korthikanti et al. eq. 2 (no SP:
 *   sbh(10 + 24/t + 5as/(ht)) at d = 2) and eq. 3 (SP: sbh/t (34 + 5as/h)) split theirs:
 *     whole on every GPU without SP, Korthikanti's layer-norm inputs, QKV and FC1
 *       inputs and residual path: ln1 (LN1 output, the QKV input) h, x1 (LN2 input) h,
 *       ln2 (LN2 output, the FC1 input) h, y (the next layer's input, LN1's) h, the
 *       two residual-branch gradients B leaves for W 2h: 6h, and the two layer norms'
 *       F32 statistics, n = 16 bytes (8 with rmsnorm);
 *     split by heads or columns: qkv h(1 + 2g/a), att (the projection's input) h,
 *       hpre and hact (FC1 output, its activation) f(swiglu ? 3 : 2): h(2 + 2g/a) +
 *       f(swiglu ? 3 : 2) (10h + 2hg/a at f = 4h), and the attention's F32 softmax
 *       statistics 4a bytes;
 *   act_layer = sb[6hd + n] + sb[hd(2 + 2g/a) + fd(swiglu ? 3 : 2) + 4a] / T without
 *   SP, act_layer = (both) / T with SP (everything sequence-split); at T = 1 both are
 *   the formula above.
 *   Parameters per GPU: the column-parallel QKV (h x h(1 + 2g/a)) and FC1 (h x f, or
 *   h x 2f with swiglu) matrices and their biases, the row-parallel projection (h x h)
 *   and FC2 (f x h) matrices / T; the row-parallel biases (2h, with bias = 1), the
 *   layer norms (4h, or 2h with rmsnorm), the position table (sh, none with rope) and
 *   the final layer norm (2h or h) whole; the embedding and the output
 *   layer hV / T each (2hV / (P T) a device under `vocab parallel`). Static bytes a
 *   parameter unchanged (d + 4 + 12, or d + 4 + 12 / D with the distributed
 *   optimizer) on these counts; stage_params and dev_params are one GPU's, so the
 *   data-parallel gradient bytes (dp_derive) are those of a TP rank, all-reduced over
 *   its D replicas (the same rank of every replica).
 *   These keys model a Megatron-style deployment. The runtime's --tensor-parallel
 *   (model_gpt.c) splits the layers the same way, and with --sequence-parallel keeps
 *   exactly act_layer (SP) a layer (tests/runtime/sp.sh), and splits the input and
 *   output layers by vocabulary rows; its first and last stages keep a few buffers of
 *   all N rows this model does not count (docs/training.md; the compiled program notes
 *   a tensor_parallel that differs from its flags).
 * Context parallelism (hardware context_parallel = C, whole, default 1; Megatron-LM's
 *   --context-parallel-size with --cp-comm-type all_gather): each pipeline device (each
 *   GPU of its tensor-parallel group) is C GPUs splitting every sequence in 2C chunks,
 *   GPU c holding chunks c and 2C-1-c (balanced under the causal mask: each GPU sees
 *   2C + 1 of the C(2C + 1) chunk pairs). P x D x C x T GPUs; every figure is one GPU's
 *   (C = 1: all unchanged, byte for byte). seq must be divisible by 2C (an error at
 *   context_parallel otherwise, a note at seq).
 *   FLOPs: every F, B, W (the attention's A too: 1/C of the whole causal attention by
 *   the load balancing), the input and output layers' and the vocabulary passes' divide
 *   by C (by C T with tensor parallelism).
 *   Communication, not overlapped, in the passes' times (add_pass_comm, as TP's): of
 *   KV = 2 s b (g/T)(h/a) d bytes (K and V of a GPU's key/value heads, the whole
 *   sequence; g/a = 1 without heads), a ring over the C GPUs at cp_bandwidth (needed
 *   when C > 1 and the times are derived) and cp_latency (default 0), t =
 *   dp_half_ring_time(C, KV): a layer's F all-gathers K and V (t), its B all-gathers
 *   them again and reduce-scatters their gradients (2t), W none; TF, TB gain L / P of
 *   these. The TP collectives carry a GPU's s / C tokens (X / C; the cross-entropy's
 *   statistics bs / C), and TC is its s / C rows (s / (C T) with SP).
 *   Activation: every term of act_layer is per token: / C (act_rep and act_split too).
 *   Parameters: none split (static bytes unchanged), but the data-parallel gradient
 *   group is D x C GPUs (Megatron's data-parallel group with context parallelism):
 *   dp_derive's ring times span R = D x C GPUs and the distributed optimizer shards
 *   over R; with data_parallel 1 and C > 1 the C GPUs still all-reduce their
 *   gradients, at dp_bandwidth / dp_latency, else cp_bandwidth / cp_latency (the group
 *   is the context-parallel group), else peer_bandwidth / 0.
 * Expert parallelism (hardware expert_parallel = X, whole, default 1; Megatron-LM's
 *   --expert-model-parallel-size X with --moe-token-dispatcher-type allgather, the
 *   runtime's --expert-parallel X; EpModel; with hardware ep_alltoall = 1 the all-to-all
 *   dispatcher's times instead, under an assumed balanced routing: ep_layer_times_a2a): the X consecutive data-parallel replicas of
 *   a pipeline device (same context and tensor rank) form an EP group, rank j holding
 *   experts [j E/X, (j+1) E/X), the router whole. X must divide experts and
 *   data_parallel (default 1), X > 1 needs experts: errors at expert_parallel.
 *   FLOPs unchanged (balanced routing: N K slots of width Fe a GPU). Communication, not
 *   overlapped, in the passes' times (add_pass_comm, ep_layer_times): of N = s b / C
 *   tokens, rings over the X GPUs at ep_bandwidth (needed when X > 1 and the times are
 *   derived, as cp_bandwidth) and ep_latency (default 0), each rank contributing y bytes
 *   t(y) = (X-1) y / ep_bandwidth + (X-1) ep_latency: a layer's F t(N h d) + t(8 N K) +
 *   t(4 N h) (LN2's output and the routing gathered, the F32 outputs reduce-scattered),
 *   B t(N h d) + t(4 N h) + t(4 N K) (dy gathered, the F32 input and routing-weight
 *   gradients reduce-scattered), W t(N h d) (LN2's output gathered again); TF, TB, TW
 *   gain L / P of them (TBW both).
 *   Bytes: the experts' parameters (FC1, FC2, their biases) 1/X a GPU
 *   (stage_expert_params, dev_expert_params), the rest unchanged; the experts' store
 *   entry (moe_bytes) sized for X N K slots (the worst case: every token of the group
 *   routed to this GPU's experts). dp_derive reduces the experts' F32 gradients over the
 *   D/X replicas of the same EP rank (x C) in a ring of their own after the dense
 *   part's (DpModel ebytes, eranks) and the distributed optimizer shards their state over
 *   (D/X) x C, the rest over D x C.
 * Host links: devices_per_host_link k (default 1) devices share one host link (d and
 *   d' share it when d / k == d' / k: k ranks on one GPU, or GPUs behind one PCIe
 *   switch), and duplex_bandwidth (default host_bandwidth) is what each direction
 *   gets while the other runs too; the simulator shares the link between the copies
 *   running on it (sim.c), TOFF and TRELOAD stay the times of a copy alone.
 * Explicit costs in the file win (elab.c applies only what the file did not give). */
#include "costmodel.h"
#include "sim.h"
#include <stdio.h>
#include <math.h>
#include <string.h>

static const IrKeyVal *kv_find(const IrKeyVal *kv, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(kv[i].key, key)) return &kv[i];
  return NULL;
}

/* Collectives that are not overlapped (tensor, context and expert parallelism's) run
 * inside the passes: f, b and w seconds of one device share more in TF, TB and TW (and
 * so in TBW = TB + TW). */
static void add_pass_comm(CostModel *out, double f, double b, double w) {
  out->tf += f;
  out->tb += b;
  out->tw += w;
}

/* One MoE layer's EP collectives for one microbatch (Megatron's allgather token
 * dispatcher), rings over the X GPUs of the group, each rank contributing `bytes`:
 * bytes / ep_bandwidth + (X-1) ep_latency (dp_half_ring_time of the X-rank whole).
 * Of N tokens, hidden h, top-K, activation bytes es:
 *   F: all-gather LN2's output (N h es), the routing (N K int32 indices and F32
 *      weights, 8 N K), reduce-scatter the combined outputs (F32, 4 N h);
 *   B: all-gather dy (N h es), reduce-scatter the input gradient (F32, 4 N h) and the
 *      routing weights' gradient (F32, 4 N K);
 *   W: all-gather LN2's output again (N h es). */
static double ep_coll(const EpModel *ep, double bytes) {
  return dp_half_ring_time(ep->X, ep->X * bytes, ep->bandwidth, ep->latency);
}
/* hardware ep_alltoall = 1 (Megatron's --moe-token-dispatcher-type alltoall, the runtime's
 * --moe-token-dispatcher alltoall): an ASSUMED balanced routing, (X-1)/X of a GPU's kept
 * N Kx slots (Kx: the kept slots a token, K dropless) go to the other X-1 GPUs, y = (X-1)/X
 * N Kx h es bytes, and as many come back; an all-to-all sends them in X-1 messages,
 * a2a(y) = y / ep_bandwidth + (X-1) ep_latency:
 *   F: the kept counts a expert all-gathered (4 E bytes a rank, ring), a2a(y) there, a2a(y)
 *      back (the expert outputs);
 *   B: a2a(y) there (w dy), a2a(y) back (the input gradient);
 *   W: a2a(y) there again (LN2's output).
 * layer_bytes = 5 y: what a GPU sends a layer and microbatch (the counts aside). A real
 * routing sends more or less: the runtime's --json ep_alltoall measures it. */
static void ep_layer_times_a2a(EpModel *ep, double h, double Kx, double E, double es) {
  double X = ep->X, y = (X - 1) / X * ep->tokens * Kx * h * es, a2a = y / ep->bandwidth + (X - 1) * ep->latency;
  ep->layer_f = ep_coll(ep, 4 * E) + 2 * a2a;
  ep->layer_b = 2 * a2a;
  ep->layer_w = a2a;
}
static void ep_layer_times(EpModel *ep, double h, double K, double es) {
  double N = ep->tokens;
  ep->layer_f = ep_coll(ep, N * h * es) + ep_coll(ep, 8 * N * K) + ep_coll(ep, 4 * N * h);
  ep->layer_b = ep_coll(ep, N * h * es) + ep_coll(ep, 4 * N * h) + ep_coll(ep, 4 * N * K);
  ep->layer_w = ep_coll(ep, N * h * es);
}

/* The feed-forward width f when model { } gives no ffn_hidden: 4h, or with swiglu = 1
 * Megatron-LM's (arguments.py), floor(8h/3 / 64) x 64, and where that is 0 (h < 24)
 * 8 max(1, floor(8h/3 / 8)), as the runtime's gpt takes it. */
static double ffn_default(double h, int swiglu) {
  if (!swiglu) return 4 * h;
  double f = floor(h / 24) * 64;   /* 8h/3 / 64 = h/24 */
  return f > 0 ? f : 8 * fmax(1, floor(h / 3));
}

/* One GPU's bytes of a mixture-of-experts MLP for one microbatch of n tokens, as the
 * runtime's experts keep them (runtime/moe.c ppsrt_moe_init: one store entry, each part
 * 256-byte aligned): of the n K routed slots FC1's outputs (fc1 f columns, f = Fe / T),
 * the activations (f), the expert outputs (h), in dtype d; the routing weights, top-K
 * indices and permutation (F32 / int32); of the n tokens the router's F32 probabilities
 * and their gradient's room (E each, the latter in d); with the load-balancing loss E
 * F32 coefficients. */
static double up256(double bytes) { return ceil(bytes / 256) * 256; }
/* the capacity of an expert (model moe_capacity_factor = CF, 0: none) of one GPU's n
 * tokens' n K slots: ceil(CF n K / E), at most n (runtime/moe.c ppsrt_moe_capacity) */
static double moe_cap(double n, double E, double K, double cf) {
  return cf > 0 ? fmin(n, ceil(cf * n * K / E)) : 0;
}
static double moe_bytes(double n, double h, double f, double fc1, double E, double K, double d, int aux, int X, double cf) {
  double nk = X * n * K;   /* slots: under expert parallelism the group's X N K (the worst case) */
  double rows = cf > 0 ? fmin(nk, E * moe_cap(n, E, K, cf)) : nk;   /* with a capacity at most E cap rows */
  return up256(rows * fc1 * f * d) + up256(rows * f * d) + up256(rows * h * d) + 3 * up256(nk * 4) + up256(n * E * 4) +
         up256(n * E * d) + (aux ? up256(E * 4) : 0);
}

int costmodel_derive(Arena *a, Diag *dg, const IrSchedule *s, const int32_t *stage_dev, CostModel *out) {
  memset(out, 0, sizeof *out);
  out->dtype_bytes = 2;
  int errors = 0;
  const IrKeyVal *mk[16], *hk[9];
  static const char *const mn[16] = {"layers", "hidden", "ffn_hidden", "heads", "query_groups", "seq", "micro_batch", "vocab", "dtype_bytes",
                                     "swiglu", "rmsnorm", "rope", "bias", "tie_embeddings", "qk_layernorm", "qkv_bias"};
  /* the Llama-style switches (0 or 1): what 1 means, or for bias what 0 means */
  static const char *const flag_meaning[7] = {
      "1: a SwiGLU feed-forward, FC1 one [hidden, 2 ffn_hidden] matrix of gate and up columns",
      "1: every layer norm an RMSNorm, gamma only",
      "1: rotary position embedding on the queries and keys, no position table",
      "0: no biases on the QKV, projection, FC1 and FC2 layers",
      "1: the output layer is the input embedding's matrix",
      "1: every query and key head normalised before RoPE, gains of the head size",
      "1: with bias = 0, the QKV layer alone keeps its bias (Qwen2's)"};
  static const char *const hn[9] = {"memory", "flops", "host_bandwidth", "peer_bandwidth", "efficiency",
                                    "d2h_bandwidth", "h2d_bandwidth", "devices_per_host_link", "duplex_bandwidth"};
  for (int i = 9; i < 16; i++) {
    mk[i] = kv_find(s->model, s->nmodel, mn[i]);
    if (mk[i] && mk[i]->value != 0 && mk[i]->value != 1) {
      diag_error(dg, mk[i]->span, "model %s must be 0 or 1 (%s), got %g", mn[i], flag_meaning[i - 9], mk[i]->value);
      errors++;
      mk[i] = NULL;
    }
  }
  int swiglu = mk[9] && mk[9]->value == 1, rmsnorm = mk[10] && mk[10]->value == 1;
  int rope = mk[11] && mk[11]->value == 1, bias = !(mk[12] && mk[12]->value == 0), tie = mk[13] && mk[13]->value == 1;
  int qkn = mk[14] && mk[14]->value == 1;
  int qkvb = !bias && mk[15] && mk[15]->value == 1;   /* (bias = 1: QKV's bias is there anyway) */
  /* norm_epsilon changes no time or byte; checked here as the runtime checks --norm-epsilon */
  const IrKeyVal *keps = kv_find(s->model, s->nmodel, "norm_epsilon");
  if (keps && !(keps->value > 0 && isfinite(keps->value))) {
    diag_error(dg, keps->span, "model norm_epsilon must be a finite number above 0 (every norm's epsilon; default 1e-5), "
               "got %g", keps->value);
    errors++;
  }
  for (int i = 0; i < 9; i++) {
    mk[i] = kv_find(s->model, s->nmodel, mn[i]);
    if (mk[i] && !(mk[i]->value > 0) && !(i == 7 && mk[i]->value == 0)) {
      diag_error(dg, mk[i]->span, "model %s must be positive, got %g", mn[i], mk[i]->value);
      errors++;
      mk[i] = NULL;
    }
  }
  for (int i = 0; i < 9; i++) {
    hk[i] = kv_find(s->hardware, s->nhardware, hn[i]);
    if (hk[i] && (!(hk[i]->value > 0) || (i == 4 && hk[i]->value > 1))) {
      if (i == 4) diag_error(dg, hk[i]->span, "hardware efficiency must be in (0, 1], got %g", hk[i]->value);
      else diag_error(dg, hk[i]->span, "hardware %s must be positive, got %g", hn[i], hk[i]->value);
      errors++;
      hk[i] = NULL;
    }
  }
  if (hk[7] && hk[7]->value != floor(hk[7]->value)) {
    diag_error(dg, hk[7]->span, "hardware devices_per_host_link must be a whole number, got %g", hk[7]->value);
    errors++;
  }
  if (hk[8] && !hk[2]) {
    diag_error(dg, hk[8]->span, "hardware duplex_bandwidth needs host_bandwidth (the speed of one direction alone)");
    errors++;
  } else if (hk[8] && hk[8]->value > hk[2]->value) {
    diag_error(dg, hk[8]->span, "hardware duplex_bandwidth (%g, each way while both run) must not exceed host_bandwidth (%g)",
               hk[8]->value, hk[2]->value);
    errors++;
  }
  /* model { kv_channels }: the attention's head size D (Megatron-LM's --kv-channels; default
   * hidden / heads) */
  const IrKeyVal *kkv = kv_find(s->model, s->nmodel, "kv_channels");
  if (kkv && !(kkv->value >= 1 && kkv->value <= 1e6 && kkv->value == floor(kkv->value))) {
    diag_error(dg, kkv->span, "model kv_channels must be a whole number from 1 to 1000000 (each attention head's size), got %g",
               kkv->value);
    errors++;
    kkv = NULL;
  } else if (kkv && !mk[3]) {
    diag_error(dg, kkv->span, "model kv_channels is the size of each of the heads: it needs model heads");
    errors++;
    kkv = NULL;
  } else if (kkv && rope && fmod(kkv->value, 2) != 0) {
    diag_error(dg, kkv->span, "model kv_channels = %g must be even with rope = 1 (rotary embedding turns pairs of a head's columns)",
               kkv->value);
    diag_note(dg, mk[11]->span, "model rope is given here");
    errors++;
    kkv = NULL;
  }
  /* tensor parallelism: hardware { tensor_parallel; sequence_parallel; tp_bandwidth; tp_latency } */
  const IrKeyVal *kt = kv_find(s->hardware, s->nhardware, "tensor_parallel");
  const IrKeyVal *ksp = kv_find(s->hardware, s->nhardware, "sequence_parallel");
  const IrKeyVal *ktb = kv_find(s->hardware, s->nhardware, "tp_bandwidth");
  const IrKeyVal *ktl = kv_find(s->hardware, s->nhardware, "tp_latency");
  int T = 1, sp = 0, t_bad = kt && !(kt->value >= 1 && kt->value <= 1e6 && kt->value == floor(kt->value));
  if (t_bad) {
    diag_error(dg, kt->span, "hardware tensor_parallel must be a whole number from 1 to 1000000 (GPUs of each tensor-parallel group), got %g",
               kt->value);
    errors++;
  } else if (kt) {
    T = (int)kt->value;
  }
  if (ksp && ksp->value != 0 && ksp->value != 1) {
    diag_error(dg, ksp->span, "hardware sequence_parallel must be 0 or 1 (1: the layer norms, dropouts and residual path split by sequence over the tensor-parallel group), got %g",
               ksp->value);
    errors++;
  } else if (ksp && ksp->value == 1 && T == 1 && !t_bad) {
    diag_error(dg, ksp->span, "hardware sequence_parallel = 1 needs tensor_parallel > 1 (it splits by sequence over the tensor-parallel group)");
    errors++;
  } else if (ksp) {
    sp = ksp->value == 1;
  }
  if (ktb && !(ktb->value > 0 && isfinite(ktb->value))) { diag_error(dg, ktb->span, "hardware tp_bandwidth must be positive, got %g", ktb->value); errors++; ktb = NULL; }
  if (ktl && !(ktl->value >= 0 && isfinite(ktl->value))) { diag_error(dg, ktl->span, "hardware tp_latency must not be negative, got %g", ktl->value); errors++; ktl = NULL; }
  if (T > 1) { /* Megatron splits the attention by heads and key/value groups, the MLP by columns */
    static const int divides[3] = {3, 4, 2};   /* heads, query_groups, ffn_hidden */
    for (int k = 0; k < 3; k++) {
      const IrKeyVal *m = mk[divides[k]];
      if (!m || fmod(m->value, T) == 0) continue;
      diag_error(dg, kt->span, "hardware tensor_parallel = %d must divide model %s = %g (Megatron splits %s over the tensor-parallel group)", T,
                 mn[divides[k]], m->value, k == 0 ? "the attention by heads" : k == 1 ? "the key/value heads" : "the feed-forward by columns");
      diag_note(dg, m->span, "model %s is given here", mn[divides[k]]);
      errors++;
    }
    if (swiglu && !mk[2] && mk[1] && fmod(ffn_default(mk[1]->value, 1), T) != 0) {
      diag_error(dg, kt->span, "hardware tensor_parallel = %d must divide the feed-forward width %g, swiglu's default ffn_hidden for hidden = %g (Megatron splits the feed-forward by columns; give ffn_hidden)",
                 T, ffn_default(mk[1]->value, 1), mk[1]->value);
      diag_note(dg, mk[9]->span, "model swiglu is given here");
      errors++;
    }
    if (mk[0] && mk[1] && mk[5] && mk[6] && hk[1] && !ktb && !hk[3]) {
      diag_error(dg, kt->span, "hardware tensor_parallel = %d needs tp_bandwidth (bytes/s of each GPU's link inside its tensor-parallel group, e.g. NVLink) or peer_bandwidth, to derive the times",
                 T);
      errors++;
    }
  }
  /* context parallelism: hardware { context_parallel; cp_bandwidth; cp_latency } */
  const IrKeyVal *kc = kv_find(s->hardware, s->nhardware, "context_parallel");
  const IrKeyVal *kcb = kv_find(s->hardware, s->nhardware, "cp_bandwidth");
  const IrKeyVal *kcl = kv_find(s->hardware, s->nhardware, "cp_latency");
  int C = 1;
  if (kc && !(kc->value >= 1 && kc->value <= 1e6 && kc->value == floor(kc->value))) {
    diag_error(dg, kc->span, "hardware context_parallel must be a whole number from 1 to 1000000 (GPUs of each context-parallel group), got %g",
               kc->value);
    errors++;
  } else if (kc) {
    C = (int)kc->value;
  }
  if (kcb && !(kcb->value > 0 && isfinite(kcb->value))) { diag_error(dg, kcb->span, "hardware cp_bandwidth must be positive, got %g", kcb->value); errors++; kcb = NULL; }
  if (kcl && !(kcl->value >= 0 && isfinite(kcl->value))) { diag_error(dg, kcl->span, "hardware cp_latency must not be negative, got %g", kcl->value); errors++; kcl = NULL; }
  if (C > 1) { /* Megatron cuts the sequence in 2C chunks, 2 a GPU (load balancing) */
    if (mk[5] && fmod(mk[5]->value, 2.0 * C) != 0) {
      diag_error(dg, kc->span, "hardware context_parallel = %d needs model seq = %g divisible by 2 x %d = %d (each GPU holds 2 of 2C chunks of the sequence, balanced under the causal mask)",
                 C, mk[5]->value, C, 2 * C);
      diag_note(dg, mk[5]->span, "model seq is given here");
      errors++;
    }
    if (mk[0] && mk[1] && mk[5] && mk[6] && hk[1] && !kcb) {
      diag_error(dg, kc->span, "hardware context_parallel = %d needs cp_bandwidth (bytes/s of each GPU's link inside its context-parallel group), to derive the times of the K and V all-gathers",
                 C);
      errors++;
    }
  }
  /* mixture of experts: model { experts; moe_topk; moe_ffn_hidden; moe_aux_loss } */
  const IrKeyVal *ke = kv_find(s->model, s->nmodel, "experts"), *kk = kv_find(s->model, s->nmodel, "moe_topk");
  const IrKeyVal *kf = kv_find(s->model, s->nmodel, "moe_ffn_hidden"), *ka = kv_find(s->model, s->nmodel, "moe_aux_loss");
  const IrKeyVal *kcf = kv_find(s->model, s->nmodel, "moe_capacity_factor");
  const IrKeyVal *ksh = kv_find(s->model, s->nmodel, "moe_shared_ffn_hidden");
  const IrKeyVal *ksg = kv_find(s->model, s->nmodel, "moe_shared_gate");
  double E = 0, K = 2, Fe = 0, cf = 0, Sh = 0, Sg = 0;
  int aux = 0;
  if (ke && !(ke->value >= 2 && ke->value <= 1024 && ke->value == floor(ke->value))) {
    diag_error(dg, ke->span, "model experts must be a whole number from 2 to 1024 (every layer's MLP is that many experts), got %g", ke->value);
    errors++;
  } else if (ke) {
    E = ke->value;
  }
  const IrKeyVal *moe_keys[6] = {kk, kf, ka, kcf, ksh, ksg};
  for (int i = 0; i < 6 && !ke; i++)
    if (moe_keys[i]) {
      diag_error(dg, moe_keys[i]->span, "model %s sets up the experts of model experts = E: add it", moe_keys[i]->key);
      errors++;
    }
  if (kk && !(kk->value >= 1 && kk->value == floor(kk->value) && (!(E > 0) || kk->value <= E))) {
    diag_error(dg, kk->span, "model moe_topk must be a whole number from 1 to experts (%g), got %g", E, kk->value);
    errors++;
  } else if (kk) {
    K = kk->value;
  }
  if (kf && !(kf->value > 0 && kf->value == floor(kf->value))) {
    diag_error(dg, kf->span, "model moe_ffn_hidden must be a positive whole number (each expert's width), got %g", kf->value);
    errors++;
  } else if (kf) {
    Fe = kf->value;
  }
  if (ksh && !(ksh->value > 0 && ksh->value <= 2147483647.0 && ksh->value == floor(ksh->value))) {
    diag_error(dg, ksh->span, "model moe_shared_ffn_hidden must be a positive whole number (the shared expert's width), got %g", ksh->value);
    errors++;
  } else if (ksh && ke) {
    Sh = ksh->value;
  }
  if (ksg && ksg->value != 0 && ksg->value != 1) {
    diag_error(dg, ksg->span, "model moe_shared_gate must be 0 or 1 (1: the shared expert's output gated by sigmoid(x . wg)), got %g", ksg->value);
    errors++;
  } else if (ksg && ke && ksg->value == 1 && !ksh) {
    diag_error(dg, ksg->span, "model moe_shared_gate gates the shared expert of model moe_shared_ffn_hidden: add it");
    errors++;
  } else if (ksg && ke) {
    Sg = ksg->value == 1 && Sh > 0;
  }
  if (Sh > 0 && T > 1 && fmod(Sh, T) != 0) {
    diag_error(dg, kt->span, "hardware tensor_parallel = %d must divide the shared expert's width %g (each GPU takes 1/T of its columns)", T, Sh);
    diag_note(dg, ksh->span, "model moe_shared_ffn_hidden is given here");
    errors++;
  }
  if (ka && ka->value != 0 && ka->value != 1) {
    diag_error(dg, ka->span, "model moe_aux_loss must be 0 or 1 (1: a load-balancing loss, --moe-aux-loss-coeff above 0), got %g", ka->value);
    errors++;
  } else if (ka) {
    aux = ka->value == 1;
  }
  if (kcf && !(kcf->value > 0 && kcf->value <= 1e6)) {
    diag_error(dg, kcf->span, "model moe_capacity_factor must be a number above 0 (at most 1e6; each expert keeps ceil(factor x tokens x moe_topk / experts) slots), got %g",
               kcf->value);
    errors++;
  } else if (kcf) {
    cf = kcf->value;
  }
  if (kcf && ke && C > 1) {
    diag_error(dg, kcf->span, "model moe_capacity_factor does not run with hardware context_parallel = %d (the runtime refuses --moe-expert-capacity-factor with --context-parallel: a GPU's tokens are parts of sequences)",
               C);
    errors++;
  }
  if (E > 0 && !(Fe > 0) && mk[1]) Fe = mk[2] ? mk[2]->value : ffn_default(mk[1]->value, swiglu);   /* the MLP's width */
  if (E > 0 && T > 1 && Fe > 0 && fmod(Fe, T) != 0) {
    diag_error(dg, kt->span, "hardware tensor_parallel = %d must divide the experts' width %g (each GPU takes 1/T of every expert's columns)", T, Fe);
    if (kf) diag_note(dg, kf->span, "model moe_ffn_hidden is given here");
    errors++;
  }
  /* expert parallelism: hardware { expert_parallel; ep_bandwidth; ep_latency } */
  const IrKeyVal *kx = kv_find(s->hardware, s->nhardware, "expert_parallel");
  const IrKeyVal *kxb = kv_find(s->hardware, s->nhardware, "ep_bandwidth");
  const IrKeyVal *kxl = kv_find(s->hardware, s->nhardware, "ep_latency");
  const IrKeyVal *kxa = kv_find(s->hardware, s->nhardware, "ep_alltoall");
  const IrKeyVal *kdp = kv_find(s->hardware, s->nhardware, "data_parallel");
  int X = 1;
  if (kx && !(kx->value >= 1 && kx->value <= 1e6 && kx->value == floor(kx->value))) {
    diag_error(dg, kx->span, "hardware expert_parallel must be a whole number from 1 to 1000000 (GPUs of each expert-parallel group), got %g",
               kx->value);
    errors++;
  } else if (kx) {
    X = (int)kx->value;
  }
  if (kxb && !(kxb->value > 0 && isfinite(kxb->value))) { diag_error(dg, kxb->span, "hardware ep_bandwidth must be positive, got %g", kxb->value); errors++; kxb = NULL; }
  if (kxl && !(kxl->value >= 0 && isfinite(kxl->value))) { diag_error(dg, kxl->span, "hardware ep_latency must not be negative, got %g", kxl->value); errors++; kxl = NULL; }
  if (kxa && kxa->value != 0 && kxa->value != 1) {
    diag_error(dg, kxa->span, "hardware ep_alltoall must be 0 or 1 (1: the all-to-all token dispatcher, 0: the allgather one), got %g",
               kxa->value);
    errors++;
    kxa = NULL;
  }
  if (X > 1) { /* Megatron's EP group: X data-parallel replicas, E / X experts each */
    double D = kdp ? kdp->value : 1;
    if (!ke) {
      diag_error(dg, kx->span, "hardware expert_parallel = %d needs model experts (it splits the experts over the expert-parallel group)", X);
      errors++;
    } else if (E > 0 && fmod(E, X) != 0) {
      diag_error(dg, kx->span, "hardware expert_parallel = %d must divide model experts = %g (each GPU of the group holds experts / expert_parallel of them)",
                 X, E);
      diag_note(dg, ke->span, "model experts is given here");
      errors++;
    }
    if (D >= 1 && D == floor(D) && fmod(D, X) != 0) {
      diag_error(dg, kx->span, "hardware expert_parallel = %d must divide data_parallel = %g (the expert-parallel group is expert_parallel of the data-parallel replicas)",
                 X, D);
      if (kdp) diag_note(dg, kdp->span, "hardware data_parallel is given here");
      errors++;
    }
    if (mk[0] && mk[1] && mk[5] && mk[6] && hk[1] && !kxb) {
      diag_error(dg, kx->span, "hardware expert_parallel = %d needs ep_bandwidth (bytes/s of each GPU's link inside its expert-parallel group), to derive the times of the token all-gathers and reduce-scatters",
                 X);
      errors++;
    }
  }
  if (errors) return errors;
  out->link_devs = hk[7] ? (int)fmin(hk[7]->value, 1e9) : 1;
  out->duplex = hk[8] ? hk[8]->value / hk[2]->value : 1;
  int P = s->ndev, S = s->nstage;
  if (P <= 0 || S <= 0) return 0;
  double L = mk[0] ? mk[0]->value : 0, h = mk[1] ? mk[1]->value : 0, f = mk[2] ? mk[2]->value : ffn_default(h, swiglu);
  double heads = mk[3] ? mk[3]->value : 0, g = mk[4] ? mk[4]->value : heads;
  /* key/value heads over heads (1 without heads: the times need no heads) */
  double gr = mk[3] ? g / heads : 1;
  /* the head size D = kv_channels (default h/a), the attention's width aD = a D (h by
   * default, and without heads) and aD over h, adr (1 by default) */
  double Dh = kkv ? kkv->value : heads > 0 ? h / heads : 0, aD = kkv ? heads * Dh : h, adr = kkv && h > 0 ? aD / h : 1;
  /* per layer per token: the matrices' weights over h (QKV, projection, FC1 and FC2:
   * 12 at a = g, f = 4h, D = h/a), and FC1's columns over f */
  double fc1 = swiglu ? 2 : 1, mat_h = (2 + 2 * gr) * adr + (fc1 + 1) * f / h;
  /* experts: a token through K of width Fe, and the router's h x E product, which is whole
   * on every GPU of a tensor-parallel group (T x, since the passes divide by T) */
  double sq = mk[5] ? mk[5]->value : 0, b = mk[6] ? mk[6]->value : 0, V = mk[7] ? mk[7]->value : 0;
  /* with a capacity factor a balanced routing (n K / E slots an expert) keeps min(n K,
   * E cap) of a GPU's n K slots: all of them at moe_capacity_factor >= 1 */
  double Kx = K, nt = sq * b / C;
  if (E > 0 && cf > 0 && nt > 0) Kx = fmin(nt * K, E * moe_cap(nt, E, K, cf)) / nt;
  if (E > 0) mat_h = (2 + 2 * gr) * adr + (Kx * Fe + Sh) * (fc1 + 1) / h + T * E / h;   /* (Sh: the shared expert) */
  if (Sg > 0) mat_h += (sp && T > 1 ? 1 : T) / h;   /* its gate's x . wg: the rows of every GPU (SP: its own) */
  double d = mk[8] ? mk[8]->value : 2;
  out->dtype_bytes = d;
  int shape = mk[0] && mk[1] && mk[5] && mk[6];
  double bsh = b * sq * h;
  TpModel *tp = NULL;
  if (T > 1) {
    tp = out->tp = arena_alloc(a, sizeof *tp);
    tp->T = T;
    tp->sp = sp;
    tp->bandwidth = ktb ? ktb->value : hk[3] ? hk[3]->value : 0;
    tp->latency = ktl ? ktl->value : 0;
  }
  EpModel *ep = NULL;
  if (X > 1) {
    ep = out->ep = arena_alloc(a, sizeof *ep);
    ep->X = X;
    ep->edp = (int)fmin(floor((kdp ? kdp->value : 1) / X), 1e6);   /* (a data_parallel outside 1..1e6 is dp_derive's error) */
    ep->bandwidth = kxb ? kxb->value : 0;
    ep->latency = kxl ? kxl->value : 0;
    ep->tokens = sq * b / C;
    ep->slots = X * ep->tokens * K;
    ep->alltoall = kxa && kxa->value == 1;
    if (ep->alltoall) ep->layer_bytes = 5 * (X - 1.0) / X * ep->tokens * Kx * h * d;   /* (ep_layer_times_a2a's 5 y) */
  }
  CpModel *cp = NULL;
  if (C > 1) {
    cp = out->cp = arena_alloc(a, sizeof *cp);
    cp->C = C;
    cp->bandwidth = kcb ? kcb->value : 0;
    cp->latency = kcl ? kcl->value : 0;
    cp->kv_bytes = 2 * sq * b * gr * aD / T * d;   /* 2 s b (g/T) D d */
  }
  if (shape && hk[1]) {
    double rate = hk[1]->value * (hk[4] ? hk[4]->value : 1);
    double share = L / P;  /* layers of one device share */
    out->times = 1;
    out->flops_rate = rate;
    /* one GPU: 1/T of every FLOP by tensor parallelism, 1/C by context parallelism
     * (its s / C tokens; the causal attention's too, by the load balancing) */
    double par = (double)T * C;
    out->tf = share * bsh * (2 * mat_h * h + 4 * sq * adr) / par / rate;   /* (the attention's A = 4bs^2 a D) */
    out->tb = share * bsh * (2 * mat_h * h + 8 * sq * adr) / par / rate;
    out->tw = share * 2 * mat_h * bsh * h / par / rate;
    double of = 2 * bsh * V / par / rate, inf = bsh / par / rate, inw = 2 * bsh / par / rate;
    if (s->vocab.mode) {
      out->ts = (s->vocab.mode == 2 ? 2 : 1) * of / P;
      out->tt = (s->vocab.mode == 2 ? 1 : 2) * of / P;
      out->tif = inf / P;
      out->tib = inw / P;
    } else {
      /* the input layer whole on every GPU of a tensor-parallel group (each looks up
       * every token, in its vocabulary rows: the runtime's count too) */
      out->in_f = inf * T; out->in_w = inw * T;
      out->out_f = of; out->out_b = of; out->out_w = of;
    }
    if (tp) { /* TP communication, not overlapped: in the passes' times, of a GPU's
               * s / C tokens */
      double x = bsh * d / C, bw = tp->bandwidth, lat = tp->latency;
      double ar = dp_ring_time(T, x, bw, lat), half = dp_half_ring_time(T, x, bw, lat);
      /* a layer's F: 2 all-reduces (attention and MLP outputs), or with sequence
       * parallelism 2 all-gathers (the layer norms' outputs) + 2 reduce-scatters; its
       * B the same (their gradients' conjugates) */
      double layer = sp ? 2 * (half + half) : 2 * ar;
      tp->times = 1;
      tp->f = share * layer;
      tp->b = share * layer;
      add_pass_comm(out, tp->f, tp->b, 0);
      if (!s->vocab.mode) {
        /* input layer (vocabulary-parallel embedding): F all-reduces its output (SP: a
         * reduce-scatter), B all-gathers the gradient it gets (SP only); output layer
         * (vocabulary-parallel LM head): F all-gathers its input (SP only) and
         * all-reduces the cross-entropy's max, sum of exponentials and target logit
         * (3 x bs F32), B all-reduces its input gradient (SP: a reduce-scatter) */
        tp->in_f = sp ? half : ar;
        tp->in_b = sp ? half : 0;
        tp->out_f = (sp ? half : 0) + 3 * dp_ring_time(T, b * sq * 4 / C, bw, lat);
        tp->out_b = sp ? half : ar;
        out->in_f += tp->in_f; out->in_b += tp->in_b;
        out->out_f += tp->out_f; out->out_b += tp->out_b;
      } else {
        /* under `vocab parallel` the runtime's group reductions inside the vocabulary
         * passes (model_gpt.c; the schedule's collectives then go over the P devices as
         * at T = 1): TIF all-reduces the device's embeddings (bsh F32), TS the softmax's
         * statistics (3 rings of bs F32) and with Vocab-2 its A and G (2 x bsh F32), TT
         * with Vocab-1 its input gradient (bsh F32); all rows, with sequence parallelism
         * too; TIB none */
        double vx = dp_ring_time(T, bsh * 4 / C, bw, lat);
        tp->in_f = vx;
        tp->out_f = 3 * dp_ring_time(T, b * sq * 4 / C, bw, lat) + (s->vocab.mode == 2 ? 2 * vx : 0);
        tp->out_b = s->vocab.mode == 1 ? vx : 0;
        out->tif += tp->in_f; out->ts += tp->out_f; out->tt += tp->out_b;
      }
    }
    if (cp && cp->bandwidth > 0) { /* CP communication, not overlapped: a layer's F
      * all-gathers K and V over the C GPUs, its B gathers them again and
      * reduce-scatters their gradients (Megatron's all_gather comm type) */
      double ag = dp_half_ring_time(C, cp->kv_bytes, cp->bandwidth, cp->latency);
      cp->times = 1;
      cp->f = share * ag;
      cp->b = share * 2 * ag;
      add_pass_comm(out, cp->f, cp->b, 0);
    }
    if (ep && ep->bandwidth > 0) { /* EP communication, not overlapped (Megatron's
      * allgather token dispatcher), of the N tokens a GPU's MoE MLP sees */
      if (ep->alltoall) ep_layer_times_a2a(ep, h, Kx, E, d);
      else ep_layer_times(ep, h, K, d);
      ep->times = 1;
      ep->f = share * ep->layer_f;
      ep->b = share * ep->layer_b;
      ep->w = share * ep->layer_w;
      add_pass_comm(out, ep->f, ep->b, ep->w);
    }
  }
  if (shape && hk[3]) {
    out->has_tc = 1;
    /* with sequence parallelism each GPU sends its s / T rows (Megatron's p2p shape),
     * of its s / C tokens */
    out->tc = bsh * d / (sp ? T : 1) / C / hk[3]->value;
  }
  if (shape && mk[3]) {
    out->bytes = 1;
    /* per token: whole (ln1, x1, ln2, y, two residual gradients; the layer norms'
     * F32 statistics) and split over a tensor-parallel group (qkv, att, hpre, hact;
     * the attention's F32 statistics): costmodel.c's header */
    double whole = 6 * h * d + (rmsnorm ? 8 : 16);
    whole += Sg > 0 ? 8 + (h + 1) * d : 0;   /* the shared expert's gate: z, s (F32), its output, dz */
    /* (qkv a D (1 + 2g/a), att a D; hpre, hact: dense or shared) */
    double split = (2 + 2 * gr) * aD * d + (fc1 + 1) * (E > 0 ? Sh : f) * d + 4 * heads;
    /* qk_layernorm: each query and key head's input and output gradient (D values each)
     * and its F32 statistics (rstd, or mean and rstd) */
    if (qkn) split += (1 + gr) * (2 * aD * d + heads * (rmsnorm ? 4 : 8));
    /* of one GPU's s / C tokens (C = 1 without context parallelism) */
    out->act_layer = sq * b * (whole + split) / C;
    if (tp) { /* one GPU's: the part split by heads or columns over the group, 1/T of
               * it; with sequence parallelism the rest too (costmodel.c's header) */
      split *= sq * b / C;
      tp->bytes = 1;
      tp->act_rep = sp ? 0 : out->act_layer - split;
      tp->act_split = sp ? out->act_layer : split;
      out->act_layer = tp->act_rep + tp->act_split / T;
    }
    if (E > 0) out->act_layer += moe_bytes(sq * b / C, h, Fe / T, fc1, E, K, d, aux, X, cf);
    if (ep) {
      ep->bytes = 1;
      ep->expert_bytes = moe_bytes(sq * b / C, h, Fe / T, fc1, E, K, d, aux, X, cf);
    }
    out->unit_bytes = L / P * out->act_layer;
    /* copy engines: D2H and H2D, each with its bandwidth (default host_bandwidth);
     * when both are given and together exceed host_bandwidth, the host link they
     * share is split between them in proportion (as if both always ran) */
    double link = hk[2] ? hk[2]->value : 0;
    double bd = hk[5] ? hk[5]->value : link, bh = hk[6] ? hk[6]->value : link;
    if (link > 0 && hk[5] && hk[6] && bd + bh > link) { double k = link / (bd + bh); bd *= k; bh *= k; }
    if (bd > 0) {
      out->has_toff = 1;
      out->toff = out->unit_bytes / bd;
      out->treload = bh > 0 ? out->unit_bytes / bh : 0;
    }
    /* one layer: the matrices (QKV, projection, FC1, FC2), the column-parallel biases
     * (QKV, FC1) and the row-parallel ones (projection, FC2) when bias = 1, and two
     * layer norms (gamma and beta, or gamma alone with rmsnorm) */
    double norm = rmsnorm ? h : 2 * h;
    double qkn_p = qkn ? (rmsnorm ? 2 : 4) * Dh : 0;   /* qk_layernorm's gains (and betas) [D], whole */
    /* QKV [h, a D (1 + 2g/a)] and the projection [a D, h]: (2 + 2g/a) a D h */
    double mats = (2 + 2 * gr) * aD * h + (fc1 + 1) * h * f;
    double col_bias = bias ? (1 + 2 * gr) * aD + fc1 * f : 0, row_bias = bias ? 2 * h : 0;
    if (qkvb) col_bias = (1 + 2 * gr) * aD;   /* qkv_bias: QKV's alone (column-parallel, 1/T) */
    double router = 0, experts = 0;
    if (E > 0) {   /* E experts of width Fe in the MLP's place (FC2's bias whole, per expert), the router whole */
      mats = (2 + 2 * gr) * aD * h;
      col_bias = bias || qkvb ? (1 + 2 * gr) * aD : 0;
      row_bias = bias ? h : 0;
      router = h * E;
      /* one GPU's experts: E / X of them (expert parallelism), their FC1 and FC2
       * matrices and FC1's bias 1/T, FC2's bias whole */
      experts = ((E * (fc1 + 1) * h * Fe + (bias ? E * fc1 * Fe : 0)) / T + (bias ? E * h : 0)) / X;
      /* the shared expert: a dense MLP of width Sh, split as the dense MLP's, on every GPU */
      mats += (fc1 + 1) * h * Sh;
      col_bias += bias ? fc1 * Sh : 0;
      row_bias += bias && Sh > 0 ? h : 0;
      router += Sg > 0 ? h : 0;   /* its gate's wg, whole as the router */
    }
    /* one GPU's: the matrices and the column-parallel biases 1/T, the rest whole */
    double per_layer = (mats + col_bias) / T + row_bias + 2 * norm + qkn_p + router + experts;
    double pos = rope ? 0 : sq * h;   /* the learned position table (none with rope) */
    double per_param = costmodel_param_bytes(d, 1);
    out->static_bytes = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
    out->dev_params = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
    out->stage_params = arena_alloc(a, sizeof(double) * (size_t)(S + 1));
    if (E > 0) {
      out->stage_expert_params = arena_alloc(a, sizeof(double) * (size_t)(S + 1));
      out->dev_expert_params = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
    }
    for (int st = 0; st < S; st++) {
      double p = L / S * per_layer;
      if (!s->vocab.mode && st == 0) p += h * V / T + pos;   /* vocabulary-parallel embedding */
      /* (tied embeddings: the output layer is stage 0's matrix, a copy on another device) */
      if (!s->vocab.mode && st == S - 1 && !(tie && stage_dev[0] == stage_dev[S - 1])) p += h * V / T;
      if (st == S - 1) p += norm;   /* the final layer norm */
      out->stage_params[st] = p;
      if (E > 0) out->stage_expert_params[st] = L / S * experts;
      int dv = stage_dev[st];
      if (dv < 0 || dv >= P) continue;
      out->static_bytes[dv] += p * per_param;
      out->dev_params[dv] += p;
      if (E > 0) out->dev_expert_params[dv] += L / S * experts;
    }
    if (ep) ep->params = out->dev_expert_params;
    if (s->vocab.mode) {
      double share = (tie ? 1 : 2) * h * V / P / T;   /* the input and output layers' rows of a GPU (tied: one matrix) */
      out->vocab_params = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
      for (int dv = 0; dv < P; dv++) out->vocab_params[dv] = share + (dv == 0 ? pos : 0);
      for (int dv = 0; dv < P; dv++) {
        out->static_bytes[dv] += out->vocab_params[dv] * per_param;
        out->dev_params[dv] += out->vocab_params[dv];
      }
    }
  }
  if (hk[0]) { out->memory = hk[0]->value; out->memory_span = hk[0]->span; }
  /* tied embeddings on two devices: the exchange of the matrix's gradient (TieModel) */
  int d0 = S > 0 ? stage_dev[0] : -1, d1 = S > 0 ? stage_dev[S - 1] : -1;
  if (tie && !s->vocab.mode && mk[1] && mk[7] && d0 != d1 && d0 >= 0 && d0 < P && d1 >= 0 && d1 < P) {
    TieModel *t = arena_alloc(a, sizeof *t);
    t->dev[0] = d0;
    t->dev[1] = d1;
    t->bytes = 4 * h * V / T;
    t->bandwidth = hk[3] ? hk[3]->value : 0;
    t->time = t->bandwidth > 0 ? t->bytes / t->bandwidth : 0;
    out->tie = t;
  }
  return 0;
}

double costmodel_param_bytes(double d, int shards) {
  return d + 4 + ((d < 4 ? 4.0 : 0.0) + 8.0) / (shards > 1 ? shards : 1);
}

int costmodel_check_memory(Diag *dg, const IrSchedule *s, const SimResult *r) {
  const IrDerived *x = &s->derived;
  if (!x->bytes || !(x->memory > 0) || !r || !x->static_bytes) return 0;
  int errors = 0;
  for (int d = 0; d < s->ndev; d++) {
    double act = r->dev[d].peak * x->unit_bytes, need = x->static_bytes[d] + act;
    if (need > x->memory * (1 + 1e-12)) {
      diag_error(dg, x->memory_span,
                 "device %d needs %.3g GB, over hardware.memory = %.3g GB: %.3g GB of weights, gradients and optimizer state + %g activation units of %.3g GB",
                 d, need / 1e9, x->memory / 1e9, x->static_bytes[d] / 1e9, r->dev[d].peak, x->unit_bytes / 1e9);
      const DpModel *m = x->dp;
      if (m && !m->dist && m->static_sharded)
        diag_note(dg, x->memory_span, "hardware distributed_optimizer = 1 would shard the optimizer state over the %d %s: device %d would need %.3g GB",
                  m->ranks, m->C > 1 ? "GPUs of the data-parallel x context-parallel group" : "replicas", d, (m->static_sharded[d] + act) / 1e9);
      errors++;
    }
  }
  return errors;
}

/* ---- data parallelism: hardware { data_parallel; dp_bandwidth; dp_latency;
 * dp_stage_bytes; distributed_optimizer } (the model: dp.c, which adds the
 * all-reduces, or reduce-scatters and all-gathers, to a simulation) ---- */
double dp_ring_time(int D, double bytes, double bandwidth, double latency) {
  if (D <= 1) return 0;
  return 2.0 * (D - 1) / D * bytes / bandwidth + 2.0 * (D - 1) * latency;
}

double dp_half_ring_time(int D, double bytes, double bandwidth, double latency) {
  if (D <= 1) return 0;
  return (double)(D - 1) / D * bytes / bandwidth + (double)(D - 1) * latency;
}

DpModel *dp_derive(Arena *a, Diag *dg, const IrSchedule *s, CostModel *cm) {
  const IrKeyVal *kd = kv_find(s->hardware, s->nhardware, "data_parallel");
  const IrKeyVal *kb = kv_find(s->hardware, s->nhardware, "dp_bandwidth");
  const IrKeyVal *kl = kv_find(s->hardware, s->nhardware, "dp_latency");
  const IrKeyVal *kg = kv_find(s->hardware, s->nhardware, "dp_stage_bytes");
  const IrKeyVal *kp = kv_find(s->hardware, s->nhardware, "peer_bandwidth");
  const IrKeyVal *ko = kv_find(s->hardware, s->nhardware, "distributed_optimizer");
  int errors = 0;
  if (ko && ko->value != 0 && ko->value != 1) {
    diag_error(dg, ko->span, "hardware distributed_optimizer must be 0 or 1 (1: each data-parallel replica keeps 1/data_parallel of the optimizer state), got %g",
               ko->value);
    errors++;
  }
  if (kd && !(kd->value >= 1 && kd->value <= 1e6 && kd->value == floor(kd->value))) {
    diag_error(dg, kd->span, "hardware data_parallel must be a whole number from 1 to 1000000 (replicas of the pipeline), got %g",
               kd->value);
    errors++;
  }
  if (kb && !(kb->value > 0 && isfinite(kb->value))) { diag_error(dg, kb->span, "hardware dp_bandwidth must be positive, got %g", kb->value); errors++; }
  if (kl && !(kl->value >= 0 && isfinite(kl->value))) { diag_error(dg, kl->span, "hardware dp_latency must not be negative, got %g", kl->value); errors++; }
  if (kg && !(kg->value > 0 && isfinite(kg->value))) { diag_error(dg, kg->span, "hardware dp_stage_bytes must be positive, got %g", kg->value); errors++; }
  /* the gradient group: the D replicas' context-parallel GPUs, D x C (Megatron's
   * data-parallel group with context parallelism) */
  const CpModel *cp = cm->cp;
  int C = cp ? cp->C : 1;
  if (errors || ((!kd || kd->value == 1) && C == 1)) return NULL;
  int D = kd ? (int)kd->value : 1, S = s->nstage;
  /* errors at data_parallel, or with data_parallel 1 at context_parallel */
  const IrKeyVal *kat = D > 1 ? kd : kv_find(s->hardware, s->nhardware, "context_parallel");
  char who[96];
  if (D > 1) snprintf(who, sizeof who, "hardware data_parallel %d", D);
  else snprintf(who, sizeof who, "hardware context_parallel %d (a gradient all-reduce over its GPUs)", C);
  if ((double)D * C > 1e6) {
    diag_error(dg, kat->span, "hardware data_parallel x context_parallel = %.0f is over 1000000 GPUs in a gradient group", (double)D * C);
    return NULL;
  }
  if (s->vocab.mode && !cm->vocab_params) {
    diag_error(dg, kat->span, "%s with `vocab parallel` needs the vocabulary layers' gradient bytes: give model { layers hidden heads seq micro_batch vocab }", who);
    errors++;
  }
  /* bandwidth and latency: dp_bandwidth and dp_latency; with data_parallel 1 the group
   * is the context-parallel group itself: cp_bandwidth and cp_latency; then
   * peer_bandwidth and 0 */
  double bw = kb ? kb->value : D == 1 && cp->bandwidth > 0 ? cp->bandwidth : kp && kp->value > 0 ? kp->value : 0;
  if (!(bw > 0)) {
    if (D > 1) diag_error(dg, kat->span, "%s needs dp_bandwidth (bytes/s of each device's link to its replicas) or peer_bandwidth", who);
    else diag_error(dg, kat->span, "%s needs dp_bandwidth, cp_bandwidth or peer_bandwidth", who);
    errors++;
  }
  if (!kg && !cm->stage_params) {
    diag_error(dg, kat->span, "%s needs each stage's gradient bytes: give model { layers hidden heads seq micro_batch } or hardware dp_stage_bytes", who);
    errors++;
  }
  if (errors || S <= 0) return NULL;
  DpModel *m = arena_alloc(a, sizeof *m);
  m->D = D;
  m->C = C;
  int R = m->ranks = D * C;
  /* expert parallelism: the experts' gradients are reduced over the D / X replicas of
   * the same EP rank (x C), in a ring of their own after the dense part's */
  const EpModel *ep = cm->ep;
  int Re = m->eranks = ep ? D / ep->X * C : R;
  if (ep && !kg && cm->stage_expert_params) m->ebytes = arena_alloc(a, sizeof(double) * (size_t)S);
  m->bandwidth = bw;
  m->latency = kl ? kl->value : D == 1 ? cp->latency : 0;
  m->bytes = arena_alloc(a, sizeof(double) * (size_t)S);
  m->time = arena_alloc(a, sizeof(double) * (size_t)S);
  m->dist = ko && ko->value == 1;
  if (m->dist) {
    m->wbytes = arena_alloc(a, sizeof(double) * (size_t)S);
    m->wtime = arena_alloc(a, sizeof(double) * (size_t)S);
  }
  /* tied embeddings on two devices under the distributed optimizer: the matrix (and
   * its copy) has buffers of its own on both devices (the runtime's `tied` tensors),
   * so stage 0 and stage S-1 each run one more reduce-scatter and all-gather, of the
   * matrix, right after their own (the bytes split, one more ring's latency) */
  const TieModel *tie = m->dist && !kg ? cm->tie : NULL;
  if (tie) m->tbytes = arena_alloc(a, sizeof(double) * (size_t)S);
  for (int st = 0; st < S; st++) {
    m->bytes[st] = kg ? kg->value : cm->stage_params[st] * 4.0;   /* F32 gradients */
    double eb = m->ebytes ? cm->stage_expert_params[st] * 4.0 : 0;   /* the experts' (expert parallelism) */
    if (m->ebytes) m->ebytes[st] = eb;
    if (!m->dist) {
      m->time[st] = dp_ring_time(R, m->bytes[st] - eb, m->bandwidth, m->latency);
      if (eb > 0) m->time[st] += dp_ring_time(Re, eb, m->bandwidth, m->latency);
      continue;
    }
    /* ZeRO-1: reduce-scatter the gradients, all-gather the weights: d = dtype_bytes
     * (default 2) a parameter, of the bytes / 4 parameters (also from dp_stage_bytes) */
    double tb = tie && (st == 0 || st == S - 1) ? tie->bytes : 0, own = m->bytes[st] - tb - eb;
    if (tie) m->tbytes[st] = tb;
    m->time[st] = dp_half_ring_time(R, own, m->bandwidth, m->latency);
    m->wbytes[st] = m->bytes[st] / 4.0 * cm->dtype_bytes;
    m->wtime[st] = dp_half_ring_time(R, own / 4.0 * cm->dtype_bytes, m->bandwidth, m->latency);
    if (eb > 0) {   /* the experts' own reduce-scatter and all-gather, over the D / X x C GPUs */
      m->time[st] += dp_half_ring_time(Re, eb, m->bandwidth, m->latency);
      m->wtime[st] += dp_half_ring_time(Re, eb / 4.0 * cm->dtype_bytes, m->bandwidth, m->latency);
    }
    if (tb > 0) {   /* the matrix's own reduce-scatter and all-gather, after the stage's */
      m->time[st] += dp_half_ring_time(R, tb, m->bandwidth, m->latency);
      m->wtime[st] += dp_half_ring_time(R, tb / 4.0 * cm->dtype_bytes, m->bandwidth, m->latency);
    }
  }
  if (s->vocab.mode) {   /* each device's rows of the vocabulary layers: one collective each */
    int P = s->ndev;
    m->vbytes = arena_alloc(a, sizeof(double) * (size_t)P);
    m->vtime = arena_alloc(a, sizeof(double) * (size_t)P);
    if (m->dist) {
      m->vwbytes = arena_alloc(a, sizeof(double) * (size_t)P);
      m->vwtime = arena_alloc(a, sizeof(double) * (size_t)P);
    }
    for (int d = 0; d < P; d++) {
      m->vbytes[d] = cm->vocab_params[d] * 4.0;
      m->vtime[d] = m->dist ? dp_half_ring_time(R, m->vbytes[d], m->bandwidth, m->latency)
                            : dp_ring_time(R, m->vbytes[d], m->bandwidth, m->latency);
      if (!m->dist) continue;
      m->vwbytes[d] = cm->vocab_params[d] * cm->dtype_bytes;
      m->vwtime[d] = dp_half_ring_time(R, m->vwbytes[d], m->bandwidth, m->latency);
    }
  }
  if (cm->static_bytes && cm->dev_params) {
    m->static_sharded = arena_alloc(a, sizeof(double) * (size_t)(s->ndev + 1));
    for (int d = 0; d < s->ndev; d++) {
      /* under expert parallelism the experts' optimizer state over their own group */
      double ex = ep && cm->dev_expert_params ? cm->dev_expert_params[d] : 0;
      m->static_sharded[d] = (cm->dev_params[d] - ex) * costmodel_param_bytes(cm->dtype_bytes, R) +
                             ex * costmodel_param_bytes(cm->dtype_bytes, Re);
    }
    if (m->dist) cm->static_bytes = m->static_sharded;
  }
  return m;
}
