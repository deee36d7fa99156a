/* metrics.c: what the runtime measures and how it reports it: the timing records of
 * each device (compute track, copy-engine tracks), the Chrome trace of what really ran
 * (one process per device with compute, copy-engine and point-to-point threads, the
 * layout of `ppsc sim --trace`), the per-iteration line (loss, time, measured bubble,
 * peak activation bytes and units per device, achieved FLOP/s and MFU), the FLOPs
 * count per device (from the op tables and the model's pass FLOPs), the memory
 * comparison with the simulator's prediction, and the --json object (documented in
 * docs/runtime.md).
 * What it does not: no measuring itself (interp.c and actstore.c count), no exit(). */
#include "config.h"
#include "rt.h"
#include "safeio.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rt_event_add(ppsrt_ctx *c, double t0, double t1, int32_t op, int track) {
  if (c->nev == c->capev) {
    int cap = c->capev ? 2 * c->capev : 1024;
    rt_event *e = realloc(c->ev, (size_t)cap * sizeof *e);
    if (!e) return PPSRT_FAIL(PPSRT_E_NOMEM, "trace: out of host memory");
    c->ev = e; c->capev = cap;
  }
  c->ev[c->nev++] = (rt_event){t0, t1, op, (int16_t)track, (int16_t)c->iteration};
  return 0;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static const char *const track_names[5] = {"compute", "copy device->host", "copy host->device",
                                           "wait (recv, collective)", "collective lane"};
static const char *const coll_label[] = {"none", "input_fwd", "output_fwd", "output_bwd", "input_bwd"};

/* The op's name as `ppsc sim --trace` writes it: "F 3 s1", "recv B 3 s2", "S 3". */
static void trace_label(const ppsrt_op *op, char *buf, size_t n) {
  switch (op->kind) {
  case PPSRT_OP_F: case PPSRT_OP_B: case PPSRT_OP_W: case PPSRT_OP_BW: case PPSRT_OP_OFFLOAD: case PPSRT_OP_RELOAD:
    snprintf(buf, n, "%s %d s%d", ppsrt_op_kind_name(op->kind), op->mb, op->stage);
    break;
  case PPSRT_OP_COLL: snprintf(buf, n, "%s %d", op->coll < 5 ? coll_label[op->coll] : "coll", op->mb); break;
  case PPSRT_OP_SEND: case PPSRT_OP_RECV:
    snprintf(buf, n, "%s %s %d s%d", ppsrt_op_kind_name(op->kind), op->xfer == PPSRT_XFER_ACT ? "F" : "B", op->mb, op->stage);
    break;
  default: snprintf(buf, n, "%s %d", ppsrt_op_kind_name(op->kind), op->mb);
  }
}

/* Closes the memory stream f (text, len) and writes it to path through safeio.h:
 * the whole file or nothing, a device or FIFO written in place, never replaced. */
static int write_whole(const char *what, const char *path, FILE *f, char **text, size_t *len) {
  int bad = ferror(f);
  if (fclose(f) || bad || !*text) {
    free(*text);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
  }
  int rc = 0;
  if (pps_write_file(path, *text, *len, 0666))
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "%s: cannot write '%s': %s", what, path, pps_write_error(errno));
  free(*text);
  *text = NULL;
  return rc;
}

/* Chrome trace (catapult JSON), the layout of `ppsc sim --trace`: pid = world rank (the
 * device, without --data-parallel and --tensor-parallel; the process is named
 * "device 1 (replica 0, tensor rank 1)" with them); tid 0
 * compute (passes and collectives), 1 the device->host copy engine (offload: issue to
 * observed completion), 2 host->device (reload), 3 point-to-point (sends and the time
 * a recv waited, and a consumer waited for an asynchronous collective), 4 the
 * collective lane (coll_lane.c, when there is one); ts and dur in microseconds since
 * the run started. A reload that cancelled its offload (offload.c) is an instant
 * "reload I sS cancelled" on tid 2, and that offload's copy "offload I sS cancelled".
 * A recomputed B/BW's rebuild (recompute.c) is a span "recompute <B's name>", cat
 * "recompute", on tid 0 inside that B's span. */
