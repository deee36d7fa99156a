/* gpt_tables.c: hand-written ppsrt_program tables that run the gpt model through the
 * runtime (ppsrt_main) without the compiler, so `--check` (pipelined run vs the
 * single-device reference) covers the vocabulary-parallel passes too:
 *
 *   gpt_tables ORDER P S M VOCAB [ppsrt flags...]
 *     ORDER  seq    microbatch after microbatch (forward chain, vocabulary group, backward
 *                   chain), so at most one microbatch is in flight;
 *            gpipe  all forwards, then every output-layer group, then all backwards, so
 *                   every microbatch's vocabulary state is alive at once;
 *            1f1b   no vocabulary parallelism: linear 1F1B with split B and W;
 *     P devices, S stages (stage s on device s mod P), M microbatches, VOCAB 0, 1 or 2.
 *
 * Every device issues the vocabulary passes and collectives in the same order:
 *   IF(i) coll input_fwd(i)            before the forward chain of i,
 *   S(i) coll output_fwd(i) T(i) [coll output_bwd(i)]   after it,
 *   coll input_bwd(i) IB(i)            after the backward chain of i.
 * What it does not: no memory prediction (predicted_peak = NULL: the memory check is
 * skipped), no offload; the compiler's own lowering is tested elsewhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ppsrt.h"

static ppsrt_op *ops[16];
static int32_t nops[16], cap[16];
static int P, S, M, VM;

static void push(int d, int kind, int mb, int stage, int xfer, int coll, int peer) {
  if (nops[d] == cap[d]) {
    cap[d] = cap[d] ? 2 * cap[d] : 64;
    ops[d] = realloc(ops[d], (size_t)cap[d] * sizeof **ops);
    if (!ops[d]) { perror("realloc"); exit(2); }
  }
  ops[d][nops[d]++] = (ppsrt_op){(uint8_t)kind, (uint8_t)xfer, (uint8_t)coll, PPSRT_FLAG_INSERTED, mb, stage, peer, 100 + nops[d]};
}
static int dev(int s) { return s % P; }

static void all(int kind, int mb, int coll) {
  for (int d = 0; d < P; d++) push(d, kind, mb, -1, 0, coll, -1);
}
static void fwd_chain(int i) {
  for (int s = 0; s < S; s++) {
    if (s > 0 && dev(s - 1) != dev(s)) {
      push(dev(s - 1), PPSRT_OP_SEND, i, s - 1, PPSRT_XFER_ACT, 0, dev(s));
      push(dev(s), PPSRT_OP_RECV, i, s - 1, PPSRT_XFER_ACT, 0, dev(s - 1));
    }
    push(dev(s), PPSRT_OP_F, i, s, 0, 0, -1);
  }
}
static void bwd_chain(int i) {
  for (int s = S - 1; s >= 0; s--) {
    if (s < S - 1 && dev(s + 1) != dev(s)) {
      push(dev(s + 1), PPSRT_OP_SEND, i, s + 1, PPSRT_XFER_GRAD, 0, dev(s));
      push(dev(s), PPSRT_OP_RECV, i, s + 1, PPSRT_XFER_GRAD, 0, dev(s + 1));
    }
    push(dev(s), PPSRT_OP_B, i, s, 0, 0, -1);
    push(dev(s), PPSRT_OP_W, i, s, 0, 0, -1);
  }
}
static void vin(int i) { if (VM) { all(PPSRT_OP_IF, i, 0); all(PPSRT_OP_COLL, i, PPSRT_COLL_INPUT_FWD); } }
static void vout(int i) {
  if (!VM) return;
  all(PPSRT_OP_S, i, 0);
  all(PPSRT_OP_COLL, i, PPSRT_COLL_OUTPUT_FWD);
  all(PPSRT_OP_T, i, 0);
  if (VM == 1) all(PPSRT_OP_COLL, i, PPSRT_COLL_OUTPUT_BWD);
}
static void vback(int i) { if (VM) { all(PPSRT_OP_COLL, i, PPSRT_COLL_INPUT_BWD); all(PPSRT_OP_IB, i, 0); } }

/* Linear 1F1B (S = P) with split B and W, sends and receives written out. */
static void one_f_one_b(void) {
  for (int d = 0; d < P; d++) {
    int warm = P - d - 1 < M ? P - d - 1 : M;
    int f = 0, b = 0;
#define FWD(i) do { if (d > 0) push(d, PPSRT_OP_RECV, (i), d - 1, PPSRT_XFER_ACT, 0, d - 1); \
                    push(d, PPSRT_OP_F, (i), d, 0, 0, -1); \
                    if (d < P - 1) push(d, PPSRT_OP_SEND, (i), d, PPSRT_XFER_ACT, 0, d + 1); } while (0)
#define BWD(i) do { if (d < P - 1) push(d, PPSRT_OP_RECV, (i), d + 1, PPSRT_XFER_GRAD, 0, d + 1); \
                    push(d, PPSRT_OP_B, (i), d, 0, 0, -1); \
                    if (d > 0) push(d, PPSRT_OP_SEND, (i), d, PPSRT_XFER_GRAD, 0, d - 1); \
                    push(d, PPSRT_OP_W, (i), d, 0, 0, -1); } while (0)
    for (; f < warm; f++) FWD(f);
    for (; f < M; f++, b++) { FWD(f); BWD(b); }
    for (; b < M; b++) BWD(b);
  }
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: gpt_tables seq|gpipe|1f1b P S M VOCAB [ppsrt flags]\n");
    return 2;
  }
  const char *order = argv[1];
  P = atoi(argv[2]); S = atoi(argv[3]); M = atoi(argv[4]); VM = atoi(argv[5]);
  if (P < 1 || P > 16 || S < P || M < 1 || VM < 0 || VM > 2) { fprintf(stderr, "gpt_tables: bad sizes\n"); return 2; }
  if (!strcmp(order, "seq")) {
    for (int i = 0; i < M; i++) { vin(i); fwd_chain(i); vout(i); bwd_chain(i); vback(i); }
  } else if (!strcmp(order, "gpipe")) {
    for (int i = 0; i < M; i++) vin(i);
    for (int i = 0; i < M; i++) fwd_chain(i);
    for (int i = 0; i < M; i++) vout(i);
    for (int i = M - 1; i >= 0; i--) bwd_chain(i);
    for (int i = M - 1; i >= 0; i--) vback(i);
  } else if (!strcmp(order, "1f1b") && S == P && VM == 0) {
    one_f_one_b();
  } else {
    fprintf(stderr, "gpt_tables: unknown order '%s' (1f1b needs S = P and VOCAB 0)\n", order);
    return 2;
  }
  ppsrt_stage *st = calloc((size_t)S, sizeof *st);
  for (int s = 0; s < S; s++) st[s] = (ppsrt_stage){dev(s), 1, 1, 1, 2, 1, 0, 0, 0, 0, 0};
  const ppsrt_op *tabs[16];
  for (int d = 0; d < P; d++) tabs[d] = ops[d];
  static const ppsrt_kv model[] = {{"hidden", 16}, {"heads", 4}, {"query_groups", 2}, {"seq", 8},
                                   {"vocab", 29}, {"micro_batch", 2}};
  ppsrt_program prog = {.abi = PPSRT_ABI_VERSION, .name = order, .source = "tests/kernels/gpt_tables.c",
                        .ndev = P, .nstage = S, .nmb = M, .stages = st, .ops = tabs, .nops = nops,
                        .vocab_mode = VM, .model = model, .nmodel = 6};
  argv[5] = argv[0];
  int rc = ppsrt_main(&prog, argc - 5, argv + 5);
  for (int d = 0; d < P; d++) free(ops[d]);
  free(st);
  return rc;
}
