/* coll_blocks.c: the transports' reduce_scatter_f32 and allgather (runtime/transport.h),
 * called as the distributed optimizer calls them, checked value by value.
 *   coll_blocks TRANSPORT BUFFERS [D]
 * TRANSPORT: threads (D ranks as threads), mpi (one process a rank, under mpirun), nccl
 * (D ranks as threads: NCCL, or its copy channel on fewer GPUs), nccl-mpi (one process a
 * rank), nccl-groups / nccl-mpi-groups (the same with 2 D ranks, replica x 2 + device,
 * the calls made on each device's replica group of D ranks, ppsrt_nccl_transport_group:
 * the distributed optimizer's transport), nccl-tgroups / nccl-mpi-tgroups (2 groups of D
 * neighbouring ranks, g x D + i, as --tensor-parallel's groups; in process, groups that
 * cannot be, refused with PPSRT_E_USAGE naming why); BUFFERS: host
 * (host buffers, b = NULL: the CPU path) or cuda (device buffers of rank r's CUDA
 * backend, ppsrt_cuda_backend_create(r), alternately on PPSRT_STREAM_DP and
 * PPSRT_STREAM_COMPUTE). Every rank makes the same calls in the same order:
 *  - reduce-scatter, SUM and MAX, count 0, 1, 2, 5, 7, in place (recv = send + r count)
 *    and not; the values are small integers (sums exact), different on every rank and
 *    block; the result must be exact, a canary on each side of recv intact, and send
 *    untouched when not in place;
 *  - all-gather of 0, 1, 3, 8, 21 bytes, in place (send = recv + r bytes) and not, the same
 *    checks; an all-reduce between them (the calls share the transport's machinery);
 *  - threads: reduce-scatter's block is bitwise allreduce_f32's result on random floats
 *    (SUM and MAX, 1001 values a block), the same reduction order;
 *  - a recv overlapping send other than in place (and the same for all-gather) is refused
 *    with PPSRT_E_USAGE and a message naming the call, on every rank (no collective runs);
 *  - alltoallv (--moe-token-dispatcher alltoall): 4 patterns of per-pair sizes (0 to 7
 *    bytes, some pairs 0, the self block too), blocks in reverse rank order with gaps:
 *    every byte where expected, gaps and send untouched; send and recv overlapping
 *    refused on every rank; threads and the copy channel: a rank expecting more bytes
 *    than its peer sends fails naming both;
 *  - in process, D >= 2, not on replica groups: rank 1 aborts the transport; the others' next reduce-scatter and
 *    all-gather fail with PPSRT_E_COMM naming the call (threads: while they wait in it);
 *    threads: a reduce-scatter and an all-gather that rank 1 never joins time out
 *    (PPSRT_E_TIMEOUT) on rank 0, naming the call.
 * Prints a line per failure and one summary line; exits 0 when all passed, 1 otherwise,
 * 77 when the library lacks the transport or backend. */
#include "config.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend.h"
#include "transport.h"

#pragma weak ppsrt_mpi_transport_create
#pragma weak ppsrt_nccl_transport_create
#pragma weak ppsrt_cuda_backend_create

enum { T_THREADS, T_MPI, T_NCCL, T_NCCL_MPI };
static int tkind, use_cuda, nranks, grpP;   /* grpP: groups of the world's ranks (nccl-*groups), else 0 */
static int grpNb;                            /* nccl-*tgroups: groups of neighbours (g x D + i), else strided (i x 2 + g) */
static ppsrt_transport *T, *G[2];            /* the world transport; its groups */
#pragma weak ppsrt_nccl_transport_group
/* world rank w's group and its rank there */
static int grp_of(int w) { return grpNb ? w / nranks : w % grpP; }
static int grp_rank(int w) { return grpNb ? w % nranks : w / grpP; }
static int make_group(int g) {
  int m[64];
  for (int i = 0; i < nranks && i < 64; i++) m[i] = grpNb ? g * nranks + i : i * grpP + g;
  return ppsrt_nccl_transport_group(T, grpP, g, nranks, m, grpNb ? "neighbours' group" : "replica group", &G[g]);
}
static pthread_barrier_t pbar;   /* in process: the test's own sequencing */

