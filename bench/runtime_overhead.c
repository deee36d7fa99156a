/* runtime_overhead.c: the runtime's own cost per op, measured with --no-compute (the
 * model skips every kernel; buffers still move through the IO box, the transport and
 * the activation store), against a bare loop doing the same table walk (a switch per
 * op and a counter) in the same run. Builds a 1F1B table (sends and receives written
 * out) for P devices and m microbatches, runs ppsrt_main on it `--iterations N`, reads
 * the per-iteration times from its --json, and prints median, min and max of the time
 * per op on the busiest device (iteration time / ops of that device), the bare loop's,
 * and their ratio. What it does not: no compute timing (bench/README.md, GPU section),
 * no MPI by itself: `mpirun -np P runtime_overhead P m N mpi` measures the MPI transport.
 *
 *   usage: runtime_overhead [P [m [iterations [transport]]]]   (default 2 512 30 threads)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ppsrt.h"

static ppsrt_op *ops[64];
static int32_t nops[64], cap[64];

static void push(int d, int kind, int mb, int stage, int xfer, int peer) {
  if (nops[d] == cap[d]) {
    cap[d] = cap[d] ? 2 * cap[d] : 1024;
    ops[d] = realloc(ops[d], (size_t)cap[d] * sizeof **ops);
    if (!ops[d]) { perror("realloc"); exit(2); }
  }
  ops[d][nops[d]++] = (ppsrt_op){(uint8_t)kind, (uint8_t)xfer, 0, PPSRT_FLAG_INSERTED, mb, stage, peer, 1};
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The bare loop: the same walk, a switch per op, nothing else. */
static volatile long sink;
static double bare_walk(int P) {
  double t0 = now();
  long acc = 0;
  for (int d = 0; d < P; d++)
    for (int i = 0; i < nops[d]; i++) {
      const ppsrt_op *op = &ops[d][i];
      switch (op->kind) {
      case PPSRT_OP_F: acc += op->mb; break;
      case PPSRT_OP_BW: acc -= op->stage; break;
      case PPSRT_OP_SEND: acc ^= op->peer; break;
      case PPSRT_OP_RECV: acc += op->peer; break;
      default: acc++; break;
      }
    }
  sink = acc;
  return now() - t0;
}

