/* report.c: the outputs of `check` and `sim`, each built in a StrBuf:
 *   - report_text: a readable summary (schedule, P, S, m, makespan, bubble, memory,
 *     a per-device table, expectations);
 *   - report_json: the --json object, keys in the fixed order docs/json.md lists;
 *   - report_trace: Chrome trace format (Perfetto, chrome://tracing): one process per
 *     device with a compute track, a track per copy engine and a wait track, plus a
 *     memory counter; one cost unit is shown as 1 ms;
 *   - report_svg (in svg.c): a timeline like the papers' figures and a memory-over-time
 *     plot per device.
 * It computes nothing: every figure comes from the simulator or the index. */
#include "report.h"
#include "recompute.h"
#include "synth.h"
#include "dp.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *metric_cmp(int c) {
  static const char *t[] = {"<", "<=", "==", "!=", ">=", ">"};
  return c >= 0 && c <= 5 ? t[c] : "?";
}

/* The bottleneck device: the one with the most compute (busy) time; its bubble is
 * 1 - busy / makespan. With per-stage costs the headline bubble (against the ideal
 * m(TF+TB+TW)) can be large while this device never waits. */
static int bottleneck(const IrSchedule *s, const SimResult *sim, double *rate) {
  int best = 0;
  for (int d = 1; d < s->ndev; d++)
    if (sim->dev[d].busy > sim->dev[best].busy) best = d;
  *rate = sim->makespan > 0 && s->ndev > 0 ? 1 - sim->dev[best].busy / sim->makespan : 0;
  return best;
}

/* GPUs in all: P x D x C x T (data, context and tensor parallelism; costmodel.c) */
static double gpus(const IrSchedule *s) {
  const IrDerived *x = &s->derived;
  return (double)s->ndev * (x->dp ? x->dp->D : 1) * (x->cp ? x->cp->C : 1) * (x->tp ? x->tp->T : 1);
}

/* hardware tensor_parallel or context_parallel > 1 (costmodel.c): the layout, P x D
 * (x C) (x T) GPUs */
static void tp_layout(StrBuf *b, const IrSchedule *s) {
  const TpModel *t = s->derived.tp;
  const CpModel *c = s->derived.cp;
  int D = s->derived.dp ? s->derived.dp->D : 1;
  if (t) sb_printf(b, "tensor parallel T = %d%s", t->T, t->sp ? " (sequence parallel)" : "");
  if (c) sb_printf(b, "%scontext parallel C = %d", t ? ", " : "", c->C);
  sb_printf(b, ": P x D%s%s = %d x %d", c ? " x C" : "", t ? " x T" : "", s->ndev, D);
  if (c) sb_printf(b, " x %d", c->C);
  if (t) sb_printf(b, " x %d", t->T);
  sb_printf(b, " = %.0f GPUs", gpus(s));
}

/* hardware expert_parallel > 1 (costmodel.c EpModel): the groups, the collectives inside
 * the passes' times, the experts' store entry */
static void ep_report_text(StrBuf *b, const IrSchedule *s) {
  const EpModel *e = s->derived.ep;
  sb_printf(b, "experts     expert parallel X = %d: each EP group is %d data-parallel replicas, 1/%d of the experts a GPU;\n"
               "            their gradients and optimizer state over the %d replica%s of the same EP rank", e->X, e->X, e->X,
            e->edp, e->edp == 1 ? "" : "s");
  if (s->derived.cp) sb_printf(b, " (x C = %d)", s->derived.cp->C);
  sb_puts(b, "\n");
  if (e->alltoall && e->times && s->derived.times)
    sb_printf(b, "            EP communication, all-to-all dispatcher (%.4g tokens a GPU; ASSUMED balanced routing: (X-1)/X of the kept\n"
                 "            slots leave each GPU, %.4g bytes sent a layer a microbatch; %.4g B/s, %.4g s a message; not overlapped):\n"
                 "            F %.4g s (the counts gathered, the rows there and back), B %.4g s (there and back), W %.4g s (there) a\n"
                 "            device share\n",
              e->tokens, e->layer_bytes, e->bandwidth, e->latency, e->f, e->b, e->w);
  else if (e->times && s->derived.times)
    sb_printf(b, "            EP communication (%.4g tokens a GPU; ring, %.4g B/s, %.4g s a step; not overlapped, inside the passes'\n"
                 "            times): F %.4g s (all-gathers of LN2's output and the routing, a reduce-scatter of the outputs a\n"
                 "            layer), B %.4g s (an all-gather of dy, reduce-scatters of the input and routing gradients), W %.4g s\n"
                 "            (LN2's output gathered again) a device share\n",
              e->tokens, e->bandwidth, e->latency, e->f, e->b, e->w);
  if (e->bytes)
    sb_printf(b, "            the experts' activation entry of a layer a microbatch: %.4g bytes (the group's X N K = %.4g slots)\n",
              e->expert_bytes, e->slots);
}

