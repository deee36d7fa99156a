/* cp.c: --context-parallel C (Megatron-LM's context parallelism, --cp-comm-type
 * all_gather): the context-parallel group's collectives and the gpt's attention over a
 * sequence split across the group's C ranks.
 *
 * Each sequence of T tokens is cut into 2C chunks of Tc = T / 2C tokens; rank c of the
 * group holds chunks c and 2C - 1 - c (so that under the causal mask every rank has the
 * same work: an early chunk and a late one), its T / C rows in that order
 * (ppsrt_cp_pos). Everything outside attention works on those rows alone (model_gpt.c:
 * N = micro_batch x T / C tokens a rank). The attention's forward all-gathers the keys
 * and values of every rank's rows (only K and V: the 2 Hkv D columns of the fused QKV
 * rows), puts them in sequence order, and runs each local chunk's queries against the
 * keys at positions up to their own (backend attention_fwd_at, a query block at global
 * offset q0 = chunk x Tc). The backward gathers them again (only the local K and V are
 * kept as activations: a rank's activation memory is 1/C of the sequence's), computes
 * the local queries' gradient and every key's and value's (attention_bwd_at, a chunk's
 * keys' gradients, the two chunks' added up), and reduce-scatters the keys' and values'
 * gradients back to the ranks that own them, which put them in their own rows of dQKV.
 * --attention-dropout: each block's mask indexed by the global positions in the whole
 * sequence (dropout.h's seq), so that the ranks drop what C = 1 drops.
 *
 * The group: world rank ((r P + d) C + c) T + t (Megatron's order: tensor ranks
 * fastest, then context ranks); c->ctr is the group of the C ranks of (r, d, t) (cli.c:
 * threads, MPI_Comm_split or an NCCL communicator). Weight gradients are summed over
 * the context ranks with the replicas' (replica.c: gtr spans D x C ranks).
 * What it does not: no ring (p2p) exchange overlapping compute; the collectives block
 * the compute stream. */
#include "config.h"
#include "rt.h"
#include <stdlib.h>
#include <string.h>

#define CS PPSRT_STREAM_COMPUTE

int ppsrt_cp_allgather(ppsrt_ctx *c, const void *send, void *recv, size_t bytes) {
  if (!c->ctr) return send == recv ? 0 : c->be->memcpy_async(c->be, CS, recv, send, bytes, 0);
  return c->ctr->allgather(c->ctr, c->cp_rank, c->be, CS, send, recv, bytes);
}

int ppsrt_cp_reduce_scatter(ppsrt_ctx *c, const float *send, float *recv, size_t count) {
  if (!c->ctr) return send == recv ? 0 : c->be->memcpy_async(c->be, CS, recv, send, count * sizeof(float), 0);
  return c->ctr->reduce_scatter_f32(c->ctr, c->cp_rank, c->be, CS, send, recv, count, PPSRT_SUM);
}

/* rows rows of w bytes from src (row stride ss bytes) to dst (stride ds bytes), all
 * multiples of the act dtype's size: one memcpy when contiguous, else the backend's
 * strided copy (one kernel), else one memcpy a row */
static int copy_rows(ppsrt_backend *be, void *dst, size_t ds, const void *src, size_t ss, size_t rows, size_t w) {
  size_t es = ppsrt_dtype_size(be->act_dtype);
  if (ds == w && ss == w) return be->memcpy_async(be, CS, dst, src, rows * w, 0);
  if (be->copy_rows) return be->copy_rows(be, CS, dst, (int)(ds / es), src, (int)(ss / es), (int)rows, (int)(w / es));
  for (size_t r = 0; r < rows; r++) {
    int rc = be->memcpy_async(be, CS, (char *)dst + r * ds, (const char *)src + r * ss, w, 0);
    if (rc) return rc;
  }
  return 0;
}
/* the same for other files (model_gpt.c's --qk-layernorm: query and key heads out of and
 * back into the fused QKV rows) */
int ppsrt_copy_rows(ppsrt_backend *be, void *dst, size_t ds, const void *src, size_t ss, size_t rows, size_t w) {
  return copy_rows(be, dst, ds, src, ss, rows, w);
}

/* the global chunk of local chunk j (0, 1) of rank r */
static int chunk_of(const ppsrt_cp_shape *s, int r, int j) { return j ? 2 * s->C - 1 - r : r; }

/* Moves every rank's rows between `blocks` (C blocks of Bm T/C rows, rank r's block in
 * its local order) and `seq` (Bm sequences of T rows in sequence order), rows of w bytes:
 * to_seq 1 blocks -> seq, 0 seq -> blocks. */
