/* svg.c: `ppsc sim --svg`, the timeline the papers draw (Zero Bubble, controllable
 * memory, ...): a row per device, a box per pass, and memory over time per device.
 * What it shows:
 *   - a hue per pass kind (F blue, B orange-red, W green, BW violet, as the Zero
 *     Bubble and PipeOffload figures tell them apart) and a lightness per chunk (a
 *     stage's rank among the stages its device holds: chunk 0 middle, 1 light, 2 dark,
 *     3 lighter, then around again, less saturated); vocabulary passes, collectives
 *     and copies keep colours of their own, none of a compute kind's hue;
 *   - in each box its microbatch, and its stage where the box is wide enough;
 *   - a <title> tooltip per box: pass, microbatch, stage, device, start, end;
 *   - a width that grows with the ops of the busiest device drawn (14 px per op, 1200
 *     to 20000 px; 1200 for a dense picture);
 *   - --svg-window T0..T1 draws only that time (boxes cut at its edges, the memory
 *     from what is held at T0), --svg-devices LO..HI only devices LO to HI - 1;
 *   - the critical path: the chain of passes and transfers that ends last, found
 *     backwards from the op that ends at the makespan (each step goes to the transfer
 *     a device waited for, or else to the device's previous pass), outlined in red;
 *   - with --svg-arrows, an arrow per transfer from the producing pass's end to its
 *     arrival on the consumer's device;
 *   - memory: up to 8 devices drawn, a plot per device with a labelled scale (0, half,
 *     max activations); beyond, a strip 10 px high per device whose shade (8 steps)
 *     is the most held in each pixel column, its peak at the right; and a legend.
 * Beyond SVG_MAX_BOXES ops the rows are drawn one pixel column at a time (the
 * busiest pass kind of each column), without labels, tooltips, arrows or path.
 * Positions are W * ((t - T0) / span) (px()), never t * (W / span): with subnormal
 * costs (1e-310) W / span overflows to inf; every coordinate written is finite. */
#include "recompute.h"
#include "report.h"
#include "dp.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SVG_MAX_BOXES = 50000, SVG_MAX_ARROWS = 20000 };

/* The time window drawn (--svg-window T0..T1, else 0..makespan): set once per picture. */
static double win_t0 = 0;

/* The x offset (pixels, 0..W) of time t on a timeline W pixels wide for the window
 * win_t0 .. win_t0 + mk (clamped to it). */
static double px(double t, double W, double mk) {
  double x = W * ((t - win_t0) / mk);
  if (!isfinite(x)) return 0;
  return x < 0 ? 0 : x > W ? W : x;
}

/* Colours of what is not a compute pass (and of the compute kinds in the dense
 * picture: their chunk-0 shade, pass_color); none shares a compute kind's hue. */
static const char *kind_color(int k) {
  switch ((IrKind)k) {
  case IR_F: return "hsl(212,65%,55%)";
  case IR_B: return "hsl(14,65%,55%)";
  case IR_W: return "hsl(122,65%,55%)";
  case IR_BW: return "hsl(290,65%,55%)";
  case IR_IF: case IR_IB: return "#8c564b";
  case IR_S: case IR_T: return "#bcbd22";
  case IR_OFFLOAD: return "#e377c2";
  case IR_RELOAD: return "#17becf";
  case IR_COLL: return "#7f7f7f";
  default: return "#bab0ac";
  }
}

/* The fill of a compute pass: a hue per pass kind (F blue, B orange-red, W green, BW
 * purple, as the Zero Bubble and PipeOffload figures tell them apart), a lightness
 * per chunk (chunk 0 middle, 1 light, 2 dark, 3 lighter, then around again with less
 * saturation). Returns 1 when the fill is dark (white text on it). */
static int pass_color(char *out, size_t n, int kind, int chunk) {
  if (kind > IR_BW) { snprintf(out, n, "%s", kind_color(kind)); return kind != IR_S && kind != IR_T && kind != IR_RELOAD; }
  static const int hue[4] = {212, 14, 122, 290};
  static const int light[4] = {55, 75, 38, 86};
  int c = chunk < 0 ? 0 : chunk;
  int sat = 65 - 15 * ((c / 4) % 3);
  snprintf(out, n, "hsl(%d,%d%%,%d%%)", hue[kind], sat, light[c % 4]);
  return light[c % 4] < 50;
}

