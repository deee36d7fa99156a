/* fuzz_inputs.c: libFuzzer target for every file PPS reads that is not a .pps (fuzz_front.c
 * has those): a PyTorch schedule CSV (`ppsc import-csv`), a measured-costs profile
 * (`cost profile "FILE";`), a training token file (--data, --val-data) and a checkpoint
 * (--load). The first byte of an input picks the reader, the rest is the file:
 *
 *   0  import-csv: torch_csv_import writes a .pps (removed afterwards);
 *   1  a profile, named by a fixed 2-stage schedule that `synthesize`s under its costs,
 *      then verified and simulated as `ppsc sim` does;
 *   2  a token file, loaded as ppsrt_tokens_load does for --data (the format from the second
 *      byte: auto, tokens, bytes), then cut into windows; with bit 0x40 of the second byte a
 *      Megatron-LM indexed dataset instead: up to the first "\n%%\n" PREFIX.idx, then
 *      PREFIX.bin (auto-detected from PREFIX, or --data-format indexed), every token checked
 *      at load or (bit 0x20) as windows are read;
 *   3  a checkpoint as rt_ckpt_open reads it before the devices start: up to the first
 *      "\n%%\n" the index (or a file of the old single-file format), then up to two
 *      shards, separated likewise, that an index naming "s0" and "s1" finds beside it
 *      (the run: gpt, 2 stages of 1 layer).
 *
 * Every file is written to a fresh temporary directory; a crash, hang, leak or undefined
 * behaviour under ASan + UBSan is a bug in the reader. Built by `make fuzz` with
 * fuzz_front (clang; every C file of the compiler and the runtime library, as built),
 * run by tests/fuzz/run-fuzz.sh on tests/fuzz/corpus-inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "driver.h"
#include "analysis.h"
#include "rt.h"

static char dir[4096];
static int verbose;   /* PPS_FUZZ_VERBOSE=1: say how far each input got (to check the seeds) */

