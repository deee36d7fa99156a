/* report.h: what `check` and `sim` print and write: the text summary, the --json
 * object (docs/json.md), the Chrome trace and the SVG timeline. Each writer fills a
 * StrBuf; the caller writes it (atomically). Nothing here computes a figure. */
#ifndef PPS_REPORT_H
#define PPS_REPORT_H
#include "driver.h"
#include "sim.h"

/* Outcome of one `expect` statement. */
typedef struct ExpectResult {
  int evaluated;     /* 0 when the schedule could not be simulated */
  int ok;
  double actual;
} ExpectResult;

/* Everything a report needs; pointers may be NULL where a phase did not run. */
typedef struct Report {
  const char *cmd;           /* "check" or "sim" */
  const IrSchedule *s;       /* NULL when nothing parsed */
  const Diag *diag;
  const AnaIndex *ix;        /* of the lowered IR */
  const SimResult *sim;      /* NULL when not simulated */
  const ExpectResult *expects; /* [s->nexpects] or NULL */
  int64_t inserted_ops;
  int valid;
  int arrows;                /* --svg-arrows: transfers drawn in the SVG */
  int svg_window;            /* --svg-window T0..T1: only that time drawn */
  double svg_t0, svg_t1;
  int svg_devices;           /* --svg-devices LO..HI: only devices LO..HI-1 drawn */
  int svg_dlo, svg_dhi;
} Report;

void report_text(StrBuf *b, const Report *r);
void report_json(StrBuf *b, const Report *r);
void report_trace(StrBuf *b, const Report *r);
void report_svg(StrBuf *b, const Report *r);
/* sim --grid: one column per device, one row per instant a pass starts (grid.c). */
void report_grid(StrBuf *b, const Report *r);
#endif