static void xml_text(StrBuf *b, const char *t) {
  for (const char *p = t; *p; p++) {
    if (*p == '<') sb_puts(b, "&lt;");
    else if (*p == '&') sb_puts(b, "&amp;");
    else if (*p == '>') sb_puts(b, "&gt;");
    else if (*p == '"') sb_puts(b, "&quot;");
    else { char c[2] = {*p, 0}; sb_puts(b, c); }
  }
}

/* One device's row for schedules too dense for a box per op: each pixel column
 * takes the colour of the pass kind that is busiest in it, and is drawn only when
 * the device is busy for at least a tenth of it (copies in the lane below). */
static void svg_binned(StrBuf *b, const Report *r, int d, double left, double y, double rowh, double lane,
                       double W, double mk) {
  const IrSchedule *s = r->s;
  const SimResult *sim = r->sim;
  const AnaIndex *ix = r->ix;
  int ncol = (int)W;
  double *busy = calloc((size_t)ncol * IR_NKINDS, sizeof(double));
  if (!busy) return;
  for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
    const IrOp *op = ana_op(s, ix, g);
    if (op->kind == IR_SEND || op->kind == IR_RECV) continue;
    double a = px(sim->start[g], W, mk), e = px(sim->end[g], W, mk);
    if (!(e > a)) continue;
    for (int c = (int)a; c < ncol && c <= (int)e; c++) {
      double lo = a > c ? a : c, hi = e < c + 1 ? e : c + 1;
      if (hi > lo) busy[(size_t)c * IR_NKINDS + op->kind] += hi - lo;
    }
  }
  for (int c = 0; c < ncol; c++) {
    for (int lane_copy = 0; lane_copy < 2; lane_copy++) {
      int best = -1;
      double tot = 0, bv = 0;
      for (int k = 0; k < IR_NKINDS; k++) {
        int is_copy = k == IR_OFFLOAD || k == IR_RELOAD;
        if (is_copy != lane_copy) continue;
        double x = busy[(size_t)c * IR_NKINDS + k];
        tot += x;
        if (x > bv) { bv = x; best = k; }
      }
      if (best < 0 || tot < 0.1) continue;
      double yy = lane_copy ? y + rowh + 1 : y, hh = lane_copy ? lane - 2 : rowh;
      if (hh <= 0) continue;
      sb_printf(b, "<rect x=\"%.0f\" y=\"%.1f\" width=\"1\" height=\"%.1f\" fill=\"%s\"/>", left + c, yy, hh, kind_color(best));
    }
  }
  sb_puts(b, "\n");
  free(busy);
}

/* The producing pass of a recv (global id), or -1. */
static int32_t recv_producer(const IrSchedule *s, const AnaIndex *ix, const IrOp *op) {
  if (op->kind != IR_RECV || !ana_valid_pass(s, op)) return -1;
  int64_t sl = ANA_SLOT(ix, op->mb, op->stage);
  return op->xfer == IR_XFER_ACT ? ix->posF[sl] : op->xfer == IR_XFER_GRAD ? ix->posB[sl] : -1;
}