typedef struct env {
  ppsrt_transport *t;
  int rank, n;
  ppsrt_backend *b;   /* NULL: host buffers */
  int stream, checks, fails;
} env;

static void check(env *e, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(env *e, int ok, const char *fmt, ...) {
  e->checks++;
  if (ok) return;
  e->fails++;
  if (e->fails > 20) return;
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL: %s, rank %d of %d: %s\n", T->name, e->rank, e->n, msg);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) { perror("malloc"); exit(2); }
  return p;
}

/* buffers where the transport wants them: host, or the rank's device */
static void *buf_new(env *e, size_t bytes) {
  if (!e->b) return xmalloc(bytes);
  void *p = NULL;
  if (e->b->alloc(e->b, bytes ? bytes : 4, &p)) { fprintf(stderr, "alloc: %s\n", ppsrt_last_error()); exit(2); }
  return p;
}
static void buf_del(env *e, void *p) {
  if (e->b) e->b->free(e->b, p);
  else free(p);
}
static void put(env *e, void *dst, const void *src, size_t bytes) {
  if (!e->b) { memcpy(dst, src, bytes); return; }
  if (e->b->memcpy_async(e->b, e->stream, dst, src, bytes, 1) || e->b->stream_sync(e->b, e->stream)) {
    fprintf(stderr, "upload: %s\n", ppsrt_last_error());
    exit(2);
  }
}
static void get(env *e, void *dst, const void *src, size_t bytes) {
  if (!e->b) { memcpy(dst, src, bytes); return; }
  if (e->b->memcpy_async(e->b, e->stream, dst, src, bytes, 2) || e->b->stream_sync(e->b, e->stream)) {
    fprintf(stderr, "download: %s\n", ppsrt_last_error());
    exit(2);
  }
}

/* rank p's value for block q, element i: small integers, different on every rank */
static float val(int p, int q, size_t i) { return (float)((int)((p * 7 + q * 3 + i * 5 + (size_t)p * i) % 23) - 11 + p); }
static unsigned char bval(int p, size_t i) { return (unsigned char)(p * 37 + i * 11 + 1); }
static const float CANARY = 12345.5f;
enum { CB = 8 };   /* canary bytes on each side of an all-gather's recv */

static void t_reduce_scatter(env *e, size_t count, ppsrt_redop op, int inplace) {
  int n = e->n, r = e->rank;
  size_t all = (size_t)n * count;
  const char *how = inplace ? "in place" : "out of place";
  const char *on = op == PPSRT_MAX ? "max" : "sum";
  float *hs = xmalloc((all + 2) * sizeof *hs), *hr = xmalloc((count + 2) * sizeof *hr);
  hs[0] = hs[all + 1] = CANARY;
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) hs[1 + (size_t)q * count + i] = val(r, q, i);
  for (size_t i = 0; i < count + 2; i++) hr[i] = CANARY;
  float *ds = buf_new(e, (all + 2) * sizeof *ds), *dr = inplace ? NULL : buf_new(e, (count + 2) * sizeof *dr);
  put(e, ds, hs, (all + 2) * sizeof *hs);
  if (dr) put(e, dr, hr, (count + 2) * sizeof *hr);
  float *send = ds + 1, *recv = inplace ? ds + 1 + (size_t)r * count : dr + 1;
  int rc = e->t->reduce_scatter_f32(e->t, r, e->b, e->stream, send, recv, count, op);
  check(e, rc == 0, "reduce-scatter (%s) of %zu floats %s: error %d: %s", on, count, how, rc, ppsrt_last_error());
  float *got = xmalloc((all + 2) * sizeof *got);
  if (inplace) get(e, got, ds, (all + 2) * sizeof *got);
  else get(e, got, dr, (count + 2) * sizeof *got);
  const float *res = inplace ? got + 1 + (size_t)r * count : got + 1;
  int bad = 0;
  for (size_t i = 0; i < count && !rc; i++) {
    float want = val(0, r, i);
    for (int p = 1; p < n; p++) want = op == PPSRT_MAX ? (val(p, r, i) > want ? val(p, r, i) : want) : want + val(p, r, i);
    if (res[i] != want && bad++ < 3)
      check(e, 0, "reduce-scatter (%s) of %zu floats %s: recv[%zu] = %g, expected %g", on, count, how, i, res[i], want);
  }
  check(e, !bad, "reduce-scatter (%s) of %zu floats %s: %d wrong values", on, count, how, bad);
  size_t last = inplace ? all + 1 : count + 1;
  check(e, got[0] == CANARY && got[last] == CANARY, "reduce-scatter (%s) of %zu floats %s: wrote outside recv", on,
        count, how);
  if (!inplace) {   /* send is const */
    get(e, got, ds, (all + 2) * sizeof *got);
    check(e, !memcmp(got, hs, (all + 2) * sizeof *got), "reduce-scatter (%s) of %zu floats %s: send was changed", on,
          count, how);
  }
  free(got);
  free(hs);
  free(hr);
  buf_del(e, ds);
  if (dr) buf_del(e, dr);
}