int main(int argc, char **argv) {
  int P = argc > 1 ? atoi(argv[1]) : 2, m = argc > 2 ? atoi(argv[2]) : 512, iters = argc > 3 ? atoi(argv[3]) : 30;
  const char *transport = argc > 4 ? argv[4] : "threads";
  if (P < 1 || P > 64 || m < 1 || iters < 3) { fprintf(stderr, "usage: runtime_overhead [P [m [iterations [transport]]]]\n"); return 2; }
  ppsrt_stage *st = calloc((size_t)P, sizeof *st);
  long total = 0, maxops = 0;
  for (int d = 0; d < P; d++) {
    st[d] = (ppsrt_stage){d, 1, 1, 1, 2, 1, 0, 0, 0, 0, 0};
    int warm = P - d - 1 < m ? P - d - 1 : m;
    for (int k = 0; k < m + warm; k++) {
      /* warm-up forwards, then 1F1B, then cool-down backwards */
      if (k < m) {
        if (d > 0) push(d, PPSRT_OP_RECV, k, d - 1, PPSRT_XFER_ACT, d - 1);
        push(d, PPSRT_OP_F, k, d, 0, -1);
        if (d < P - 1) push(d, PPSRT_OP_SEND, k, d, PPSRT_XFER_ACT, d + 1);
      }
      int i = k - warm;
      if (i >= 0) {
        if (d < P - 1) push(d, PPSRT_OP_RECV, i, d + 1, PPSRT_XFER_GRAD, d + 1);
        push(d, PPSRT_OP_BW, i, d, 0, -1);
        if (d > 0) push(d, PPSRT_OP_SEND, i, d, PPSRT_XFER_GRAD, d - 1);
      }
    }
    total += nops[d];
    if (nops[d] > maxops) maxops = nops[d];
  }
  const ppsrt_op *tabs[64];
  for (int d = 0; d < P; d++) tabs[d] = ops[d];
  ppsrt_program prog = {.abi = PPSRT_ABI_VERSION, .name = "bench_1f1b", .source = "bench/runtime_overhead.c",
                        .ndev = P, .nstage = P, .nmb = m, .stages = st, .ops = tabs, .nops = nops};

  /* the runtime: --json into a temporary file, then read the iteration times */
  char path[] = "/tmp/ppsrt-bench-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) { perror("mkstemp"); return 2; }
  char itbuf[32];
  snprintf(itbuf, sizeof itbuf, "%d", iters);
  char *av[] = {"runtime_overhead", "--no-compute", "--json", "--iterations", itbuf, "--hidden", "8", "--seq", "1",
                "--transport", (char *)transport, NULL};
  fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  int rc = ppsrt_main(&prog, 11, av);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  if (rc) { fprintf(stderr, "runtime_overhead: ppsrt_main failed (%d)\n", rc); unlink(path); return 1; }
  FILE *f = fopen(path, "r");
  static char json[1 << 20];
  size_t n = f ? fread(json, 1, sizeof json - 1, f) : 0;
  if (f) fclose(f);
  json[n] = 0;
  unlink(path);
  double *t = calloc((size_t)iters, sizeof *t);
  int nt = 0;
  for (char *p = json; (p = strstr(p, "\"time_s\":")) && nt < iters; p += 9) t[nt++] = atof(p + 9);
  const char *r = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
  if (nt < 3 && r && atoi(r) > 0) return 0;   /* under mpirun only rank 0 reports */
  if (nt < 3) { fprintf(stderr, "runtime_overhead: no iteration times in the JSON\n"); return 1; }
  /* skip the first (warm-up) iteration */
  qsort(t + 1, (size_t)(nt - 1), sizeof *t, cmp_double);
  double med = t[1 + (nt - 1) / 2], lo = t[1], hi = t[nt - 1];

  double bare[9];
  for (int k = 0; k < 9; k++) bare[k] = bare_walk(P);
  qsort(bare, 9, sizeof *bare, cmp_double);

  printf("# runtime_overhead: libppsrt %s\n", ppsrt_version());
  printf("# schedule 1F1B, P=%d devices, m=%d microbatches, %ld ops (%ld on the busiest device), transport %s\n", P, m,
         total, maxops, transport);
  printf("# --no-compute, mlp hidden 8 x seq 1, %d iterations (first one dropped), CPU backend\n", iters);
  printf("# per op = iteration time / ops of the busiest device; bare loop = the same walk, switch + counter, per op\n");
  printf("%-28s %12s %12s %12s\n", "what", "median_us", "min_us", "max_us");
  printf("%-28s %12.4f %12.4f %12.4f\n", "runtime per op", med / maxops * 1e6, lo / maxops * 1e6, hi / maxops * 1e6);
  printf("%-28s %12.4f %12.4f %12.4f\n", "bare loop per op", bare[4] / total * 1e6, bare[0] / total * 1e6,
         bare[8] / total * 1e6);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int used = P < cores ? P : (int)cores;
  printf("%-28s %12.4f %12.4f %12.4f\n", "runtime, cores x time / ops", med * used / total * 1e6, lo * used / total * 1e6,
         hi * used / total * 1e6);
  printf("# (the last line: iteration time x min(P, %ld cores) / all ops: the CPU the runtime spends per op when\n"
         "#  there are more devices than cores and the per-device figure includes time-slicing)\n", cores);
  printf("# ratio runtime/bare (median): %.1f\n", (med / maxops) / (bare[4] / total));
  printf("# target: runtime per op < 2 us: %s\n", med / maxops * 1e6 < 2.0 ? "met" : "NOT met");
  for (int d = 0; d < P; d++) free(ops[d]);
  free(st);
  free(t);
  return 0;
}
