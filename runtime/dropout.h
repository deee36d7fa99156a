/* dropout.h: the dropout mask of the gpt model (--hidden-dropout, --attention-dropout;
 * docs/models.md "Dropout"), one integer hash shared by the CPU kernels
 * (cpu_kernels.c), the CUDA kernels (cuda/kernels.cu, also under the emulator) and the
 * model (model_gpt.c), so that both backends drop the very same elements.
 *
 * The mask is never stored: an element is kept or dropped by a counter-based hash of
 * (key, index), where key = ppsrt_drop_key(seed, step, microbatch, layer, site) names
 * one dropout site of one pass and index is the element's GLOBAL position in the
 * whole tensor (token row within the microbatch, whole feature or head index), so that
 *  - B and W regenerate F's mask instead of keeping it (no activation memory),
 *  - a recomputed F (--recompute) regenerates it too,
 *  - --tensor-parallel / --sequence-parallel ranks drop what T = 1 drops,
 *  - the --check reference (one device, whole layers) drops what the pipeline drops.
 * An element is dropped when the hash's upper 32 bits are below thr = round(p 2^32),
 * so the fraction dropped is thr / 2^32 (p to 2^-33); kept ones are scaled by
 * 1 / (1 - p) (inverted dropout, as Megatron-LM and PyTorch). The hash is splitmix64's
 * finaliser (Steele, Lea, Flood 2014), applied to the key and to the mixed index.
 * What it does not: no state, no stream of random numbers; p = 0 is "no dropout" and
 * callers skip the kernels altogether (bit for bit the run without dropout). */
#ifndef PPSRT_DROPOUT_H
#define PPSRT_DROPOUT_H
#include <stdint.h>

#if defined(__CUDACC__)
#define PPSRT_DROP_FN static __host__ __device__ __forceinline__
#else
#define PPSRT_DROP_FN static inline
#endif

/* One dropout site of one pass (F, B and W build the same one). thr == 0: no dropout. */
typedef struct ppsrt_dropout {
  uint32_t thr;    /* dropped when ppsrt_drop_bits(key, index) < thr */
  float scale;     /* 1 / (1 - p), the factor of kept elements */
  uint64_t key;    /* ppsrt_drop_key(...) */
  uint64_t base;   /* element i of the call has index base + i (hidden sites: the first token row
                    * times the width); attention: the first query head's index in the whole layer */
  int heads;       /* attention: the whole layer's query heads (index ((b heads + base + h) T + i) T + j) */
  int seq;         /* attention_fwd_at/bwd_at (--context-parallel): T of that index, the whole sequence
                    * (i, j the global positions); 0 elsewhere (T: the call's) */
} ppsrt_dropout;

PPSRT_DROP_FN uint64_t ppsrt_drop_mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
PPSRT_DROP_FN uint32_t ppsrt_drop_bits(uint64_t key, uint64_t index) {
  return (uint32_t)(ppsrt_drop_mix(key ^ ppsrt_drop_mix(index)) >> 32);
}
/* 1 when element `index` of the site is kept */
PPSRT_DROP_FN int ppsrt_drop_keep(uint32_t thr, uint64_t key, uint64_t index) {
  return ppsrt_drop_bits(key, index) >= thr;
}
/* Sites of the gpt model: the embedding's output (hidden), the attention probabilities,
 * the attention block's output and the MLP's (hidden, before the residual add). */
enum { PPSRT_DROP_EMBED = 1, PPSRT_DROP_ATTN = 2, PPSRT_DROP_PROJ = 3, PPSRT_DROP_FC2 = 4 };
/* the key of a site: seed, global step (1, 2, ...), global microbatch, global layer (-1:
 * the embedding), site */
PPSRT_DROP_FN uint64_t ppsrt_drop_key(uint64_t seed, int64_t step, int64_t mb, int64_t layer, int site) {
  uint64_t k = ppsrt_drop_mix(seed ^ 0x64726f706f757421ULL);   /* "dropout!" */
  k = ppsrt_drop_mix(k ^ (uint64_t)step);
  k = ppsrt_drop_mix(k ^ (uint64_t)mb);
  k = ppsrt_drop_mix(k ^ (uint64_t)(layer + 1));
  return ppsrt_drop_mix(k ^ (uint64_t)site);
}
/* the threshold of rate p (0 <= p < 1) */
PPSRT_DROP_FN uint32_t ppsrt_drop_thr(double p) {
  double t = p * 4294967296.0 + 0.5;
  return p <= 0 ? 0u : t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}
#endif
