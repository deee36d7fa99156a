/* cmd_check.c: the `check` and `sim` commands: front end (parse, elaborate, order)
 * -> analysis pipeline (analysis.c: lower, verify, simulate, expectations) ->
 * reports (report.c). It turns the results into exit codes and writes the outputs
 * (atomically: a file is written whole or not at all). `import-csv` and
 * `export-csv` live in csv.c. */
#include "analysis.h"
#include <stdio.h>
#include <string.h>

static int write_buf(const char *path, StrBuf *b) {
  int rc = write_file_atomic(path, b->data ? b->data : "", b->len);
  sb_free(b);
  return rc;
}

/* check and sim share everything but what they print. */
static int run_cmd(Compilation *c, int is_sim) {
  const Options *o = c->opt;
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  Analysis an;
  memset(&an, 0, sizeof an);
  int want_tl = is_sim && (o->trace || o->svg || o->grid);
  if (s && !io && c->diag.errors == 0) analysis_run(&c->arena, &c->diag, s, &an, want_tl);
  int valid = s && !io && c->diag.errors == 0;
  Report rep = {is_sim ? "sim" : "check", s, &c->diag, an.verified ? &an.vr.ix : NULL,
                an.simulated ? &an.sim : NULL, an.verified ? an.expects : NULL, an.inserted_ops, valid,
                o->svg_arrows, o->svg_window, o->svg_t0, o->svg_t1, o->svg_devices, (int)o->svg_dlo, (int)o->svg_dhi};
  int rc = io ? PPSC_USAGE : valid ? PPSC_OK : PPSC_INVALID;
  StrBuf b = {0};
  if (o->json) {
    report_json(&b, &rep);
    if (write_buf("-", &b)) rc = PPSC_USAGE;
  } else if (!o->quiet && s && !io) {
    if (is_sim || valid) {
      report_text(&b, &rep);
      if (is_sim && o->grid && an.simulated) { sb_puts(&b, "\n"); report_grid(&b, &rep); }
      if (write_buf("-", &b)) rc = PPSC_USAGE;
    }
  }
  if (is_sim && (o->trace || o->svg)) {
    if (!an.simulated) {
      fprintf(stderr, "ppsc: no %s written: the schedule was not simulated\n", o->trace && o->svg ? "trace or svg" : o->trace ? "trace" : "svg");
    } else {
      if (o->trace) {
        report_trace(&b, &rep);
        if (write_buf(o->trace, &b)) rc = PPSC_USAGE;
      }
      if (o->svg && o->svg_devices && o->svg_dhi > s->ndev) {
        fprintf(stderr, "ppsc: --svg-devices %ld..%ld: the schedule has devices 0..%d (HI is at most %d); no svg written\n",
                o->svg_dlo, o->svg_dhi, s->ndev, s->ndev);
        rc = PPSC_USAGE;
      } else if (o->svg) {
        report_svg(&b, &rep);
        if (write_buf(o->svg, &b)) rc = PPSC_USAGE;
      }
    }
  }
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
}

int cmd_check(Compilation *c) { return run_cmd(c, 0); }
int cmd_sim(Compilation *c) { return run_cmd(c, 1); }