static void t_allgather(env *e, size_t bytes, int inplace) {
  int n = e->n, r = e->rank;
  size_t all = (size_t)n * bytes;
  const char *how = inplace ? "in place" : "out of place";
  unsigned char *hr = xmalloc(all + 2 * CB), *hs = xmalloc(bytes);
  memset(hr, 0xA5, all + 2 * CB);
  for (size_t i = 0; i < bytes; i++) hs[i] = bval(r, i);
  if (inplace) memcpy(hr + CB + (size_t)r * bytes, hs, bytes);
  unsigned char *dr = buf_new(e, all + 2 * CB), *ds = inplace ? NULL : buf_new(e, bytes);
  put(e, dr, hr, all + 2 * CB);
  if (ds) put(e, ds, hs, bytes);
  void *recv = dr + CB, *send = inplace ? dr + CB + (size_t)r * bytes : ds;
  int rc = e->t->allgather(e->t, r, e->b, e->stream, send, recv, bytes);
  check(e, rc == 0, "all-gather of %zu bytes %s: error %d: %s", bytes, how, rc, ppsrt_last_error());
  unsigned char *got = xmalloc(all + 2 * CB);
  get(e, got, dr, all + 2 * CB);
  int bad = 0;
  for (int q = 0; q < n && !rc; q++)
    for (size_t i = 0; i < bytes; i++)
      if (got[CB + (size_t)q * bytes + i] != bval(q, i) && bad++ < 3)
        check(e, 0, "all-gather of %zu bytes %s: block %d byte %zu = %u, expected %u", bytes, how, q, i,
              got[CB + (size_t)q * bytes + i], bval(q, i));
  check(e, !bad, "all-gather of %zu bytes %s: %d wrong bytes", bytes, how, bad);
  int canary = 1;
  for (int i = 0; i < CB; i++) canary &= got[i] == 0xA5 && got[CB + all + i] == 0xA5;
  check(e, canary, "all-gather of %zu bytes %s: wrote outside recv", bytes, how);
  if (ds) {
    get(e, got, ds, bytes);
    check(e, !memcmp(got, hs, bytes), "all-gather of %zu bytes %s: send was changed", bytes, how);
  }
  free(got);
  free(hr);
  free(hs);
  buf_del(e, dr);
  if (ds) buf_del(e, ds);
}

static void t_allreduce(env *e) {
  float h[3] = {(float)e->rank, 1, (float)-e->rank}, *d = buf_new(e, sizeof h);
  put(e, d, h, sizeof h);
  int rc = e->t->allreduce_f32(e->t, e->rank, e->b, e->stream, d, 3, PPSRT_SUM);
  get(e, h, d, sizeof h);
  float s = (float)(e->n * (e->n - 1) / 2);
  check(e, !rc && h[0] == s && h[1] == (float)e->n && h[2] == -s, "an all-reduce between them: error %d: %s", rc,
        rc ? ppsrt_last_error() : "wrong values");
  buf_del(e, d);
}