/* ---- text ---- */
void report_text(StrBuf *b, const Report *r) {
  const IrSchedule *s = r->s;
  if (!s) return;
  const SimResult *sim = r->sim;
  if (!strcmp(r->cmd, "check")) {
    sb_printf(b, "%s: valid (%d device%s, %d stage%s, %d microbatch%s, %lld op%s", s->name ? s->name : "schedule",
              s->ndev, s->ndev == 1 ? "" : "s", s->nstage, s->nstage == 1 ? "" : "s", s->nmb, s->nmb == 1 ? "" : "es",
              (long long)s->total_ops, s->total_ops == 1 ? "" : "s");
    if (sim) {
      sb_puts(b, "; makespan ");
      sb_num(b, sim->makespan);
      sb_printf(b, ", bubble %.4f, peak memory ", sim->bubble_rate);
      sb_num(b, sim->peak_memory);
    }
    sb_puts(b, ")\n");
    if (s->derived.tp || s->derived.cp) {
      sb_printf(b, "%s: ", s->name ? s->name : "schedule");
      tp_layout(b, s);
      sb_puts(b, "; times and bytes are one GPU's\n");
    }
    if (s->synth)   /* the search runs on every check (issue 22: 5 s at P = 16 in CI) */
      sb_printf(b, "%s: the order was synthesised (%.3g s, %ld candidate orders) and is searched again on every check; "
                "to freeze it: ppsc synth %s -o FROZEN.pps, then check FROZEN.pps\n",
                s->name ? s->name : "schedule", s->synth->seconds, s->synth->candidates, s->file ? s->file : "FILE");
    return;
  }
  sb_printf(b, "schedule    %s (%s)\n", s->name ? s->name : "?", s->file ? s->file : "?");
  sb_printf(b, "shape       P=%d devices, S=%d stages, m=%d microbatches, placement %s\n", s->ndev, s->nstage, s->nmb,
            s->placement ? s->placement : "?");
  sb_printf(b, "ops         %lld (%lld inserted by lowering)\n", (long long)s->total_ops, (long long)r->inserted_ops);
  sb_printf(b, "valid       %s\n", r->valid ? "yes" : "no");
  if (!sim) return;
  sb_puts(b, "makespan    ");
  sb_num(b, sim->makespan);
  sb_puts(b, "   (ideal ");
  sb_num(b, sim->ideal);
  /* the ideal is the busiest device's compute (sim.c); it is m(TF+TB+TW) unless
     per-stage costs, vocabulary passes or overlapped pairs make it otherwise */
  double wide = (double)s->nmb * (s->tf + s->tb + s->tw);
  if (s->ndev > 0 && sim->ideal != wide) {
    double br;
    int wd = bottleneck(s, sim, &br);
    sb_printf(b, ": the compute of device %d, with the costs its passes have; m(TF+TB+TW) = ", wd);
    sb_num(b, wide);
  } else {
    sb_puts(b, " = m(TF+TB+TW)");
  }
  sb_puts(b, ")\n");
  sb_printf(b, "bubble      %.4f   (over the longest device span: %.4f)\n", sim->bubble_rate, sim->bubble_rate_span);
  if (s->ndev > 0) {
    double br;
    int bd = bottleneck(s, sim, &br);
    sb_printf(b, "bottleneck  device %d: busy %.4f of the makespan, bubble %.4f\n", bd, 1 - br, br);
  }
  sb_puts(b, "peak memory ");
  sb_num(b, sim->peak_memory);
  sb_printf(b, " activations on device %d", sim->peak_device);
  if (sim->host_memory > 0) {
    sb_puts(b, ", host ");
    sb_num(b, sim->host_memory);
  }
  sb_puts(b, "\n");
  if (recompute_any(s)) {   /* recompute.c: B runs the dropped part of F again */
    int dm = 0;
    for (int d = 1; d < s->ndev; d++) if (recompute_device_time(s, d) > recompute_device_time(s, dm)) dm = d;
    sb_printf(b, "recompute   ratio %.4g of stages %d..%d: B reruns that part of F, most on device %d: ", s->recompute.ratio,
              s->recompute.stage_lo, s->recompute.stage_hi, dm);
    sb_num(b, recompute_device_time(s, dm));
    sb_puts(b, "\n");
  }
  if (s->derived.times) sb_puts(b, "units       seconds (costs from model { } and hardware { } where the file gives none)\n");
  if (s->derived.tp || s->derived.cp) {
    sb_puts(b, "layout      ");
    tp_layout(b, s);
    sb_puts(b, "; the derived times and bytes are one GPU's\n");
  }
  if (s->derived.cp) {
    const CpModel *c = s->derived.cp;
    /* inside TF and TB when they are derived */
    if (c->times && s->derived.times)
      sb_printf(b, "            CP communication (K and V, %.4g bytes a layer and microbatch, all-gathered over the %d GPUs; ring, %.4g B/s,\n"
                   "            %.4g s a step; not overlapped, inside the passes' times): F %.4g s (an all-gather a layer), B %.4g s (an\n"
                   "            all-gather and a reduce-scatter of the gradients a layer), W 0 a device share\n",
                c->kv_bytes, c->C, c->bandwidth, c->latency, c->f, c->b);
    sb_printf(b, "            each GPU holds 2 of the %d chunks of the sequence: 1/%d of every derived FLOP and activation byte\n", 2 * c->C, c->C);
  }
  if (s->derived.ep) ep_report_text(b, s);
  if (s->derived.tp) {
    const TpModel *t = s->derived.tp;
    /* the communication below is inside TF and TB when they are derived */
    if (t->times && s->derived.times) {
      sb_printf(b, "            TP communication (ring, %.4g B/s, %.4g s a step; not overlapped, inside the passes' times):\n"
                   "            F %.4g s, B %.4g s, W 0 a device share", t->bandwidth, t->latency, t->f, t->b);
      if (!s->vocab.mode)
        sb_printf(b, "; input layer F %.4g s, B %.4g s; output layer F %.4g s, B %.4g s", t->in_f, t->in_b, t->out_f, t->out_b);
      else
        sb_printf(b, "; vocabulary passes TIF %.4g s, TS %.4g s, TT %.4g s, TIB 0", t->in_f, t->out_f, t->out_b);
      sb_puts(b, "\n");
    }
    if (t->bytes)
      sb_printf(b, "            a layer's activation a microbatch: %.4g GB whole on each GPU + %.4g GB split over the %d\n",
                t->act_rep / 1e9, t->act_split / 1e9, t->T);
  }
  if (s->derived.bytes && s->derived.static_bytes) {
    sb_printf(b, "bytes       one activation unit = %.4g GB; weights + gradients + optimizer state + peak activations per device", s->derived.unit_bytes / 1e9);
    if (s->derived.memory > 0) sb_printf(b, " (hardware.memory %.4g GB)", s->derived.memory / 1e9);
    if (s->derived.dp && s->derived.dp->dist)
      sb_printf(b, ", optimizer state sharded over %d %s", s->derived.dp->ranks,
                s->derived.dp->C > 1 ? "GPUs (data-parallel x context-parallel)" : "replicas");
    if (s->derived.dp && s->derived.dp->dist && s->derived.ep)
      sb_printf(b, ", the experts' over %d", s->derived.dp->eranks);
    sb_puts(b, ":\n");
    for (int d = 0; d < s->ndev; d++) {
      double st = s->derived.static_bytes[d], ac = sim->dev[d].peak * s->derived.unit_bytes;
      sb_printf(b, "%6d %9.4g GB + %9.4g GB = %9.4g GB\n", d, st / 1e9, ac / 1e9, (st + ac) / 1e9);
    }
  }
  sb_puts(b, "\n");
  int copies = 0;
  for (int d = 0; d < s->ndev; d++) if (sim->dev[d].copy_busy[0] + sim->dev[d].copy_busy[1] > 0) copies = 1;
  sb_printf(b, "%6s %10s %10s %10s %10s %10s %9s %9s%s\n", "device", "busy", "idle", "first", "last", "comm_wait", "peak_mem",
            "time_mem", copies ? "  host_mem  copy_d2h  copy_h2d" : "");
  for (int d = 0; d < s->ndev; d++) {
    const SimDev *v = &sim->dev[d];
    sb_printf(b, "%6d %10.6g %10.6g %10.6g %10.6g %10.6g %9.6g %9.6g", d, v->busy, v->idle, v->first, v->last, v->comm_wait,
              v->peak_order, v->peak_time);
    if (copies) sb_printf(b, " %9.6g %9.6g %9.6g", v->host_peak, v->copy_busy[0], v->copy_busy[1]);
    sb_puts(b, "\n");
  }
  if (sim->dp) dp_report_text(b, s, sim->dp);   /* hardware data_parallel (dp.c) */
  if (s->nexpects && r->expects) {
    sb_puts(b, "\n");
    for (int k = 0; k < s->nexpects; k++) {
      const IrExpect *e = &s->expects[k];
      const ExpectResult *x = &r->expects[k];
      char name[64];
      if (e->device >= 0) snprintf(name, sizeof name, "%s[%d]", ir_metric_name(e->metric), e->device);
      else snprintf(name, sizeof name, "%s", ir_metric_name(e->metric));
      sb_printf(b, "expect %s %s %.6g: %s (%.6g)\n", name, metric_cmp(e->cmp), e->value,
                !x->evaluated ? "not evaluated" : x->ok ? "ok" : "FAILED", x->actual);
    }
  }
}

