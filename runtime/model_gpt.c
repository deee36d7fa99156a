/* model_gpt.c: the GPT model (placeholder until the real model lands: creation fails
 * with a clear message, so the library links and the mlp model works meanwhile). */
#include "config.h"
#include "model.h"

int ppsrt_gpt_create(const ppsrt_model_config *cfg, ppsrt_backend *be, int device, const int *stages,
                     int nstages, ppsrt_model **out) {
  *out = NULL;
  return PPSRT_FAIL(PPSRT_E_USAGE, "gpt model: not implemented yet");
}