/* threads: reduce-scatter's block r is allreduce_f32's values [r count, (r + 1) count) bit for bit */
static unsigned long long rng;
static float rnd(void) {   /* magnitudes 2^-20 .. 2^20: the order of a sum matters */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  float u = (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
  int ex = (int)((rng >> 3) % 41) - 20;
  return ex >= 0 ? u * (float)(1 << ex) : u / (float)(1 << -ex);
}
static void t_bitwise(env *e, ppsrt_redop op) {
  size_t count = 1001, all = (size_t)e->n * count;
  float *h = xmalloc(all * sizeof *h), *a = xmalloc(all * sizeof *a), *g = xmalloc(count * sizeof *g);
  rng = 0x9E3779B97F4A7C15ull * (unsigned long long)(e->rank + 1);
  for (size_t i = 0; i < all; i++) h[i] = rnd();
  float *ds = buf_new(e, all * sizeof *ds), *dr = buf_new(e, count * sizeof *dr);
  put(e, ds, h, all * sizeof *h);
  int rc = e->t->reduce_scatter_f32(e->t, e->rank, e->b, e->stream, ds, dr, count, op);
  if (!rc) rc = e->t->allreduce_f32(e->t, e->rank, e->b, e->stream, ds, all, op);
  check(e, !rc, "bitwise: error %d: %s", rc, ppsrt_last_error());
  get(e, g, dr, count * sizeof *g);
  get(e, a, ds, all * sizeof *a);
  check(e, !memcmp(g, a + (size_t)e->rank * count, count * sizeof *g),
        "reduce-scatter (%s) of random floats: not allreduce_f32's bits", op == PPSRT_MAX ? "max" : "sum");
  buf_del(e, ds);
  buf_del(e, dr);
  free(h);
  free(a);
  free(g);
}

/* overlaps other than in place: refused on every rank, no collective runs */
static void t_overlap(env *e) {
  int n = e->n, r = e->rank;
  size_t count = 3;
  float *d = buf_new(e, ((size_t)n * count + 2) * sizeof *d);
  int rc = e->t->reduce_scatter_f32(e->t, r, e->b, e->stream, d, d + 1, count, PPSRT_SUM);
  check(e, rc == PPSRT_E_USAGE && strstr(ppsrt_last_error(), "reduce-scatter"),
        "reduce-scatter with recv = send + 1 float: error %d (%s), expected PPSRT_E_USAGE naming the call", rc,
        ppsrt_last_error());
  rc = e->t->allgather(e->t, r, e->b, e->stream, (char *)d + 2, d, 4);
  check(e, rc == PPSRT_E_USAGE && strstr(ppsrt_last_error(), "all-gather"),
        "all-gather with send = recv + 2 bytes: error %d (%s), expected PPSRT_E_USAGE naming the call", rc,
        ppsrt_last_error());
  buf_del(e, d);
}

/* alltoallv (--moe-token-dispatcher alltoall): rank p sends rank q a2a_n(p, q, k) bytes
 * (0 for some pairs, the self block included), the blocks placed in reverse rank order
 * with 3-byte gaps on both sides; every byte received where expected, the gaps and
 * canaries intact, send unchanged */
static size_t a2a_n(int p, int q, int k) { return (p + 2 * q + k) % 3 == 0 ? 0 : (size_t)(p * 3 + q * 5 + k) % 7 + 1; }
static unsigned char a2a_v(int p, int q, size_t i) { return (unsigned char)(p * 41 + q * 13 + i * 7 + 3); }
static void a2a_places(int n, size_t *cnt, size_t *pl, size_t *span) {   /* reverse order, gaps of 3 */
  size_t o = 3;
  for (int q = n - 1; q >= 0; q--) { pl[q] = o; o += cnt[q] + 3; }
  *span = o;
}
static void t_alltoallv(env *e, int k) {
  int n = e->n, r = e->rank;
  size_t *v = xmalloc(4 * (size_t)n * sizeof *v), ss, rs;
  for (int q = 0; q < n; q++) { v[q] = a2a_n(r, q, k); v[2 * n + q] = a2a_n(q, r, k); }
  a2a_places(n, v, v + n, &ss);
  a2a_places(n, v + 2 * n, v + 3 * n, &rs);
  unsigned char *hs = xmalloc(ss), *hr = xmalloc(rs), *got = xmalloc(ss > rs ? ss : rs);
  memset(hs, 0x5A, ss);
  memset(hr, 0xA5, rs);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < v[q]; i++) hs[v[n + q] + i] = a2a_v(r, q, i);
  unsigned char *ds = buf_new(e, ss), *dr = buf_new(e, rs);
  put(e, ds, hs, ss);
  put(e, dr, hr, rs);
  int rc = e->t->alltoallv(e->t, r, e->b, e->stream, ds, v, v + n, dr, v + 2 * n, v + 3 * n);
  check(e, rc == 0, "all-to-all %d: error %d: %s", k, rc, ppsrt_last_error());
  get(e, got, dr, rs);
  int bad = 0;
  for (int q = 0; q < n && !rc; q++)
    for (size_t i = 0; i < v[2 * n + q]; i++) {
      hr[v[3 * n + q] + i] = a2a_v(q, r, i);   /* (what recv must hold now) */
      if (got[v[3 * n + q] + i] != a2a_v(q, r, i) && bad++ < 3)
        check(e, 0, "all-to-all %d: byte %zu from rank %d = %u, expected %u", k, i, q, got[v[3 * n + q] + i], a2a_v(q, r, i));
    }
  check(e, !bad && (rc || !memcmp(got, hr, rs)), "all-to-all %d: %d wrong bytes, or a gap written", k, bad);
  get(e, got, ds, ss);
  check(e, !memcmp(got, hs, ss), "all-to-all %d: send was changed", k);
  buf_del(e, ds);
  buf_del(e, dr);
  free(hs); free(hr); free(got); free(v);
}
/* alltoallv refusals: send and recv overlapping (every rank, no exchange); threads and
 * the copy channel: rank 0 expecting a byte more from the last rank than it sends (rank
 * 0 fails naming both, the others pass) */
