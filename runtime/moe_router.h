/* moe_router.h: the router's options of a mixture-of-experts layer, one plain struct the
 * backends' moe_route kernels take (backend.h; runtime/moe.c fills it from Megatron-Core's
 * --moe-router-* flags). Apart from backend.h so that nvcc's kernels.cu, which does not
 * include backend.h, reads the same definition. */
#ifndef PPSRT_MOE_ROUTER_H
#define PPSRT_MOE_ROUTER_H
#include <stdint.h>
typedef struct ppsrt_moe_router {
  int sigmoid;        /* score function: 0 softmax, 1 sigmoid (--moe-router-score-function) */
  int pre_softmax;    /* softmax: the softmax over all E before the top-K (--moe-router-pre-softmax) */
  float scale;        /* the weights' factor (--moe-router-topk-scaling-factor; 0: 1) */
  const float *bias;  /* sigmoid: F32 [E] in the backend's memory added to the scores for the choice only
                       * (--moe-router-enable-expert-bias; NULL: none) */
  float zcoef;        /* the z-loss's gradient factor (2 Z / tokens; 0: none) */
  const int32_t *force; /* --check's reference (moe.c replay): int32 [N K] in the backend's memory, the
                       * choices to take instead of the top-K (the weights, probabilities and counts
                       * still from these logits); NULL: the top-K */
} ppsrt_moe_router;
#endif