/* ---- JSON ---- */
static void json_loc(StrBuf *b, const Diag *dg, Span sp) {
  if (sp.file && (int)sp.file < dg->nfiles) {
    sb_puts(b, "\"file\":");
    sb_json_string(b, dg->files[sp.file].path);
    sb_printf(b, ",\"line\":%u,\"col\":%u", sp.line, sp.col);
  } else {
    sb_puts(b, "\"file\":null,\"line\":null,\"col\":null");
  }
}

static void json_key_num(StrBuf *b, const char *key, double x, int have) {
  sb_printf(b, ",\"%s\":", key);
  if (have) sb_num(b, x); else sb_puts(b, "null");
}

void report_json(StrBuf *b, const Report *r) {
  const IrSchedule *s = r->s;
  const Diag *dg = r->diag;
  const SimResult *sim = r->sim;
  sb_puts(b, "{\"command\":");
  sb_json_string(b, r->cmd);
  sb_puts(b, ",\"schedule\":");
  if (s && s->name) sb_json_string(b, s->name); else sb_puts(b, "null");
  sb_puts(b, ",\"file\":");
  if (s && s->file) sb_json_string(b, s->file); else sb_puts(b, "null");
  json_key_num(b, "devices", s ? s->ndev : 0, s != NULL);
  json_key_num(b, "stages", s ? s->nstage : 0, s != NULL);
  json_key_num(b, "microbatches", s ? s->nmb : 0, s != NULL);
  sb_puts(b, ",\"placement\":");
  if (s && s->placement) sb_json_string(b, s->placement); else sb_puts(b, "null");
  sb_printf(b, ",\"valid\":%s", r->valid ? "true" : "false");
  /* errors (with their notes) and warnings, in the order reported */
  for (int pass = 0; pass < 2; pass++) {
    sb_puts(b, pass == 0 ? ",\"errors\":[" : ",\"warnings\":[");
    int first = 1;
    DiagLevel want = pass == 0 ? DIAG_ERROR : DIAG_WARNING;
    for (int k = 0; k < dg->nrecs; k++) {
      const DiagRecord *d = &dg->recs[k];
      if (d->level != want) continue;
      sb_puts(b, first ? "{" : ",{");
      first = 0;
      json_loc(b, dg, d->span);
      sb_puts(b, ",\"message\":");
      sb_json_string(b, d->message);
      sb_puts(b, ",\"notes\":[");
      int nf = 1;
      for (int j = k + 1; j < dg->nrecs && dg->recs[j].level == DIAG_NOTE; j++) {
        sb_puts(b, nf ? "{" : ",{");
        nf = 0;
        json_loc(b, dg, dg->recs[j].span);
        sb_puts(b, ",\"message\":");
        sb_json_string(b, dg->recs[j].message);
        sb_puts(b, "}");
      }
      sb_puts(b, "]}");
    }
    sb_puts(b, "]");
  }
  json_key_num(b, "ops", s ? (double)s->total_ops : 0, s && r->ix);
  json_key_num(b, "inserted_ops", (double)r->inserted_ops, s && r->ix);
  json_key_num(b, "makespan", sim ? sim->makespan : 0, sim != NULL);
  json_key_num(b, "ideal_time", sim ? sim->ideal : 0, sim != NULL);
  json_key_num(b, "bubble_rate", sim ? sim->bubble_rate : 0, sim != NULL);
  json_key_num(b, "bubble_rate_span", sim ? sim->bubble_rate_span : 0, sim != NULL);
  json_key_num(b, "span", sim ? sim->span : 0, sim != NULL);
  json_key_num(b, "peak_memory", sim ? sim->peak_memory : 0, sim != NULL);
  json_key_num(b, "peak_memory_device", sim ? sim->peak_device : 0, sim != NULL);
  json_key_num(b, "host_memory", sim ? sim->host_memory : 0, sim != NULL);
  sb_puts(b, ",\"per_device\":[");
  if (sim && s) {
    for (int d = 0; d < s->ndev; d++) {
      const SimDev *v = &sim->dev[d];
      sb_printf(b, "%s{\"device\":%d", d ? "," : "", d);
      json_key_num(b, "peak_memory", v->peak, 1);
      json_key_num(b, "busy", v->busy, 1);
      json_key_num(b, "idle", v->idle, 1);
      json_key_num(b, "ops", (double)v->nops, 1);
      json_key_num(b, "first_start", v->first, 1);
      json_key_num(b, "last_end", v->last, 1);
      json_key_num(b, "comm_wait", v->comm_wait, 1);
      json_key_num(b, "peak_memory_order", v->peak_order, 1);
      json_key_num(b, "peak_memory_time", v->peak_time, 1);
      json_key_num(b, "host_memory", v->host_peak, 1);
      json_key_num(b, "copy_busy_d2h", v->copy_busy[0], 1);
      json_key_num(b, "copy_busy_h2d", v->copy_busy[1], 1);
      if (recompute_any(s)) json_key_num(b, "recompute_time", recompute_device_time(s, d), 1);
      if (s->derived.bytes && s->derived.static_bytes) {
        json_key_num(b, "static_bytes", s->derived.static_bytes[d], 1);
        json_key_num(b, "peak_bytes", s->derived.static_bytes[d] + v->peak * s->derived.unit_bytes, 1);
      }
      sb_puts(b, "}");
    }
  }
  sb_puts(b, "],\"expects\":[");
  if (s) {
    for (int k = 0; k < s->nexpects; k++) {
      const IrExpect *e = &s->expects[k];
      const ExpectResult *x = r->expects ? &r->expects[k] : NULL;
      sb_puts(b, k ? ",{" : "{");
      json_loc(b, dg, e->span);
      sb_puts(b, ",\"metric\":");
      sb_json_string(b, ir_metric_name(e->metric));
      json_key_num(b, "device", e->device, e->device >= 0);
      sb_puts(b, ",\"cmp\":");
      sb_json_string(b, metric_cmp(e->cmp));
      json_key_num(b, "value", e->value, 1);
      int ev = x && x->evaluated;
      json_key_num(b, "actual", ev ? x->actual : 0, ev);
      sb_printf(b, ",\"ok\":%s}", ev ? (x->ok ? "true" : "false") : "null");
    }
  }
  sb_puts(b, "],\"params\":[");
  if (s) {
    for (int k = 0; k < s->nparams; k++) {
      sb_puts(b, k ? ",{\"name\":" : "{\"name\":");
      sb_json_string(b, s->params[k].name ? s->params[k].name : "");
      json_key_num(b, "value", s->params[k].value, 1);
      sb_puts(b, "}");
    }
  }
  sb_puts(b, "]");
  /* added after the original keys (their order is kept): the bottleneck device's bubble */
  {
    double br = 0;
    int bd = sim && s && s->ndev > 0 ? bottleneck(s, sim, &br) : 0;
    json_key_num(b, "bottleneck_device", bd, sim && s && s->ndev > 0);
    json_key_num(b, "bubble_rate_bottleneck", br, sim && s && s->ndev > 0);
  }
  if (s) { /* seconds and bytes (costmodel.c), added after the first keys */
    sb_printf(b, ",\"time_unit\":\"%s\"", s->derived.times ? "s" : "unit");
    json_key_num(b, "unit_bytes", s->derived.unit_bytes, s->derived.bytes);
    json_key_num(b, "hardware_memory", s->derived.memory, s->derived.memory > 0);
  }
  if (sim && s && sim->dp) dp_report_json(b, s, sim->dp);   /* hardware data_parallel (dp.c) */
  if (s && s->derived.tp) {   /* hardware tensor_parallel > 1 (costmodel.c), appended */
    const TpModel *t = s->derived.tp;
    sb_printf(b, ",\"tensor_parallel\":{\"size\":%d,\"sequence_parallel\":%s,\"gpus\":", t->T, t->sp ? "true" : "false");
    sb_num(b, gpus(s));
    json_key_num(b, "bandwidth", t->bandwidth, t->bandwidth > 0);
    json_key_num(b, "latency", t->latency, 1);
    json_key_num(b, "comm_f", t->f, t->times);
    json_key_num(b, "comm_b", t->b, t->times);
    json_key_num(b, "comm_w", 0, t->times);
    json_key_num(b, "input_comm_f", t->in_f, t->times);
    json_key_num(b, "input_comm_b", t->in_b, t->times);
    json_key_num(b, "output_comm_f", t->out_f, t->times);
    json_key_num(b, "output_comm_b", t->out_b, t->times);
    json_key_num(b, "layer_bytes_whole", t->act_rep, t->bytes);
    json_key_num(b, "layer_bytes_split", t->act_split, t->bytes);
    sb_puts(b, "}");
  }
  if (s && s->derived.cp) {   /* hardware context_parallel > 1 (costmodel.c), appended */
    const CpModel *c = s->derived.cp;
    sb_printf(b, ",\"context_parallel\":{\"size\":%d,\"gpus\":", c->C);
    sb_num(b, gpus(s));
    json_key_num(b, "bandwidth", c->bandwidth, c->bandwidth > 0);
    json_key_num(b, "latency", c->latency, 1);
    json_key_num(b, "kv_bytes", c->kv_bytes, c->kv_bytes > 0);
    json_key_num(b, "comm_f", c->f, c->times);
    json_key_num(b, "comm_b", c->b, c->times);
    json_key_num(b, "comm_w", 0, c->times);
    sb_puts(b, "}");
  }
  if (s && s->derived.ep) {   /* hardware expert_parallel > 1 (costmodel.c EpModel), appended */
    const EpModel *e = s->derived.ep;
    sb_printf(b, ",\"expert_parallel\":{\"size\":%d,\"expert_data_parallel\":%d", e->X, e->edp);
    json_key_num(b, "bandwidth", e->bandwidth, e->bandwidth > 0);
    json_key_num(b, "latency", e->latency, 1);
    json_key_num(b, "tokens", e->tokens, 1);
    json_key_num(b, "slots", e->slots, 1);
    json_key_num(b, "comm_f", e->f, e->times);
    json_key_num(b, "comm_b", e->b, e->times);
    json_key_num(b, "comm_w", e->w, e->times);
    json_key_num(b, "layer_comm_f", e->layer_f, e->times);
    json_key_num(b, "layer_comm_b", e->layer_b, e->times);
    json_key_num(b, "layer_comm_w", e->layer_w, e->times);
    sb_printf(b, ",\"dispatcher\":\"%s\"", e->alltoall ? "alltoall" : "allgather");
    json_key_num(b, "layer_bytes", e->layer_bytes, e->alltoall && e->layer_bytes > 0);
    json_key_num(b, "expert_bytes", e->expert_bytes, e->bytes);
    if (e->params) {
      sb_puts(b, ",\"expert_params\":[");
      for (int d = 0; d < s->ndev; d++) {
        if (d) sb_puts(b, ",");
        sb_num(b, e->params[d]);
      }
      sb_puts(b, "]");
    } else sb_puts(b, ",\"expert_params\":null");
    sb_puts(b, "}");
  }
  if (sim && s && sim->dp) dp_report_tie_json(b, sim->dp);   /* tied embeddings on two devices (dp.c), appended */
  sb_puts(b, "}\n");
}

