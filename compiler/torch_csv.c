/* torch_csv.c: PyTorch interop, the schedule CSV formats of torch.distributed.pipelining
 * behind `ppsc import-csv` and `ppsc export-csv` (csv.c reads the file and dispatches).
 *
 * The grammar (PyTorch's _Action text form, one row per rank, one cell per action):
 *   cell    := empty | "None" | action | "(" action (";" action)* ")OVERLAP_F_B"
 *   action  := STAGE TYPE [MICROBATCH]
 *   TYPE    := F | I | W | B                      forward, input backward, weight
 *                                                 backward, full backward (current)
 *            | BW                                 legacy full backward (then B = input backward)
 *            | SEND_F | RECV_F | SEND_B | RECV_B  compute-comms form
 *            | WAIT_SEND_F | WAIT_SEND_B          completion of an earlier send
 *            | UNSHARD | RESHARD | REDUCE_GRAD | WAIT_REDUCE_GRAD   FSDP actions
 * A receive names the receiving stage: `1RECV_F0` on stage 1's rank receives what
 * `0SEND_F0` sent; `1RECV_B0` on stage 1's rank what `2SEND_B0` sent.
 *
 * Import builds the literal .pps (explicit placement; sends and receives kept in the
 * order written, so `ppsc check` verifies that order: a misordered send is a located
 * channel or deadlock error), elaborates it in memory, moves every op's location back
 * to its CSV cell, lowers and verifies it, and writes OUT only when it is valid. The
 * FSDP actions UNSHARD/RESHARD are accepted and reported as left out; REDUCE_GRAD,
 * WAIT_REDUCE_GRAD (gradients are final after the iteration in PPS too) and
 * WAIT_SEND_* (a PPS send never blocks; checked against its send) are accepted. OVERLAP_F_B of an F and a backward pass is imported as an overlapped pair
 * (`overlap { }`), any other group as its sub-actions in order with a warning (emit_overlap).
 *
 * Export verifies the schedule first (an invalid one is refused in both forms), then
 * writes the compute-only form (default) or, with --comms, the compute-comms
 * form _PipelineScheduleRuntime loads: the lowered, verified order with sends and
 * receives, one WAIT_SEND per send (a forward send's after the local backward of
 * the same stage and microbatch, which proves the peer consumed it; the others at the
 * end of the row), and REDUCE_GRAD + WAIT_REDUCE_GRAD after a stage's last W or full
 * B (where PyTorch's runtime scales the accumulated gradients). An overlapped pair
 * (`overlap { F BW }`) is PyTorch's `(F;B)OVERLAP_F_B` cell in both forms. What
 * PyTorch's CSV cannot express (offload, vocabulary passes and collectives) is refused
 * with a located error, or with --drop left out and named. */
#include "analysis.h"
#include "ast.h"
#include "driver.h"
#include "lower.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum ActKind {
  A_F, A_I, A_W, A_B, A_BW_LEGACY,
  A_SEND_F, A_RECV_F, A_SEND_B, A_RECV_B, A_WAIT_SEND_F, A_WAIT_SEND_B,
  A_UNSHARD, A_RESHARD, A_REDUCE_GRAD, A_WAIT_REDUCE_GRAD, A_NKINDS
} ActKind;

static const char *const kind_text[A_NKINDS] = {
  "F", "I", "W", "B", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "WAIT_SEND_F", "WAIT_SEND_B",
  "UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD"};

typedef struct Act {
  int stage, mb;   /* mb = -1: none written */
  uint8_t kind;    /* ActKind */
  int group;       /* > 0: sub-action of the OVERLAP_F_B cell with this number */
  Span span;
} Act;
typedef struct Row { Act *acts; int n, cap; int blank; } Row;

static int is_compute(int k) { return k <= A_BW_LEGACY; }
static int is_fsdp(int k) { return k >= A_UNSHARD; }