int rt_write_trace(ppsrt_run *run, const char *path) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return PPSRT_FAIL(PPSRT_E_NOMEM, "--trace: out of host memory");
  const ppsrt_program *p = run->prog;
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":");
  json_str(f, p->name);
  fprintf(f, ",\"time_unit\":\"measured, 1 us\",\"source\":\"runtime\"},\"traceEvents\":[\n");
  int first = 1;
  for (int l = 0; l < run->nlocal; l++) {
    ppsrt_ctx *c = &run->ctx[l];
    char who[64];   /* a process per world rank: "device 1", "device 1 (replica 0, tensor rank 1)" */
    int pid = c->wrank;
    fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":",
            first ? "" : ",\n", pid);
    json_str(f, rt_who(c, who, sizeof who));
    fprintf(f, "}}");
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            pid, pid);
    first = 0;
    for (int t = 0; t < (run->lane_tr ? 5 : 4); t++)
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
              pid, t, track_names[t]);
    for (int k = 0; k < c->nev; k++) {
      rt_event *e = &c->ev[k];
      char name[96];
      const ppsrt_op *op = e->op >= 0 && e->op < c->nops ? &c->ops[e->op] : NULL;
      if (op) trace_label(op, name, sizeof name); else snprintf(name, sizeof name, "op");
      int tid = e->track & ~(RT_TRACK_CANCELLED | RT_TRACK_RECOMPUTE), cancelled = (e->track & RT_TRACK_CANCELLED) != 0;
      int rcmp = (e->track & RT_TRACK_RECOMPUTE) != 0;
      if (op && cancelled) snprintf(name + strlen(name), sizeof name - strlen(name), " cancelled");
      if (rcmp) {   /* inside its B/BW: the forward that B runs again (recompute.c) */
        char in[96];
        snprintf(in, sizeof in, "%s", name);
        snprintf(name, sizeof name, "recompute %.80s", in);
      }
      if (op && tid == 0 && (op->kind == PPSRT_OP_SEND || op->kind == PPSRT_OP_RECV)) tid = 3;
      fprintf(f, ",\n{\"name\":");
      json_str(f, name);
      fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
              "\"args\":{\"op\":%d,\"mb\":%d,\"stage\":%d,\"line\":%d,\"iteration\":%d%s%s}}",
              rcmp ? "recompute" : op ? ppsrt_op_kind_name(op->kind) : "op", pid, tid, e->t0 * 1e6, (e->t1 - e->t0) * 1e6, e->op,
              op ? op->mb : -1, op ? op->stage : -1, op ? op->line : 0, e->it,
              op && (op->flags & PPSRT_FLAG_INSERTED) ? ",\"inserted\":true" : "", cancelled ? ",\"cancelled\":true" : "");
    }
  }
  fprintf(f, "\n]}\n");
  return write_whole("--trace", path, f, &text, &len);
}

/* --profile FILE: for every (kind, stage) the mean, standard deviation and count of
 * the measured durations, in seconds, over every device and every iteration but the
 * first (when there are several: it warms caches and allocators). Kinds F B W BW per
 * stage, SEND (one hop, by the sending stage), OFFLOAD RELOAD (copy engine time), IF
 * IB S T (stage -1). Written whole or not at all (write_whole). */
