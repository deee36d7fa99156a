/* cmd_synth.c: `ppsc synth FILE -o OUT.pps [--json]`: runs the synthesiser of a
 * schedule that says `synthesize;` and writes the chosen order as a literal PPS file
 * whose header comment states the inputs, the makespan and peak (by the simulator,
 * after lowering, as `ppsc sim` reports them), the lower bound and the gap, and the
 * search time. --json prints the same fields as one object (docs/json.md). */
#include "analysis.h"
#include "driver.h"
#include "synth.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void num(StrBuf *b, double x) {
  /* the range first: casting a real outside long long's range is undefined */
  if (x > -1e15 && x < 1e15 && x == (double)(long long)x) sb_printf(b, "%lld", (long long)x);
  else sb_printf(b, "%.10g", x);
}

static void json_num(StrBuf *b, const char *key, double x) {
  sb_printf(b, ", \"%s\": ", key);
  num(b, x);
}

int cmd_synth(Compilation *c) {
  const Options *o = c->opt;
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  if (!s || io || c->diag.errors) {
    diag_summary(&c->diag);
    return io ? PPSC_USAGE : PPSC_INVALID;
  }
  if (!s->synth) {
    diag_error(&c->diag, s->span, "schedule '%s' does not say 'synthesize;': nothing to synthesise (use ppsc expand)", s->name);
    diag_summary(&c->diag);
    return PPSC_INVALID;
  }
  const SynthInfo *in = s->synth;
  /* the schedule's own parameters and costs, before lowering changes the IR */
  StrBuf body = {0};
  expand_write(s, &body);
  Analysis an;
  analysis_run(&c->arena, &c->diag, s, &an, 0);
  if (c->diag.errors || !an.simulated) {
    sb_free(&body);
    diag_summary(&c->diag);
    return PPSC_INVALID;
  }
  double mk = an.sim.makespan, pk = an.sim.peak_memory;
  if (mk > in->makespan + 1e-6 * (1 + mk) || mk < in->makespan - 1e-6 * (1 + mk))
    diag_warning(&c->diag, s->span, "the simulator's makespan %g differs from the synthesiser's model %g (what the model leaves out: offload and vocabulary passes)",
                 mk, in->makespan);
  double gap = in->lower_bound > 0 ? mk / in->lower_bound - 1 : 0;
  if (fabs(gap) < 1e-9) gap = 0;
  /* optimal only when the makespan reaches the bound, never below it (a bound above
     a valid order's makespan would be a bug: synth_run warns) */
  int optimal = gap == 0;
  int rc = PPSC_OK;
  if (o->out || !o->json) {
    StrBuf h = {0};
    sb_printf(&h, "// synthesized by ppsc synth from %s, schedule %s\n", s->file, s->name);
    sb_printf(&h, "// inputs: %d devices, %d stages (placement %s), %d microbatches; TF = ", s->ndev, s->nstage,
              s->placement, s->nmb);
    num(&h, s->tf); sb_puts(&h, ", TB = "); num(&h, s->tb); sb_puts(&h, ", TW = "); num(&h, s->tw);
    sb_puts(&h, ", TC = "); num(&h, s->tc);
    sb_puts(&h, " (per stage below); memory limit ");
    if (s->mem_limit >= 0) num(&h, s->mem_limit); else sb_puts(&h, "none");
    if (in->bytes) {
      sb_puts(&h, "; hardware.memory holds ");
      num(&h, in->bytes_lo);
      if (in->bytes_hi != in->bytes_lo) { sb_puts(&h, ".."); num(&h, in->bytes_hi); }
      sb_puts(&h, " activation units per device beside its weights, gradients and optimizer state");
    }
    sb_puts(&h, "\n// makespan "); num(&h, mk);
    sb_puts(&h, ", peak memory "); num(&h, pk);
    sb_printf(&h, " (device %d)\n// lower bound ", an.sim.peak_device);
    num(&h, in->lower_bound);
    sb_printf(&h, " (%s", in->lb_which);
    if (in->lb_device >= 0) sb_printf(&h, ", device %d", in->lb_device);
    sb_printf(&h, "), gap %.4g%%%s\n", 100 * gap, optimal ? " (optimal)" : gap < 0 ? " (below the bound: the bound is wrong here)" : "");
    sb_printf(&h, "// search: %ld candidate orders in %.3f s%s%s; %s\n", in->candidates, in->seconds,
              in->timed_out ? " (time limit reached: best so far)" : "",
              in->stalled && !in->timed_out ? " (ended where no better order came; effort 3 or 4 searches further)" : "",
              in->policy);
    sb_puts(&h, body.data ? body.data : "");
    if (o->out) {
      if (write_file_atomic(o->out, h.data, h.len)) rc = PPSC_USAGE;
    } else if (fwrite(h.data, 1, h.len, stdout) != h.len) {
      rc = PPSC_USAGE;
    }
    sb_free(&h);
  }
  if (o->json && rc == PPSC_OK) {
    StrBuf j = {0};
    sb_puts(&j, "{\"cmd\": \"synth\", \"schedule\": ");
    sb_json_string(&j, s->name);
    sb_puts(&j, ", \"file\": ");
    sb_json_string(&j, s->file);
    sb_puts(&j, ", \"output\": ");
    if (o->out) sb_json_string(&j, o->out); else sb_puts(&j, "null");
    json_num(&j, "devices", s->ndev);
    json_num(&j, "stages", s->nstage);
    json_num(&j, "microbatches", s->nmb);
    sb_puts(&j, ", \"placement\": ");
    sb_json_string(&j, s->placement);
    json_num(&j, "TF", s->tf);
    json_num(&j, "TB", s->tb);
    json_num(&j, "TW", s->tw);
    json_num(&j, "TC", s->tc);
    sb_puts(&j, ", \"stage_costs\": [");
    for (int k = 0; k < s->nstage; k++) {
      const IrStage *g = &s->stages[k];
      sb_printf(&j, "%s{\"stage\": %d, \"device\": %d", k ? ", " : "", k, g->device);
      json_num(&j, "TF", g->tf); json_num(&j, "TB", g->tb); json_num(&j, "TW", g->tw);
      json_num(&j, "TBW", g->tbw); json_num(&j, "act", g->act);
      sb_puts(&j, "}");
    }
    sb_puts(&j, "]");
    if (s->mem_limit >= 0) json_num(&j, "memory_limit", s->mem_limit);
    else sb_puts(&j, ", \"memory_limit\": null");
    json_num(&j, "min_memory_limit", in->min_limit);
    if (in->bytes) { json_num(&j, "hardware_memory_units_min", in->bytes_lo); json_num(&j, "hardware_memory_units_max", in->bytes_hi); }
    else sb_puts(&j, ", \"hardware_memory_units_min\": null, \"hardware_memory_units_max\": null");
    json_num(&j, "makespan", mk);
    json_num(&j, "peak_memory", pk);
    json_num(&j, "lower_bound", in->lower_bound);
    sb_puts(&j, ", \"lower_bound_term\": ");
    sb_json_string(&j, in->lb_which);
    sb_puts(&j, ", \"lower_bound_terms\": {");
    sb_printf(&j, "\"path\": "); num(&j, in->lb_path);
    json_num(&j, "work", in->lb_work);
    json_num(&j, "ramp", in->lb_ramp);
    json_num(&j, "ramp_cool", in->lb_cool);
    json_num(&j, "cool_down", in->lb_drain);
    json_num(&j, "memory", in->lb_memory);
    sb_puts(&j, "}");
    json_num(&j, "gap", gap);
    sb_printf(&j, ", \"optimal\": %s", optimal ? "true" : "false");
    json_num(&j, "search_seconds", in->seconds);
    json_num(&j, "candidates", (double)in->candidates);
    sb_printf(&j, ", \"timed_out\": %s, \"stalled\": %s, \"fused\": %s, \"policy\": ", in->timed_out ? "true" : "false",
              in->stalled ? "true" : "false",
              in->fused ? "true" : "false");
    sb_json_string(&j, in->policy);
    sb_puts(&j, "}\n");
    if (fwrite(j.data, 1, j.len, stdout) != j.len) rc = PPSC_USAGE;
    sb_free(&j);
  }
  sb_free(&body);
  diag_summary(&c->diag);
  return rc;
}