/* Parses one action [p, e) into *out. Returns 0 or -1 (reported). */
static int parse_action(Compilation *c, const char *p, const char *e, Span sp, Act *out) {
  const char *q = p;
  long st = 0, mb = 0;
  if (q == e || *q < '0' || *q > '9') goto bad;
  while (q < e && *q >= '0' && *q <= '9') { st = st * 10 + (*q - '0'); if (st > INT_MAX / 2) goto big; q++; }
  const char *ts = q;
  while (q < e && ((*q >= 'A' && *q <= 'Z') || *q == '_')) q++;
  int kind = -1;
  for (int k = 0; k < A_NKINDS; k++)
    if ((size_t)(q - ts) == strlen(kind_text[k]) && !strncmp(ts, kind_text[k], (size_t)(q - ts))) kind = k;
  if (kind < 0) {
    if (q == ts) goto bad;
    diag_error(&c->diag, sp, "unsupported action '%.*s': unknown type '%.*s' (expected F, I, W, B, BW, SEND_F, RECV_F, SEND_B, RECV_B, WAIT_SEND_F, WAIT_SEND_B, UNSHARD, RESHARD, REDUCE_GRAD or WAIT_REDUCE_GRAD)",
               (int)(e - p), p, (int)(q - ts), ts);
    return -1;
  }
  if (q == e) {
    if (!is_fsdp(kind)) {
      diag_error(&c->diag, sp, "action '%.*s' needs a microbatch number after '%s'", (int)(e - p), p, kind_text[kind]);
      return -1;
    }
    mb = -1;
  } else {
    if (*q < '0' || *q > '9') goto bad;
    while (q < e && *q >= '0' && *q <= '9') { mb = mb * 10 + (*q - '0'); if (mb > INT_MAX / 2) goto big; q++; }
    if (q != e) goto bad;
  }
  out->stage = (int)st;
  out->mb = (int)mb;
  out->kind = (uint8_t)kind;
  out->span = sp;
  out->group = 0;
  return 0;
bad:
  diag_error(&c->diag, sp, "malformed action '%.*s': expected STAGE TYPE MICROBATCH, e.g. 0F1, 1I0 or 0SEND_F1", (int)(e - p), p);
  return -1;
big:
  diag_error(&c->diag, sp, "number too large in action '%.*s'", (int)(e - p), p);
  return -1;
}

/* Parses one cell [a, e) (trimmed, unquoted) at column col of line; appends to row. */
static void parse_cell(Compilation *c, Row *row, uint32_t fid, uint32_t line, uint32_t col, const char *a, const char *e, int *groups) {
  Span sp = {fid, line, col, (uint32_t)(e > a ? e - a : 1)};
  if (a == e || (e - a == 4 && !strncmp(a, "None", 4))) return;
  if (*a == '(') {
    const char *close = memchr(a, ')', (size_t)(e - a));
    static const char ov[] = "OVERLAP_F_B";
    if (!close || (size_t)(e - close - 1) != strlen(ov) || strncmp(close + 1, ov, strlen(ov))) {
      diag_error(&c->diag, sp, "malformed action '%.*s': a group is written (ACTION;ACTION)OVERLAP_F_B", (int)(e - a), a);
      return;
    }
    int g = ++*groups, nsub = 0;
    const char *q = a + 1;
    while (q < close) {
      const char *s = q;
      while (q < close && *q != ';') q++;
      const char *x = s, *y = q;
      while (x < y && (*x == ' ' || *x == '\t')) x++;
      while (y > x && (y[-1] == ' ' || y[-1] == '\t')) y--;
      Span ssp = {fid, line, col + (uint32_t)(x - a), (uint32_t)(y > x ? y - x : 1)};
      Act act;
      if (x == y) diag_error(&c->diag, ssp, "empty action in '%.*s'", (int)(e - a), a);
      else if (!parse_action(c, x, y, ssp, &act)) {
        if (!is_compute(act.kind)) diag_error(&c->diag, ssp, "OVERLAP_F_B groups compute actions; '%.*s' is not one", (int)(y - x), x);
        act.group = g;
        *VEC_PUSH(&c->arena, row->acts, row->n, row->cap) = act;
        nsub++;
      }
      if (q < close) q++;
    }
    if (nsub < 1 && !c->diag.errors) diag_error(&c->diag, sp, "empty OVERLAP_F_B group");
    return;
  }
  Act act;
  if (!parse_action(c, a, e, sp, &act)) *VEC_PUSH(&c->arena, row->acts, row->n, row->cap) = act;
}

/* A valid PPS identifier from a file name: its base name up to the first '.', other
 * characters as '_', "s_" before a leading digit, "_csv" after a keyword. */
static void write_name(StrBuf *b, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char name[72];
  int n = 0;
  if (*base >= '0' && *base <= '9') { name[n++] = 's'; name[n++] = '_'; }
  for (const char *p = base; *p && *p != '.' && n < 60; p++) {
    char ch = *p;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || (ch >= '0' && ch <= '9');
    name[n++] = ok ? ch : '_';
  }
  name[n] = 0;
  int all_us = 1;
  for (int k = 0; k < n; k++) if (name[k] != '_') all_us = 0;
  if (!n || all_us) strcpy(name, "imported");
  if (pps_is_keyword(name)) strcat(name, "_csv");
  sb_puts(b, name);
}