/* Marks the critical path in crit[] (global ids of compute passes on it). */
static void critical_path(const Report *r, uint8_t *crit) {
  const IrSchedule *s = r->s;
  const SimResult *sim = r->sim;
  const AnaIndex *ix = r->ix;
  int32_t cur = -1;
  for (int32_t g = 0; g < ix->total; g++)
    if (ana_op(s, ix, g)->kind <= IR_T && (cur < 0 || sim->end[g] > sim->end[cur])) cur = g;
  /* relative to the makespan (costs may be anything from 1e-300 to 1e300) */
  const double eps = 1e-9 * (sim->makespan > 0 ? sim->makespan : 1);
  for (int64_t steps = 0; cur >= 0 && steps <= ix->total; steps++) {
    crit[cur] = 1;
    int d = ix->devof[cur];
    double t = sim->start[cur];
    int32_t next = -1;
    /* the ops before cur on its device, back to the previous pass: a transfer that
       arrived exactly when cur started is what cur waited for */
    for (int32_t g = cur - 1; g >= ix->off[d]; g--) {
      const IrOp *op = ana_op(s, ix, g);
      if (op->kind == IR_RECV && fabs(sim->end[g] - t) <= eps) {
        int32_t p = recv_producer(s, ix, op);
        if (p >= 0 && p != cur) { next = p; break; }
      }
      if (op->kind <= IR_T) {
        if (fabs(sim->end[g] - t) <= eps) next = g;
        break;
      }
    }
    if (next < 0) {
      /* a pass started late with no transfer: its producer on another device */
      const IrOp *op = ana_op(s, ix, cur);
      if (ana_valid_pass(s, op)) {
        int32_t p = -1;
        if (op->kind == IR_F && op->stage > 0) p = ix->posF[ANA_SLOT(ix, op->mb, op->stage - 1)];
        else if ((op->kind == IR_B || op->kind == IR_BW) && op->stage + 1 < s->nstage) p = ix->posB[ANA_SLOT(ix, op->mb, op->stage + 1)];
        if (p >= 0 && p != cur && sim->end[p] <= t + eps && sim->end[p] >= t - eps - s->tc) next = p;
      }
    }
    if (next < 0 || crit[next]) break;
    cur = next;
  }
}