static int permute(ppsrt_backend *be, const ppsrt_cp_shape *s, void *blocks, void *seq, size_t w, int to_seq) {
  int Tl = s->T / s->C, Tc = s->T / (2 * s->C);
  size_t n = (size_t)s->Bm * Tl;
  for (int r = 0; r < s->C; r++)
    for (int b = 0; b < s->Bm; b++)
      for (int j = 0; j < 2; j++) {
        char *bl = (char *)blocks + ((size_t)r * n + (size_t)b * Tl + (size_t)j * Tc) * w;
        char *sq = (char *)seq + ((size_t)b * s->T + (size_t)chunk_of(s, r, j) * Tc) * w;
        int rc = to_seq ? be->memcpy_async(be, CS, sq, bl, (size_t)Tc * w, 0)
                        : be->memcpy_async(be, CS, bl, sq, (size_t)Tc * w, 0);
        if (rc) return rc;
      }
  return 0;
}

/* *kv (a new act_dtype buffer [Bm, T, 2 Hkv D]): every rank's keys and values, in sequence order */
static int gather_kv(ppsrt_ctx *c, const ppsrt_cp_shape *s, const void *qkv, void **kv) {
  ppsrt_backend *be = c->be;
  size_t es = ppsrt_dtype_size(be->act_dtype), kw = (size_t)2 * s->Hkv * s->D * es;
  size_t n = (size_t)s->Bm * (s->T / s->C);
  void *mine = NULL, *all = NULL;
  *kv = NULL;
  int rc = be->alloc(be, n * kw, &mine);
  if (!rc) rc = be->alloc(be, (size_t)s->C * n * kw, &all);
  if (!rc) rc = be->alloc(be, (size_t)s->Bm * s->T * kw, kv);
  if (!rc) rc = copy_rows(be, mine, kw, (const char *)qkv + (size_t)s->Hq * s->D * es, (size_t)s->ld * es, n, kw);
  if (!rc) rc = ppsrt_cp_allgather(c, mine, all, n * kw);
  if (!rc) rc = permute(be, s, all, *kv, kw, 1);
  if (mine) be->free(be, mine);
  if (all) be->free(be, all);
  if (rc && *kv) { be->free(be, *kv); *kv = NULL; }
  return rc;
}

static int check_backend(ppsrt_ctx *c, const ppsrt_cp_shape *s) {
  if (!c->be->attention_fwd_at || !c->be->attention_bwd_at)
    return PPSRT_FAIL(PPSRT_E_USAGE, "--context-parallel: the %s backend has no attention over a query block "
                      "(attention_fwd_at)", c->be->name);
  if (s->C < 1 || s->T % (2 * s->C))
    return PPSRT_FAIL(PPSRT_E_USAGE, "--context-parallel %d: --seq %d is not a multiple of 2 x %d", s->C, s->T, s->C);
  return 0;
}

/* the dropout of sequence b's blocks: the sequence folded into base, the whole sequence's T */
static const ppsrt_dropout *seq_drop(const ppsrt_cp_shape *s, const ppsrt_dropout *drop, int b, ppsrt_dropout *d) {
  if (!drop || !drop->thr) return NULL;
  *d = *drop;
  d->base = (uint64_t)b * drop->heads + drop->base;
  d->seq = s->T;
  return d;
}

int ppsrt_cp_attention_fwd(ppsrt_ctx *c, const ppsrt_cp_shape *s, const void *qkv, void *att, float *lse,
                           const ppsrt_dropout *drop) {
  ppsrt_backend *be = c->be;
  int rc = check_backend(c, s);
  if (rc) return rc;
  size_t es = ppsrt_dtype_size(be->act_dtype), kwe = (size_t)2 * s->Hkv * s->D, ha = (size_t)s->Hq * s->D;
  int Tl = s->T / s->C, Tc = s->T / (2 * s->C);
  void *kv;
  if ((rc = gather_kv(c, s, qkv, &kv))) return rc;
  for (int b = 0; b < s->Bm && !rc; b++)
    for (int j = 0; j < 2 && !rc; j++) {
      size_t row = (size_t)b * Tl + (size_t)j * Tc;
      const char *k = (const char *)kv + (size_t)b * s->T * kwe * es;
      ppsrt_dropout d;
      rc = be->attention_fwd_at(be, CS, (char *)att + row * ha * es, lse + (size_t)(2 * b + j) * s->Hq * Tc,
                                (const char *)qkv + row * s->ld * es, s->ld, k, (int)kwe, k + (size_t)s->Hkv * s->D * es,
                                (int)kwe, Tc, chunk_of(s, s->cp, j) * Tc, s->Hq, s->Hkv, s->D, seq_drop(s, drop, b, &d));
    }
  be->free(be, kv);
  return rc;
}