static int cmp_int(const void *x, const void *y) {
  int a = *(const int *)x, b = *(const int *)y;
  return (a > b) - (a < b);
}

/* The count N of indices 0..N-1 that a schedule uses: an index used by more than half
 * as many compute actions as the most used one is real; N is one past the highest real
 * index. vals: the index of every compute action (sorted in place). */
static int real_count(int *vals, int n) {
  if (!n) return 0;
  qsort(vals, (size_t)n, sizeof *vals, cmp_int);
  int maxc = 0;
  for (int i = 0, j; i < n; i = j) {
    for (j = i; j < n && vals[j] == vals[i]; j++) {}
    if (j - i > maxc) maxc = j - i;
  }
  int top = -1;
  for (int i = 0, j; i < n; i = j) {
    for (j = i; j < n && vals[j] == vals[i]; j++) {}
    if (2 * (j - i) > maxc && vals[i] > top) top = vals[i];
  }
  return top + 1;
}

/* OVERLAP_F_B: the sub-actions of one cell. An F and a backward (I, W, B, BW) of
 * another microbatch become PPS's overlapped pair (`overlap { F(i,s) BW(j,t) }`,
 * docs/language.md): returns 1 and writes the opening; the caller closes it after the
 * second sub-action. Any other group (more or fewer passes, two of a kind, one
 * microbatch) is written as its passes in order, with a warning. */
static int is_backward(int k) { return k == A_I || k == A_W || k == A_B || k == A_BW_LEGACY; }
static int emit_overlap(Compilation *c, StrBuf *b, const Act *first, int nsub, int *warned) {
  if (nsub == 2 && first[0].mb != first[1].mb &&
      ((first[0].kind == A_F && is_backward(first[1].kind)) || (first[1].kind == A_F && is_backward(first[0].kind)))) {
    sb_puts(b, " overlap {");
    return 1;
  }
  if (!(*warned)++)
    diag_warning(&c->diag, first->span, "OVERLAP_F_B imported as its passes one after the other: an overlapped pair is one F and one backward pass of different microbatches");
  return 0;
}

typedef struct Keyed { int64_t key; Act act; } Keyed;
static int cmp_keyed(const void *x, const void *y) {
  int64_t a = ((const Keyed *)x)->key, b = ((const Keyed *)y)->key;
  return (a > b) - (a < b);
}

/* PyTorch posts a RECV where it is written (an irecv) and waits for it at the pass
 * that consumes it; a PPS recv waits where it stands. So each receive moves to just
 * before its consumer on the same rank (before the whole OVERLAP_F_B group holding
 * it), never earlier than written and never past a later receive from the same rank
 * (receives from one rank keep their written order: that order is what matches them
 * with the sends, and what `check` verifies). PyTorch's RECV posts an irecv that the
 * consumer waits for, which is what a PPS recv placed before its consumer times. */
static void place_receives(Compilation *c, Row *rows, int nrows, const int *place, int S, int m, int legacy) {
  size_t slots = (size_t)S * (size_t)m;
  int *posF = malloc(sizeof(int) * slots), *posB = malloc(sizeof(int) * slots), *next = malloc(sizeof(int) * (size_t)nrows);
  if (!posF || !posB || !next) { fputs("ppsc: out of memory\n", stderr); exit(PPSC_USAGE); }
  for (int r = 0; r < nrows; r++) {
    Row *row = &rows[r];
    int moved = 0;
    for (int k = 0; k < row->n; k++) {
      const Act *a = &row->acts[k];
      if (a->kind == A_RECV_F || a->kind == A_RECV_B) moved = 1;
    }
    if (!moved) continue;
    for (int k = 0; k < row->n; k++) {
      const Act *a = &row->acts[k];
      size_t sl = (size_t)a->mb * (size_t)S + (size_t)a->stage;
      if (a->kind == A_RECV_F || a->kind == A_SEND_F) posF[sl] = -1;
      if (a->kind == A_RECV_B || a->kind == A_SEND_B) posB[sl] = -1;
    }
    for (int k = 0; k < row->n; k++) {
      const Act *a = &row->acts[k];
      int first = k;
      while (a->group && first > 0 && row->acts[first - 1].group == a->group) first--;
      size_t sl = a->mb >= 0 ? (size_t)a->mb * (size_t)S + (size_t)a->stage : 0;
      if (a->kind == A_F) posF[sl] = first;
      if (a->kind == A_I || a->kind == A_BW_LEGACY || (a->kind == A_B && !legacy)) posB[sl] = first;
    }
    Keyed *ks = malloc(sizeof(Keyed) * (size_t)row->n);
    if (!ks) { fputs("ppsc: out of memory\n", stderr); exit(PPSC_USAGE); }
    for (int q = 0; q < nrows; q++) next[q] = row->n;
    for (int k = row->n - 1; k >= 0; k--) {
      const Act *a = &row->acts[k];
      ks[k].act = *a;
      ks[k].key = (int64_t)(2L * k + 1) * 4294967296LL + k;
      if (a->kind != A_RECV_F && a->kind != A_RECV_B) continue;
      size_t sl = (size_t)a->mb * (size_t)S + (size_t)a->stage;
      int fwd = a->kind == A_RECV_F;
      int consumer = fwd ? posF[sl] : posB[sl];
      int src = place[fwd ? a->stage - 1 : a->stage + 1];
      int to = consumer > k ? consumer : k;
      if (to > next[src]) to = next[src];
      if (to < k) to = k;
      next[src] = to;
      ks[k].key = (int64_t)(2L * to) * 4294967296LL + k;
    }
    qsort(ks, (size_t)row->n, sizeof *ks, cmp_keyed);  /* keys are distinct: position, then k */
    for (int k = 0; k < row->n; k++) row->acts[k] = ks[k].act;
    free(ks);
  }
  (void)c;
  free(posF);
  free(posB);
  free(next);
}