static void t_a2a_refused(env *e) {
  int n = e->n, r = e->rank;
  size_t *v = xmalloc(4 * (size_t)n * sizeof *v);
  for (int q = 0; q < n; q++) { v[q] = v[2 * n + q] = 2; v[n + q] = v[3 * n + q] = 2 * (size_t)q; }
  unsigned char *d = buf_new(e, 2 * (size_t)n + 4);
  int rc = e->t->alltoallv(e->t, r, e->b, e->stream, d, v, v + n, d + 1, v + 2 * n, v + 3 * n);
  check(e, rc == PPSRT_E_USAGE && strstr(ppsrt_last_error(), "all-to-all") && strstr(ppsrt_last_error(), "overlap"),
        "all-to-all with recv = send + 1 byte: error %d (%s), expected PPSRT_E_USAGE naming the call", rc, ppsrt_last_error());
  const char *gpus = getenv("PPSRT_EMU_GPUS");   /* (the copy channel: fewer GPUs than the world's ranks) */
  if (tkind == T_THREADS || (tkind == T_NCCL && gpus && atoi(gpus) < n * (grpP ? grpP : 1))) {
    unsigned char *s = buf_new(e, 2 * (size_t)n + 1), *t = buf_new(e, 2 * (size_t)n + 1);
    if (r == 0) v[2 * n + n - 1] = 3;
    rc = e->t->alltoallv(e->t, r, e->b, e->stream, s, v, v + n, t, v + 2 * n, v + 3 * n);
    if (r == 0)
      check(e, rc == PPSRT_E_USAGE && strstr(ppsrt_last_error(), "expects 3 bytes") && strstr(ppsrt_last_error(), "sends it 2"),
            "all-to-all with rank 0 expecting 3 bytes of rank %d's 2: error %d (%s), expected PPSRT_E_USAGE naming both",
            n - 1, rc, ppsrt_last_error());
    else check(e, rc == 0, "all-to-all (rank 0 expecting more): error %d: %s", rc, ppsrt_last_error());
    buf_del(e, s);
    buf_del(e, t);
  }
  buf_del(e, d);
  free(v);
}

