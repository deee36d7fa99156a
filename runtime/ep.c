/* ep.c: --expert-parallel X (Megatron-LM's --expert-model-parallel-size with the
 * allgather token dispatcher, or with --moe-token-dispatcher alltoall the all-to-all one):
 * the expert-parallel group's collectives, for moe.c and for the runtime's norms and
 * checkpoints.
 *
 * Replica r = q X + j of a device is rank j of expert-parallel group q: the X consecutive
 * replicas of the same device, context rank and tensor rank (world rank
 * ((r P + d) C + c) T + t; Megatron's tp-cp-ep-dp order). Rank j holds experts
 * [j E/X, (j + 1) E/X) of every MoE layer (moe.c); the router and every dense tensor are
 * whole on every rank. c->xtr is the group (cli.c: threads, MPI_Comm_split or an NCCL
 * communicator). The experts' gradients are summed over the expert-data-parallel group
 * c->etr (the D/X x C ranks with the same j, device and tensor rank; replica.c's expert
 * buffers) and scaled as the dense ones (1 / (D C)).
 * The dispatchers (moe.c's header): allgather, every rank sees the group's tokens; alltoall,
 * each rank sends its kept slots' rows to their experts' ranks and takes the outputs back
 * (c->xtr's alltoallv, transport.h: threads, MPI_Ialltoallv, grouped ncclSend/ncclRecv),
 * counting the bytes sent to the other ranks and the slots routed to their experts for
 * --json (interp.c sums them over the group). A capacity factor caps each rank's own slots
 * before the dispatch (moe.c). */
#include "config.h"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS PPSRT_STREAM_COMPUTE

int ppsrt_ep_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes) {
  if (!c->xtr) return send == recv ? 0 : c->be->memcpy_async(c->be, CS, recv, send, bytes, 0);
  return c->xtr->allgather(c->xtr, c->ep_rank, c->be, CS, send, recv, bytes);
}

int ppsrt_ep_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count) {
  if (!c->xtr) return send == recv ? 0 : c->be->memcpy_async(c->be, CS, recv, send, count * sizeof(float), 0);
  return c->xtr->reduce_scatter_f32(c->xtr, c->ep_rank, c->be, CS, send, recv, count, PPSRT_SUM);
}

int ppsrt_ep_alltoallv(ppsrt_ctx *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                       const size_t *rcount, const size_t *rdispl) {
  for (int q = 0; q < c->run->nep; q++)   /* (the bytes that leave this rank: --json's ep_alltoall) */
    if (q != c->ep_rank) c->ep_a2a_sent += (double)scount[q];
  if (!c->xtr)
    return scount[0] ? c->be->memcpy_async(c->be, CS, (char *)recv + rdispl[0], (const char *)send + sdispl[0], scount[0], 0)
                     : 0;
  return c->xtr->alltoallv(c->xtr, c->ep_rank, c->be, CS, send, scount, sdispl, recv, rcount, rdispl);
}

void ppsrt_ep_count_slots(ppsrt_ctx *c, double n) { c->ep_a2a_slots += n; }

/* (a float pair hi + lo, as replica.c's group sums) */
int rt_ep_sum(ppsrt_ctx *c, double *x) {
  if (!c->xtr) return 0;
  float v[2] = {(float)*x, 0};
  v[1] = (float)(*x - (double)v[0]);
  int rc = rt_allreduce_host_on(c, c->xtr, c->ep_rank, v, 2, PPSRT_SUM);
  if (!rc) *x = (double)v[0] + (double)v[1];
  return rc;
}

int rt_ep_gather(ppsrt_ctx *c, const ppsrt_param *p, const float *mine, float *all) {
  size_t n = p->numel, X = (size_t)c->run->nep, bytes = n * sizeof(float);
  if (!c->xtr) { memcpy(all, mine, bytes); return 0; }
  if (strcmp(c->xtr->name, "nccl")) return c->xtr->allgather(c->xtr, c->ep_rank, NULL, CS, mine, all, bytes);
  /* NCCL gathers device memory: through a buffer of the backend */
  float *d = NULL;
  int rc = c->be->alloc(c->be, X * bytes > 0 ? X * bytes : 4, (void **)&d);
  if (rc) return rc;
  float *dm = d + (size_t)c->ep_rank * n;   /* in place: this rank's block */
  if (!(rc = c->be->memcpy_async(c->be, CS, dm, mine, bytes, 1)) && !(rc = c->be->stream_sync(c->be, CS)) &&
      !(rc = c->xtr->allgather(c->xtr, c->ep_rank, c->be, CS, dm, d, bytes)) &&
      !(rc = c->be->memcpy_async(c->be, CS, all, d, X * bytes, 2)))
    rc = c->be->stream_sync(c->be, CS);
  c->be->free(c->be, d);
  return rc;
}

int rt_ep_name(const ppsrt_ctx *c, const char *name, int u, char *out, size_t cap) {
  const char *m = strstr(name, ".moe.e");
  int e, len = 0, El = c->run->o.cfg.num_experts / c->run->nep;
  if (!m || sscanf(m + 6, "%d%n", &e, &len) != 1 || len <= 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "--expert-parallel: '%s' is not an expert's tensor", name);
  e += (u - c->ep_rank) * El;
  int w = snprintf(out, cap, "%.*s.moe.e%d%s", (int)(m - name), name, e, m + 6 + len);
  return w < 0 || (size_t)w >= cap ? PPSRT_FAIL(PPSRT_E_USAGE, "--expert-parallel: name '%s' too long", name) : 0;
}