int ppsrt_cp_attention_bwd(ppsrt_ctx *c, const ppsrt_cp_shape *s, const void *qkv, const void *att, const float *lse,
                           const void *datt, void *dqkv, const ppsrt_dropout *drop) {
  ppsrt_backend *be = c->be;
  int rc = check_backend(c, s);
  if (rc) return rc;
  int f32 = be->act_dtype == PPSRT_F32;
  size_t es = ppsrt_dtype_size(be->act_dtype), kwe = (size_t)2 * s->Hkv * s->D, ha = (size_t)s->Hq * s->D;
  int Tl = s->T / s->C, Tc = s->T / (2 * s->C);
  size_t n = (size_t)s->Bm * Tl, all = (size_t)s->C * n * kwe;
  void *kv = NULL, *dkv = NULL, *blk = NULL, *mine = NULL;
  float *sf = NULL, *rf = NULL;
  if ((rc = gather_kv(c, s, qkv, &kv))) return rc;
  /* the local queries' gradient into dqkv, every key's and value's into dkv (sequence
     order): the late chunk's (keys [0, Tk1)) written in place, the rows after it zero,
     the early chunk's (keys [0, Tk0), Tk0 < Tk1) into tmp and added */
  void *tmp = NULL;
  size_t Tk0 = (size_t)(s->cp + 1) * Tc, Tk1 = (size_t)(2 * s->C - s->cp) * Tc;
  rc = be->alloc(be, (size_t)s->Bm * s->T * kwe * es, &dkv);
  if (!rc) rc = be->alloc(be, Tk0 * kwe * es, &tmp);
  for (int b = 0; b < s->Bm && !rc; b++) {
    const char *k = (const char *)kv + (size_t)b * s->T * kwe * es;
    char *dkb = (char *)dkv + (size_t)b * s->T * kwe * es;
    if (Tk1 < (size_t)s->T) rc = be->memset0(be, CS, dkb + Tk1 * kwe * es, ((size_t)s->T - Tk1) * kwe * es);
    for (int j = 1; j >= 0 && !rc; j--) {
      size_t row = (size_t)b * Tl + (size_t)j * Tc;
      ppsrt_dropout d;
      char *dk = j ? dkb : tmp;
      rc = be->attention_bwd_at(be, CS, (char *)dqkv + row * s->ld * es, s->ld, dk, dk + (size_t)s->Hkv * s->D * es,
                                (int)kwe, (const char *)datt + row * ha * es, (const char *)att + row * ha * es,
                                lse + (size_t)(2 * b + j) * s->Hq * Tc, (const char *)qkv + row * s->ld * es, s->ld, k,
                                (int)kwe, k + (size_t)s->Hkv * s->D * es, (int)kwe, Tc, chunk_of(s, s->cp, j) * Tc,
                                s->Hq, s->Hkv, s->D, seq_drop(s, drop, b, &d));
    }
    if (!rc) rc = be->add(be, CS, dkb, dkb, tmp, Tk0 * kwe);
  }
  if (tmp) be->free(be, tmp);
  if (kv) be->free(be, kv);
  /* each owner's rows in a block of its own, summed over the group (F32) into this rank's */
  if (!rc) rc = be->alloc(be, all * es, &blk);
  if (!rc) rc = permute(be, s, blk, dkv, kwe * es, 0);
  if (dkv) be->free(be, dkv);
  if (!rc && !f32) rc = be->alloc(be, all * sizeof(float), (void **)&sf);
  if (!rc && !f32) rc = be->convert(be, CS, sf, PPSRT_F32, blk, be->act_dtype, all);
  if (!rc) rc = be->alloc(be, n * kwe * sizeof(float), (void **)&rf);
  if (!rc) rc = ppsrt_cp_reduce_scatter(c, f32 ? (float *)blk : sf, rf, n * kwe);
  if (!rc && !f32) rc = be->alloc(be, n * kwe * es, &mine);
  if (!rc && !f32) rc = be->convert(be, CS, mine, be->act_dtype, rf, PPSRT_F32, n * kwe);
  if (!rc) rc = copy_rows(be, (char *)dqkv + ha * es, (size_t)s->ld * es, f32 ? (void *)rf : mine, kwe * es, n, kwe * es);
  if (blk) be->free(be, blk);
  if (sf) be->free(be, sf);
  if (rf) be->free(be, rf);
  if (mine) be->free(be, mine);
  return rc;
}