/* Appends the PPS text of one action; returns 1 when it became an op, 0 when left out. */
static int emit_act(StrBuf *b, const Act *a, int legacy) {
  switch ((ActKind)a->kind) {
  case A_F: sb_printf(b, " F(%d,%d)", a->mb, a->stage); return 1;
  case A_I: sb_printf(b, " B(%d,%d)", a->mb, a->stage); return 1;
  case A_W: sb_printf(b, " W(%d,%d)", a->mb, a->stage); return 1;
  case A_B: sb_printf(b, legacy ? " B(%d,%d)" : " BW(%d,%d)", a->mb, a->stage); return 1;
  case A_BW_LEGACY: sb_printf(b, " BW(%d,%d)", a->mb, a->stage); return 1;
  case A_SEND_F: sb_printf(b, " send F(%d,%d)", a->mb, a->stage); return 1;
  case A_RECV_F: sb_printf(b, " recv F(%d,%d)", a->mb, a->stage - 1); return 1;
  case A_SEND_B: sb_printf(b, " send B(%d,%d)", a->mb, a->stage); return 1;
  case A_RECV_B: sb_printf(b, " recv B(%d,%d)", a->mb, a->stage + 1); return 1;
  default: return 0;
  }
}

int torch_csv_import(Compilation *c, uint32_t fid, const char *text, size_t size) {
  const Options *o = c->opt;
  Row *rows = NULL;
  int nrows = 0, caprows = 0, groups = 0;
  const char *p = text, *end = text + size;
  uint32_t line = 1;
  if (size >= 3 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf) p += 3;
  while (p < end) {
    const char *ls = p;
    while (p < end && *p != '\n') p++;
    const char *le = p;
    if (le > ls && le[-1] == '\r') le--;
    Row *row = VEC_PUSH(&c->arena, rows, nrows, caprows);
    row->blank = le == ls;
    const char *q = ls;
    for (;;) {
      const char *cs = q;
      int quoted = 0;
      while (q < le && (quoted || *q != ',')) {
        if (*q == '"') quoted = !quoted;
        q++;
      }
      const char *a = cs, *e = q;
      while (a < e && (*a == ' ' || *a == '\t')) a++;
      while (e > a && (e[-1] == ' ' || e[-1] == '\t')) e--;
      if (e - a >= 2 && *a == '"' && e[-1] == '"') { a++; e--; }
      parse_cell(c, row, fid, line, (uint32_t)(a - ls + 1), a, e, &groups);
      if (q >= le) break;
      q++;
    }
    if (p < end) p++;
    line++;
  }
  while (nrows > 0 && rows[nrows - 1].blank) nrows--;  /* trailing blank lines are not ranks */
  if (nrows == 0 && !c->diag.errors) diag_error(&c->diag, (Span){fid, 1, 1, 1}, "no ranks: the CSV has no actions");
  if (c->diag.errors) goto fail;

  /* which letters: current (I = input backward, B = full) or legacy (B = input, BW = full) */
  const Act *first_i = NULL, *first_bw = NULL;
  int have_w = 0;
  long ncompute = 0, nall = 0;
  for (int r = 0; r < nrows; r++)
    for (int k = 0; k < rows[r].n; k++) {
      const Act *a = &rows[r].acts[k];
      if (a->kind == A_I && !first_i) first_i = a;
      if (a->kind == A_BW_LEGACY && !first_bw) first_bw = a;
      if (a->kind == A_W) have_w = 1;
      ncompute += is_compute(a->kind);
      nall++;
    }
  if (first_i && first_bw) {
    diag_error(&c->diag, first_bw->span, "legacy 'BW' (full backward) in a file that uses the current 'I' (input backward)");
    diag_note(&c->diag, first_i->span, "current letters used here: I = input backward, B = full backward");
    goto fail;
  }
  int legacy = first_bw || (!first_i && have_w);
  if (!ncompute) { diag_error(&c->diag, (Span){fid, 1, 1, 1}, "no compute actions (F, I, W, B)"); goto fail; }

  /* microbatch and stage counts, robust to a stray index */
  int *mbs = malloc(sizeof(int) * (size_t)ncompute), *sts = malloc(sizeof(int) * (size_t)ncompute);
  if (!mbs || !sts) { free(mbs); free(sts); fputs("ppsc: out of memory\n", stderr); return PPSC_USAGE; }
  long nc = 0;
  for (int r = 0; r < nrows; r++)
    for (int k = 0; k < rows[r].n; k++)
      if (is_compute(rows[r].acts[k].kind)) { mbs[nc] = rows[r].acts[k].mb; sts[nc] = rows[r].acts[k].stage; nc++; }
  int m = real_count(mbs, (int)nc), S = real_count(sts, (int)nc);
  free(mbs);
  free(sts);
  /* every microbatch runs F on every stage: indices that need more compute actions than
   * the file has are an error here, before the tables of S and m x S entries below (a
   * stray index in the hundreds of millions took gigabytes to reject) */
  if ((double)m * S > (double)ncompute) {
    diag_error(&c->diag, (Span){fid, 1, 1, 1},
               "the actions use microbatches 0..%d and stages 0..%d: %.0f forward passes at least, but the CSV has %ld "
               "compute actions", m - 1, S - 1, (double)m * S, ncompute);
    goto fail;
  }
  for (int r = 0; r < nrows; r++)
    for (int k = 0; k < rows[r].n; k++) {
      const Act *a = &rows[r].acts[k];
      if (a->mb >= m)
        diag_error(&c->diag, a->span, "stray microbatch index %d: the schedule's microbatches are 0..%d (inferred from how often each index is used)", a->mb, m - 1);
      else if (a->stage >= S)
        diag_error(&c->diag, a->span, "stray stage index %d: the schedule's stages are 0..%d (inferred from how often each index is used)", a->stage, S - 1);
      else if ((a->kind == A_RECV_F || a->kind == A_SEND_B) && a->stage == 0)
        diag_error(&c->diag, a->span, "%s on stage 0: the first stage has no previous stage", kind_text[a->kind]);
      else if ((a->kind == A_SEND_F || a->kind == A_RECV_B) && a->stage == S - 1)
        diag_error(&c->diag, a->span, "%s on stage %d: the last stage has no next stage", kind_text[a->kind], a->stage);
    }
  if (c->diag.errors) goto fail;

  /* placement: the rank every action of a stage is on */
  int *place = arena_alloc(&c->arena, sizeof(int) * (size_t)S);
  Span *place_at = arena_alloc(&c->arena, sizeof(Span) * (size_t)S);
  for (int st = 0; st < S; st++) place[st] = -1;
  for (int r = 0; r < nrows && c->diag.errors < 50; r++)
    for (int k = 0; k < rows[r].n; k++) {
      Act *a = &rows[r].acts[k];
      if (place[a->stage] < 0) { place[a->stage] = r; place_at[a->stage] = a->span; }
      else if (place[a->stage] != r) {
        diag_error(&c->diag, a->span, "stage %d runs on rank %d here, but on rank %d before: a stage lives on one rank",
                   a->stage, r, place[a->stage]);
        diag_note(&c->diag, place_at[a->stage], "stage %d first runs here", a->stage);
      }
    }
  for (int st = 0; st < S && !c->diag.errors; st++)
    if (place[st] < 0) diag_error(&c->diag, (Span){fid, 1, 1, 1}, "stage %d appears on no rank (stages 0..%d are used)", st, S - 1);
  if (c->diag.errors) goto fail;

  /* the same action twice; a wait without its send; FSDP and waits reported */
  size_t slots = (size_t)m * (size_t)S;
  Span *seen = calloc(slots * A_NKINDS, sizeof(Span));
  if (!seen) { fputs("ppsc: out of memory\n", stderr); return PPSC_USAGE; }
  long nleft[A_NKINDS] = {0};
  Span left_at[A_NKINDS];
  for (int r = 0; r < nrows; r++)
    for (int k = 0; k < rows[r].n; k++) {
      const Act *a = &rows[r].acts[k];
      if (is_fsdp(a->kind) || a->kind == A_WAIT_SEND_F || a->kind == A_WAIT_SEND_B) {
        if (!nleft[a->kind]++) left_at[a->kind] = a->span;
      }
      if (a->mb < 0) continue;
      int kk = a->kind == A_BW_LEGACY ? A_B : a->kind;  /* fused backward, either spelling */
      if (is_fsdp(kk)) continue;
      Span *sl = &seen[((size_t)a->mb * (size_t)S + (size_t)a->stage) * A_NKINDS + (size_t)kk];
      if (kk == A_WAIT_SEND_F || kk == A_WAIT_SEND_B) {
        Span *snd = &seen[((size_t)a->mb * (size_t)S + (size_t)a->stage) * A_NKINDS + (size_t)(kk == A_WAIT_SEND_F ? A_SEND_F : A_SEND_B)];
        if (!snd->file) diag_error(&c->diag, a->span, "%dWAIT_%s%d waits for a send not written before it on this rank", a->stage, kk == A_WAIT_SEND_F ? "SEND_F" : "SEND_B", a->mb);
      }
      if (sl->file) {
        diag_error(&c->diag, a->span, "action written twice: %d%s%d", a->stage, kind_text[a->kind], a->mb);
        diag_note(&c->diag, *sl, "first written here");
      } else *sl = a->span;
    }
  free(seen);
  if (c->diag.errors) goto fail;

  place_receives(c, rows, nrows, place, S, m, legacy);

  /* the literal .pps, with every op's CSV cell kept in order */
  StrBuf b = {0};
  sb_printf(&b, "// imported by `ppsc import-csv` from %s\n// torch.distributed.pipelining actions: F -> F, I -> B, W -> W, B -> BW%s;\n"
                "// SEND_F/RECV_F/SEND_B/RECV_B -> send/recv (a RECV names the receiving stage)\nschedule ",
            o->file, legacy ? " (legacy letters read here: B -> B, BW -> BW)" : "");
  write_name(&b, o->file);
  sb_printf(&b, "() {\n  devices %d;\n  microbatches %d;\n  stages %d;\n  placement [", nrows, m, S);
  for (int st = 0; st < S; st++) sb_printf(&b, "%s%d", st ? ", " : "", place[st]);
  sb_puts(&b, "];\n");
  int has_comm = 0;
  for (int r = 0; r < nrows && !has_comm; r++)
    for (int k = 0; k < rows[r].n && !has_comm; k++) has_comm = rows[r].acts[k].kind >= A_SEND_F && rows[r].acts[k].kind <= A_RECV_B;
  if (has_comm)   /* PyTorch's runtime issues isend/irecv: a send never holds its rank back */
    sb_puts(&b, "  // PyTorch posts every SEND as an isend and every RECV as an irecv waited by its consumer:\n"
                "  // a send never blocks its rank, so the order is proven with buffered sends\n  p2p buffered;\n");
  Span **opspan = arena_alloc(&c->arena, sizeof(Span *) * (size_t)nrows);
  int *nops = arena_alloc(&c->arena, sizeof(int) * (size_t)nrows);
  int overlap_warned = 0;
  for (int r = 0; r < nrows; r++) {
    opspan[r] = arena_alloc(&c->arena, sizeof(Span) * (size_t)(rows[r].n ? rows[r].n : 1));
    sb_printf(&b, "  device %d {", r);
    int written = 0, close_at = -1;
    for (int k = 0; k < rows[r].n; k++) {
      const Act *a = &rows[r].acts[k];
      if (a->group && (k == 0 || rows[r].acts[k - 1].group != a->group)) {
        int n = 1;
        while (k + n < rows[r].n && rows[r].acts[k + n].group == a->group) n++;
        if (emit_overlap(c, &b, a, n, &overlap_warned)) close_at = k + 1;
      }
      if (written && written % 16 == 0) sb_puts(&b, "\n   ");
      if (emit_act(&b, a, legacy)) opspan[r][written++] = a->span;
      if (k == close_at) sb_puts(&b, " }");
    }
    nops[r] = written;
    sb_puts(&b, " }\n");
  }
  sb_puts(&b, "}\n");
  /* UNSHARD/RESHARD change what a device holds: reported. REDUCE_GRAD and its wait
     mark where PyTorch finalizes a stage's gradients, which PPS does after the
     iteration anyway: accepted without a word (export --comms writes them). */
  for (int k = A_UNSHARD; k <= A_RESHARD; k++)
    if (nleft[k]) diag_warning(&c->diag, left_at[k], "%ld %s actions left out: PPS has no parameter sharding (FSDP) actions", nleft[k], kind_text[k]);

  /* elaborate the text in memory, move op locations to their cells, verify */
  Options o2 = *o;
  o2.file = o->out;
  o2.src_text = b.data;
  o2.src_size = b.len;
  o2.ndefs = 0;
  o2.schedule = NULL;
  c->opt = &o2;
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  c->opt = o;
  if (s && !c->diag.errors && s->ndev == nrows) {
    int same = 1;
    for (int r = 0; r < nrows; r++) same &= s->devs[r].nops == nops[r];
    if (same) {
      for (int r = 0; r < nrows; r++)
        for (int k = 0; k < nops[r]; k++) s->devs[r].ops[k].span = opspan[r][k];
      s->span = (Span){fid, 1, 1, 1};
      for (int r = 0; r < nrows; r++) s->devs[r].span = (Span){fid, (uint32_t)r + 1, 1, 1};
    }
    Analysis an;
    analysis_run(&c->arena, &c->diag, s, &an, 0);
  }
  if (io || !s || c->diag.errors) {
    if (!c->diag.errors) diag_error(&c->diag, (Span){fid, 1, 1, 1}, "the imported schedule does not elaborate");
    sb_free(&b);
    goto fail;
  }
  int rc = write_file_atomic(o->out, b.data, b.len) ? PPSC_USAGE : PPSC_OK;
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
fail:
  diag_summary(&c->diag);
  return PPSC_INVALID;
}