int rt_write_profile(ppsrt_run *run, const char *path) {
  const ppsrt_program *p = run->prog;
  int ns = p->nstage > 0 ? p->nstage : 1, nk = PPSRT_OP_NKINDS;
  size_t n = (size_t)(ns + 1) * (size_t)nk;
  double *s1 = calloc(n, sizeof *s1), *s2 = calloc(n, sizeof *s2);
  long *cnt = calloc(n, sizeof *cnt);
  if (!s1 || !s2 || !cnt) { free(s1); free(s2); free(cnt); return PPSRT_FAIL(PPSRT_E_NOMEM, "--profile: out of host memory"); }
  int skip_first = run->o.iterations > 1;
  for (int l = 0; l < run->nlocal; l++) {
    ppsrt_ctx *c = &run->ctx[l];
    for (int k = 0; k < c->nev; k++) {
      rt_event *e = &c->ev[k];
      if (e->op < 0 || e->op >= c->nops || (skip_first && e->it == 0)) continue;
      const ppsrt_op *op = &c->ops[e->op];
      int kind = op->kind;
      if (kind == PPSRT_OP_RECV || kind == PPSRT_OP_COLL) continue;
      if ((kind == PPSRT_OP_OFFLOAD || kind == PPSRT_OP_RELOAD) != (e->track != 0)) continue;
      if (kind == PPSRT_OP_RELOAD && (e->track & RT_TRACK_CANCELLED)) continue;   /* no copy ran */
      int st = op->stage >= 0 && op->stage < ns ? op->stage + 1 : 0;
      size_t idx = (size_t)st * (size_t)nk + (size_t)kind;
      double d = e->t1 - e->t0;
      s1[idx] += d;
      s2[idx] += d * d;
      cnt[idx]++;
    }
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) { free(s1); free(s2); free(cnt); return PPSRT_FAIL(PPSRT_E_NOMEM, "--profile: out of host memory"); }
  fprintf(f, "# ppsrt profile of %s: %d devices, %d stages, %d iterations%s\n", p->name, p->ndev, p->nstage,
          run->o.iterations, skip_first ? " (the first left out)" : "");
  fprintf(f, "# KIND STAGE MEAN SPREAD COUNT (seconds; read by `cost profile \"FILE\";`, docs/synth.md)\n");
  for (int st = 0; st <= ns; st++)
    for (int k = 0; k < nk; k++) {
      size_t idx = (size_t)st * (size_t)nk + (size_t)k;
      if (!cnt[idx]) continue;
      double mean = s1[idx] / (double)cnt[idx], var = s2[idx] / (double)cnt[idx] - mean * mean;
      /* the kind's name in capitals (the profile format, compiler/profile.c) */
      for (const char *q = ppsrt_op_kind_name(k); *q; q++) fputc(toupper((unsigned char)*q), f);
      fprintf(f, " %d %.9g %.9g %ld\n", st - 1, mean, var > 0 ? sqrt(var) : 0, cnt[idx]);
    }
  free(s1); free(s2); free(cnt);
  return write_whole("--profile", path, f, &text, &len);
}

/* Measured peak of device d in iteration it, in activation units: every stored byte
 * of stage s counts stages[s].act / act_bytes(s) units, sampled at op boundaries. */
static double units_of(ppsrt_run *run, int it, int d) {
  return run->dev_units[(size_t)it * run->prog->ndev + d];
}

/* ---- FLOPs, achieved FLOP/s, MFU ---- */

/* FLOPs of one iteration per device: the model's FLOPs of every compute and vocabulary
 * pass in the device's op table (so vocabulary passes count where they run). */
void rt_count_flops(ppsrt_run *run, rt_pass_flops_fn fn) {
  const ppsrt_program *p = run->prog;
  run->flops_total = 0;
  for (int d = 0; d < p->ndev; d++) {
    double fl = 0;
    for (int i = 0; fn && i < p->nops[d]; i++) {
      const ppsrt_op *op = &p->ops[d][i];
      if (op->kind <= PPSRT_OP_T) fl += fn(&run->o.cfg, op->kind, op->stage);
    }
    run->dev_flops[d] = fl;
    run->flops_total += fl;
  }
}

/* The iteration's time: the longest device span. */
static double iter_span(ppsrt_run *run, int it) {
  int ndev = run->prog->ndev;
  double span = 0;
  for (int d = 0; d < ndev; d++) span = fmax(span, run->dev_span[(size_t)it * ndev + d]);
  return span;
}

/* Achieved FLOP/s of device d (d < 0: all devices) in iteration it, and its MFU
 * (achieved / (devices x peak); < 0 when the peak is unknown or the time is 0). */