void report_svg(StrBuf *b, const Report *r) {
  const IrSchedule *s = r->s;
  const SimResult *sim = r->sim;
  const AnaIndex *ix = r->ix;
  int P = s->ndev;
  /* the part drawn: --svg-window T0..T1 (time), --svg-devices LO..HI (devices LO to
     HI - 1); the whole picture otherwise */
  int win = r->svg_window;
  double T0 = win ? r->svg_t0 : 0, T1 = win ? r->svg_t1 : sim->dp ? sim->dp->iteration : sim->makespan;
  int dlo = r->svg_devices ? r->svg_dlo : 0, dhi = r->svg_devices ? r->svg_dhi : P;
  if (dlo < 0) dlo = 0;
  if (dhi > P) dhi = P;
  if (dhi < dlo) dhi = dlo;
  int ndr = dhi - dlo;
  win_t0 = T0;
#define VISIBLE(g) (!win || (sim->end[g] > T0 && sim->start[g] < T1))
  int copies = 0;
  for (int d = dlo; d < dhi; d++) if (sim->dev[d].copy_busy[0] + sim->dev[d].copy_busy[1] > 0) copies = 1;
  double mk = win ? T1 - T0 : T1 > 0 ? T1 : 1;   /* the time the width spans */
  /* width: 14 px per pass of the busiest device, within 1200..20000 */
  int64_t most = 0, drawn = 0;
  for (int d = dlo; d < dhi; d++) {
    int64_t n = 0;
    for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
      if (!VISIBLE(g)) continue;
      n += ana_op(s, ix, g)->kind <= IR_T;
      drawn++;
    }
    if (n > most) most = n;
  }
  double W = most * 14.0;
  if (W < 1200) W = 1200;
  if (W > 20000) W = 20000;
  int dense = (win || r->svg_devices ? drawn : ix->total) > SVG_MAX_BOXES;
  if (dense) W = 1200; /* drawn a pixel column at a time: the width is the cost */
  double left = 80, top = 66, rowh = 22, lane = (copies ? 12 : 0) + (sim->dp ? 12 : 0), gap = 4;
  double rowstep = rowh + lane + gap;
  double tl_h = ndr * rowstep;
  /* memory: a plot per device up to 8 devices; beyond, a strip per device whose shade
     is the memory held (the plots took two thirds of the height at P = 16) */
  int strips = ndr > 8;
  double memh = strips ? 10 : 50, memgap = strips ? 3 : 14;
  double mem_top = top + tl_h + 40;
  double H = mem_top + ndr * (memh + memgap) + 20;
  sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"10\">\n",
            left + W + 20, H);
  sb_puts(b, "<defs><marker id=\"arrow\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto\">"
             "<path d=\"M0,0 L6,3 L0,6 z\" fill=\"#555\"/></marker>");
  if (recompute_any(s))   /* the forward a recomputed B runs again (recompute.c), hatched */
    sb_puts(b, "<pattern id=\"recompute\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" "
               "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"4\" fill=\"white\" opacity=\"0.55\"/></pattern>");
  sb_puts(b, "</defs>\n");
  sb_puts(b, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"16\" font-size=\"13\">");
  xml_text(b, s->name ? s->name : "schedule");
  sb_printf(b, ": P=%d S=%d m=%d, makespan %.6g, bubble %.4f, peak memory %.6g", P, s->nstage, s->nmb,
            sim->makespan, sim->bubble_rate, sim->peak_memory);
  const DpModel *dm = sim->dp ? sim->dp->m : NULL;   /* data parallelism (dp.c; the tie alone: none) */
  if (dm) sb_printf(b, "; %d replicas: iteration %.6g with the %s", dm->D, sim->dp->iteration,
                    dm->dist ? "reduce-scatters and all-gathers" : "all-reduces");
  else if (sim->dp) sb_printf(b, "; iteration %.6g with the tied embeddings' exchange", sim->dp->iteration);
  if (win) sb_printf(b, "; time %.6g to %.6g", T0, T1);
  if (r->svg_devices) sb_printf(b, "; devices %d to %d", dlo, dhi - 1);
  sb_puts(b, "</text>\n");
  /* chunk of each stage: its rank among the stages its device holds */
  int32_t *chunk = calloc((size_t)(s->nstage > 0 ? s->nstage : 1), sizeof *chunk);
  int32_t *held = calloc((size_t)(P > 0 ? P : 1), sizeof *held);
  int nchunk = 1;
  for (int32_t st = 0; chunk && held && st < s->nstage; st++) {
    int32_t dv = s->stages[st].device;
    if (dv >= 0 && dv < P) chunk[st] = held[dv]++;
    if (chunk[st] + 1 > nchunk) nchunk = chunk[st] + 1;
  }
  free(held);
  /* legend: the pass kinds (shades of chunk 0), the chunks, the other colours */
  double lx = left;
  static const int kinds[] = {IR_F, IR_B, IR_W, IR_BW};
  char col[48];
  for (int k = 0; k < 4; k++, lx += 44) {
    pass_color(col, sizeof col, kinds[k], 0);
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"33\">%s</text>\n",
              lx, col, lx + 14, ir_kind_name((IrKind)kinds[k]));
  }
  static const int others[] = {IR_IF, IR_S, IR_COLL, IR_OFFLOAD, IR_RELOAD};
  static const char *oname[] = {"IF/IB", "S/T", "collective", "offload", "reload"};
  for (int k = 0; k < 5; k++, lx += 80)
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"33\">%s</text>\n",
              lx, kind_color(others[k]), lx + 14, oname[k]);
  if (dm && !dm->dist)
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"#333\"/><text x=\"%.0f\" y=\"33\">all-reduce</text>\n",
              lx, lx + 14), lx += 80;
  if (dm && dm->dist)   /* distributed optimizer (dp.c) */
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"#333\"/><text x=\"%.0f\" y=\"33\">reduce-scatter</text>\n"
                 "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"#6b6ecf\"/><text x=\"%.0f\" y=\"33\">all-gather</text>\n",
              lx, lx + 14, lx + 110, lx + 124), lx += 190;
  if (sim->dp && sim->dp->tie)
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"#8c564b\"/><text x=\"%.0f\" y=\"33\">tied exchange</text>\n",
              lx, lx + 14), lx += 100;
  if (!dense)
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>"
                 "<text x=\"%.0f\" y=\"33\">critical path</text>\n", lx, lx + 14);
  if (recompute_any(s)) {
    pass_color(col, sizeof col, IR_B, 0);
    lx += 90;
    sb_printf(b, "<rect x=\"%.0f\" y=\"24\" width=\"10\" height=\"10\" fill=\"%s\"/><rect x=\"%.0f\" y=\"24\" "
                 "width=\"10\" height=\"10\" fill=\"url(#recompute)\"/><text x=\"%.0f\" y=\"33\">forward again (recompute)</text>\n",
              lx, col, lx, lx + 14);
  }
  lx = left;
  sb_printf(b, "<text x=\"%.0f\" y=\"50\">chunks:</text>\n", lx);
  lx += 44;
  for (int k = 0; k < nchunk && k < 16; k++, lx += 64) {
    pass_color(col, sizeof col, IR_F, k);
    sb_printf(b, "<rect x=\"%.0f\" y=\"41\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"50\">chunk %d</text>\n",
              lx, col, lx + 14, k);
  }
  if (nchunk > 16) sb_printf(b, "<text x=\"%.0f\" y=\"50\">... %d chunks</text>\n", lx, nchunk);
  uint8_t *crit = dense ? NULL : calloc((size_t)ix->total + 1, 1);
  if (crit) critical_path(r, crit);
  for (int d = dlo; d < dhi; d++) {
    double y = top + (d - dlo) * rowstep;
    sb_printf(b, "<text x=\"4\" y=\"%.1f\">device %d</text>\n", y + rowh * 0.7, d);
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n", left, y, W, rowh);
    if (dense) {
      svg_binned(b, r, d, left, y, rowh, lane, W, mk);
      continue;
    }
    for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
      const IrOp *op = ana_op(s, ix, g);
      if (op->kind == IR_SEND || op->kind == IR_RECV || !VISIBLE(g)) continue;
      double x0 = left + px(sim->start[g], W, mk), w = px(sim->end[g], W, mk) - px(sim->start[g], W, mk);
      double yy = y, hh = rowh;
      if (op->kind == IR_OFFLOAD || op->kind == IR_RELOAD) {
        yy = y + rowh + 1;
        hh = lane - 2;
      }
      if (w <= 0) continue;
      int has_stage = op->stage >= 0 && op->stage < s->nstage;
      int dark = pass_color(col, sizeof col, op->kind, chunk && has_stage ? chunk[op->stage] : 0);
      int on_path = crit && crit[g];
      sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%s\">",
                x0, yy, w, hh, col, on_path ? "#d62728" : "white", on_path ? "2" : "0.5");
      char name[64];
      ir_format_op(s, op, name, sizeof name);
      sb_puts(b, "<title>");
      xml_text(b, name);
      sb_printf(b, ": microbatch %d", op->mb);
      if (has_stage) sb_printf(b, ", stage %d", op->stage);
      sb_printf(b, ", device %d, %.6g to %.6g%s</title></rect>", d, sim->start[g], sim->end[g], on_path ? " (critical path)" : "");
      double rt = recompute_time(s, op), oc = sim_cost(s, op);
      if (rt > 0 && oc > 0)
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"url(#recompute)\"/>", x0, yy,
                  w * rt / oc, hh);
      if (op->kind != IR_OFFLOAD && op->kind != IR_RELOAD) {
        if (w >= 30 && has_stage)
          sb_printf(b, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%d<tspan font-size=\"7\">s%d</tspan></text>",
                    x0 + w / 2, yy + hh * 0.7, dark ? "white" : "#222", op->mb, op->stage);
        else if (w >= 9)
          sb_printf(b, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%d</text>", x0 + w / 2, yy + hh * 0.7,
                    dark ? "white" : "#222", op->mb);
      }
      sb_puts(b, "\n");
    }
    /* the data-parallel all-reduces (dp.c): a lane under the copies'; under the
     * distributed optimizer the reduce-scatters and the all-gathers */
    for (int st = 0; dm && st < s->nstage; st++)
      for (int k = 0; k < (dm->dist ? 2 : 1); k++) {   /* k = 1: the all-gather */
        const DpResult *dp = sim->dp;
        double a0 = k ? dp->gstart[st] : dp->start[st], a1 = k ? dp->gend[st] : dp->end[st];
        double x0 = left + px(a0, W, mk), w = px(a1, W, mk) - px(a0, W, mk);
        if (s->stages[st].device != d || w <= 0) continue;
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"10\" fill=\"%s\" stroke=\"white\" stroke-width=\"0.5\">"
                     "<title>%s of stage %d's %s over %d replicas: %.6g to %.6g</title></rect>\n",
                  x0, y + rowh + (copies ? 12 : 0) + 1, w, k ? "#6b6ecf" : "#333",
                  k ? "all-gather" : dp->m->dist ? "reduce-scatter" : "all-reduce", st, k ? "weights" : "gradients", dp->m->D, a0, a1);
      }
    if (sim->dp && sim->dp->tie && (d == sim->dp->tie->dev[0] || d == sim->dp->tie->dev[1])) {   /* the tied exchange (dp.c) */
      const DpResult *dp = sim->dp;
      double x0 = left + px(dp->tie_start, W, mk), w = px(dp->tie_end, W, mk) - px(dp->tie_start, W, mk);
      if (w > 0)
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"10\" fill=\"#8c564b\" stroke=\"white\" stroke-width=\"0.5\">"
                     "<title>the tied embeddings' gradient exchanged with device %d: %.6g to %.6g</title></rect>\n",
                  x0, y + rowh + (copies ? 12 : 0) + 1, w, d == dp->tie->dev[0] ? dp->tie->dev[1] : dp->tie->dev[0], dp->tie_start,
                  dp->tie_end);
    }
  }
  /* transfers: from the producing pass's end to the arrival on the consumer */
  if (r->arrows && !dense) {
    int n = 0;
    sb_puts(b, "<g stroke=\"#555\" stroke-width=\"0.8\" fill=\"none\" opacity=\"0.6\">\n");
    for (int32_t g = 0; g < ix->total && n < SVG_MAX_ARROWS; g++) {
      const IrOp *op = ana_op(s, ix, g);
      int32_t p = recv_producer(s, ix, op);
      if (p < 0) continue;
      int pd = ix->devof[p], d = ix->devof[g];
      if (pd < dlo || pd >= dhi || d < dlo || d >= dhi || !VISIBLE(p) || !VISIBLE(g)) continue;
      double y0 = top + (pd - dlo) * rowstep + (d > pd ? rowh : 0), y1 = top + (d - dlo) * rowstep + (d > pd ? 0 : rowh);
      sb_printf(b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" marker-end=\"url(#arrow)\"/>\n", left + px(sim->end[p], W, mk),
                y0, left + px(sim->end[g], W, mk), y1);
      n++;
    }
    sb_puts(b, "</g>\n");
  }
  free(crit);
  free(chunk);
  /* time axis: ticks at 1, 2 or 5 times a power of ten, at most about 100 */
  double yax = top + tl_h + 4;
  sb_printf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, yax, left + W, yax);
  double step = pow(10, floor(log10(mk / 10)));
  if (mk / step > 50) step *= 5; else if (mk / step > 20) step *= 2;
  if (W > 2400) step /= W > 6000 ? 5 : 2;
  if (!(step > 0) || !isfinite(step) || mk / step > 100) step = mk / 10;
  double tick0 = win ? ceil(T0 / step - 1e-9) * step : 0;
  for (int t = 0; t <= 100 && tick0 + t * step - T0 <= mk * (1 + 1e-9); t++) {
    double x = tick0 + t * step;
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
              left + px(x, W, mk), yax, left + px(x, W, mk), yax + 3, left + px(x, W, mk), yax + 13, x);
  }
  sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">time (cost units)</text>\n", left + W, yax + 26);
  /* memory over time, with a scale: 0, half and the maximum over devices */
  double pk = sim->peak_memory > 0 ? sim->peak_memory : 1;
  sb_printf(b, "<text x=\"4\" y=\"%.1f\" font-size=\"12\">activation memory over time (activations; max %.6g%s)</text>\n",
            mem_top - 8, pk, strips ? "; darker holds more, the peak of each device at the right" : "");
  for (int d = dlo; d < dhi; d++) {
    const SimDev *v = &sim->dev[d];
    double y = mem_top + (d - dlo) * (memh + memgap);
    if (strips) {   /* the most held in each pixel column, in 8 shades, a rect per run */
      sb_printf(b, "<text x=\"4\" y=\"%.1f\" font-size=\"8\">device %d</text>\n", y + memh * 0.8, d);
      sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" stroke=\"#ddd\"/>\n", left, y, W, memh);
      int ncol = (int)W, k = 0, runlv = 0, run0 = 0;
      double cur = 0;
      while (k < v->nmem && v->mt[k] <= T0) cur = v->mv[k++];   /* what is held when the window opens */
      for (int c = 0; c <= ncol; c++) {
        double mx = cur;
        while (c < ncol && k < v->nmem && px(v->mt[k], W, mk) < c + 1 && (!win || v->mt[k] < T1)) {
          cur = v->mv[k++];
          if (cur > mx) mx = cur;
        }
        int lv = c < ncol ? (int)ceil(8 * mx / pk - 1e-9) : -1;
        if (lv > 8) lv = 8;
        if (lv != runlv || c == ncol) {
          if (runlv > 0 && c > run0)
            sb_printf(b, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"hsl(212,60%%,%d%%)\"/>", left + run0, y,
                      c - run0, memh, 92 - 7 * runlv);
          runlv = lv;
          run0 = c;
        }
      }
      sb_printf(b, "\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"8\">peak %.6g</text>\n", left + W - 2,
                y + memh * 0.8, v->peak);
      continue;
    }
    sb_printf(b, "<text x=\"4\" y=\"%.1f\">device %d</text>\n", y + memh * 0.6, d);
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#ccc\"/>\n", left, y, W, memh);
    for (int k = 0; k <= 2; k++) {
      double yy = y + memh - k * memh / 2;
      sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"end\" font-size=\"8\">%.4g</text>\n",
                left - 4, yy, left, yy, left - 6, yy + 3, pk * k / 2);
    }
    if (s->mem_limit >= 0 && s->mem_limit <= pk)
      sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"red\" stroke-dasharray=\"4 2\"/>\n", left,
                y + memh - s->mem_limit / pk * memh, left + W, y + memh - s->mem_limit / pk * memh);
    if (v->nmem <= 0) continue;
    if (v->nmem > 2 * (int)W) {
      /* too many steps to draw: the maximum in each pixel column (peaks stay visible) */
      int ncol = (int)W;
      double *cm = malloc(sizeof(double) * (size_t)(ncol + 1));
      if (!cm) continue;
      double cur = 0;
      int k = 0;
      for (int c = 0; c <= ncol; c++) {
        double mx = cur;
        while (k < v->nmem && px(v->mt[k], W, mk) < c + 1) {
          cur = v->mv[k++];
          if (cur > mx) mx = cur;
        }
        cm[c] = mx;
      }
      sb_puts(b, "<polyline fill=\"none\" stroke=\"#4e79a7\" points=\"");
      for (int c = 0; c <= ncol; c++) sb_printf(b, "%.0f,%.2f ", left + c, y + memh - cm[c] / pk * memh);
      sb_puts(b, "\"/>\n");
      free(cm);
      sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">peak %.6g</text>\n", left + W - 2, y + 10, v->peak);
      continue;
    }
    sb_puts(b, "<polyline fill=\"none\" stroke=\"#4e79a7\" points=\"");
    double prev = 0;
    int k0 = 0;
    if (win) while (k0 < v->nmem && v->mt[k0] <= T0) prev = v->mv[k0++];   /* held when the window opens */
    for (int k = k0; k < v->nmem && (!win || v->mt[k] < T1); k++) {
      double x = left + px(v->mt[k], W, mk);
      sb_printf(b, "%.2f,%.2f %.2f,%.2f ", x, y + memh - prev / pk * memh, x, y + memh - v->mv[k] / pk * memh);
      prev = v->mv[k];
    }
    sb_printf(b, "%.2f,%.2f\"/>\n", left + W, y + memh - prev / pk * memh);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">peak %.6g</text>\n", left + W - 2, y + 10, v->peak);
  }
  sb_puts(b, "</svg>\n");
}