static void run_all(env *e) {
  static const size_t counts[] = {0, 1, 2, 5, 7}, bytes[] = {0, 1, 3, 8, 21};
  int k = 0;
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
    for (int op = 0; op < 2; op++)
      for (int inplace = 0; inplace < 2; inplace++) {
        if (use_cuda) e->stream = k++ & 1 ? PPSRT_STREAM_COMPUTE : PPSRT_STREAM_DP;
        t_reduce_scatter(e, counts[c], op ? PPSRT_MAX : PPSRT_SUM, inplace);
        t_allgather(e, bytes[c], inplace);
      }
  t_allreduce(e);
  if (tkind == T_THREADS) {
    t_bitwise(e, PPSRT_SUM);
    t_bitwise(e, PPSRT_MAX);
  }
  t_overlap(e);
  if (e->t->alltoallv) {
    for (int pat = 0; pat < 4; pat++) {
      if (use_cuda) e->stream = pat & 1 ? PPSRT_STREAM_COMPUTE : PPSRT_STREAM_DP;
      t_alltoallv(e, pat);
    }
    t_a2a_refused(e);
  }
  t_allreduce(e);   /* the refused calls left nothing behind */
}

/* in process: rank 1 aborts the transport; the others' calls fail, naming the call
 * (threads: rank 1 aborts while they wait in the reduce-scatter) */
static void t_abort(env *e) {
  /* every rank done with the calls before (rank 1 aborting while another still waited
     for its last copy made that wait fail: seen on the NCCL copy channel, D = 3) */
  pthread_barrier_wait(&pbar);
  if (e->rank == 1) {
    if (tkind == T_THREADS) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    e->t->abort(e->t, 1, "a planned failure");
    pthread_barrier_wait(&pbar);
    return;
  }
  if (tkind != T_THREADS) pthread_barrier_wait(&pbar);
  float *d = buf_new(e, (size_t)e->n * 4 * sizeof *d);
  int rc = e->t->reduce_scatter_f32(e->t, e->rank, e->b, e->stream, d, d + (size_t)e->rank * 4, 4, PPSRT_SUM);
  /* threads: "stopped: " marks a rank stopped by another's abort in the run's report (cli.c) */
  check(e, rc == PPSRT_E_COMM && strstr(ppsrt_last_error(), "reduce-scatter") &&
        (tkind != T_THREADS || strstr(ppsrt_last_error(), "stopped: ")),
        "reduce-scatter after an abort: error %d (%s), expected PPSRT_E_COMM naming the call", rc, ppsrt_last_error());
  rc = e->t->allgather(e->t, e->rank, e->b, e->stream, d, d + 4, 4);
  check(e, rc == PPSRT_E_COMM && strstr(ppsrt_last_error(), "all-gather"),
        "all-gather after an abort: error %d (%s), expected PPSRT_E_COMM naming the call", rc, ppsrt_last_error());
  if (tkind == T_THREADS) pthread_barrier_wait(&pbar);
  buf_del(e, d);
}

/* threads: rank 1 never joins; rank 0 times out, naming the call */
static ppsrt_transport *TT;
static void t_timeout(env *e) {
  if (e->rank != 0) return;
  float *s = xmalloc((size_t)e->n * 4 * sizeof *s), r[4];
  int rc = TT->reduce_scatter_f32(TT, 0, NULL, 0, s, r, 4, PPSRT_SUM);
  check(e, rc == PPSRT_E_TIMEOUT && strstr(ppsrt_last_error(), "reduce-scatter"),
        "reduce-scatter rank 1 never joins: error %d (%s), expected PPSRT_E_TIMEOUT naming the call", rc,
        ppsrt_last_error());
  rc = TT->allgather(TT, 0, NULL, 0, r, s, sizeof r);
  check(e, rc == PPSRT_E_TIMEOUT && strstr(ppsrt_last_error(), "all-gather"),
        "all-gather rank 1 never joins: error %d (%s), expected PPSRT_E_TIMEOUT naming the call", rc,
        ppsrt_last_error());
  free(s);
}