static double achieved(ppsrt_run *run, int it, int d) {
  double span = iter_span(run, it);
  return span > 0 ? (d < 0 ? run->flops_total : run->dev_flops[d]) / span : 0;
}
static double mfu(ppsrt_run *run, int it, int d) {
  double span = iter_span(run, it), n = d < 0 ? run->prog->ndev : 1;
  if (!(run->peak_flops > 0) || !(span > 0)) return -1;
  return (d < 0 ? run->flops_total : run->dev_flops[d]) / (span * n * run->peak_flops);
}

void rt_print_flops(ppsrt_run *run) {
  FILE *f = run->out;
  int ndev = run->prog->ndev;
  if (!run->flops_known) {
    fprintf(f, "flops: n/a (--no-compute: no kernels ran)\n");
    return;
  }
  fprintf(f, "flops: %.17g per iteration (", run->flops_total);
  for (int d = 0; d < ndev; d++) fprintf(f, "%sd%d %.17g", d ? " " : "", d, run->dev_flops[d]);
  if (run->peak_flops > 0)
    fprintf(f, "); MFU against a peak of %.6g FLOP/s per device (%s)\n", run->peak_flops,
            run->peak_source ? run->peak_source : "?");
  else
    fprintf(f, "); MFU n/a: no peak FLOP/s (give --peak-flops X, FLOP/s per device%s)\n",
            strcmp(run->o.backend, "cuda") ? "" : ", or a hardware { flops } block");
}

void rt_print_iteration(ppsrt_run *run, int it) {
  FILE *f = run->out;
  int ndev = run->prog->ndev;
  double span = iter_span(run, it);
  fprintf(f, "iter %ld/%ld  loss %.7f  time %.3f ms  bubble", run->step0 + it + 1, run->step0 + run->o.iterations,
          run->loss[it], span * 1e3);
  for (int d = 0; d < ndev; d++) {
    double s = run->dev_span[(size_t)it * ndev + d], b = run->dev_busy[(size_t)it * ndev + d];
    fprintf(f, " d%d %.1f%%", d, s > 0 ? 100.0 * (1.0 - b / s) : 0.0);
  }
  fprintf(f, "  peak act");
  for (int d = 0; d < ndev; d++)
    fprintf(f, " d%d %zu B %.4g u", d, run->dev_peak[(size_t)it * ndev + d], units_of(run, it, d));
  fprintf(f, "  peak mem");
  for (int d = 0; d < ndev; d++) fprintf(f, " d%d %zu B", d, run->dev_mem[(size_t)it * ndev + d]);
  if (run->flops_known) {
    fprintf(f, "  FLOP/s %.4g (", achieved(run, it, -1));
    for (int d = 0; d < ndev; d++) fprintf(f, "%sd%d %.4g", d ? " " : "", d, achieved(run, it, d));
    double u = mfu(run, it, -1);
    if (u >= 0) fprintf(f, ")  MFU %.4g%%", 100 * u);
    else fprintf(f, ")  MFU n/a");
  }
  long nrc = 0;
  for (int d = 0; d < ndev; d++) nrc += run->dev_rccount[(size_t)it * ndev + d];
  if (nrc) {   /* recompute.c: the forwards B/BW ran again, and their time */
    fprintf(f, "  recompute");
    for (int d = 0; d < ndev; d++)
      fprintf(f, " d%d %ldx %.3f ms", d, run->dev_rccount[(size_t)it * ndev + d], 1e3 * run->dev_rctime[(size_t)it * ndev + d]);
  }
  fprintf(f, "  lr %.6g", run->lr_it[it]);
  if (run->o.clip_grad > 0) fprintf(f, "  grad norm %.6g", run->gnorm_it[it]);
  fputc('\n', f);
  fflush(f);
}

/* x as the shortest %g decimal that reads back to the same double (a whole number
 * below 1e15 without an exponent), into buf[32] */
static const char *short_num(char *buf, double x) {
  if (x == floor(x) && fabs(x) < 1e15) { snprintf(buf, 32, "%.0f", x); return buf; }
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, 32, "%.*g", p, x);
    if (strtod(buf, NULL) == x) break;
  }
  return buf;
}

/* Compares the measured peak (max over iterations, in units) with ppsc sim's prediction;
 * returns the number of devices that differ (0 when nothing was predicted). */
