/* profile.c: `cost profile "FILE";`: measured per-stage costs from a runtime profile
 * (libppsrt --profile FILE, runtime/metrics.c writes it) replace the stated ones, so
 * that sim and synthesize use them. The format (docs/synth.md, "Measured costs"):
 *
 *   # comment
 *   KIND STAGE MEAN SPREAD COUNT
 *
 * KIND is F, B, W, BW (per stage), SEND (one hop of the activation or gradient that
 * stage STAGE sends), OFFLOAD, RELOAD (one way copy of that stage's activation), IF,
 * IB, S, T (vocabulary passes, STAGE -1); MEAN and SPREAD (standard deviation) are in
 * seconds, COUNT the number of passes measured. Stages are those of the schedule that
 * ran; the profile must have as many stages as the schedule that reads it. It must be
 * a regular file of at most 64 MiB (a FIFO or a device is refused before reading). */

enum { PROFILE_MAX_BYTES = 64 << 20 };
#include "synth.h"
#include "safeio.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int elab_profile(Arena *a, Diag *dg, IrSchedule *s, const char *path, Span at) {
  const char *full = path;
  if (path[0] != '/' && at.file) {
    const char *src = diag_file_path(dg, at.file);
    const char *slash = src ? strrchr(src, '/') : NULL;
    if (slash) full = arena_printf(a, "%.*s/%s", (int)(slash - src), src, path);
  }
  /* safeio.h: a regular file only (a FIFO would block, /dev/zero never end), at most
     PROFILE_MAX_BYTES */
  size_t size = 0;
  char *text = pps_read_file(full, 1, PROFILE_MAX_BYTES, &size);
  if (!text) {
    diag_error(dg, at, "cost profile: cannot read '%s': %s", full, pps_read_error(errno));
    return -1;
  }
  char *bw_seen = arena_alloc(a, (size_t)s->nstage + 1), *bsplit = arena_alloc(a, (size_t)s->nstage + 1);
  char line[512];
  int ln = 0, bad = 0, seen_stage = 0;
  double tc_sum = 0;
  int tc_n = 0;
  for (size_t pos = 0; pos < size;) {
    const char *eol = memchr(text + pos, '\n', size - pos);
    size_t len = (eol ? (size_t)(eol - text) : size) - pos;
    ln++;
    if (len >= sizeof line || memchr(text + pos, 0, len)) {
      diag_error(dg, at, "cost profile: %s:%d: %s", full, ln,
                 len >= sizeof line ? "line too long (a profile line is 'KIND STAGE MEAN SPREAD COUNT')" : "not text (a NUL byte)");
      bad = 1;
      break;
    }
    memcpy(line, text + pos, len);
    line[len] = 0;
    pos += len + 1;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || *p == '\r' || !*p) continue;
    char kind[16];
    long stage, count;
    double mean, spread;
    int n = 0;
    if (sscanf(p, "%15s %ld %lf %lf %ld %n", kind, &stage, &mean, &spread, &count, &n) != 5 || p[n] ||
        !(mean >= 0) || !(spread >= 0) || count < 0 || mean > 1e300) {
      diag_error(dg, at, "cost profile: %s:%d: expected 'KIND STAGE MEAN SPREAD COUNT' (times in seconds, not negative)", full, ln);
      bad = 1;
      break;
    }
    int per_stage = !strcmp(kind, "F") || !strcmp(kind, "B") || !strcmp(kind, "W") || !strcmp(kind, "BW") ||
                    !strcmp(kind, "SEND") || !strcmp(kind, "OFFLOAD") || !strcmp(kind, "RELOAD");
    if (per_stage) {
      if (stage < 0 || stage >= s->nstage) {
        diag_error(dg, at, "cost profile: %s:%d: stage %ld out of range 0..%d (the profile is of another placement?)",
                   full, ln, stage, s->nstage);
        bad = 1;
        break;
      }
      IrStage *g = &s->stages[stage];
      if (!strcmp(kind, "F")) g->tf = mean;
      else if (!strcmp(kind, "B")) { g->tb = mean; bsplit[stage] = 1; }
      else if (!strcmp(kind, "W")) { g->tw = mean; bsplit[stage] = 1; }
      else if (!strcmp(kind, "BW")) { g->tbw = mean; bw_seen[stage] = 1; }
      else if (!strcmp(kind, "SEND")) { tc_sum += mean; tc_n++; }
      else g->offload_time = mean > g->offload_time ? mean : g->offload_time;
      seen_stage = 1;
    } else if (!strcmp(kind, "IF")) s->vocab.t_if = mean;
    else if (!strcmp(kind, "IB")) s->vocab.t_ib = mean;
    else if (!strcmp(kind, "S")) s->vocab.t_s = mean;
    else if (!strcmp(kind, "T")) s->vocab.t_t = mean;
    else if (!strcmp(kind, "COLL")) s->vocab.t_coll = mean;
    else {
      diag_error(dg, at, "cost profile: %s:%d: unknown kind '%s' (expected F, B, W, BW, SEND, OFFLOAD, RELOAD, IF, IB, S, T or COLL)",
                 full, ln, kind);
      bad = 1;
      break;
    }
  }
  free(text);
  if (bad) return -1;
  if (!seen_stage) { diag_error(dg, at, "cost profile: '%s' has no per-stage figures", full); return -1; }
  if (tc_n) s->tc = tc_sum / tc_n;
  for (int k = 0; k < s->nstage; k++)
    if (bsplit[k] && !bw_seen[k]) s->stages[k].tbw = s->stages[k].tb + s->stages[k].tw;
  /* the schedule-wide figures (one device share) as the mean over devices, for reports */
  double tf = 0, tb = 0, tw = 0;
  for (int k = 0; k < s->nstage; k++) { tf += s->stages[k].tf; tb += s->stages[k].tb; tw += s->stages[k].tw; }
  s->tf = tf / s->ndev;
  s->tb = tb / s->ndev;
  s->tw = tw / s->ndev;
  return 0;
}