typedef struct targ { int rank; env e; } targ;

static void *rank_main(void *p) {
  targ *a = p;
  env *e = &a->e;
  e->t = grpP ? G[grp_of(a->rank)] : T;
  e->rank = grpP ? grp_rank(a->rank) : a->rank;
  e->n = nranks;
  if (use_cuda && ppsrt_cuda_backend_create(a->rank, &e->b)) {
    fprintf(stderr, "rank %d: cuda backend: %s\n", a->rank, ppsrt_last_error());
    exit(2);
  }
  run_all(e);
  if (nranks >= 2 && tkind == T_THREADS && !use_cuda) {
    pthread_barrier_wait(&pbar);
    t_timeout(e);
    pthread_barrier_wait(&pbar);
  }
  if (nranks >= 2 && !grpP) t_abort(e);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: coll_blocks threads|mpi|nccl|nccl-mpi|nccl[-mpi]-groups|nccl[-mpi]-tgroups host|cuda [D]\n");
    return 2;
  }
  const char *tn = argv[1];
  grpNb = !strcmp(tn, "nccl-tgroups") || !strcmp(tn, "nccl-mpi-tgroups");
  grpP = grpNb || !strcmp(tn, "nccl-groups") || !strcmp(tn, "nccl-mpi-groups") ? 2 : 0;
  tkind = !strcmp(tn, "threads") ? T_THREADS : !strcmp(tn, "mpi") ? T_MPI : !strncmp(tn, "nccl-mpi", 8) ? T_NCCL_MPI
        : !strncmp(tn, "nccl", 4) ? T_NCCL : -1;
  use_cuda = !strcmp(argv[2], "cuda");
  nranks = argc > 3 ? atoi(argv[3]) : 2;
  if (tkind < 0 || (!use_cuda && strcmp(argv[2], "host")) || nranks < 1) {
    fprintf(stderr, "coll_blocks: bad arguments\n");
    return 2;
  }
  if ((use_cuda && !ppsrt_cuda_backend_create) || ((tkind == T_MPI) && !ppsrt_mpi_transport_create) ||
      ((tkind == T_NCCL || tkind == T_NCCL_MPI) && !ppsrt_nccl_transport_create)) {
    printf("skip: this libppsrt has no %s %s\n", tn, use_cuda ? "or CUDA backend" : "transport");
    return 77;
  }
  if ((tkind == T_NCCL || tkind == T_NCCL_MPI) && !use_cuda) {
    fprintf(stderr, "coll_blocks: the nccl transport takes device buffers (cuda)\n");
    return 2;
  }
  int my = -1, rc;
  double timeout = 30;
  if (tkind == T_THREADS) rc = ppsrt_threads_transport_create(nranks, timeout, &T);
  else if (tkind == T_MPI) rc = ppsrt_mpi_transport_create(timeout, &T, &my);
  else rc = ppsrt_nccl_transport_create(tkind == T_NCCL ? nranks * (grpP ? grpP : 1) : 0, timeout, tkind == T_NCCL_MPI, &T, &my);
  if (tkind == T_NCCL_MPI && grpP) nranks = T->nranks / grpP;
  if (nranks > 64) nranks = 64;
  int bad_groups = 0;
  if (!rc && tkind == T_NCCL && grpP) {   /* groups that cannot be: refused, named, nothing made */
    int out_of_range[2] = {0, T->nranks}, twice[2] = {1, 1};
    struct { int ng, g, n; const int *m; const char *says; } bad[] = {
      {2, 0, 2, out_of_range, "is not a rank of the transport"},
      {2, 0, 2, twice, "names rank 1 twice"},
      {2, 2, 2, twice, "not a group of"},
      {2, 0, 0, twice, "not a group of"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
      ppsrt_transport *g = NULL;
      int r = ppsrt_nccl_transport_group(T, bad[k].ng, bad[k].g, bad[k].n, bad[k].m, "test group", &g);
      if (r != PPSRT_E_USAGE || g || !strstr(ppsrt_last_error(), bad[k].says)) {
        fprintf(stderr, "FAIL: bad group %zu: error %d (%s), expected PPSRT_E_USAGE saying '%s'\n", k, r, ppsrt_last_error(),
                bad[k].says);
        bad_groups++;
      }
    }
  }
  for (int d = 0; !rc && d < grpP; d++)   /* over MPI, each process its own group */
    if (tkind == T_NCCL || d == grp_of(my)) rc = make_group(d);
  if (rc) {
    fprintf(stderr, "coll_blocks: %s transport: %s\n", tn, ppsrt_last_error());
    return 2;
  }
  if (!T->reduce_scatter_f32 || !T->allgather || (grpP && (!G[my >= 0 ? grp_of(my) : 0]->reduce_scatter_f32))) {
    fprintf(stderr, "FAIL: the %s transport has no reduce_scatter_f32/allgather\n", tn);
    return 1;
  }
  int checks = 0, fails = 0;
  if (tkind == T_MPI || tkind == T_NCCL_MPI) {   /* one process a rank */
    nranks = T->nranks / (grpP ? grpP : 1);
    targ a = {my, {0}};
    if (use_cuda && ppsrt_cuda_backend_create(my, &a.e.b)) {
      fprintf(stderr, "rank %d: cuda backend: %s\n", my, ppsrt_last_error());
      return 2;
    }
    a.e.t = grpP ? G[grp_of(my)] : T;
    a.e.rank = grpP ? grp_rank(my) : my;
    a.e.n = nranks;
    run_all(&a.e);
    checks = a.e.checks;
    fails = a.e.fails;
    if (grpP) G[grp_of(my)]->destroy(G[grp_of(my)]);
    T->destroy(T);
    if (a.e.b) a.e.b->destroy(a.e.b);
  } else {
    if (nranks >= 2 && tkind == T_THREADS && !use_cuda && ppsrt_threads_transport_create(nranks, 0.3, &TT)) {
      fprintf(stderr, "coll_blocks: %s\n", ppsrt_last_error());
      return 2;
    }
    int nth = nranks * (grpP ? grpP : 1);
    pthread_barrier_init(&pbar, NULL, (unsigned)nth);
    pthread_t *th = xmalloc((size_t)nth * sizeof *th);
    targ *a = calloc((size_t)nth, sizeof *a);
    for (int r = 0; r < nth; r++) {
      a[r].rank = r;
      if (pthread_create(&th[r], NULL, rank_main, &a[r])) { perror("pthread_create"); return 2; }
    }
    for (int r = 0; r < nth; r++) {
      pthread_join(th[r], NULL);
      checks += a[r].e.checks;
      fails += a[r].e.fails;
    }
    for (int d = 0; d < grpP; d++) G[d]->destroy(G[d]);
    T->destroy(T);
    if (TT) TT->destroy(TT);
    for (int r = 0; r < nth; r++)
      if (a[r].e.b) a[r].e.b->destroy(a[r].e.b);
    pthread_barrier_destroy(&pbar);
    free(th);
    free(a);
  }
  if (tkind != T_MPI && tkind != T_NCCL_MPI)
    printf("coll_blocks: %s, %s buffers, %s%d ranks: ", tn, use_cuda ? "device" : "host",
           grpP ? grpNb ? "2 groups of neighbours of " : "2 replica groups of " : "", nranks);
  else printf("coll_blocks: rank %d: ", my);
  checks += bad_groups ? 0 : (tkind == T_NCCL && grpP ? 4 : 0);
  fails += bad_groups;
  if (fails) printf("%d of %d checks failed\n", fails, checks);
  else printf("%d checks passed\n", checks);
  return fails ? 1 : 0;
}