int rt_compare_memory(ppsrt_run *run, int print) {
  const ppsrt_program *p = run->prog;
  int bad = 0;
  if (!p->predicted_peak && !p->predicted_peak_order) return 0;
  for (int d = 0; d < p->ndev; d++) {
    double meas = 0;
    for (int it = 0; it < run->iterations_done; it++) meas = fmax(meas, units_of(run, it, d));
    /* the counted bytes follow program order: compare with the order-based prediction
     * (the verdict was reached by the device itself, in double precision) */
    double pred = p->predicted_peak_order ? p->predicted_peak_order[d] : p->predicted_peak[d];
    double simpk = p->predicted_peak ? p->predicted_peak[d] : pred;
    int same = !run->dev_membad[d];
    bad += !same;
    if (print) {
      fprintf(run->out, "memory: device %d: measured peak %.6g units (%zu B), predicted %.6g units", d, meas,
              run->iterations_done ? run->dev_peak[(size_t)(run->iterations_done - 1) * p->ndev + d] : 0, pred);
      if (fabs(simpk - pred) > 1e-9) fprintf(run->out, " (over simulated time %.6g)", simpk);
      fprintf(run->out, ": %s; resident peak %zu B, host peak %zu B", same ? "match" : "DIFFERS",
              run->dev_resident[d], run->dev_host[d]);
      if (run->dev_cancel[d]) fprintf(run->out, ", %ld offload(s) cancelled by their reload", run->dev_cancel[d]);
      fputc('\n', run->out);
      if (run->dev_actbad[d])
        fprintf(run->out, "memory: device %d: note: an F kept other than the model's act_bytes for its stage, so its "
                "units are not exact (or a recomputed F kept other than its stage's `input` or `layer` share predicts)\n", d);
    }
  }
  run->memory_mismatch = bad;
  return bad;
}

