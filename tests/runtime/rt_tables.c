/* rt_tables.c: hand-written ppsrt_program tables for the runtime tests, so the runtime
 * is tested without the compiler: `rt_tables KIND P M [ppsrt flags...]` builds
 *   1f1b     linear 1F1B with B+W fused (BW), sends/recvs written out;
 *   zb       the same order with split B and W (W right after B);
 *   offload  1F1B where every F is followed by offload and every BW preceded by reload;
 *   hang     device 1's first recv has no matching send (must time out, not hang);
 *   swap     device 1 receives microbatches 0 and 1 in the wrong order (the channel is
 *            FIFO: the runtime must report the mismatch, not compute on wrong data);
 *   posted   1f1b where every device d > 0 posts its first activation recv (op flag 8)
 *            and receives the second, plain, right after it in one group, before F(0, d)
 *            reads the first: the plain recv must match the second message (FIFO);
 * with the predicted peak per device (1F1B: min(P - d, m) units; offload: 1) and runs
 * it through ppsrt_main. What it does not: no verification (these tables are right
 * by construction, except `hang`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ppsrt.h"

static ppsrt_op *ops[64];
static int32_t nops[64], cap[64];

static void push(int d, int kind, int mb, int stage, int xfer, int peer) {
  if (nops[d] == cap[d]) {
    cap[d] = cap[d] ? 2 * cap[d] : 64;
    ops[d] = realloc(ops[d], (size_t)cap[d] * sizeof **ops);
    if (!ops[d]) { perror("realloc"); exit(2); }
  }
  ops[d][nops[d]++] = (ppsrt_op){(uint8_t)kind, (uint8_t)xfer, 0, PPSRT_FLAG_INSERTED, mb, stage, peer, 100 + nops[d]};
}

static void fwd(int d, int P, int i, int mode) {
  if (d > 0) push(d, PPSRT_OP_RECV, i, d - 1, PPSRT_XFER_ACT, d - 1);
  push(d, PPSRT_OP_F, i, d, 0, -1);
  if (mode == 2) push(d, PPSRT_OP_OFFLOAD, i, d, 0, -1);
  if (d < P - 1) push(d, PPSRT_OP_SEND, i, d, PPSRT_XFER_ACT, d + 1);
}

static void bwd(int d, int P, int i, int mode) {
  if (d < P - 1) push(d, PPSRT_OP_RECV, i, d + 1, PPSRT_XFER_GRAD, d + 1);
  if (mode == 2) push(d, PPSRT_OP_RELOAD, i, d, 0, -1);
  if (mode == 1) { push(d, PPSRT_OP_B, i, d, 0, -1); }
  else push(d, PPSRT_OP_BW, i, d, 0, -1);
  if (d > 0) push(d, PPSRT_OP_SEND, i, d, PPSRT_XFER_GRAD, d - 1);
  if (mode == 1) push(d, PPSRT_OP_W, i, d, 0, -1);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: rt_tables 1f1b|zb|offload|hang|swap|posted P M [flags]\n"); return 2; }
  const char *kind = argv[1];
  int P = atoi(argv[2]), m = atoi(argv[3]);
  if (P < 1 || P > 64 || m < 1) { fprintf(stderr, "rt_tables: bad P or M\n"); return 2; }
  int mode = !strcmp(kind, "zb") ? 1 : !strcmp(kind, "offload") ? 2 : 0;
  ppsrt_stage *st = calloc((size_t)P, sizeof *st);
  double *peak = calloc((size_t)P, sizeof *peak);
  for (int d = 0; d < P; d++) {
    st[d] = (ppsrt_stage){d, 1, 1, 1, 2, 1, 0, mode == 2 ? 1 : 0, 0, 0, 0};
    int warm = P - d - 1 < m ? P - d - 1 : m;
    for (int i = 0; i < warm; i++) fwd(d, P, i, mode);
    for (int i = 0; i < m - warm; i++) { fwd(d, P, i + warm, mode); bwd(d, P, i, mode); }
    for (int i = m - warm; i < m; i++) bwd(d, P, i, mode);
    /* offload frees at issue in program order: at most 1 unit */
    peak[d] = mode == 2 ? 1 : (P - d < m ? P - d : m);
  }
  if (!strcmp(kind, "swap") && P > 1 && m > 1) {
    /* swap device 1's first two activation receives */
    int a = -1, b = -1;
    for (int i = 0; i < nops[1]; i++)
      if (ops[1][i].kind == PPSRT_OP_RECV && ops[1][i].xfer == PPSRT_XFER_ACT) { if (a < 0) a = i; else { b = i; break; } }
    if (a >= 0 && b >= 0) { int t = ops[1][a].mb; ops[1][a].mb = ops[1][b].mb; ops[1][b].mb = t; }
  }
  if (!strcmp(kind, "posted") && m > 1) {
    for (int d = 1; d < P; d++) {
      int a = -1, b = -1;
      for (int i = 0; i < nops[d]; i++)
        if (ops[d][i].kind == PPSRT_OP_RECV && ops[d][i].xfer == PPSRT_XFER_ACT) { if (a < 0) a = i; else { b = i; break; } }
      if (a < 0 || b < 0) continue;
      ppsrt_op second = ops[d][b];
      memmove(&ops[d][a + 2], &ops[d][a + 1], (size_t)(b - a - 1) * sizeof **ops);
      ops[d][a].flags |= PPSRT_FLAG_POSTED;
      second.flags |= PPSRT_FLAG_GROUP;
      ops[d][a + 1] = second;
    }
  }
  if (!strcmp(kind, "hang") && P > 1) {
    /* device 1 first waits for a gradient nobody sends */
    push(1, PPSRT_OP_F, 0, 1, 0, -1);
    memmove(&ops[1][1], &ops[1][0], (size_t)(nops[1] - 1) * sizeof **ops);
    ops[1][0] = (ppsrt_op){PPSRT_OP_RECV, PPSRT_XFER_GRAD, 0, 0, m - 1, 2 % P, (1 + 1) % P, 42};
  }
  const ppsrt_op *tabs[64];
  for (int d = 0; d < P; d++) tabs[d] = ops[d];
  ppsrt_program prog = {.abi = PPSRT_ABI_VERSION, .name = kind, .source = "tests/runtime/rt_tables.c",
                        .ndev = P, .nstage = P, .nmb = m, .stages = st, .ops = tabs, .nops = nops,
                        .predicted_peak = peak, .predicted_peak_order = peak};
  argv[3] = argv[0];
  int rc = ppsrt_main(&prog, argc - 3, argv + 3);
  for (int d = 0; d < P; d++) free(ops[d]);
  free(st); free(peak);
  return rc;
}
