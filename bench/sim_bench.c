/* sim_bench.c: speed of the analysis phases (lower, verify, simulate) on IR built
 * in memory: interleaved 1F1B (Megatron order), P = 64, v = 2, B and W split, for
 * several m. Prints a table of ops vs time (median of REPS runs, with min and max)
 * so the curve shows cost growing linearly with the number of ops. The IR is
 * rebuilt (untimed) before each run, since lowering changes it in place.
 * Not a test: nothing here asserts a time. Usage: sim_bench [P [v [m...]]] */
#include "config.h"
#include "analysis.h"
#include "../tests/analysis/irbuild.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { REPS = 5 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int P = argc > 1 ? atoi(argv[1]) : 64, v = argc > 2 ? atoi(argv[2]) : 2;
  int ms_default[] = {64, 128, 256, 512, 1024, 2048};
  int nm = argc > 3 ? argc - 3 : 6;
  printf("# sim_bench: ppsc %s analysis phases (lower + verify + simulate) on in-memory IR\n", PACKAGE_VERSION);
  printf("# schedule: interleaved 1F1B (Megatron order), P=%d v=%d S=%d, B and W split, TF=TB=TW=1 TC=0\n", P, v, P * v);
  printf("# %d runs per row; times in ms: median [min, max]; ns/op = median total / ops after lowering\n", REPS);
  printf("%6s %10s %10s %22s %22s %22s %22s %8s %10s\n", "m", "compute", "ops", "lower_ms", "verify_ms", "sim_ms", "total_ms",
         "ns/op", "makespan");
  for (int k = 0; k < nm; k++) {
    int m = argc > 3 ? atoi(argv[3 + k]) : ms_default[k];
    if (m % P) { fprintf(stderr, "m=%d: must be a multiple of P\n", m); continue; }
    double t[4][REPS], mk = 0;
    int64_t nops = 0, ncomp = 0;
    for (int r = 0; r < REPS; r++) {
      Arena a = {0};
      Diag dg;
      diag_init(&dg, &a);
      dg.out = stderr;
      IB b;
      IrSchedule *s = ib_new(&b, &a, &dg, P, v, m, 1, 1, 1, 0);
      b.keep_text = 0;
      ib_interleaved(&b, 1);
      ib_done(&b);
      ncomp = s->total_ops;
      double t0 = now();
      LowerIndex kept;
      lower_schedule(&a, &dg, s, &kept);
      double t1 = now();
      VerifyResult vr;
      verify_schedule(&a, &dg, s, &vr, kept.valid ? &kept.ix : NULL, kept.valid ? &kept.links : NULL);
      double t2 = now();
      SimResult sr;
      sim_run(&a, s, &vr.ix, &vr.links, &sr);
      double t3 = now();
      t[0][r] = (t1 - t0) * 1e3, t[1][r] = (t2 - t1) * 1e3, t[2][r] = (t3 - t2) * 1e3, t[3][r] = (t3 - t0) * 1e3;
      nops = vr.ix.total;
      mk = sr.makespan;
      if (dg.errors) { fprintf(stderr, "unexpected errors\n"); return 1; }
      arena_free(&a);
    }
    printf("%6d %10lld %10lld", m, (long long)ncomp, (long long)nops);
    double med[4];
    for (int j = 0; j < 4; j++) {
      qsort(t[j], REPS, sizeof(double), cmpd);
      med[j] = t[j][REPS / 2];
      char cell[64];
      snprintf(cell, sizeof cell, "%.1f [%.1f, %.1f]", med[j], t[j][0], t[j][REPS - 1]);
      printf(" %22s", cell);
    }
    printf(" %8.1f %10g\n", med[3] * 1e6 / (double)nops, mk);
  }
  printf("# end\n");
  return 0;
}