void rt_print_json(ppsrt_run *run, int status) {
  FILE *f = run->out;
  const ppsrt_program *p = run->prog;
  int ndev = p->ndev;
  fprintf(f, "{\"schedule\":");
  json_str(f, p->name);
  fprintf(f, ",\"source\":");
  json_str(f, p->source);
  fprintf(f, ",\"devices\":%d,\"stages\":%d,\"microbatches\":%d,\"model\":", ndev, p->nstage, p->nmb);
  json_str(f, run->o.model);
  fprintf(f, ",\"backend\":");
  json_str(f, run->o.backend);
  fprintf(f, ",\"transport\":");
  json_str(f, run->o.transport);
  fprintf(f, ",\"iterations\":[");
  int done = run->iterations_done;
  for (int it = 0; it < done; it++) {
    double span = 0;
    for (int d = 0; d < ndev; d++) span = fmax(span, run->dev_span[(size_t)it * ndev + d]);
    fprintf(f, "%s{\"iteration\":%d,\"loss\":", it ? "," : "", it + 1);
    if (isfinite(run->loss[it])) fprintf(f, "%.9g", run->loss[it]);
    else fputs("null", f); /* NaN and inf are not JSON */
    fprintf(f, ",\"time_s\":%.9g,\"bubble\":[", span);
    for (int d = 0; d < ndev; d++) {
      double s = run->dev_span[(size_t)it * ndev + d], b = run->dev_busy[(size_t)it * ndev + d];
      fprintf(f, "%s%.6f", d ? "," : "", s > 0 ? 1.0 - b / s : 0.0);
    }
    fprintf(f, "],\"peak_bytes\":[");
    for (int d = 0; d < ndev; d++) fprintf(f, "%s%zu", d ? "," : "", run->dev_peak[(size_t)it * ndev + d]);
    fprintf(f, "],\"peak_units\":[");
    for (int d = 0; d < ndev; d++) fprintf(f, "%s%.9g", d ? "," : "", units_of(run, it, d));
    fprintf(f, "],\"device_peak_bytes\":[");
    for (int d = 0; d < ndev; d++) fprintf(f, "%s%zu", d ? "," : "", run->dev_mem[(size_t)it * ndev + d]);
    fprintf(f, "]");
    if (run->flops_known) {
      fprintf(f, ",\"achieved_flops_per_s\":%.9g,\"achieved_flops_per_s_per_device\":[", achieved(run, it, -1));
      for (int d = 0; d < ndev; d++) fprintf(f, "%s%.9g", d ? "," : "", achieved(run, it, d));
      fprintf(f, "]");
    } else {
      fprintf(f, ",\"achieved_flops_per_s\":null,\"achieved_flops_per_s_per_device\":null");
    }
    if (run->flops_known && mfu(run, it, -1) >= 0) {
      fprintf(f, ",\"mfu\":%.9g,\"mfu_per_device\":[", mfu(run, it, -1));
      for (int d = 0; d < ndev; d++) fprintf(f, "%s%.9g", d ? "," : "", mfu(run, it, d));
      fprintf(f, "]");
    } else {
      fprintf(f, ",\"mfu\":null,\"mfu_per_device\":null");
    }
    fprintf(f, ",\"recompute_time_s\":[");
    for (int d = 0; d < ndev; d++) fprintf(f, "%s%.9g", d ? "," : "", run->dev_rctime[(size_t)it * ndev + d]);
    fprintf(f, "],\"recomputes\":[");
    for (int d = 0; d < ndev; d++) fprintf(f, "%s%ld", d ? "," : "", run->dev_rccount[(size_t)it * ndev + d]);
    fprintf(f, "]");
    fprintf(f, ",\"step\":%ld,\"lr\":%.9g", run->step0 + it + 1, run->lr_it[it]);
    if (run->o.clip_grad > 0) fprintf(f, ",\"grad_norm\":%.9g", run->gnorm_it[it]);
    if (run->val_tokens && ((it + 1) % run->o.val_every == 0 || it + 1 == run->o.iterations))   /* (validate.c's steps) */
      fprintf(f, ",\"val_loss\":%.9g,\"val_time_s\":%.9g", run->val_loss[it], run->val_time[it]);
    fprintf(f, "}");
  }
  fprintf(f, "],\"per_device\":[");
  for (int d = 0; d < ndev; d++) {
    double meas = 0;
    for (int it = 0; it < done; it++) meas = fmax(meas, units_of(run, it, d));
    fprintf(f, "%s{\"device\":%d,\"peak_units\":%.9g,\"predicted_peak_units\":", d ? "," : "", d, meas);
    if (p->predicted_peak_order) fprintf(f, "%.9g", p->predicted_peak_order[d]);
    else if (p->predicted_peak) fprintf(f, "%.9g", p->predicted_peak[d]);
    else fprintf(f, "null");
    fprintf(f, ",\"predicted_peak_time_units\":");
    if (p->predicted_peak) fprintf(f, "%.9g", p->predicted_peak[d]); else fprintf(f, "null");
    size_t dmem = 0;
    for (int it = 0; it < done; it++) if (run->dev_mem[(size_t)it * ndev + d] > dmem) dmem = run->dev_mem[(size_t)it * ndev + d];
    fprintf(f, ",\"unit_bytes_first_stage\":%zu,\"resident_peak_bytes\":%zu,\"host_peak_bytes\":%zu", run->dev_unit[d],
            run->dev_resident[d], run->dev_host[d]);
    fprintf(f, ",\"device_peak_bytes\":%zu,\"offloads_cancelled\":%ld", dmem, run->dev_cancel[d]);
    fprintf(f, ",\"parameters\":%zu,\"expert_parameters\":%zu", run->dev_params[2 * d], run->dev_params[2 * d + 1]);
    if (run->nep > 1 && run->o.cfg.moe_a2a)   /* --moe-token-dispatcher alltoall: measured, over the run */
      fprintf(f, ",\"ep_alltoall\":{\"bytes\":%.0f,\"slots\":%.0f}", run->dev_a2a[2 * d], run->dev_a2a[2 * d + 1]);
    if (run->val_tokens)   /* validation's forward-only evaluation (validate.c): its largest peaks */
      fprintf(f, ",\"val_peak_bytes\":%zu,\"val_device_peak_bytes\":%zu", run->dev_val_peak[d], run->dev_val_mem[d]);
    if (run->flops_known) fprintf(f, ",\"flops_per_iteration\":%.17g}", run->dev_flops[d]);
    else fprintf(f, ",\"flops_per_iteration\":null}");
  }
  fprintf(f, "]");
  if (run->val_tokens) fprintf(f, ",\"eval_iters\":%d,\"val_sequences\":%ld", run->o.eval_iters, run->val_seqs);
  fprintf(f, ",\"predicted_makespan\":%.9g,\"memory_match\":%s", p->predicted_makespan,
          p->predicted_peak ? (run->memory_mismatch ? "false" : "true") : "null");
  if (run->flops_known) fprintf(f, ",\"flops_per_iteration\":%.17g", run->flops_total);
  else fprintf(f, ",\"flops_per_iteration\":null");
  fprintf(f, ",\"peak_flops\":");
  if (run->peak_flops > 0) fprintf(f, "%.17g", run->peak_flops); else fprintf(f, "null");
  fprintf(f, ",\"peak_flops_source\":");
  if (run->peak_flops > 0 && run->peak_source) json_str(f, run->peak_source); else fprintf(f, "null");
  fprintf(f, ",\"hardware\":");
  if (p->nhardware > 0 && p->hardware) {
    fputc('{', f);
    for (int i = 0; i < p->nhardware; i++) {
      if (i) fputc(',', f);
      json_str(f, p->hardware[i].key);
      fprintf(f, ":%.17g", p->hardware[i].value);
    }
    fputc('}', f);
  } else {
    fprintf(f, "null");
  }
  if (run->o.check)
    fprintf(f, ",\"check\":{\"match\":%s,\"loss_match\":%s,\"mismatches\":%ld,\"max_diff\":%.9g,\"k\":%.9g,\"k_loss\":%.9g}",
            !run->check_mismatches && !run->check_loss_bad && done ? "true" : "false",
            run->check_loss_bad ? "false" : "true", run->check_mismatches, run->check_maxdiff, run->check_k,
            run->check_k_loss);
  fprintf(f, ",\"error\":");
  if (run->first_error[0]) json_str(f, run->first_error); else fprintf(f, "null");
  /* vocabulary collectives: on their lanes (coll_lane.c) or blocking; null without */
  fprintf(f, ",\"collectives\":%s", !p->vocab_mode ? "null" : run->lane_tr ? "\"async\"" : "\"blocking\"");
  /* the ranks: P devices x D replicas x C context ranks x T tensor ranks */
  int ncp = run->ncp > 1 ? run->ncp : 1;
  fprintf(f, ",\"layout\":{\"devices\":%d,\"data_parallel\":%d,\"context_parallel\":%d,\"tensor_parallel\":%d,"
          "\"expert_parallel\":%d,\"ranks\":%d,\"distributed_optimizer\":%s,\"sequence_parallel\":%s}",
          p->ndev, run->nrep, ncp, run->ntp, run->nep > 1 ? run->nep : 1, p->ndev * run->nrep * ncp * run->ntp,
          run->o.distopt ? "true" : "false", run->o.sequence_parallel ? "true" : "false");
  /* the gpt's layer (null for the mlp model); its rates and factors as the shortest
     decimals that read back to the same double (0.1, not 0.10000000000000001) */
  const ppsrt_model_config *mc = &run->o.cfg;
  if (!strcmp(run->o.model, "gpt")) {
    char n[4][32];
    fprintf(f, ",\"layer\":{\"mlp\":\"%s\",\"norm\":\"%s\",\"position\":\"%s\",\"bias\":%s,\"embeddings\":\"%s\","
            "\"ffn_hidden\":%d,\"hidden_dropout\":%s,\"attention_dropout\":%s", mc->swiglu ? "swiglu" : "gelu",
            mc->rmsnorm ? "rmsnorm" : "layernorm", mc->rope ? "rope" : "learned", mc->no_bias ? "false" : "true",
            mc->tie_embeddings ? "tied" : "untied", mc->ffn_hidden, short_num(n[0], mc->hidden_dropout),
            short_num(n[1], mc->attention_dropout));
    if (mc->qk_layernorm) fprintf(f, ",\"qk_layernorm\":true");
    /* --kv-channels: the head size, where it is not --hidden / --heads */
    if (mc->kv_channels && mc->heads > 0 && (int64_t)mc->kv_channels * mc->heads != mc->hidden)
      fprintf(f, ",\"kv_channels\":%d", mc->kv_channels);
    if (mc->no_bias && mc->qkv_bias) fprintf(f, ",\"qkv_bias\":true");   /* --add-qkv-bias */
    if (mc->norm_epsilon > 0 && mc->norm_epsilon != PPSRT_NORM_EPS)   /* (absent: the default, 1e-5) */
      fprintf(f, ",\"norm_epsilon\":%s", short_num(n[0], mc->norm_epsilon));
    if (mc->init_method_std > 0)   /* --init-method-std (absent: the default uniform init) */
      fprintf(f, ",\"init_method_std\":%s", short_num(n[0], mc->init_method_std));
    /* RoPE: its base, scaling and the scaling's parameters (null with learned positions) */
    if (!mc->rope) fprintf(f, ",\"rope\":null");
    else {
      fprintf(f, ",\"rope\":{\"base\":%s,\"scaling\":\"%s\"", short_num(n[0], mc->rope_base > 0 ? mc->rope_base : 10000.0),
              rt_rope_scaling_names[mc->rope_scaling]);
      if (mc->rope_scaling != PPSRT_ROPE_NONE) fprintf(f, ",\"factor\":%s", short_num(n[1], mc->rope_factor));
      if (mc->rope_scaling == PPSRT_ROPE_LLAMA3)
        fprintf(f, ",\"low_freq_factor\":%s,\"high_freq_factor\":%s,\"original_max_positions\":%d",
                short_num(n[2], mc->rope_low_freq), short_num(n[3], mc->rope_high_freq), mc->rope_orig_max);
      fprintf(f, "}");
    }
    /* --num-experts (only then, after rope: a dense layer's object is unchanged) */
    if (mc->num_experts) {   /* the router's options too (--moe-router-*, --moe-z-loss-coeff); shared_ffn_hidden only with a shared expert */
      fprintf(f, ",\"experts\":{\"num\":%d,\"topk\":%d,\"ffn_hidden\":%d,\"aux_loss_coeff\":%s", mc->num_experts,
              mc->moe_topk, mc->moe_ffn_hidden, short_num(n[0], mc->moe_aux_coeff));
      fprintf(f, ",\"score_function\":\"%s\",\"pre_softmax\":%s,\"topk_scaling_factor\":%s,\"z_loss_coeff\":%s",
              mc->moe_router_sigmoid ? "sigmoid" : "softmax", mc->moe_router_pre_softmax ? "true" : "false",
              short_num(n[1], mc->moe_router_scale > 0 ? mc->moe_router_scale : 1.0), short_num(n[2], mc->moe_z_coeff));
      if (mc->moe_expert_bias)   /* the aux-loss-free balancing's update rate, else null */
        fprintf(f, ",\"expert_bias_update_rate\":%s", short_num(n[3], mc->moe_bias_rate > 0 ? mc->moe_bias_rate : 1e-3));
      else
        fprintf(f, ",\"expert_bias_update_rate\":null");
      if (mc->moe_shared_ffn) fprintf(f, ",\"shared_ffn_hidden\":%d", mc->moe_shared_ffn);
      if (mc->moe_shared_ffn && mc->moe_shared_gate) fprintf(f, ",\"shared_gate\":true");
      fprintf(f, "}");
    }
    if (mc->num_experts && mc->moe_capacity > 0)   /* (after it: the object above unchanged without one) */
      fprintf(f, ",\"expert_capacity\":{\"factor\":%s,\"drop_policy\":\"%s\"}", short_num(n[0], mc->moe_capacity),
              mc->moe_drop_position ? "position" : "probs");
    fprintf(f, "}");
  } else
    fprintf(f, ",\"layer\":null");
  fprintf(f, ",\"exit\":%d}\n", status);
  fflush(f);
}