/* ---- Chrome trace ---- */
static void trace_ts(StrBuf *b, double t) { sb_num(b, t * 1000.0); }

static void op_label(const IrSchedule *s, const IrOp *op, char *buf, int n) {
  switch ((IrKind)op->kind) {
  case IR_F: case IR_B: case IR_W: case IR_BW: case IR_OFFLOAD: case IR_RELOAD:
    snprintf(buf, (size_t)n, "%s %d s%d", ir_kind_name(op->kind), op->mb, op->stage);
    break;
  case IR_COLL:
    snprintf(buf, (size_t)n, "%s %d", ir_coll_name(op->coll), op->mb);
    break;
  case IR_RECV:
    snprintf(buf, (size_t)n, "recv %s %d s%d", op->xfer == IR_XFER_ACT ? "F" : "B", op->mb, op->stage);
    break;
  default:
    snprintf(buf, (size_t)n, "%s %d", ir_kind_name(op->kind), op->mb);
  }
  (void)s;
}

void report_trace(StrBuf *b, const Report *r) {
  const IrSchedule *s = r->s;
  const SimResult *sim = r->sim;
  const AnaIndex *ix = r->ix;
  sb_puts(b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":");
  sb_json_string(b, s->name ? s->name : "");
  sb_puts(b, ",\"time_unit\":\"one cost unit = 1 ms\"},\"traceEvents\":[\n");
  static const char *tracks[] = {"compute", "copy device->host", "copy host->device", "wait (recv, collective)"};
  int first = 1;
  for (int d = 0; d < s->ndev; d++) {
    sb_printf(b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"device %d\"}}", first ? "" : ",\n", d, d);
    first = 0;
    sb_printf(b, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", d, d);
    for (int t = 0; t < 4; t++)
      sb_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", d, t, tracks[t]);
    if (s->vocab.async) /* `vocab async`: the collective lane */
      sb_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":4,\"args\":{\"name\":\"collectives\"}}", d);
  }
  char lab[96];
  for (int d = 0; d < s->ndev; d++) {
    for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
      const IrOp *op = ana_op(s, ix, g);
      int tid;
      double st = sim->start[g], en = sim->end[g];
      switch ((IrKind)op->kind) {
      case IR_SEND: continue;
      case IR_RECV: if (en <= st) continue; tid = 3; break;
      case IR_OFFLOAD: tid = 1; break;
      case IR_RELOAD: tid = 2; break;
      case IR_COLL: tid = s->vocab.async ? 4 : 0; break;
      default: tid = 0;
      }
      op_label(s, op, lab, sizeof lab);
      sb_puts(b, ",\n{\"name\":");
      sb_json_string(b, lab);
      sb_printf(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", ir_kind_name(op->kind), d, tid);
      trace_ts(b, st);
      sb_puts(b, ",\"dur\":");
      trace_ts(b, en - st);
      sb_printf(b, ",\"args\":{\"mb\":%d,\"stage\":%d", op->mb, op->stage);
      if (op->span.line) sb_printf(b, ",\"line\":%u", op->span.line);
      if (op->flags & IR_FLAG_INSERTED) sb_puts(b, ",\"inserted\":true");
      if (op->flags & IR_FLAG_OVERLAP) sb_puts(b, ",\"overlap\":true");
      sb_puts(b, "}}");
    }
    const SimDev *v = &sim->dev[d];
    for (int k = 0; k < v->nmem; k++) {
      sb_printf(b, ",\n{\"name\":\"activation memory\",\"ph\":\"C\",\"pid\":%d,\"ts\":", d);
      trace_ts(b, v->mt[k]);
      sb_puts(b, ",\"args\":{\"activations\":");
      sb_num(b, v->mv[k]);
      sb_puts(b, "}}");
    }
  }
  sb_puts(b, "\n]}\n");
}