/* Each input's temporary directory goes after it (libFuzzer may end with _Exit). */
static void cleanup(void) {
  static const char *const names[] = {"out.pps", "prof.txt", "s.pps", "t.bin", "t.dat", "t.idx", "ck", "s0"};
  char p[4200];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

static int put(const char *name, const uint8_t *data, size_t size, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Options for command `cmd` on `file`, as fuzz_front's: small limits, no stdlib. */
static void opt_init(Options *opt, const char *cmd, const char *file) {
  memset(opt, 0, sizeof *opt);
  opt->cmd = cmd;
  opt->file = file;
  opt->max_ops = 20000;
  opt->max_errors = 20;
  opt->stdlib_dir = "/nonexistent-pps-stdlib";
  opt->synth_check = analysis_candidate;
}

/* A compilation of `opt` with diagnostics recorded, not printed. */
static void comp_init(Compilation *c, Options *opt) {
  memset(c, 0, sizeof *c);
  c->opt = opt;
  diag_init(&c->diag, &c->arena);
  c->diag.out = NULL;
}

static void fuzz_csv(const uint8_t *data, size_t size) {
  char out[4200];
  snprintf(out, sizeof out, "%s/out.pps", dir);
  Options opt;
  opt_init(&opt, "import-csv", "in.csv");
  opt.out = out;
  Compilation c;
  comp_init(&c, &opt);
  uint32_t fid = diag_add_file(&c.diag, opt.file, (const char *)data, size);
  int rc = torch_csv_import(&c, fid, (const char *)data, size);
  if (verbose) fprintf(stderr, "fuzz_inputs: csv: exit %d, %d errors\n", rc, c.diag.errors);
  arena_free(&c.arena);
  unlink(out);
}

static void fuzz_profile(const uint8_t *data, size_t size) {
  static const char pps[] =
      "schedule prof(P = 2, m = 4) {\n"
      "  devices P; microbatches m; placement linear;\n"
      "  cost profile \"prof.txt\"; memory limit = 2;\n"
      "  synthesize;\n"
      "}\n";
  char ppath[4200], spath[4200];
  if (put("prof.txt", data, size, ppath, sizeof ppath) || put("s.pps", (const uint8_t *)pps, sizeof pps - 1, spath, sizeof spath))
    return;
  Options opt;
  opt_init(&opt, "sim", spath);
  Compilation c;
  comp_init(&c, &opt);
  int io = 0;
  IrSchedule *s = front_compile(&c, &io);
  if (s && !c.diag.errors) {
    Analysis an;
    memset(&an, 0, sizeof an);
    analysis_run(&c.arena, &c.diag, s, &an, 1);
    if (verbose) fprintf(stderr, "fuzz_inputs: profile: simulated %d, makespan %g\n", an.simulated, an.simulated ? an.sim.makespan : 0);
  } else if (verbose) fprintf(stderr, "fuzz_inputs: profile: %d errors\n", c.diag.errors);
  arena_free(&c.arena);
}

static void fuzz_tokens(const uint8_t *data, size_t size) {
  if (!size) return;
  int format = data[0] % 3;
  char path[4200];
  if (data[0] & 0x40) {   /* an indexed dataset: PREFIX.idx "\n%%\n" PREFIX.bin */
    size_t cut = size;
    for (size_t i = 1; i + 4 <= size; i++)
      if (!memcmp(data + i, "\n%%\n", 4)) { cut = i; break; }
    if (put("t.idx", data + 1, cut - 1, path, sizeof path) ||
        put("t.bin", data + (cut < size ? cut + 4 : size), cut < size ? size - cut - 4 : 0, path, sizeof path))
      return;
    snprintf(path, sizeof path, "%s/t", dir);
    format = format == 0 ? 0 : 3;
    if (data[0] & 0x20) setenv("PPSRT_DATA_SCAN", "0", 1);
  } else if (put(format == 0 && data[0] % 2 ? "t.bin" : "t.dat", data + 1, size - 1, path, sizeof path)) {
    return;   /* (auto picks the token format for a name ending in .bin) */
  }
  ppsrt_tokens *t = NULL;
  int vocab = data[0] & 0x80 ? 256 : 50304, seq = 1 + data[0] % 7;
  int rc = ppsrt_tokens_load(path, format, vocab, seq, &t);
  if (verbose) fprintf(stderr, "fuzz_inputs: tokens: %s\n", rc ? ppsrt_last_error() : "loaded");
  if (rc == 0) {
    int32_t ids[8], tgt[8];
    for (long s = 0; s < 5; s++)
      if (ppsrt_tokens_window(t, s * 1000003L, seq, ids, tgt) && verbose)
        fprintf(stderr, "fuzz_inputs: tokens: window %ld: %s\n", s * 1000003L, ppsrt_last_error());
    ppsrt_tokens_free(t);
  }
  unsetenv("PPSRT_DATA_SCAN");
}

static void fuzz_ckpt(const uint8_t *data, size_t size) {
  static const char *const names[3] = {"ck", "s0", "s1"};
  char path[3][4200];
  size_t start = 0;
  int nf = 0;
  while (nf < 3) {
    size_t end = size;
    for (size_t i = start; nf < 2 && i + 4 <= size; i++)
      if (!memcmp(data + i, "\n%%\n", 4)) { end = i; break; }
    if (put(names[nf], data + start, end - start, path[nf], sizeof path[nf])) return;
    nf++;
    if (end == size) break;
    start = end + 4;
  }
  ppsrt_run run;
  memset(&run, 0, sizeof run);
  run.o.model = "gpt";
  run.o.cfg.name = "gpt";
  run.o.cfg.nstage = 2;
  run.o.cfg.layers_per_stage = 1;
  run.o.cfg.nmb = 2;
  run.o.cfg.micro_batch = 1;
  rt_ckpt *ck = NULL;
  int rc = rt_ckpt_open(&run, path[0], &ck);
  if (verbose) fprintf(stderr, "fuzz_inputs: checkpoint (%d files): %s\n", nf, rc ? ppsrt_last_error() : "opened");
  if (rc == 0) rt_ckpt_close(ck);
  for (int i = 1; i < nf; i++) unlink(path[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pps-fuzz-in-XXXXXX", tmp && *tmp && strlen(tmp) < 4000 ? tmp : "/tmp");
  if (!mkdtemp(dir)) abort();
  verbose = getenv("PPS_FUZZ_VERBOSE") && *getenv("PPS_FUZZ_VERBOSE") == '1';
  switch (data[0] % 4) {
  case 0: fuzz_csv(data + 1, size - 1); break;
  case 1: fuzz_profile(data + 1, size - 1); break;
  case 2: fuzz_tokens(data + 1, size - 1); break;
  default: fuzz_ckpt(data + 1, size - 1); break;
  }
  cleanup();
  return 0;
}