/* ---- export ---- */

/* Appends the pair (x, y) to a heap array of ints. */
static void push2(int **v, int *n, int *cap, int x, int y) {
  if (*n + 2 > *cap) {
    int nc = *cap ? *cap * 2 : 64;
    int *nv = realloc(*v, sizeof(int) * (size_t)nc);
    if (!nv) { fputs("ppsc: out of memory\n", stderr); exit(PPSC_USAGE); }
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = x;
  (*v)[(*n)++] = y;
}

/* The PyTorch letter of a compute pass (current letters), 0 for anything else. */
static char pass_letter(int kind) {
  switch ((IrKind)kind) {
  case IR_F: return 'F';
  case IR_B: return 'I';
  case IR_W: return 'W';
  case IR_BW: return 'B';
  default: return 0;
  }
}

/* Writes one row per device: compute-only (comms = 0) or compute-comms. An overlapped
 * pair (IR_FLAG_OVERLAP, adjacent after lowering: its receives before it, its sends
 * after) is one cell `(sFi;tBj)OVERLAP_F_B`, PyTorch's form; what follows one of its
 * passes (REDUCE_GRAD, WAIT_SEND_F) follows the whole cell. */
static void export_rows(const IrSchedule *s, StrBuf *b, int comms) {
  int *done = calloc((size_t)s->nstage + 1, sizeof(int));  /* W or full B seen per stage */
  if (!done) { fputs("ppsc: out of memory\n", stderr); exit(PPSC_USAGE); }
  for (int d = 0; d < s->ndev; d++) {
    const IrDevice *dv = &s->devs[d];
    int n = 0;
    /* forward sends waiting for the local backward of their (mb, stage) */
    int *pend = NULL, npend = 0, cappend = 0;
    int *late = NULL, nlate = 0, caplate = 0; /* backward sends: wait at the end */
    for (int k = 0; k < dv->nops; k++) {
      const IrOp *op = &dv->ops[k];
      if (pass_letter(op->kind)) {
        int pair = (op->flags & IR_FLAG_OVERLAP) && k + 1 < dv->nops && pass_letter(dv->ops[k + 1].kind);
        const IrOp *halves[2] = {op, pair ? &dv->ops[k + 1] : NULL};
        sb_puts(b, n++ ? "," : "");
        if (pair) sb_puts(b, "(");
        for (int h = 0; h < 1 + pair; h++)
          sb_printf(b, "%s%d%c%d", h ? ";" : "", halves[h]->stage, pass_letter(halves[h]->kind), halves[h]->mb);
        if (pair) { sb_puts(b, ")OVERLAP_F_B"); k++; }
        for (int h = 0; h < 1 + pair && comms; h++) {
          const IrOp *x = halves[h];
          char t = pass_letter(x->kind);
          /* the stage's gradients are complete after its m-th W or full B: PyTorch's
             runtime scales (and data-parallel reduces) them at REDUCE_GRAD */
          if ((t == 'W' || t == 'B') && ++done[x->stage] == s->nmb)
            sb_printf(b, ",%dREDUCE_GRAD,%dWAIT_REDUCE_GRAD", x->stage, x->stage);
          if (t == 'I' || t == 'B')
            for (int j = 0; j < npend; j += 2)
              if (pend[j] == x->stage && pend[j + 1] == x->mb) {
                sb_printf(b, ",%dWAIT_SEND_F%d", x->stage, x->mb);
                pend[j] = pend[npend - 2];
                pend[j + 1] = pend[npend - 1];
                npend -= 2;
                break;
              }
        }
        continue;
      }
      if (!comms || (op->kind != IR_SEND && op->kind != IR_RECV)) continue;
      int fwd = op->xfer == IR_XFER_ACT;
      if (op->kind == IR_SEND) {
        sb_printf(b, "%s%d%s%d", n++ ? "," : "", op->stage, fwd ? "SEND_F" : "SEND_B", op->mb);
        if (fwd) push2(&pend, &npend, &cappend, op->stage, op->mb);
        else push2(&late, &nlate, &caplate, op->stage, op->mb);
      } else {
        sb_printf(b, "%s%d%s%d", n++ ? "," : "", fwd ? op->stage + 1 : op->stage - 1, fwd ? "RECV_F" : "RECV_B", op->mb);
      }
    }
    for (int j = 0; j < npend; j += 2) sb_printf(b, "%s%dWAIT_SEND_F%d", n++ ? "," : "", pend[j], pend[j + 1]);
    for (int j = 0; j < nlate; j += 2) sb_printf(b, "%s%dWAIT_SEND_B%d", n++ ? "," : "", late[j], late[j + 1]);
    free(pend);
    free(late);
    sb_puts(b, "\n");
  }
  free(done);
}

int torch_csv_export(Compilation *c) {
  const Options *o = c->opt;
  if (!o->out) { fputs("ppsc: export-csv needs -o OUT.csv\n", stderr); return PPSC_USAGE; }
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  if (io) { diag_summary(&c->diag); return PPSC_USAGE; }
  if (!s || c->diag.errors) { diag_summary(&c->diag); return PPSC_INVALID; }
  /* what the CSV cannot express: refused, or with --drop named and left out */
  void (*say)(Diag *, Span, const char *, ...) = o->drop ? diag_warning : diag_error;
  const char *how = o->drop ? "left out (--drop)" : "refused (--drop writes the CSV without it)";
  if (s->offload.enabled)
    say(&c->diag, s->offload.span, "activation offload: PyTorch's schedule CSV has no offload action; %s", how);
  if (s->vocab.mode)
    say(&c->diag, s->vocab.span, "vocabulary parallelism (Vocab-%d): PyTorch's schedule CSV has no vocabulary passes or collectives; %s", s->vocab.mode, how);
  long written_off = 0, written_vocab = 0, written_comm = 0;
  Span off_at = {0}, vocab_at = {0}, comm_at = {0};
  for (int d = 0; d < s->ndev; d++)
    for (int k = 0; k < s->devs[d].nops; k++) {
      const IrOp *op = &s->devs[d].ops[k];
      switch ((IrKind)op->kind) {
      case IR_OFFLOAD: case IR_RELOAD: if (!written_off++) off_at = op->span; break;
      case IR_IF: case IR_IB: case IR_S: case IR_T: case IR_COLL: if (!written_vocab++) vocab_at = op->span; break;
      case IR_SEND: case IR_RECV: if (!written_comm++) comm_at = op->span; break;
      default: break;
      }
    }
  if (written_off && !s->offload.enabled)
    say(&c->diag, off_at, "%ld offload/reload ops: PyTorch's schedule CSV has no offload action; %s", written_off, how);
  if (written_vocab && !s->vocab.mode)
    say(&c->diag, vocab_at, "%ld vocabulary passes and collectives: PyTorch's schedule CSV has none; %s", written_vocab, how);
  if (written_comm && !o->comms)
    diag_warning(&c->diag, comm_at, "%ld sends and receives written in the file are left out: PyTorch derives its own from the compute-only CSV (use --comms to keep them)", written_comm);
  if (c->diag.errors) { diag_summary(&c->diag); return PPSC_INVALID; }
  /* verified first, in both forms (a deadlocking order, or a backward before its
     forward, is refused as `check` refuses it); the lowered order is what --comms
     writes, with sends and receives as ppsc proves them */
  Analysis an;
  if (!analysis_run(&c->arena, &c->diag, s, &an, 0) || c->diag.errors) {
    diag_summary(&c->diag);
    return PPSC_INVALID;
  }
  StrBuf b = {0};
  export_rows(s, &b, o->comms);
  int rc = write_file_atomic(o->out, b.data ? b.data : "", b.len) ? PPSC_USAGE : PPSC_OK;
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
}
