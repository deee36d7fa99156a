/* fuzz_front.c: libFuzzer target for the whole compiler: scan, parse, elaborate, and
 * for what elaborates, lower, verify, simulate, evaluate the expectations and write
 * every report (text, JSON, trace, SVG) and the generated C into memory. Each input is
 * compiled from a temporary file with no diagnostics printed, a small op limit and a
 * fresh arena, so any crash, hang, leak or undefined behaviour the sanitizers see is a
 * compiler bug. Built by `make fuzz` (clang), run by tests/fuzz/run-fuzz.sh. Imports
 * resolve against a directory that does not exist. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "driver.h"
#include "analysis.h"
#include "emit_c.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[] = "/tmp/pps-fuzz-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  if (size && write(fd, data, size) != (ssize_t)size) { close(fd); unlink(path); return 0; }
  close(fd);
  Options opt;
  memset(&opt, 0, sizeof opt);
  opt.cmd = "expand";
  opt.file = path;
  opt.max_ops = 20000;
  opt.max_errors = 20;
  opt.stdlib_dir = "/nonexistent-pps-stdlib";
  opt.synth_check = analysis_candidate;
  Compilation c;
  memset(&c, 0, sizeof c);
  c.opt = &opt;
  diag_init(&c.diag, &c.arena);
  c.diag.out = NULL; /* record only */
  int io = 0;
  IrSchedule *s = front_compile(&c, &io);
  if (s && !c.diag.errors) {
    /* touch what later phases read */
    int64_t n = 0;
    for (int d = 0; d < s->ndev; d++) n += s->devs[d].nops;
    if (n != s->total_ops) abort();
    Analysis an;
    memset(&an, 0, sizeof an);
    analysis_run(&c.arena, &c.diag, s, &an, 1);
    int valid = c.diag.errors == 0;
    Report rep = {"sim", s, &c.diag, an.verified ? &an.vr.ix : NULL, an.simulated ? &an.sim : NULL,
                  an.verified ? an.expects : NULL, an.inserted_ops, valid};
    StrBuf b = {0};
    report_json(&b, &rep);
    report_text(&b, &rep);
    if (an.simulated) {
      report_trace(&b, &rep);
      report_svg(&b, &rep);
    }
    if (valid) emit_c(s, &an, &c.diag, &b);
    sb_free(&b);
  }
  arena_free(&c.arena);
  unlink(path);
  return 0;
}
