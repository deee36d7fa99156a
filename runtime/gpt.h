/* gpt.h: what model_gpt.c offers besides ppsrt_gpt_create (model.h): the FLOPs of
 * each pass, for MFU, and the check of a configuration's sizes. Internal to libppsrt. */
#ifndef PPSRT_GPT_H
#define PPSRT_GPT_H
#include "model.h"

/* FLOPs of one pass `kind` (PPSRT_OP_F, _B, _W, _BW on `stage`; _IF, _IB, _S, _T on one
 * device's vocabulary shard, stage ignored) for one microbatch, with the Vocabulary
 * Parallelism paper's counts: transformer layer bsh(72h + 12s) split F bsh(24h + 4s),
 * B bsh(24h + 8s), W 24bsh^2; input layer 3bsh (F bsh, W or IB 2bsh); output layer
 * 6bshV (F/S, B, W/T 2bshV each; Vocab-1's T and Vocab-2's S carry the input
 * gradient's 2bshV). Vocabulary shares are divided by the number of devices. The
 * layer's counts are those of a 4h GeLU MLP and as many key/value heads as heads;
 * generally, with a = heads, g = query groups, D = the head size (--kv-channels, h/a),
 * f = ffn_hidden (x 3 matrices with SwiGLU, 2 without): M = 2bs (h (a + 2g) D + a D h +
 * c h f), c = 3 or 2; F = M + 4bs^2 a D, B = M + 8bs^2 a D, W = M (the same as the
 * compiler's cost model; at D = h/a: h h (1 + 2g/a) + h h, 4bs^2 h). */
double ppsrt_gpt_pass_flops(const ppsrt_model_config *cfg, int kind, int stage);

/* Checks the sizes of cfg before anything runs (ppsrt_gpt_create checks them too):
 * positive, --hidden a multiple of --heads, every tensor within INT32_MAX elements,
 * the parameter table within an int. 0, or PPSRT_E_USAGE with ppsrt_last_error(). */
int ppsrt_gpt_check_config(const ppsrt_model_config *cfg);

/* The attention head size D of cfg: --kv-channels, else --hidden / --heads. */
int ppsrt_gpt_kv_channels(const ppsrt_model_config *cfg);

/* The MLP width of cfg: --ffn-hidden, else 4 hidden, or with SwiGLU Megatron-LM's
 * default floor(8h/3 / 64) * 64 (8 floor(8h/3 / 8), at least 8, when that is 0). */
int ppsrt_gpt_ffn(const ppsrt_model_config *cfg);

/* --num-experts: a hash of every routing decision (token, slot, expert) of the iteration
 * so far (0 without experts); tests/kernels/gpt_grad tells with it whether a moved weight
 * moved a token to another expert. */
uint64_t ppsrt_gpt_route_hash(const ppsrt_model *m);
/* --check with --num-experts: compares the routing of every layer of every microbatch
 * that model m (a pipeline device's stages) computed in its last iteration with that of
 * ref (every stage on one device, the global batch: m's microbatch mb is ref's
 * mb0 + mb), slot by slot (each slot's decisions hashed in token order). *n: the
 * (microbatch, layer) slots compared, *ndiff: those routed differently; with
 * --context-parallel m's tokens of each slot (ref records its decisions: moe.h rec). -1
 * when there is nothing to compare (no experts; --context-parallel without ref's record),
 * else 0. */
int ppsrt_gpt_route_compare(const ppsrt_model *m, const ppsrt_model *ref, int mb0, long *n, long *ndiff);
/* --check's replay of the routing (check.c; moe.h rec): the reference's own choice (its
 * hash before the replay) against m's routing, per (microbatch, layer) slot as above:
 * *ndiff slots differ; -1 without a replay. */
int ppsrt_gpt_route_ohash(const ppsrt_model *m, const ppsrt_model *ref, int mb0, long *ndiff);
/* m's recorded routing (cfg moe_record) into tab, the reference's layout [nmb][stages][layers][N K]:
 * decision + 1 (0: not this device's) for m's microbatches (global mb0 on) and stages; with
 * --context-parallel m's tokens at their places in the whole sequences (ppsrt_cp_pos), the
 * reference's N K entries a slot the C ranks' together; -1 without one. */
int ppsrt_gpt_route_record(const ppsrt_model *m, int mb0, int nmb, float *tab);
/* The reference ref (every stage local) replays rec (tab's layout, the decisions; kept by the caller). */
int ppsrt_gpt_route_replay(ppsrt_model *ref, const int32_t *rec);
#endif
