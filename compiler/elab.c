/* elab.c: elaboration: evaluates a schedule's AST into the IR (see elab.h).
 *
 * Evaluation is a direct walk of the AST. Names are interned symbols; a binding is
 * one slot per symbol (saved and restored on scope exit), so a lookup is an array
 * index and loops never touch strings. The int and bool expressions of statements
 * run as compiled programs (see "compiled expressions"), the common pass takes a
 * short path (pass_fast); both hand anything unusual to the general code.
 * Everything is bounded: loop iterations and statements by a step budget derived
 * from --max-ops, ops by --max-ops, `use` by a depth limit, expression depth and
 * nesting by the parser.
 *
 * What this file checks: names, types, ranges (device, microbatch, stage), passes
 * on a device that does not hold their stage, duplicates, arithmetic errors, keys of
 * cost/memory/model/hardware, `require`. What it does not: completeness, dependencies,
 * deadlock, memory bounds (analysis.c). */
#include "elab.h"
#include "synth.h"
#include "overlap.h"
#include "costmodel.h"
#include "recompute.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { T_ERR, T_INT, T_REAL, T_BOOL } VType;
typedef struct Value {
  uint8_t t;
  union { int64_t i; double r; } u;
} Value;

typedef struct Bind { Value v; int32_t frame; uint8_t set; } Bind;
typedef struct Saved { Sym sym; Bind old; } Saved;

/* A per-stage cost or memory override, applied after the defaults. */
typedef struct Override { int64_t stage; Span span; Sym key; double value; } Override;

typedef struct BlockState {
  BlockEntry *e;
  int n, cap;
  int32_t *seen;    /* [4 * nstage]: entry of (kind, stage) + 1, for duplicates */
  int64_t interval;
  int has_interval;
  int w_rule;
  int squeeze;      /* `squeeze;` was written (at sqspan) */
  Span span, wspan, sqspan;
} BlockState;

enum { PL_NONE, PL_LINEAR, PL_INTERLEAVED, PL_VSHAPE, PL_EXPLICIT };
enum { B_P, B_M, B_S, B_V, B_N };   /* builtin names */
enum { USE_MAX_DEPTH = 16, MAX_DEVICES = 65536, MAX_STAGES = 1 << 20, MAX_MBS = 1 << 30 };

typedef struct Ctx {
  const ElabInput *in;
  Arena *a;
  Diag *d;
  Symtab *syms;
  IrSchedule *s;
  Bind *binds;
  int32_t *pidx;   /* scratch for `use`: parameter index + 1 by symbol, else 0 */
  Saved *saved;
  int nsaved, capsaved;
  int32_t frame, next_frame;
  Value builtin[B_N];
  Sym bsym[B_N];
  /* layout */
  int64_t ndev, nmb, nstage_stated;
  int has_dev, has_mb, has_stages;
  Span stagesspan;
  int placement;
  int64_t nstage, pv;
  int32_t *stage_dev;
  int32_t *dev_nst, *dev_first;
  Span placespan;
  Span tfb_span;      /* where `cost TFB = x` was given (overlap.c) */
  int layout_done, layout_failed;
  /* costs and memory (one device share) */
  double cost[24];
  uint8_t cost_set[24];
  Span cost_span[24];     /* where each schedule-wide key was last set */
  Override *ovr;
  int novr, capovr;
  /* policies */
  IrOffload off;
  int off_stages_set, off_mbs_set;
  IrRecompute rc;          /* recompute ...; (recompute.c models it) */
  int rc_stages_set;
  Span rc_stages_span;     /* the last `stages` clause of a recompute statement */
  /* where we are */
  int cur_dev;
  long dev_ops;            /* ops the last device block left on its device (-1: stop guessing) */
  /* duplicates (check_duplicates), marked as exec_pass writes each op: one bit per
   * (kind, microbatch, stage or device); dup_ops: the ops marked; dup_off: not in use
   * (too large, or an op was out of range or already marked: the full check decides) */
  uint64_t *dup_bits;
  int64_t dup_per;
  long dup_ops;
  int dup_off;
  BlockState *blk;
  BlockSqueeze *sq;       /* the block that squeezes, run after the stage costs are built */
  int use_depth;
  long steps, step_limit;
  int stop, ops_reported;
  int *usage;             /* set when a -D value is wrong (exit 2) */
  /* the loops we are in, innermost last, for the bindings note under an error; fr:
   * this iteration's IrFrame once an op needed it (0 = not made yet), loop: the
   * `for` statement's IrLoop */
  struct LoopAt { Sym sym; int64_t v; Span span; uint32_t fr; int loop; } loops[16];
  int nloops;
  uint32_t fr_top;        /* the innermost loop's frame once made (0: not yet, or none) */
  uint32_t use_fr;        /* inside `use`: its frame (IrLoop.use), the parent of the frames
                             of loops from use_base on (0: not in a use) */
  int use_base;
  /* placement [E for NAME in A..B]: entry s of the list is E with NAME = A + s */
  Sym place_var;
  int64_t place_lo;
  /* interned names */
  Sym f_min, f_max, f_abs, f_ceil, f_floor, f_round, f_int, f_real;
  Sym t_int, t_real, t_bool, w_stage, w_parallel;
  Sym p_linear, p_interleaved, p_vshape;
  Sym w_slot, w_eager, w_fill;
  Sym o_all, o_ratio, o_stages, o_mbs;
  /* `synthesize;` (synth.c) and `cost profile "FILE";` */
  Stmt *synth;
  SynthOptions sopt;
  Stmt *profile;
  Stmt *p2p;                /* p2p buffered|both; (stated at most once) */
  Sym w_profile;
  Stmt *off_auto;   /* `offload auto;` */
} Ctx;

/* cost/memory keys: index into Ctx.cost */
enum { K_TF, K_TB, K_TW, K_TC, K_TBW, K_TIF, K_TIB, K_TS, K_TT, K_TCOLL, K_TOFF, K_TFB, K_TRELOAD,
       K_ACT, K_BFREE, K_LIMIT, K_HOSTLIMIT, K_ACTS, K_INPUT, K_LAYER, K_N };
static const char *const key_names[K_N] = {"TF", "TB", "TW", "TC", "TBW", "TIF", "TIB", "TS", "TT",
                                           "TCOLL", "TOFF", "TFB", "TRELOAD", "act", "b_free", "limit", "host_limit", "act_s", "input", "layer"};
static const char *const model_keys[] = {"layers", "hidden", "ffn_hidden", "heads", "query_groups", "kv_channels",
                                         "seq", "micro_batch", "vocab", "dtype_bytes", "swiglu", "rmsnorm", "rope",
                                         "bias", "tie_embeddings", "qk_layernorm", "experts", "moe_topk", "moe_ffn_hidden",
                                         "moe_aux_loss", "moe_capacity_factor", "moe_shared_ffn_hidden",
                                         "moe_shared_gate", "qkv_bias", "norm_epsilon", NULL};
static const char *const hardware_keys[] = {"memory", "flops", "host_bandwidth", "peer_bandwidth", "efficiency",
                                            "d2h_bandwidth", "h2d_bandwidth", "devices_per_host_link",
                                            "duplex_bandwidth", "data_parallel", "dp_bandwidth", "dp_latency",
                                            "dp_stage_bytes", "distributed_optimizer", "tensor_parallel",
                                            "sequence_parallel", "tp_bandwidth", "tp_latency", "context_parallel",
                                            "cp_bandwidth", "cp_latency", "expert_parallel", "ep_bandwidth",
                                            "ep_latency", "ep_alltoall", NULL};

/* ---- diagnostics ---- */

static void errv(Ctx *c, uint8_t *once, Span at, const char *fmt, va_list ap) {
  if (once) {
    if (*once) return;
    *once = 1;
  }
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  diag_emit(c->d, DIAG_ERROR, at, buf);
  if (c->nloops > 0) {
    /* which iteration failed: "in device 3, i = 7" at the innermost loop */
    char nb[512];
    size_t n = 0;
    if (c->cur_dev >= 0) n += (size_t)snprintf(nb, sizeof nb, "in device %d, ", c->cur_dev);
    else n += (size_t)snprintf(nb, sizeof nb, "with ");
    int shown = c->nloops < (int)(sizeof c->loops / sizeof *c->loops) ? c->nloops : (int)(sizeof c->loops / sizeof *c->loops);
    for (int k = 0; k < shown && n < sizeof nb - 64; k++)
      n += (size_t)snprintf(nb + n, sizeof nb - n, "%s%s = %lld", k ? ", " : "", sym_name(c->syms, c->loops[k].sym),
                            (long long)c->loops[k].v);
    diag_emit(c->d, DIAG_NOTE, c->loops[shown - 1].span, nb);
  }
  if (c->d->errors > 10000) c->stop = 1; /* enough; do not drown */
}
static void __attribute__((format(printf, 4, 5))) err(Ctx *c, uint8_t *once, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  errv(c, once, at, fmt, ap);
  va_end(ap);
}
#define EERR(c, e, ...) err((c), &(e)->errored, (e)->span, __VA_ARGS__)
#define SERR(c, st, ...) err((c), &(st)->errored, (st)->span, __VA_ARGS__)

static const char *tname(int t) {
  return t == T_INT ? "int" : t == T_REAL ? "real" : t == T_BOOL ? "bool" : "error";
}
static const char *sname(Ctx *c, Sym s) { return sym_name(c->syms, s); }

/* ---- values ---- */

static Value vint(int64_t i) { Value v; v.t = T_INT; v.u.i = i; return v; }
static Value vreal(double r) { Value v; v.t = T_REAL; v.u.r = r; return v; }
static Value vbool(int b) { Value v; v.t = T_BOOL; v.u.i = b != 0; return v; }
static const Value verr = {T_ERR, {0}};
static double num(Value v) { return v.t == T_INT ? (double)v.u.i : v.u.r; }

static Value eval(Ctx *c, Expr *e);

static Value real_result(Ctx *c, Expr *e, double r) {
  if (!isfinite(r)) { EERR(c, e, "real overflow"); return verr; }
  return vreal(r);
}

/* a real that must become an int (ceil, floor, round, int) */
static Value to_int(Ctx *c, Expr *e, double r) {
  if (!(r > -9.2e18 && r < 9.2e18)) { EERR(c, e, "integer overflow converting %g to int", r); return verr; }
  return vint((int64_t)r);
}

static const char *op_text(int op) {
  switch (op) {
  case '+': return "+"; case '-': return "-"; case '*': return "*"; case '/': return "/";
  case 'd': return "div"; case 'm': return "mod"; case '<': return "<"; case '>': return ">";
  case 'l': return "<="; case 'g': return ">="; case 'e': return "=="; case 'n': return "!=";
  case '&': return "and"; case '|': return "or";
  default: return "?";
  }
}

static Value eval_binary(Ctx *c, Expr *e) {
  int op = e->op;
  if (op == '&' || op == '|') {
    Value a = eval(c, e->u.bin.a);
    if (a.t == T_ERR) return verr;
    if (a.t != T_BOOL) { EERR(c, e, "'%s' needs bool operands, got %s", op_text(op), tname(a.t)); return verr; }
    if (op == '&' && !a.u.i) return vbool(0);
    if (op == '|' && a.u.i) return vbool(1);
    Value b = eval(c, e->u.bin.b);
    if (b.t == T_ERR) return verr;
    if (b.t != T_BOOL) { EERR(c, e, "'%s' needs bool operands, got %s", op_text(op), tname(b.t)); return verr; }
    return vbool((int)b.u.i);
  }
  Value a = eval(c, e->u.bin.a);
  Value b = eval(c, e->u.bin.b);
  if (a.t == T_ERR || b.t == T_ERR) return verr;
  int cmp = op == '<' || op == '>' || op == 'l' || op == 'g' || op == 'e' || op == 'n';
  if (a.t == T_BOOL || b.t == T_BOOL) {
    if ((op == 'e' || op == 'n') && a.t == T_BOOL && b.t == T_BOOL)
      return vbool(op == 'e' ? a.u.i == b.u.i : a.u.i != b.u.i);
    EERR(c, e, "'%s' needs %s operands, got %s and %s", op_text(op), cmp ? "comparable" : "number",
         tname(a.t), tname(b.t));
    return verr;
  }
  if (cmp) {
    int r;
    if (a.t == T_INT && b.t == T_INT) {
      int64_t x = a.u.i, y = b.u.i;
      r = op == '<' ? x < y : op == '>' ? x > y : op == 'l' ? x <= y : op == 'g' ? x >= y : op == 'e' ? x == y : x != y;
    } else {
      double x = num(a), y = num(b);
      r = op == '<' ? x < y : op == '>' ? x > y : op == 'l' ? x <= y : op == 'g' ? x >= y : op == 'e' ? x == y : x != y;
    }
    return vbool(r);
  }
  if (op == 'd' || op == 'm') {
    if (a.t != T_INT || b.t != T_INT) {
      EERR(c, e, "'%s' needs int operands, got %s and %s", op_text(op), tname(a.t), tname(b.t));
      return verr;
    }
    int64_t x = a.u.i, y = b.u.i;
    if (y == 0) { EERR(c, e, "division by zero"); return verr; }
    if (x == INT64_MIN && y == -1) { EERR(c, e, "integer overflow"); return verr; }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) { q--; r += y; }
    return vint(op == 'd' ? q : r);
  }
  if (op == '/') {
    double y = num(b);
    if (y == 0) { EERR(c, e, "division by zero"); return verr; }
    return real_result(c, e, num(a) / y);
  }
  if (a.t == T_INT && b.t == T_INT) {
    int64_t r;
    int ovf = op == '+' ? __builtin_add_overflow(a.u.i, b.u.i, &r)
            : op == '-' ? __builtin_sub_overflow(a.u.i, b.u.i, &r)
                        : __builtin_mul_overflow(a.u.i, b.u.i, &r);
    if (ovf) { EERR(c, e, "integer overflow"); return verr; }
    return vint(r);
  }
  double x = num(a), y = num(b);
  return real_result(c, e, op == '+' ? x + y : op == '-' ? x - y : x * y);
}

static Value eval_call(Ctx *c, Expr *e) {
  Sym f = e->sym;
  int n = e->nargs;
  int minmax = f == c->f_min || f == c->f_max;
  if (!minmax && f != c->f_abs && f != c->f_ceil && f != c->f_floor && f != c->f_round && f != c->f_int &&
      f != c->f_real) {
    EERR(c, e, "unknown function '%s' (expected min, max, abs, ceil, floor, round, int or real)", sname(c, f));
    return verr;
  }
  if (minmax ? n < 1 : n != 1) {
    EERR(c, e, "'%s' takes %s", sname(c, f), minmax ? "one or more arguments" : "one argument");
    return verr;
  }
  if (minmax) {
    Value best = verr;
    for (int k = 0; k < n; k++) {
      Value v = eval(c, e->u.args[k]);
      if (v.t == T_ERR) return verr;
      if (v.t == T_BOOL) { EERR(c, e->u.args[k], "'%s' needs numbers, got bool", sname(c, f)); return verr; }
      if (k == 0) { best = v; continue; }
      int both_int = best.t == T_INT && v.t == T_INT;
      int take = f == c->f_min ? (both_int ? v.u.i < best.u.i : num(v) < num(best))
                               : (both_int ? v.u.i > best.u.i : num(v) > num(best));
      if (!both_int) { best = vreal(num(best)); v = vreal(num(v)); }
      if (take) best = v;
    }
    return best;
  }
  Value v = eval(c, e->u.args[0]);
  if (v.t == T_ERR) return verr;
  if (v.t == T_BOOL) { EERR(c, e, "'%s' needs a number, got bool", sname(c, f)); return verr; }
  if (f == c->f_abs) {
    if (v.t == T_INT) {
      if (v.u.i == INT64_MIN) { EERR(c, e, "integer overflow"); return verr; }
      return vint(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    return vreal(fabs(v.u.r));
  }
  if (f == c->f_real) return vreal(num(v));
  if (v.t == T_INT) return v;
  if (f == c->f_ceil) return to_int(c, e, ceil(v.u.r));
  if (f == c->f_floor) return to_int(c, e, floor(v.u.r));
  if (f == c->f_round) return to_int(c, e, round(v.u.r));
  return to_int(c, e, trunc(v.u.r)); /* int(x): toward zero */
}

/* The type e would have if it were evaluated now without error, found without
 * evaluating it (no diagnostics, no division): T_ERR when that is not known (an
 * unknown name or function, or operands no operator accepts). It follows eval's
 * rules exactly; the conditional expression uses it for the branch it does not take. */
static int static_type(Ctx *c, Expr *e) {
  switch ((ExprKind)e->kind) {
  case EX_INT: return T_INT;
  case EX_REAL: return T_REAL;
  case EX_BOOL: return T_BOOL;
  case EX_NAME: {
    Bind *b = &c->binds[e->sym];
    if (b->set && b->frame == c->frame) return b->v.t;
    for (int k = 0; k < B_N; k++)
      if (e->sym == c->bsym[k]) return c->builtin[k].t;
    return T_ERR;
  }
  case EX_UNARY: {
    if (e->op == 'n') return T_BOOL;
    int t = static_type(c, e->u.bin.a);
    return t == T_INT || t == T_REAL ? t : T_ERR;
  }
  case EX_BINARY: {
    int op = e->op;
    if (op == '&' || op == '|' || op == '<' || op == '>' || op == 'l' || op == 'g' || op == 'e' || op == 'n')
      return T_BOOL;
    if (op == '/') return T_REAL;
    if (op == 'd' || op == 'm') return T_INT;
    int a = static_type(c, e->u.bin.a), b = static_type(c, e->u.bin.b);
    if (a == T_INT && b == T_INT) return T_INT;
    return (a == T_INT || a == T_REAL) && (b == T_INT || b == T_REAL) ? T_REAL : T_ERR;
  }
  case EX_CALL: {
    Sym f = e->sym;
    int minmax = f == c->f_min || f == c->f_max;
    if (minmax ? e->nargs < 1 : e->nargs != 1) return T_ERR;
    int t = T_ERR;
    for (int k = 0; k < e->nargs; k++) {
      int u = static_type(c, e->u.args[k]);
      if (u != T_INT && u != T_REAL) return T_ERR;
      t = k == 0 || (t == T_INT && u == T_INT) ? u : T_REAL;
    }
    if (minmax || f == c->f_abs) return t;
    if (f == c->f_real) return T_REAL;
    if (f == c->f_ceil || f == c->f_floor || f == c->f_round || f == c->f_int) return T_INT;
    return T_ERR;
  }
  case EX_COND: {
    int a = static_type(c, e->u.args[1]), b = static_type(c, e->u.args[2]);
    if (a == T_ERR || b == T_ERR) return T_ERR;
    if (a == b) return a;
    return a != T_BOOL && b != T_BOOL ? T_REAL : T_ERR;
  }
  }
  return T_ERR;
}

/* if COND then A else B: only the branch taken is evaluated; the other one's type
 * (found without evaluating it) must agree, and an int meets a real as a real. */
static Value eval_cond(Ctx *c, Expr *e) {
  Expr *cond = e->u.args[0];
  Value v = eval(c, cond);
  if (v.t == T_ERR) return verr;
  if (v.t != T_BOOL) { EERR(c, cond, "expected a bool condition, got %s", tname(v.t)); return verr; }
  int taken = v.u.i ? 1 : 2;
  v = eval(c, e->u.args[taken]);
  if (v.t == T_ERR) return verr;
  int other = static_type(c, e->u.args[3 - taken]);
  if (other == T_ERR || other == v.t) return v;
  if (v.t == T_BOOL || other == T_BOOL) {
    int tt = taken == 1 ? v.t : other, te = taken == 1 ? other : v.t;
    EERR(c, e, "the branches of a conditional expression must both be numbers or both bool, got %s (then) and %s (else)",
         tname(tt), tname(te));
    return verr;
  }
  return vreal(num(v)); /* an int branch where the other is real */
}

static Value eval(Ctx *c, Expr *e) {
  switch ((ExprKind)e->kind) {
  case EX_INT: return vint(e->u.i);
  case EX_REAL: return vreal(e->u.r);
  case EX_BOOL: return vbool((int)e->u.i);
  case EX_NAME: {
    Bind *b = &c->binds[e->sym];
    if (b->set && b->frame == c->frame) return b->v;
    for (int k = 0; k < B_N; k++)
      if (e->sym == c->bsym[k] && c->builtin[k].t != T_ERR) return c->builtin[k];
    for (int k = 0; k < B_N; k++)
      if (e->sym == c->bsym[k]) {
        static const char *const what[B_N] = {"devices", "microbatches", "placement", "placement"};
        EERR(c, e, "'%s' is not known yet (state '%s' first)", sname(c, e->sym), what[k]);
        return verr;
      }
    EERR(c, e, "unknown name '%s'", sname(c, e->sym));
    return verr;
  }
  case EX_UNARY: {
    Value a = eval(c, e->u.bin.a);
    if (a.t == T_ERR) return verr;
    if (e->op == 'n') {
      if (a.t != T_BOOL) { EERR(c, e, "'not' needs a bool, got %s", tname(a.t)); return verr; }
      return vbool(!a.u.i);
    }
    if (a.t == T_BOOL) { EERR(c, e, "'-' needs a number, got bool"); return verr; }
    if (a.t == T_INT) {
      if (a.u.i == INT64_MIN) { EERR(c, e, "integer overflow"); return verr; }
      return vint(-a.u.i);
    }
    return vreal(-a.u.r);
  }
  case EX_BINARY: return eval_binary(c, e);
  case EX_CALL: return eval_call(c, e);
  case EX_COND: return eval_cond(c, e);
  }
  return verr;
}

/* ---- compiled expressions ----
 *
 * The loops of a schedule evaluate the same few expressions hundreds of thousands of
 * times, nearly all of them int arithmetic and comparisons. The first time a
 * statement evaluates an expression (eval_top), it is compiled into a short program
 * for a stack machine on int64 (bools are 0 and 1): leaves become operands of the
 * instruction that uses them, and names keep their symbol, checked at each run.
 * A program never reports anything: whenever its result could differ from eval's
 * (a name that is not bound to an int or bool as the program expects, overflow,
 * division by zero) it gives up and eval evaluates the expression again, reporting
 * what it reports. Expressions are free of side effects, so running both is safe.
 * What is not compiled (reals, '/', conditional expressions, other functions, a lone
 * leaf) is always evaluated by eval. */

/* where an operand comes from; XS_NC and XS_NN: binary operators whose left operand is
 * an int name too (lsym), the right one a constant or an int name; they push */
enum { XS_NONE, XS_STACK, XS_CONST, XS_INT, XS_BOOL, XS_NC, XS_NN };
enum { XO_PUSH, XO_NEG, XO_NOT, XO_ABS,                   /* push f(operand) */
       XO_ADD, XO_SUB, XO_MUL, XO_DIV, XO_MOD, XO_MIN, XO_MAX,
       XO_LT, XO_GT, XO_LE, XO_GE, XO_EQ, XO_NE, XO_AND, XO_OR, /* top = top op operand */
       XO_JF, XO_JT,    /* top false (JF) or true (JT): jump k forward keeping it, else pop */
       XO_END };
enum { XSTACK = 32, XMAXINS = 256 };

typedef struct XIns {
  uint8_t code;    /* XK(XO_*, XS_*): xrun dispatches on operator and operand at once */
  int16_t bi;      /* XS_INT/XS_BOOL: the builtin the name falls back to, or -1 */
  Sym sym;         /* XS_INT/XS_BOOL/XS_NN: the name */
  int64_t k;       /* XS_CONST/XS_NC: the value; XO_JF/XO_JT: the jump */
  Sym lsym;        /* XS_NC/XS_NN: the left operand's name */
  int16_t lbi;     /* its builtin, or -1 */
} XIns;
#define XK(op, src) ((op) * 7 + (src))

typedef struct XProg {
  uint8_t t;       /* T_INT or T_BOOL: the type of the result; T_ERR: not compiled */
  XIns ins[];
} XProg;

static const XProg xnone = {T_ERR};

typedef struct XBuf { XIns ins[XMAXINS]; int n, depth, max, bad; } XBuf;

static XIns *xemit(XBuf *b, int op, int src) {
  if (b->n >= XMAXINS - 1) { b->bad = 1; b->n = 0; }
  XIns *i = &b->ins[b->n++];
  memset(i, 0, sizeof *i);
  i->code = (uint8_t)XK(op, src);
  i->bi = i->lbi = -1;
  if (src == XS_STACK) b->depth--;
  return i;
}
static void xpush(XBuf *b) {
  if (++b->depth > b->max) b->max = b->depth;
  if (b->max > XSTACK) b->bad = 1;
}

/* The type an operand or value of e has when it is compiled: a literal's own, an
 * operator's result, or `want` for a name (checked when the program runs). */
static int xtype(Ctx *c, Expr *e, int want) {
  switch ((ExprKind)e->kind) {
  case EX_INT: return T_INT;
  case EX_BOOL: return T_BOOL;
  case EX_NAME: return want;
  case EX_UNARY: return e->op == 'n' ? T_BOOL : T_INT;
  case EX_BINARY:
    return e->op == '+' || e->op == '-' || e->op == '*' || e->op == 'd' || e->op == 'm' ? T_INT
         : e->op == '/' ? T_ERR : T_BOOL;
  case EX_CALL: return e->sym == c->f_real ? T_ERR : T_INT;
  default: return T_ERR;
  }
}

static int xval(Ctx *c, XBuf *b, Expr *e, int want);

/* Emits instruction op with e as its operand (a leaf inline, else computed first
 * onto the stack); e must have type want. */
/* The builtin (B_*) a name falls back to when it is not bound, or -1. */
static int16_t xbuiltin(Ctx *c, Sym s) {
  for (int k = 0; k < B_N; k++)
    if (s == c->bsym[k]) return (int16_t)k;
  return -1;
}

static void xop(Ctx *c, XBuf *b, int op, Expr *e, int want) {
  if (xtype(c, e, want) != want) { b->bad = 1; return; }
  if (e->kind == EX_INT || e->kind == EX_BOOL) {
    xemit(b, op, XS_CONST)->k = e->u.i;
  } else if (e->kind == EX_NAME) {
    XIns *i = xemit(b, op, want == T_INT ? XS_INT : XS_BOOL);
    i->sym = e->sym;
    i->bi = xbuiltin(c, e->sym);
  } else {
    if (xval(c, b, e, want) != want) { b->bad = 1; return; }
    xemit(b, op, XS_STACK);
  }
  if (op <= XO_ABS) xpush(b);
}

/* Emits the code that pushes e's value; returns its type (T_ERR: not compilable). */
static int xval(Ctx *c, XBuf *b, Expr *e, int want) {
  if (b->bad) return T_ERR;
  switch ((ExprKind)e->kind) {
  case EX_INT:
  case EX_BOOL:
  case EX_NAME:
    xop(c, b, XO_PUSH, e, xtype(c, e, want));
    return xtype(c, e, want);
  case EX_UNARY:
    if (e->op == 'n') { xop(c, b, XO_NOT, e->u.bin.a, T_BOOL); return T_BOOL; }
    xop(c, b, XO_NEG, e->u.bin.a, T_INT);
    return T_INT;
  case EX_BINARY: {
    static const char ops[] = "+-*dm<>lgen&|";
    static const uint8_t xo[] = {XO_ADD, XO_SUB, XO_MUL, XO_DIV, XO_MOD, XO_LT, XO_GT, XO_LE, XO_GE,
                                 XO_EQ, XO_NE, XO_AND, XO_OR};
    const char *p = e->op ? strchr(ops, e->op) : NULL;
    if (!p) return T_ERR;
    int op = xo[p - ops];
    Expr *l = e->u.bin.a, *r = e->u.bin.b;
    if (op == XO_AND || op == XO_OR) {
      if (xval(c, b, l, T_BOOL) != T_BOOL) return T_ERR;
      if (r->kind == EX_NAME || r->kind == EX_BOOL) {
        xop(c, b, op, r, T_BOOL);
      } else {
        int at = b->n;
        xemit(b, op == XO_AND ? XO_JF : XO_JT, XS_NONE);
        b->depth--;   /* the jump pops when it falls through */
        if (xval(c, b, r, T_BOOL) != T_BOOL) return T_ERR;
        if (!b->bad) b->ins[at].k = b->n - at;
      }
      return b->bad ? T_ERR : T_BOOL;
    }
    int t = T_INT;   /* operand type */
    if (op == XO_EQ || op == XO_NE) {
      int ta = xtype(c, l, T_ERR), tb = xtype(c, r, T_ERR);
      t = ta != T_ERR ? ta : tb != T_ERR ? tb : T_INT;
    }
    if (t == T_INT && l->kind == EX_NAME && (r->kind == EX_INT || r->kind == EX_NAME)) {
      XIns *i = xemit(b, op, r->kind == EX_INT ? XS_NC : XS_NN);   /* name op leaf: one instruction */
      i->lsym = l->sym;
      i->lbi = xbuiltin(c, l->sym);
      if (r->kind == EX_INT) i->k = r->u.i;
      else i->sym = r->sym, i->bi = xbuiltin(c, r->sym);
      xpush(b);
      return b->bad ? T_ERR : op <= XO_MAX ? T_INT : T_BOOL;
    }
    if (xval(c, b, l, t) != t) return T_ERR;
    xop(c, b, op, r, t);
    return b->bad ? T_ERR : op <= XO_MAX ? T_INT : T_BOOL;
  }
  case EX_CALL: {
    Sym f = e->sym;
    if (f == c->f_min || f == c->f_max) {
      if (e->nargs < 1) return T_ERR;
      if (xval(c, b, e->u.args[0], T_INT) != T_INT) return T_ERR;
      for (int k = 1; k < e->nargs; k++) xop(c, b, f == c->f_min ? XO_MIN : XO_MAX, e->u.args[k], T_INT);
      return b->bad ? T_ERR : T_INT;
    }
    if (e->nargs != 1) return T_ERR;
    if (f == c->f_abs) { xop(c, b, XO_ABS, e->u.args[0], T_INT); return b->bad ? T_ERR : T_INT; }
    /* ceil, floor, round and int leave an int as it is */
    if (f == c->f_ceil || f == c->f_floor || f == c->f_round || f == c->f_int) return xval(c, b, e->u.args[0], T_INT);
    return T_ERR;
  }
  default:
    return T_ERR;
  }
}

static const XProg *xcompile(Ctx *c, Expr *e) {
  if (e->kind == EX_INT || e->kind == EX_BOOL || e->kind == EX_NAME || e->kind == EX_REAL) return &xnone;
  XBuf *b = malloc(sizeof *b);
  if (!b) return &xnone;
  b->n = b->depth = b->max = b->bad = 0;
  int t = xval(c, b, e, T_INT);
  xemit(b, XO_END, XS_NONE);
  const XProg *p = &xnone;
  if (t != T_ERR && !b->bad) {
    XProg *q = arena_alloc(c->a, sizeof *q + (size_t)b->n * sizeof *b->ins);
    q->t = (uint8_t)t;
    memcpy(q->ins, b->ins, (size_t)b->n * sizeof *b->ins);
    p = q;
  }
  free(b);
  return p;
}

/* A name operand that is not an int (bool) bound in this frame: its builtin, or 1 when
 * eval must decide (unbound, or bound to another type). */
static int xname(const Ctx *c, Sym sym, int bi, int t, int64_t *y) {
  const Bind *bd = &c->binds[sym];
  if ((bd->set && bd->frame == c->frame) || bi < 0 || c->builtin[bi].t != t) return 1;
  *y = c->builtin[bi].u.i;
  return 0;
}

/* Runs a program: 0 with *out set, or 1 when eval must evaluate the expression. The
 * top of the stack is kept in acc, the values under it in st. Each instruction jumps
 * to the next one's code itself (labels as values, as Lua's interpreter can): one
 * indirect jump per instruction kind predicts far better than a shared switch. */
static int xrun(const Ctx *c, const XIns *p, int64_t *out) {
  int64_t st[XSTACK + 2];
  int sp = 0;
  int64_t acc = 0, y, l;
  const Bind *bd;
#define XLOAD(T)                                                                   \
  bd = &c->binds[p->sym];                                                          \
  if (bd->v.t == (T) && bd->set && bd->frame == c->frame) y = bd->v.u.i;           \
  else if (xname(c, p->sym, p->bi, (T), &y)) return 1;
#define XLOADL                                                                     \
  bd = &c->binds[p->lsym];                                                         \
  if (bd->v.t == T_INT && bd->set && bd->frame == c->frame) l = bd->v.u.i;         \
  else if (xname(c, p->lsym, p->lbi, T_INT, &l)) return 1;
#define XNEXT goto *jt[(++p)->code]
#define XL(OP, S) &&L_##OP##_##S
#define XTAB(OP) [XK(OP, XS_STACK)] = XL(OP, XS_STACK), [XK(OP, XS_CONST)] = XL(OP, XS_CONST), \
                 [XK(OP, XS_INT)] = XL(OP, XS_INT), [XK(OP, XS_BOOL)] = XL(OP, XS_BOOL)
#define XTAB2(OP) XTAB(OP), [XK(OP, XS_NC)] = XL(OP, XS_NC), [XK(OP, XS_NN)] = XL(OP, XS_NN)
  /* an operator that pushes f(y) (on a value computed first: replaces it) */
#define XPUSH(OP, F)                                                               \
  L_##OP##_XS_STACK: y = acc; { F; } XNEXT;                                         \
  L_##OP##_XS_CONST: y = p->k; st[sp++] = acc; { F; } XNEXT;                        \
  L_##OP##_XS_INT: XLOAD(T_INT) st[sp++] = acc; { F; } XNEXT;                       \
  L_##OP##_XS_BOOL: XLOAD(T_BOOL) st[sp++] = acc; { F; } XNEXT;
  /* a binary operator: acc = l op y, l the value under its operand y */
#define XBIN(OP, F)                                                                \
  L_##OP##_XS_STACK: y = acc; l = st[--sp]; { F; } XNEXT;                           \
  L_##OP##_XS_CONST: y = p->k; l = acc; { F; } XNEXT;                               \
  L_##OP##_XS_INT: XLOAD(T_INT) l = acc; { F; } XNEXT;                              \
  L_##OP##_XS_BOOL: XLOAD(T_BOOL) l = acc; { F; } XNEXT;                            \
  L_##OP##_XS_NC: XLOADL y = p->k; st[sp++] = acc; { F; } XNEXT;                    \
  L_##OP##_XS_NN: XLOADL XLOAD(T_INT) st[sp++] = acc; { F; } XNEXT;
  static const void *const jt[XK(XO_END, XS_NONE) + 1] = {
    XTAB(XO_PUSH), XTAB(XO_NEG), XTAB(XO_NOT), XTAB(XO_ABS), XTAB2(XO_ADD), XTAB2(XO_SUB), XTAB2(XO_MUL),
    XTAB2(XO_DIV), XTAB2(XO_MOD), XTAB2(XO_MIN), XTAB2(XO_MAX), XTAB2(XO_LT), XTAB2(XO_GT), XTAB2(XO_LE),
    XTAB2(XO_GE), XTAB2(XO_EQ), XTAB2(XO_NE), XTAB2(XO_AND), XTAB2(XO_OR),
    [XK(XO_JF, XS_NONE)] = &&L_JF, [XK(XO_JT, XS_NONE)] = &&L_JT, [XK(XO_END, XS_NONE)] = &&L_END};
  goto *jt[p->code];
  XPUSH(XO_PUSH, acc = y)
  XPUSH(XO_NEG, if (y == INT64_MIN) return 1; acc = -y)
  XPUSH(XO_NOT, acc = !y)
  XPUSH(XO_ABS, if (y == INT64_MIN) return 1; acc = y < 0 ? -y : y)
  XBIN(XO_ADD, if (__builtin_add_overflow(l, y, &acc)) return 1)
  XBIN(XO_SUB, if (__builtin_sub_overflow(l, y, &acc)) return 1)
  XBIN(XO_MUL, if (__builtin_mul_overflow(l, y, &acc)) return 1)
  /* floored; operands in 0..2^32 - 1 (the usual case) take the faster 32-bit divide */
  XBIN(XO_DIV, if ((uint64_t)(l | y) <= UINT32_MAX && y) { acc = (uint32_t)l / (uint32_t)y; XNEXT; }
               if (y == 0 || (l == INT64_MIN && y == -1)) return 1;
               acc = l / y; if (l % y != 0 && ((l % y < 0) != (y < 0))) acc--)
  XBIN(XO_MOD, if ((uint64_t)(l | y) <= UINT32_MAX && y) { acc = (uint32_t)l % (uint32_t)y; XNEXT; }
               if (y == 0 || (l == INT64_MIN && y == -1)) return 1;
               acc = l % y; if (acc != 0 && ((acc < 0) != (y < 0))) acc += y)
  XBIN(XO_MIN, acc = y < l ? y : l)
  XBIN(XO_MAX, acc = y > l ? y : l)
  XBIN(XO_LT, acc = l < y)
  XBIN(XO_GT, acc = l > y)
  XBIN(XO_LE, acc = l <= y)
  XBIN(XO_GE, acc = l >= y)
  XBIN(XO_EQ, acc = l == y)
  XBIN(XO_NE, acc = l != y)
  XBIN(XO_AND, acc = l && y)
  XBIN(XO_OR, acc = l || y)
L_JF:
  if (!acc) p += p->k - 1; else acc = st[--sp];
  XNEXT;
L_JT:
  if (acc) p += p->k - 1; else acc = st[--sp];
  XNEXT;
L_END:
  *out = acc;
  return 0;
#undef XBIN
#undef XPUSH
#undef XTAB2
#undef XTAB
#undef XL
#undef XNEXT
#undef XLOADL
#undef XLOAD
}

/* eval for an expression a statement evaluates: an int literal or a name bound in
 * this frame at once, else the expression's program when it has one, else eval. */
static inline Value eval_top(Ctx *c, Expr *e) {
  if (e->kind == EX_NAME) {
    const Bind *b = &c->binds[e->sym];
    if (b->set && b->frame == c->frame) return b->v;
  } else if (e->kind == EX_INT) {
    return vint(e->u.i);
  } else {
    const XProg *p = e->prog;
    if (!p) p = e->prog = xcompile(c, e);
    int64_t r;
    if (p->t != T_ERR && !xrun(c, p->ins, &r)) {
      Value v;
      v.t = p->t;
      v.u.i = r;
      return v;
    }
  }
  return eval(c, e);
}

/* An int where one is required (counts, indices, bounds). Returns 0 on success.
 * eval_int reads a name bound to an int in this frame itself (most pass arguments);
 * eval_int_any does the rest. */
static int eval_int_any(Ctx *c, Expr *e, int64_t *out) {
  Value v = eval_top(c, e);
  if (v.t == T_ERR) return -1;
  if (v.t != T_INT) {
    EERR(c, e, "expected an int, got %s%s", tname(v.t), v.t == T_REAL ? " (use int(), floor(), ceil() or round())" : "");
    return -1;
  }
  *out = v.u.i;
  return 0;
}

static inline int eval_int(Ctx *c, Expr *e, int64_t *out) {
  if (e->kind == EX_NAME) {
    const Bind *b = &c->binds[e->sym];
    if (b->v.t == T_INT && b->set && b->frame == c->frame) {
      *out = b->v.u.i;
      return 0;
    }
  }
  return eval_int_any(c, e, out);
}

static int eval_num(Ctx *c, Expr *e, double *out) {
  Value v = eval_top(c, e);
  if (v.t == T_ERR) return -1;
  if (v.t == T_BOOL) { EERR(c, e, "expected a number, got bool"); return -1; }
  *out = num(v);
  return 0;
}

static int eval_bool(Ctx *c, Expr *e, int *out) {
  Value v = eval_top(c, e);
  if (v.t == T_ERR) return -1;
  if (v.t != T_BOOL) { EERR(c, e, "expected a bool condition, got %s", tname(v.t)); return -1; }
  *out = (int)v.u.i;
  return 0;
}

/* ---- scopes ---- */

static void bind(Ctx *c, Sym sym, Value v) {
  Saved *sv = VEC_PUSH(c->a, c->saved, c->nsaved, c->capsaved);
  sv->sym = sym;
  sv->old = c->binds[sym];
  c->binds[sym].v = v;
  c->binds[sym].frame = c->frame;
  c->binds[sym].set = 1;
}

static void unbind_to(Ctx *c, int mark) {
  while (c->nsaved > mark) {
    Saved *sv = &c->saved[--c->nsaved];
    c->binds[sv->sym] = sv->old;
  }
}

/* ---- layout: devices, microbatches, stages, placement ---- */

static void set_builtin(Ctx *c, int k, int64_t v) { c->builtin[k] = vint(v); }

/* Computes the stage -> device map for the placement stated (or linear). With st
 * NULL it is a silent trial (comparing a repeated placement): errors only return -1. */
static int place(Ctx *c, int kind, int64_t v, ExprList *list, Stmt *st) {
  int64_t P = c->ndev, S;
  switch (kind) {
  case PL_LINEAR: S = P; break;
  case PL_INTERLEAVED:
    if (v < 1 || v > MAX_STAGES / P) {
      if (st) SERR(c, st, "interleaved(%lld): stages per device must be 1..%lld", (long long)v, (long long)(MAX_STAGES / P));
      return -1;
    }
    S = v * P;
    break;
  case PL_VSHAPE: S = 2 * P; break;
  default: S = list->n; break;
  }
  int32_t *map = arena_alloc(c->a, (size_t)S * sizeof *map);
  for (int64_t s = 0; s < S; s++) {
    switch (kind) {
    case PL_LINEAR: map[s] = (int32_t)s; break;
    case PL_INTERLEAVED: map[s] = (int32_t)(s % P); break;
    case PL_VSHAPE: map[s] = (int32_t)(s < P ? s : 2 * P - 1 - s); break;
    default: {
      int64_t d;
      int mark = c->nsaved;
      if (c->place_var) bind(c, c->place_var, vint(c->place_lo + s));
      int bad = eval_int(c, list->v[s], &d);
      if (c->place_var) unbind_to(c, mark);
      if (bad) return -1;
      if (d < 0 || d >= P) {
        int first = !list->v[s]->errored;
        EERR(c, list->v[s], "device %lld out of range 0..%lld", (long long)d, (long long)P);
        if (first && c->place_var)
          diag_note(c->d, list->v[s]->span, "for stage %lld, with %s = %lld", (long long)s, sname(c, c->place_var),
                    (long long)(c->place_lo + s));
        return -1;
      }
      map[s] = (int32_t)d;
    }
    }
  }
  c->stage_dev = map;
  c->nstage = S;
  c->placement = kind;
  c->dev_nst = arena_alloc(c->a, (size_t)P * sizeof *c->dev_nst);
  c->dev_first = arena_alloc(c->a, (size_t)P * sizeof *c->dev_first);
  for (int64_t d = 0; d < P; d++) c->dev_first[d] = -1;
  for (int64_t s = 0; s < S; s++) {
    if (c->dev_first[map[s]] < 0) c->dev_first[map[s]] = (int32_t)s;
    c->dev_nst[map[s]]++;
  }
  int64_t uni = c->dev_nst[0];
  for (int64_t d = 1; d < P; d++)
    if (c->dev_nst[d] != uni) uni = 0;
  c->pv = uni;
  set_builtin(c, B_S, S);
  set_builtin(c, B_V, uni);
  if (st) c->placespan = st->span;
  return 0;
}

/* Makes sure devices, microbatches and the placement are known before the first op.
 * Returns 0 when the layout is usable. */
static int ensure_layout(Ctx *c, Span at) {
  if (c->layout_done) return 0;
  if (c->layout_failed) return -1;
  if (!c->has_dev || !c->has_mb) {
    err(c, NULL, at, "passes need the '%s' statement first", !c->has_dev ? "devices" : "microbatches");
    c->layout_failed = 1;
    return -1;
  }
  if (c->placement == PL_NONE && place(c, PL_LINEAR, 0, NULL, NULL)) { c->layout_failed = 1; return -1; }
  if (c->has_stages && c->nstage_stated != c->nstage) {
    err(c, NULL, c->stagesspan, "'stages %lld' does not match the placement (%lld stages)",
        (long long)c->nstage_stated, (long long)c->nstage);
  }
  IrSchedule *s = c->s;
  s->ndev = (int32_t)c->ndev;
  s->nmb = (int32_t)c->nmb;
  s->nstage = (int32_t)c->nstage;
  s->devs = arena_alloc(c->a, (size_t)c->ndev * sizeof *s->devs);
  c->layout_done = 1;
  return 0;
}

static int layout_frozen(Ctx *c, Stmt *st) {
  if (c->layout_done) {
    SERR(c, st, "'%s' must come before the first pass",
         st->kind == ST_DEVICES ? "devices" : st->kind == ST_MICROBATCHES ? "microbatches" :
         st->kind == ST_STAGES ? "stages" : "placement");
    return 1;
  }
  return 0;
}

/* ---- passes ---- */

static void pass_text(Stmt *st, const int64_t *a, int n, char *buf, size_t size) {
  const char *k = ir_kind_name(st->op);
  if (st->op == IR_SEND || st->op == IR_RECV) {
    if (n == 1) snprintf(buf, size, "%s %s(%lld)", k, st->xfer == IR_XFER_ACT ? "F" : "B", (long long)a[0]);
    else snprintf(buf, size, "%s %s(%lld,%lld)", k, st->xfer == IR_XFER_ACT ? "F" : "B", (long long)a[0], (long long)a[1]);
  } else if (n == 1) {
    snprintf(buf, size, "%s(%lld)", k, (long long)a[0]);
  } else {
    snprintf(buf, size, "%s(%lld,%lld)", k, (long long)a[0], (long long)a[1]);
  }
}

/* The frame of the loop bindings in force (IrFrame), made for each loop level whose
 * current iteration has none yet: one frame per iteration that writes ops. */
static uint32_t make_frame(Ctx *c) {
  int n = c->nloops < (int)(sizeof c->loops / sizeof *c->loops) ? c->nloops : (int)(sizeof c->loops / sizeof *c->loops);
  uint32_t parent = 0;
  for (int k = 0; k < n; k++) {
    if (c->use_fr && k == c->use_base) parent = c->use_fr;   /* the loops inside a use chain to it */
    if (!c->loops[k].fr) c->loops[k].fr = ir_frame_push(c->a, c->s, (uint32_t)c->loops[k].loop, c->loops[k].v, parent);
    parent = c->loops[k].fr;
  }
  if (c->use_fr && n <= c->use_base) parent = c->use_fr;
  c->fr_top = parent;
  return parent;
}
static inline uint32_t cur_frame(Ctx *c) { return c->fr_top ? c->fr_top : c->nloops || c->use_fr ? make_frame(c) : 0; }

/* The IrLoop of a `use` statement (IrLoop.use). */
static int use_index(Ctx *c, const char *name, Span span) {
  IrSchedule *s = c->s;
  for (int k = s->nloops - 1; k >= 0; k--)
    if (s->loops[k].use == name && s->loops[k].span.file == span.file && s->loops[k].span.line == span.line &&
        s->loops[k].span.col == span.col)
      return k;
  IrLoop *l = VEC_PUSH(c->a, s->loops, s->nloops, s->caploops);
  l->name = name;
  l->use = name;
  l->span = span;
  return s->nloops - 1;
}

/* The IrLoop of a `for` statement (one per statement and variable). */
static int loop_index(Ctx *c, Sym sym, Span span) {
  IrSchedule *s = c->s;
  const char *name = sname(c, sym);
  for (int k = s->nloops - 1; k >= 0; k--)
    if (s->loops[k].name == name && s->loops[k].span.file == span.file && s->loops[k].span.line == span.line &&
        s->loops[k].span.col == span.col)
      return k;
  IrLoop *l = VEC_PUSH(c->a, s->loops, s->nloops, s->caploops);
  l->name = name;
  l->span = span;
  return s->nloops - 1;
}

static int count_op(Ctx *c, Span at) {
  if (c->s->total_ops >= c->in->max_ops) {
    if (!c->ops_reported)
      err(c, NULL, at, "the schedule generates more than %ld ops (limit: --max-ops)", c->in->max_ops);
    c->ops_reported = 1;
    c->stop = 1;
    return -1;
  }
  return 0;
}

static int check_range(Ctx *c, Stmt *st, const char *what, int64_t x, int64_t n) {
  if (x < 0 || x >= n) {
    SERR(c, st, "%s %lld out of range 0..%lld", what, (long long)x, (long long)n);
    return -1;
  }
  return 0;
}

/* A pass inside a building block: kind(stage) at slot. */
static void block_pass(Ctx *c, Stmt *st) {
  BlockState *b = c->blk;
  if (st->op > IR_BW) { SERR(c, st, "a building block holds only F, B, W and BW passes"); return; }
  if (st->list.n != 1) { SERR(c, st, "a pass in a building block takes its stage only: %s(s) at SLOT", ir_kind_name(st->op)); return; }
  if (!st->e3) { SERR(c, st, "a pass in a building block needs 'at SLOT'"); return; }
  int64_t stage, slot;
  if (eval_int(c, st->list.v[0], &stage) || eval_int(c, st->e3, &slot)) return;
  if (check_range(c, st, "stage", stage, c->nstage)) return;
  if (slot < -(INT64_C(1) << 40) || slot > (INT64_C(1) << 40)) { SERR(c, st, "slot %lld out of range", (long long)slot); return; }
  if (!b->seen) b->seen = arena_alloc(c->a, (size_t)(4 * c->nstage) * sizeof *b->seen);
  int32_t *seen = &b->seen[st->op * c->nstage + stage]; /* index + 1 of the entry, 0 = none */
  if (*seen) {
    SERR(c, st, "duplicate %s(%lld) in building block", ir_kind_name(st->op), (long long)stage);
    diag_note(c->d, b->e[*seen - 1].span, "first written here");
    return;
  }
  *seen = b->n + 1;
  BlockEntry *e = VEC_PUSH(c->a, b->e, b->n, b->cap);
  e->kind = st->op;
  e->stage = (int32_t)stage;
  e->slot = slot;
  e->span = st->span;
  e->frame = cur_frame(c);
}

static void dup_mark(Ctx *c, const IrOp *op, int d);
/* The bit of (table kind, stage or device, microbatch) in Ctx.dup_bits: a stage's
 * microbatches side by side (dup_bit checks the ranges first). */
static inline int64_t dup_index(int64_t kind, int64_t third, int64_t mb, int nmb, int64_t per) {
  return kind * per + third * nmb + mb;
}

/* Appends a pass's op to device d (checked) and marks it for check_duplicates. Every
 * field is written, each bit-field word whole, so that no store has to read the
 * fresh op back first. */
static inline void put_op(Ctx *c, const Stmt *st, int d, int kind, int coll, int64_t mb, int64_t stage, int peer) {
  uint32_t fr = cur_frame(c);
  IrOp *op = ir_push(c->a, c->s, d);
  op->kind = (uint8_t)kind;
  op->flags = 0;
  op->xfer = st->xfer;
  op->coll = (uint8_t)coll;
  op->frame_hi = (uint16_t)(fr >> 15 & 0x7ff);
  op->peer = peer;
  op->frame_lo = fr & 0x7fff;
  op->mb = (int32_t)mb;
  op->stage = (int32_t)stage;
  op->span = st->span;
  if (c->dup_bits && kind <= IR_BW) {   /* dup_mark's common case: in range (checked) */
    int64_t k = dup_index(kind, stage, mb, c->s->nmb, c->dup_per);   /* dup_bit's, ranges checked */
    uint64_t *w = &c->dup_bits[k >> 6], bit = 1ull << (k & 63);
    if (!(*w & bit)) {
      *w |= bit;
      c->dup_ops++;
      return;
    }
  }
  dup_mark(c, op, d);
}

static void exec_pass_any(Ctx *c, Stmt *st) {
  if (c->blk) {
    if (ensure_layout(c, st->span)) return;
    block_pass(c, st);
    return;
  }
  if (c->cur_dev < 0) { SERR(c, st, "a pass must be inside a 'device' block"); return; }
  if (st->e3) { SERR(c, st, "'at' is only allowed in a building block"); return; }
  int d = c->cur_dev;
  int kind = st->op;
  int vocab = kind == IR_IF || kind == IR_IB || kind == IR_S || kind == IR_T || kind == IR_COLL;
  int n = st->list.n;
  if (vocab ? n != 1 : (n < 1 || n > 2)) {
    SERR(c, st, "%s takes %s", kind == IR_COLL ? "coll" : ir_kind_name(kind),
         vocab ? "one argument (the microbatch)" : "(microbatch) or (microbatch, stage)");
    return;
  }
  int64_t a[2] = {0, -1};
  for (int k = 0; k < n; k++)
    if (eval_int(c, st->list.v[k], &a[k])) return;
  if (check_range(c, st, "microbatch", a[0], c->nmb)) return;
  int coll = IR_COLL_NONE;
  if (kind == IR_COLL) {
    const char *nm = sname(c, st->sym);
    for (int k = IR_COLL_INPUT_FWD; k <= IR_COLL_INPUT_BWD; k++)
      if (!strcmp(nm, ir_coll_name((IrColl)k))) coll = k;
    if (!coll) {
      err(c, &st->errored, st->span2, "unknown collective '%s' (expected input_fwd, output_fwd, output_bwd or input_bwd)", nm);
      return;
    }
  }
  int64_t stage = -1;
  int peer = -1;
  if (!vocab) {
    if (n == 2) {
      stage = a[1];
      if (check_range(c, st, "stage", stage, c->nstage)) return;
    } else {
      if (c->dev_nst[d] == 0) {
        SERR(c, st, "device %d holds no stage (see the placement)", d);
        return;
      }
      if (c->dev_nst[d] != 1) {
        SERR(c, st, "device %d holds %d stages; write the stage: %s(i, s)", d, c->dev_nst[d],
             kind == IR_SEND || kind == IR_RECV ? (st->xfer == IR_XFER_ACT ? "F" : "B") : ir_kind_name(kind));
        return;
      }
      stage = c->dev_first[d];
      /* recv names the sender's stage: F from the stage before, B from the one after */
      if (kind == IR_RECV) stage += st->xfer == IR_XFER_ACT ? -1 : 1;
      if (stage < 0 || stage >= c->nstage) {
        SERR(c, st, "nothing to receive: device %d holds the %s stage", d, st->xfer == IR_XFER_ACT ? "first" : "last");
        return;
      }
    }
    int holder = c->stage_dev[stage];
    if (kind == IR_SEND || kind == IR_RECV) {
      int64_t to = st->xfer == IR_XFER_ACT ? stage + 1 : stage - 1;
      if (to < 0 || to >= c->nstage) {
        SERR(c, st, "stage %lld has no %s stage to %s", (long long)stage, st->xfer == IR_XFER_ACT ? "next" : "previous",
             kind == IR_SEND ? "send to" : "receive from");
        return;
      }
      int recvr = c->stage_dev[to];
      int me = kind == IR_SEND ? holder : recvr;
      peer = kind == IR_SEND ? recvr : holder;
      if (me != d) {
        char t[96];
        pass_text(st, a, n, t, sizeof t);
        SERR(c, st, "%s belongs on device %d, not device %d", t, me, d);
        return;
      }
      if (peer == d) {
        SERR(c, st, "stages %lld and %lld are both on device %d: nothing to %s", (long long)stage, (long long)to, d,
             kind == IR_SEND ? "send" : "receive");
        return;
      }
    } else if (holder != d) {
      SERR(c, st, "stage %lld is not on device %d (the placement puts it on device %d)", (long long)stage, d, holder);
      return;
    }
  }
  if (count_op(c, st->span)) return;
  put_op(c, st, d, kind, coll, a[0], stage, peer);
}

/* The common pass first: F, B, W or BW in a device block, its arguments ints (a
 * name, a literal or a program that runs through), in range, on the device that
 * holds its stage, within --max-ops. Returns 0 when the pass needs exec_pass_any,
 * which evaluates the arguments again (they have no side effects) and reports. */
static inline int arg_fast(Ctx *c, Expr *e, int64_t *out) {
  if (e->kind == EX_NAME) {
    const Bind *b = &c->binds[e->sym];
    if (b->v.t != T_INT || !b->set || b->frame != c->frame) return 1;
    *out = b->v.u.i;
    return 0;
  }
  if (e->kind == EX_INT) { *out = e->u.i; return 0; }
  const XProg *p = e->prog;
  if (!p) p = e->prog = xcompile(c, e);
  return p->t != T_INT || xrun(c, p->ins, out);
}

static int pass_fast(Ctx *c, Stmt *st) {
  int d = c->cur_dev, n = st->list.n;
  int64_t mb, stage;
  if (st->op > IR_BW || d < 0 || c->blk || st->e3 || n < 1 || n > 2 || arg_fast(c, st->list.v[0], &mb)) return 0;
  if (n == 2) {
    if (arg_fast(c, st->list.v[1], &stage)) return 0;
  } else {
    if (c->dev_nst[d] != 1) return 0;
    stage = c->dev_first[d];
  }
  if ((uint64_t)mb >= (uint64_t)c->nmb || (uint64_t)stage >= (uint64_t)c->nstage || c->stage_dev[stage] != d ||
      c->s->total_ops >= c->in->max_ops)
    return 0;
  put_op(c, st, d, st->op, IR_COLL_NONE, mb, stage, -1);
  return 1;
}

static void exec_pass(Ctx *c, Stmt *st) {
  if (!pass_fast(c, st)) exec_pass_any(c, st);
}

/* overlap { P1 P2 }: an F and a backward pass run at the same time (overlap.c); the
 * first op of the pair is flagged. */
static void exec_overlap(Ctx *c, Stmt *st) {
  if (c->blk) { SERR(c, st, "'overlap' is not allowed in a building block"); return; }
  Stmt *x = st->body, *y = x ? x->next : NULL;
  if (!x || !y) return;
  for (Stmt *p = x; p; p = p == x ? y : NULL)
    if (p->op > IR_BW) { SERR(c, p, "overlap pairs compute passes: one F with one B, W or BW"); return; }
  if ((x->op == IR_F) == (y->op == IR_F)) {
    SERR(c, st, "overlap pairs one forward pass (F) with one backward pass (B, W or BW)");
    return;
  }
  int d = c->cur_dev;
  int64_t before = d >= 0 && d < c->s->ndev ? c->s->devs[d].nops : -1;
  exec_pass(c, x);
  exec_pass(c, y);
  if (before >= 0 && c->s->devs[d].nops == before + 2) {
    c->s->devs[d].ops[before].flags |= IR_FLAG_OVERLAP;
    c->s->noverlap++;
  }
}

/* ---- statements ---- */

static void exec_list(Ctx *c, Stmt *st);
static void exec_use(Ctx *c, Stmt *st);
static void exec_synth(Ctx *c, Stmt *st);

static int find_key(Sym k, Ctx *c, int lo, int hi) {
  const char *nm = sname(c, k);
  for (int i = lo; i < hi; i++)
    if (!strcmp(nm, key_names[i])) return i;
  return -1;
}

/* The clauses offload and recompute share: 'ratio R' (R in (0, 1]; *out is set only
 * when it is) and 'stages/microbatches LO..HI' (0 <= LO < HI <= INT32_MAX); 1 on an
 * error, reported at the clause. */
static int clause_ratio(Ctx *c, OffloadClause *cl, const char *what, double *out) {
  double x;
  if (eval_num(c, cl->lo, &x)) return 1;
  if (!(x > 0 && x <= 1)) { EERR(c, cl->lo, "%s ratio must be in (0, 1], got %g", what, x); return 1; }
  *out = x;
  return 0;
}

static int clause_range(Ctx *c, OffloadClause *cl, int64_t *lo, int64_t *hi) {
  if (eval_int(c, cl->lo, lo) || eval_int(c, cl->hi, hi)) return 1;
  if (*lo < 0 || *hi <= *lo || *hi > INT32_MAX) {
    err(c, NULL, cl->span, "empty or negative range %lld..%lld", (long long)*lo, (long long)*hi);
    return 1;
  }
  return 0;
}

/* cost ...; memory ...; with `stage E:` overrides. */
static void exec_costmem(Ctx *c, Stmt *st) {
  int cost = st->kind == ST_COST;
  int lo = cost ? K_TF : K_ACT, hi = cost ? K_TRELOAD + 1 : K_N;
  int64_t stage = -1;
  if (st->e1) {
    if (st->sym != c->w_stage) {
      err(c, &st->errored, st->span2, "expected 'stage' or a key = value list after '%s'", cost ? "cost" : "memory");
      return;
    }
    if (eval_int(c, st->e1, &stage)) return;
    if (stage < 0) { EERR(c, st->e1, "stage %lld out of range: stages are numbered from 0", (long long)stage); return; }
  }
  for (KeyVal *kv = st->kv; kv; kv = kv->next) {
    int k = find_key(kv->key, c, lo, hi);
    int ok_stage = k == K_TF || k == K_TB || k == K_TW || k == K_TBW || k == K_TOFF || k == K_TRELOAD || k == K_ACT || k == K_BFREE || k == K_INPUT || k == K_LAYER;
    if (k < 0 || (stage >= 0 && !ok_stage)) {
      err(c, NULL, kv->span, "unknown %s%s key '%s' (expected %s)", stage >= 0 ? "per-stage " : "",
          cost ? "cost" : "memory", sname(c, kv->key),
          stage >= 0 ? (cost ? "TF, TB, TW, TBW, TOFF or TRELOAD" : "act, b_free, input or layer")
                     : (cost ? "TF, TB, TW, TC, TBW, TIF, TIB, TS, TT, TCOLL, TOFF, TFB or TRELOAD" : "act, b_free, limit, host_limit, act_s, input or layer"));
      continue;
    }
    double v;
    if (eval_num(c, kv->value, &v)) continue;
    if (v < 0 && k != K_LIMIT && k != K_HOSTLIMIT) {
      EERR(c, kv->value, "'%s' must not be negative", key_names[k]);
      continue;
    }
    if (v < 0) { EERR(c, kv->value, "'%s' must not be negative (leave it out for no bound)", key_names[k]); continue; }
    if (k == K_BFREE && v > 1) { EERR(c, kv->value, "'b_free' is a fraction of the activation: 0..1"); continue; }
    if ((k == K_INPUT || k == K_LAYER) && v > 1) { EERR(c, kv->value, "'%s' is a fraction of the activation: 0..1", key_names[k]); continue; }
    if (k == K_TRELOAD && !(v > 0)) { EERR(c, kv->value, "'TRELOAD' must be positive (leave it out to reload at TOFF)"); continue; }
    if (stage >= 0) {
      Override *o = VEC_PUSH(c->a, c->ovr, c->novr, c->capovr);
      o->stage = stage;
      o->span = st->span;
      o->key = (Sym)k;
      o->value = v;
    } else {
      c->cost[k] = v;
      c->cost_set[k] = 1;
      c->cost_span[k] = kv->span;
      if (k == K_TFB) c->tfb_span = kv->span;
    }
  }
}

static void exec_keyvals(Ctx *c, Stmt *st, const char *const *keys, IrKeyVal **out, int *nout, const char *what) {
  int cap = 0;
  for (KeyVal *kv = st->kv; kv; kv = kv->next) cap++;
  IrKeyVal *arr = arena_alloc(c->a, (size_t)(cap + *nout + 1) * sizeof *arr);
  if (*nout) memcpy(arr, *out, (size_t)*nout * sizeof *arr);
  int n = *nout;
  for (KeyVal *kv = st->kv; kv; kv = kv->next) {
    const char *nm = sname(c, kv->key);
    int known = 0;
    for (int i = 0; keys[i]; i++)
      if (!strcmp(nm, keys[i])) known = 1;
    if (!known) {
      char list[400] = "";   /* the hardware keys: 300 characters */
      size_t len = 0;
      for (int i = 0; keys[i] && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", keys[i]);
      err(c, NULL, kv->span, "unknown %s key '%s' (expected %s)", what, nm, list);
      continue;
    }
    int dup = -1;
    for (int i = 0; i < n; i++)
      if (!strcmp(arr[i].key, nm)) dup = i;
    if (dup >= 0) {
      err(c, NULL, kv->span, "%s key '%s' given twice", what, nm);
      diag_note(c->d, arr[dup].span, "first given here");
      continue;
    }
    double v;
    if (eval_num(c, kv->value, &v)) continue;
    if (keys == model_keys && strcmp(nm, "moe_capacity_factor") && strcmp(nm, "norm_epsilon") &&
        !(v >= 0 && v <= INT32_MAX && v == floor(v))) {
      /* the runtime reads these as C ints: 1e10 would wrap, 2.5 would be cut (moe_capacity_factor
         and norm_epsilon numbers: costmodel.c checks them) */
      EERR(c, kv->value, "model key '%s' must be a whole number in 0..%d, got %.17g", nm, INT32_MAX, v);
      continue;
    }
    arr[n].key = nm;
    arr[n].value = v;
    arr[n].span = kv->span;
    n++;
  }
  *out = arr;
  *nout = n;
}

static void exec_offload(Ctx *c, Stmt *st) {
  IrOffload *o = &c->off;
  if (st->sym) {   /* offload auto; (synthesize chooses) */
    if (strcmp(sname(c, st->sym), "auto")) {
      err(c, &st->errored, st->span2, "unknown offload clause '%s' (expected auto, all, ratio, stages or microbatches)", sname(c, st->sym));
      return;
    }
    c->sopt.offload_auto = 1;
    c->off_auto = st;
    return;
  }
  o->enabled = 1;
  o->span = st->span;
  if (o->ratio <= 0) o->ratio = 1;
  for (OffloadClause *cl = st->clauses; cl; cl = cl->next) {
    if (cl->word == c->o_all) continue;
    if (cl->word == c->o_ratio) {
      clause_ratio(c, cl, "offload", &o->ratio);
      continue;
    }
    if (cl->word != c->o_stages && cl->word != c->o_mbs) {
      err(c, NULL, cl->span, "unknown offload clause '%s' (expected all, ratio, stages or microbatches)", sname(c, cl->word));
      continue;
    }
    int64_t lo, hi;
    if (clause_range(c, cl, &lo, &hi)) continue;
    if (cl->word == c->o_stages) { o->stage_lo = (int32_t)lo; o->stage_hi = (int32_t)hi; c->off_stages_set = 1; }
    else { o->mb_lo = (int32_t)lo; o->mb_hi = (int32_t)hi; c->off_mbs_set = 1; }
  }
}

/* recompute all | ratio R | stages LO..HI (clauses combine, as offload's do). */
static void exec_recompute(Ctx *c, Stmt *st) {
  IrRecompute *r = &c->rc;
  r->enabled = 1;
  r->span = st->span;
  if (r->ratio <= 0) r->ratio = 1;
  for (OffloadClause *cl = st->clauses; cl; cl = cl->next) {
    if (cl->word == c->o_all) continue;
    if (cl->word == c->o_ratio) {
      clause_ratio(c, cl, "recompute", &r->ratio);
      continue;
    }
    if (cl->word != c->o_stages) {
      err(c, NULL, cl->span, "unknown recompute clause '%s' (expected all, ratio or stages)", sname(c, cl->word));
      continue;
    }
    int64_t lo, hi;
    if (clause_range(c, cl, &lo, &hi)) continue;
    r->stage_lo = (int32_t)lo; r->stage_hi = (int32_t)hi; c->rc_stages_set = 1; c->rc_stages_span = cl->span;
  }
}

static void exec_expect(Ctx *c, Stmt *st) {
  const char *nm = sname(c, st->sym);
  int metric = -1;
  for (int k = 0; k < IR_NMETRICS; k++)
    if (!strcmp(nm, ir_metric_name((IrMetric)k))) metric = k;
  if (metric < 0) {
    err(c, &st->errored, st->span2,
        "unknown metric '%s' (expected makespan, bubble_rate, bubble_rate_span, peak_memory, host_memory, ops or idle)", nm);
    return;
  }
  int64_t dev = -1;
  if (st->e1) {
    if (metric != IR_METRIC_PEAK_MEMORY && metric != IR_METRIC_HOST_MEMORY && metric != IR_METRIC_IDLE) {
      EERR(c, st->e1, "only peak_memory, host_memory and idle take a device index");
      return;
    }
    if (eval_int(c, st->e1, &dev)) return;
    if (!c->has_dev) { EERR(c, st->e1, "a device index needs the 'devices' statement first"); return; }
    if (dev < 0 || dev >= c->ndev) {
      EERR(c, st->e1, "device %lld out of range 0..%lld", (long long)dev, (long long)c->ndev);
      return;
    }
  }
  double v;
  if (eval_num(c, st->e2, &v)) return;
  IrExpect *x = VEC_PUSH(c->a, c->s->expects, c->s->nexpects, c->s->capexpects);
  x->metric = (uint8_t)metric;
  x->cmp = st->op;
  x->device = (int32_t)dev;
  x->value = v;
  x->span = st->span;
}

static void exec_block(Ctx *c, Stmt *st) {
  if (c->blk || c->cur_dev >= 0) { SERR(c, st, "a building block must be at schedule level"); return; }
  if (ensure_layout(c, st->span)) return;
  BlockState b = {0};
  b.span = st->span;
  b.w_rule = BLOCK_W_SLOT;
  c->blk = &b;
  int mark = c->nsaved;
  exec_list(c, st->body);
  unbind_to(c, mark);
  c->blk = NULL;
  if (c->stop) return;
  if (!b.has_interval) { SERR(c, st, "building block needs 'interval N;'"); return; }
  if (b.n == 0) { SERR(c, st, "building block has no passes"); return; }
  if (b.w_rule != BLOCK_W_SLOT)
    for (int k = 0; k < b.n; k++)
      if (b.e[k].kind == IR_W) {
        err(c, NULL, b.e[k].span, "w_rule %s places W itself; remove this W", b.w_rule == BLOCK_W_EAGER ? "eager" : "fill");
        return;
      }
  int64_t total = 0;
  for (int k = 0; k < b.n; k++) total += (b.w_rule != BLOCK_W_SLOT && b.e[k].kind == IR_B ? 2 : 1);
  if (total * c->nmb > c->in->max_ops - c->s->total_ops) {
    if (!c->ops_reported)
      SERR(c, st, "the schedule generates more than %ld ops (limit: --max-ops)", c->in->max_ops);
    c->ops_reported = 1;
    c->stop = 1;
    return;
  }
  BlockSqueeze *sq = NULL;
  if (b.squeeze) {
    if (c->sq) { SERR(c, st, "only one building block of a schedule may squeeze"); return; }
    /* squeezing schedules every pass of every microbatch: F and B (or BW) of each stage */
    for (int64_t g = 0; g < c->nstage; g++)
      if (!b.seen[IR_F * c->nstage + g] || (!b.seen[IR_B * c->nstage + g] && !b.seen[IR_BW * c->nstage + g])) {
        err(c, NULL, b.sqspan, "a building block that squeezes needs F and B (or BW) of every stage; stage %lld has %s",
             (long long)g, b.seen[IR_F * c->nstage + g] ? "no B or BW" : "no F");
        return;
      }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int k = 0; k < b.n; k++) {
      if (b.e[k].slot < lo) lo = b.e[k].slot;
      if (b.e[k].slot > hi) hi = b.e[k].slot;
    }
    sq = arena_alloc(c->a, sizeof *sq);
    sq->start = arena_alloc(c->a, (size_t)(c->s->ndev + 1) * sizeof *sq->start);
    sq->count = arena_alloc(c->a, (size_t)(c->s->ndev + 1) * sizeof *sq->count);
    sq->slot = arena_alloc(c->a, (size_t)(c->s->ndev + 1) * sizeof *sq->slot);
    sq->cut1 = hi;                              /* microbatch 0's last pass */
    sq->cut2 = lo + (c->nmb - 1) * b.interval;  /* the last microbatch's first pass */
    sq->span = b.sqspan;
  }
  for (int d = 0; d < c->s->ndev; d++)
    if (!c->s->devs[d].span.file) c->s->devs[d].span = st->span;
  if (block_expand(c->a, c->d, c->s, c->stage_dev, b.e, b.n, b.interval, b.w_rule, st->span, c->in->max_ops, sq)) {
    c->stop = 1;
    return;
  }
  c->sq = sq;
}

/* Binds the parameters of `def` in the current frame: given[k] when has[k], else
 * the default (evaluated after the earlier parameters are bound). */
static void bind_params(Ctx *c, ScheduleDef *def, Value *given, const uint8_t *has, Span at, int is_main) {
  int k = 0;
  for (Param *p = def->params; p; p = p->next) {
    if (c->pidx[p->name]) err(c, NULL, p->span, "parameter '%s' declared twice", sname(c, p->name));
    c->pidx[p->name] = 1;
  }
  for (Param *p = def->params; p; p = p->next) c->pidx[p->name] = 0;
  for (Param *p = def->params; p; p = p->next, k++) {
    int want = p->type == c->t_int ? T_INT : p->type == c->t_real ? T_REAL : p->type == c->t_bool ? T_BOOL : 0;
    if (p->type && !want) {
      err(c, NULL, p->span, "unknown type '%s' for parameter '%s' (expected int, real or bool)", sname(c, p->type), sname(c, p->name));
    }
    Value v = verr;
    if (has[k] && is_main && !want && p->def) {
      /* -D against an untyped parameter: the default's type decides */
      Value dv = eval(c, p->def);
      want = dv.t;
      if (want == T_REAL && given[k].t == T_INT) given[k] = vreal((double)given[k].u.i);
      if (want != T_ERR && given[k].t != want) {
        diag_error(c->d, (Span){0}, "-D %s: parameter '%s' is %s (from its default), got %s", sname(c, p->name),
                   sname(c, p->name), tname(want), tname(given[k].t));
        *c->usage = 1;
        given[k] = verr;
      }
    }
    if (has[k]) {
      v = given[k];
    } else if (p->def) {
      v = eval(c, p->def);
    } else {
      if (is_main) err(c, NULL, p->span, "parameter '%s' has no default; give it with -D %s=VALUE", sname(c, p->name), sname(c, p->name));
      else err(c, NULL, at, "missing argument for parameter '%s' of '%s'", sname(c, p->name), sname(c, def->name));
    }
    if (v.t != T_ERR && want && v.t != want) {
      if (want == T_REAL && v.t == T_INT) {
        v = vreal((double)v.u.i);
      } else {
        err(c, NULL, has[k] ? at : p->def ? p->def->span : p->span, "parameter '%s' is %s, got %s", sname(c, p->name),
            tname(want), tname(v.t));
        v = verr;
      }
    }
    bind(c, p->name, v);
  }
}

/* A device block's ops usually number what the previous device block wrote (a loop
 * over the devices): a device with none yet gets that many and an eighth more at
 * once, instead of doubling from 16 (which allocates, zeroes and copies about three
 * times the final array). A guess that proves bad (under half used) ends the
 * guessing, so at most one device's worth is ever allocated and not used. Returns
 * the capacity given, or 0. */
static int reserve_ops(Ctx *c, IrDevice *dv) {
  long n = c->dev_ops + c->dev_ops / 8, left = c->in->max_ops - c->s->total_ops;
  if (dv->capops || c->dev_ops < 64) return 0;
  if (n > left) n = left;
  if (n < 64 || n > INT_MAX / 2) return 0;
  dv->ops = arena_alloc(c->a, (size_t)n * sizeof *dv->ops);
  dv->capops = (int)n;
  return (int)n;
}

static void exec(Ctx *c, Stmt *st) {
  if (++c->steps > c->step_limit) {
    SERR(c, st, "elaboration takes more than %ld steps (limit from --max-ops)", c->step_limit);
    c->stop = 1;
    return;
  }
  if (st->kind == ST_PASS) {   /* the statements of loop bodies first, without the switch */
    exec_pass(c, st);
    return;
  }
  if (st->kind == ST_IF) {
    int ok;
    if (eval_bool(c, st->e1, &ok)) return;
    Stmt *body = ok ? st->body : st->els;
    if (!body) return;
    int mark = c->nsaved;
    exec_list(c, body);
    unbind_to(c, mark);
    return;
  }
  switch ((StmtKind)st->kind) {
  case ST_DEVICES:
  case ST_MICROBATCHES:
  case ST_STAGES: {
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "this statement must be at schedule level"); return; }
    int64_t v;
    if (eval_int(c, st->e1, &v)) return;
    int64_t max = st->kind == ST_DEVICES ? MAX_DEVICES : st->kind == ST_STAGES ? MAX_STAGES : MAX_MBS;
    const char *what = st->kind == ST_DEVICES ? "devices" : st->kind == ST_STAGES ? "stages" : "microbatches";
    if (v < 1 || v > max) { EERR(c, st->e1, "%s must be 1..%lld, got %lld", what, (long long)max, (long long)v); return; }
    int64_t *slot = st->kind == ST_DEVICES ? &c->ndev : st->kind == ST_STAGES ? &c->nstage_stated : &c->nmb;
    int *has = st->kind == ST_DEVICES ? &c->has_dev : st->kind == ST_STAGES ? &c->has_stages : &c->has_mb;
    if (*has && *slot == v) return; /* the same again (composition): fine */
    if (*has) { SERR(c, st, "%s already stated as %lld", what, (long long)*slot); return; }
    if (layout_frozen(c, st)) return;
    if (st->kind == ST_DEVICES && c->placement != PL_NONE) { SERR(c, st, "'devices' must come before 'placement'"); return; }
    *slot = v;
    *has = 1;
    if (st->kind == ST_DEVICES) set_builtin(c, B_P, v);
    if (st->kind == ST_MICROBATCHES) set_builtin(c, B_M, v);
    if (st->kind == ST_STAGES) c->stagesspan = st->span;
    return;
  }
  case ST_PLACEMENT: {
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'placement' must be at schedule level"); return; }
    if (!c->has_dev) { SERR(c, st, "'placement' needs the 'devices' statement first"); return; }
    int had = c->placement != PL_NONE;
    int kind = PL_EXPLICIT;
    int64_t v = 0;
    if (st->sym) {
      kind = st->sym == c->p_linear ? PL_LINEAR : st->sym == c->p_interleaved ? PL_INTERLEAVED
           : st->sym == c->p_vshape ? PL_VSHAPE : PL_NONE;
      if (kind == PL_NONE) {
        err(c, &st->errored, st->span2, "unknown placement '%s' (expected linear, interleaved(v), vshape or [d, ...])", sname(c, st->sym));
        return;
      }
      if ((kind == PL_INTERLEAVED) != (st->e1 != NULL)) {
        err(c, &st->errored, st->span2, kind == PL_INTERLEAVED ? "interleaved needs the stages per device: interleaved(v)"
                                                                : "'%s' takes no argument", sname(c, st->sym));
        return;
      }
      if (st->e1 && eval_int(c, st->e1, &v)) return;
    } else if (st->list.n > MAX_STAGES) {
      SERR(c, st, "too many stages");
      return;
    }
    ExprList list = st->list;
    if (st->sym2) { /* [E for NAME in A..B]: B - A entries, each E */
      int64_t lo, hi;
      if (eval_int(c, st->e2, &lo) || eval_int(c, st->e3, &hi)) return;
      if (hi - lo < 1 || hi - lo > MAX_STAGES) {
        err(c, &st->errored, st->span2, "a placement of %lld stages (%lld..%lld): expected 1..%d", (long long)(hi - lo),
            (long long)lo, (long long)hi, MAX_STAGES);
        return;
      }
      list.n = list.cap = (int)(hi - lo);
      list.v = arena_alloc(c->a, sizeof *list.v * (size_t)list.n);
      for (int k = 0; k < list.n; k++) list.v[k] = st->e1;
      c->place_var = st->sym2;
      c->place_lo = lo;
    }
    if (had) { /* the same placement again is fine (composition); another is not */
      int32_t *map = c->stage_dev, *nst = c->dev_nst, *first = c->dev_first;
      int64_t S = c->nstage, pv = c->pv;
      int pk = c->placement;
      Value bs = c->builtin[B_S], bv = c->builtin[B_V];
      Span sp = c->placespan;
      int same = place(c, kind, v, &list, NULL) == 0 && c->nstage == S &&
                 !memcmp(c->stage_dev, map, (size_t)S * sizeof *map);
      c->stage_dev = map; c->dev_nst = nst; c->dev_first = first;
      c->nstage = S; c->pv = pv; c->placement = pk;
      c->builtin[B_S] = bs; c->builtin[B_V] = bv; c->placespan = sp;
      c->place_var = 0;
      if (!same) SERR(c, st, "a different placement is already in effect");
      return;
    }
    place(c, kind, v, &list, st);
    c->place_var = 0;
    return;
  }
  case ST_COST:
  case ST_MEMORY:
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'%s' must be at schedule level", st->kind == ST_COST ? "cost" : "memory"); return; }
    exec_costmem(c, st);
    return;
  case ST_MODEL:
    exec_keyvals(c, st, model_keys, &c->s->model, &c->s->nmodel, "model");
    return;
  case ST_HARDWARE:
    exec_keyvals(c, st, hardware_keys, &c->s->hardware, &c->s->nhardware, "hardware");
    return;
  case ST_OFFLOAD:
    exec_offload(c, st);
    return;
  case ST_RECOMPUTE:
    exec_recompute(c, st);
    return;
  case ST_VOCAB: {
    if (st->sym != c->w_parallel && !strcmp(sname(c, st->sym), "async")) {
      /* vocab async BOOL: collectives on their own lane (sim.c, lower.c) */
      int on;
      if (eval_bool(c, st->e1, &on)) return;
      c->s->vocab.async = on;
      return;
    }
    if (st->sym != c->w_parallel) { err(c, &st->errored, st->span2, "expected 'parallel' or 'async' after 'vocab'"); return; }
    int64_t m;
    if (eval_int(c, st->e1, &m)) return;
    if (m != 1 && m != 2) { EERR(c, st->e1, "vocab parallel must be 1 or 2, got %lld", (long long)m); return; }
    c->s->vocab.mode = (int)m;
    c->s->vocab.span = st->span;
    return;
  }
  case ST_LET: {
    Value v = eval_top(c, st->e1);
    bind(c, st->sym, v);
    return;
  }
  case ST_REQUIRE: {
    int ok;
    if (eval_bool(c, st->e1, &ok)) return;
    if (!ok) {
      SERR(c, st, "%s", st->str);
      c->stop = 1;  /* what follows assumes the requirement: its errors would be noise */
    }
    return;
  }
  case ST_EXPECT:
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'expect' must be at schedule level"); return; }
    exec_expect(c, st);
    return;
  case ST_USE:
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'use' must be at schedule level"); return; }
    exec_use(c, st);
    return;
  case ST_FOR: {
    int64_t lo, hi, step = 1;
    if (eval_int(c, st->e1, &lo) || eval_int(c, st->e2, &hi)) return;
    if (st->e3) {
      if (eval_int(c, st->e3, &step)) return;
      if (step <= 0) { EERR(c, st->e3, "step must be positive, got %lld", (long long)step); return; }
    }
    uint64_t trip = hi > lo ? (uint64_t)(((__int128)hi - lo + step - 1) / step) : 0;
    if (trip > (uint64_t)(c->step_limit - c->steps)) {
      SERR(c, st, "loop of %llu iterations exceeds the elaboration limit (%ld steps, from --max-ops)",
           (unsigned long long)trip, c->step_limit);
      c->stop = 1;
      return;
    }
    c->steps += (long)trip;
    int mark = c->nsaved;
    bind(c, st->sym, vint(lo));
    Bind *b = &c->binds[st->sym];
    int li = c->nloops++;
    if (li < (int)(sizeof c->loops / sizeof *c->loops)) {
      c->loops[li].sym = st->sym;
      c->loops[li].span = st->span;
      if (trip) c->loops[li].loop = loop_index(c, st->sym, st->span);
    }
    for (uint64_t k = 0; k < trip && !c->stop; k++) {
      b->v.u.i = (int64_t)((uint64_t)lo + k * (uint64_t)step); /* in [lo, hi): no overflow */
      if (li < (int)(sizeof c->loops / sizeof *c->loops)) { c->loops[li].v = b->v.u.i; c->loops[li].fr = 0; c->fr_top = 0; }
      exec_list(c, st->body);
      unbind_to(c, mark + 1);
    }
    c->nloops--;
    c->fr_top = 0;
    unbind_to(c, mark);
    return;
  }
  case ST_DEVICE: {
    if (c->cur_dev >= 0) { SERR(c, st, "device blocks do not nest"); return; }
    if (c->blk) { SERR(c, st, "a device block is not allowed in a building block"); return; }
    int64_t d;
    if (eval_int(c, st->e1, &d)) return;
    if (ensure_layout(c, st->span)) return;
    if (d < 0 || d >= c->ndev) { EERR(c, st->e1, "device %lld out of range 0..%lld", (long long)d, (long long)c->ndev); return; }
    int mark = c->nsaved;
    IrDevice *dv = &c->s->devs[d];
    if (!dv->span.file) dv->span = st->span;
    int reserved = reserve_ops(c, dv);
    c->cur_dev = (int)d;
    exec_list(c, st->body);
    c->cur_dev = -1;
    unbind_to(c, mark);
    if (reserved && dv->nops < reserved / 2) c->dev_ops = -1;   /* a bad guess: no more */
    else if (c->dev_ops >= 0) c->dev_ops = dv->nops;
    return;
  }
  case ST_BLOCK:
    exec_block(c, st);
    return;
  case ST_INTERVAL: {
    if (!c->blk) { SERR(c, st, "'interval' is only allowed in a building block"); return; }
    int64_t v;
    if (eval_int(c, st->e1, &v)) return;
    if (v < 0 || v > (INT64_C(1) << 30)) { EERR(c, st->e1, "interval must be 0..%lld, got %lld", (long long)(INT64_C(1) << 30), (long long)v); return; }
    c->blk->interval = v;
    c->blk->has_interval = 1;
    return;
  }
  case ST_WRULE: {
    if (!c->blk) { SERR(c, st, "'w_rule' is only allowed in a building block"); return; }
    Sym r = st->sym;
    if (r == c->w_slot) c->blk->w_rule = BLOCK_W_SLOT;
    else if (r == c->w_eager) c->blk->w_rule = BLOCK_W_EAGER;
    else if (r == c->w_fill) c->blk->w_rule = BLOCK_W_FILL;
    else err(c, &st->errored, st->span2, "unknown w_rule '%s' (expected slot, eager or fill)", sname(c, r));
    c->blk->wspan = st->span;
    return;
  }
  case ST_SQUEEZE:
    if (!c->blk) { SERR(c, st, "'squeeze' is only allowed in a building block"); return; }
    c->blk->squeeze = 1;
    c->blk->sqspan = st->span;
    return;
  case ST_SYNTH:
    exec_synth(c, st);
    return;
  case ST_P2P: {
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'p2p' must be at schedule level"); return; }
    if (c->p2p) { SERR(c, st, "'p2p' already stated"); return; }
    const char *w = sname(c, st->sym);
    if (strcmp(w, "buffered") && strcmp(w, "both")) {
      err(c, &st->errored, st->span2, "unknown point-to-point model '%s' (expected 'buffered' or 'both')", w);
      return;
    }
    c->p2p = st;
    return;
  }
  case ST_PROFILE:
    if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'cost profile' must be at schedule level"); return; }
    if (st->sym != c->w_profile) { err(c, &st->errored, st->span, "expected 'cost profile \"FILE\"'"); return; }
    c->profile = st;
    return;
  case ST_OVERLAP:
    exec_overlap(c, st);
    return;
  case ST_PASS:   /* done above */
  case ST_IF:
  case ST_EMPTY:
    return;
  }
}

/* synthesize [time_limit = SECONDS, effort = 0..4, fused = BOOL]; */
static void exec_synth(Ctx *c, Stmt *st) {
  if (c->cur_dev >= 0 || c->blk) { SERR(c, st, "'synthesize' must be at schedule level"); return; }
  if (c->synth) { SERR(c, st, "'synthesize' already stated"); return; }
  c->synth = st;
  c->sopt.span = st->span;
  c->sopt.effort = 2;
  c->sopt.stdlib_dir = c->in->stdlib_dir;
  c->sopt.seed = c->in->seed;
  for (KeyVal *kv = st->kv; kv; kv = kv->next) {
    const char *k = sname(c, kv->key);
    KeyVal *first = NULL;   /* an option given twice is an error at the second */
    for (KeyVal *q = st->kv; q != kv && !first; q = q->next)
      if (q->key == kv->key) first = q;
    if (first) {
      err(c, NULL, kv->span, "synthesize option '%s' given twice", k);
      diag_note(c->d, first->span, "first given here");
      continue;
    }
    if (!strcmp(k, "time_limit")) {
      double v;
      if (eval_num(c, kv->value, &v)) continue;
      if (!(v > 0)) { EERR(c, kv->value, "'time_limit' is in seconds and must be positive"); continue; }
      c->sopt.time_limit = v;
    } else if (!strcmp(k, "effort")) {
      int64_t v;
      if (eval_int(c, kv->value, &v)) continue;
      if (v < 0 || v > 4) { EERR(c, kv->value, "'effort' must be 0..4, got %lld", (long long)v); continue; }
      c->sopt.effort = (int)v;
    } else if (!strcmp(k, "fused")) {
      int v;
      if (eval_bool(c, kv->value, &v)) continue;
      c->sopt.fused = v;
    } else {
      err(c, NULL, kv->span, "unknown synthesize option '%s' (expected time_limit, effort or fused)", k);
    }
  }
}

static void exec_list(Ctx *c, Stmt *st) {
  for (; st && !c->stop; st = st->next) {
    if ((st->kind == ST_PASS || st->kind == ST_OVERLAP) && c->steps < c->step_limit) {
      c->steps++;   /* exec's own cases, without its frame */
      if (st->kind == ST_PASS) exec_pass(c, st);
      else exec_overlap(c, st);
    } else {
      exec(c, st);
    }
  }
}

/* use NAME(args): the named schedule's body, elaborated here with its own parameters. */
static void exec_use(Ctx *c, Stmt *st) {
  ScheduleDef *def = st->sym < c->syms->n ? c->in->by_sym[st->sym] : NULL;
  if (!def) { SERR(c, st, "unknown schedule '%s'", sname(c, st->sym)); return; }
  if (def->using) { SERR(c, st, "recursive use of schedule '%s'", sname(c, st->sym)); return; }
  if (c->use_depth >= USE_MAX_DEPTH) { SERR(c, st, "'use' nested more than %d deep", USE_MAX_DEPTH); return; }
  int np = def->nparams;
  Value *given = arena_alloc(c->a, (size_t)(np + 1) * sizeof *given);
  uint8_t *has = arena_alloc(c->a, (size_t)np + 1);
  int pos = 0, bad = 0, i = 0;
  for (Param *p = def->params; p; p = p->next, i++) c->pidx[p->name] = i + 1;
  for (KeyVal *kv = st->kv; kv; kv = kv->next) {
    int k = -1;
    if (kv->key) {
      k = c->pidx[kv->key] - 1;
      if (k < 0) { err(c, NULL, kv->span, "schedule '%s' has no parameter '%s'", sname(c, def->name), sname(c, kv->key)); bad = 1; continue; }
    } else {
      k = pos++;
      if (k >= np) { err(c, NULL, kv->span, "too many arguments for '%s' (it takes %d)", sname(c, def->name), np); bad = 1; continue; }
    }
    if (has[k]) { err(c, NULL, kv->span, "parameter given twice"); bad = 1; continue; }
    given[k] = eval(c, kv->value);
    if (given[k].t == T_ERR) bad = 1;
    has[k] = 1;
  }
  for (Param *p = def->params; p; p = p->next) c->pidx[p->name] = 0;
  if (bad) return;
  int32_t saved_frame = c->frame;
  int mark = c->nsaved;
  /* the ops the used schedule writes chain to a frame of this statement (IrLoop.use) */
  uint32_t saved_use_fr = c->use_fr;
  int saved_use_base = c->use_base;
  {
    uint32_t parent = cur_frame(c);
    c->use_fr = ir_frame_push(c->a, c->s, (uint32_t)use_index(c, sname(c, def->name), st->span), 0, parent);
    c->use_base = c->nloops;
    c->fr_top = 0;
  }
  c->frame = ++c->next_frame;
  def->using = 1;
  c->use_depth++;
  int errors_before = c->d->errors;
  bind_params(c, def, given, has, st->span, 0);
  exec_list(c, def->body);
  if (c->d->errors > errors_before && c->d->errors <= 10000)
    diag_note(c->d, st->span, "in schedule '%s', used here", sname(c, def->name));
  c->use_depth--;
  def->using = 0;
  unbind_to(c, mark);
  c->frame = saved_frame;
  c->use_fr = saved_use_fr;
  c->use_base = saved_use_base;
  c->fr_top = 0;
}

/* ---- -D values ---- */

static int parse_define(const char *s, Value *out) {
  if (!strcmp(s, "true")) { *out = vbool(1); return 0; }
  if (!strcmp(s, "false")) { *out = vbool(0); return 0; }
  if (!*s) return -1;
  char *end;
  errno = 0;
  long long i = strtoll(s, &end, 10);
  if (!*end && !errno) { *out = vint(i); return 0; }
  errno = 0;
  double r = strtod(s, &end);
  /* an underflow (1e-320, 1e-400) reads as the nearest double, as it does in a file */
  int ok = !errno || (errno == ERANGE && fabs(r) < 1);
  if (!*end && ok && isfinite(r) && strspn(s, "0123456789.eE+-") == strlen(s)) { *out = vreal(r); return 0; }
  return -1;
}

/* ---- the IR's stage table and the duplicate check ---- */

static void build_stages(Ctx *c) {
  IrSchedule *s = c->s;
  double *k = c->cost;
  /* seconds and bytes from model { } / hardware { }: explicit costs win */
  CostModel cm;
  int cm_errors = costmodel_derive(c->a, c->d, s, c->stage_dev, &cm);
  if (cm.times) {
    if (!c->cost_set[K_TF]) k[K_TF] = cm.tf;
    if (!c->cost_set[K_TB]) k[K_TB] = cm.tb;
    if (!c->cost_set[K_TW]) k[K_TW] = cm.tw;
    if (s->vocab.mode) {
      if (!c->cost_set[K_TIF]) k[K_TIF] = cm.tif;
      if (!c->cost_set[K_TIB]) k[K_TIB] = cm.tib;
      if (!c->cost_set[K_TS]) k[K_TS] = cm.ts;
      if (!c->cost_set[K_TT]) k[K_TT] = cm.tt;
    }
  }
  /* times derived from keys given on the command line, which the file's own costs
   * override: said, not silently dropped */
  int flags = 0;
  for (int i = 0; i < c->in->nkeys; i++) flags |= c->in->keys[i].memory >= 3;
  for (int j = K_TF; flags && cm.times && j <= K_TW; j++)
    if (c->cost_set[j] == 1) {
      double d = j == K_TF ? cm.tf : j == K_TB ? cm.tb : cm.tw;
      diag_warning(c->d, c->cost_span[j], "the file's cost %s = %g wins over the %g s that model { } and hardware { } give "
                   "with --model/--hardware (explicit costs win; --cost %s=%g sets it)", key_names[j], k[j], d, key_names[j], d);
      break;
    }
  if (cm.has_tc && !c->cost_set[K_TC]) k[K_TC] = cm.tc;
  if (cm.has_toff && !c->cost_set[K_TOFF]) k[K_TOFF] = cm.toff;
  if (cm.has_toff && !c->cost_set[K_TOFF] && !c->cost_set[K_TRELOAD] && cm.treload > 0 && cm.treload != k[K_TOFF]) { k[K_TRELOAD] = cm.treload; c->cost_set[K_TRELOAD] = 2; }
  s->derived.times = cm.times && !(c->cost_set[K_TF] && c->cost_set[K_TB] && c->cost_set[K_TW]);
  /* hardware data_parallel (costmodel.c); first: distributed_optimizer shards cm.static_bytes */
  s->derived.dp = cm_errors ? NULL : dp_derive(c->a, c->d, s, &cm);   /* (its "needs the model" would echo those errors) */
  s->derived.bytes = cm.bytes;
  s->derived.unit_bytes = cm.unit_bytes;
  s->derived.static_bytes = cm.static_bytes;
  s->derived.memory = cm.memory;
  s->derived.memory_span = cm.memory_span;
  s->derived.link_devs = cm.link_devs;
  s->derived.duplex = cm.duplex;
  s->derived.tp = cm.tp;
  s->derived.cp = cm.cp;
  s->derived.ep = cm.ep;
  s->derived.tie = cm.tie;
  s->tf = k[K_TF];
  s->tb = k[K_TB];
  s->tw = k[K_TW];
  s->tc = k[K_TC];
  s->mem_limit = c->cost_set[K_LIMIT] ? k[K_LIMIT] : -1;
  if (c->cost_set[K_LIMIT]) s->mem_limit_span = c->cost_span[K_LIMIT];
  s->act = k[K_ACT];
  s->b_free = k[K_BFREE];
  s->toff = k[K_TOFF];
  s->treload = c->cost_set[K_TRELOAD] ? k[K_TRELOAD] : 0;
  s->vocab.t_if = k[K_TIF];
  s->vocab.t_ib = k[K_TIB];
  s->vocab.t_s = k[K_TS];
  s->vocab.t_t = k[K_TT];
  s->vocab.t_coll = k[K_TCOLL];
  s->vocab.act_s = k[K_ACTS];
  s->tfb = c->cost_set[K_TFB] ? k[K_TFB] : 0;
  s->overlap_eff = 0;
  if (c->cost_set[K_TFB]) {
    double lo, hi;
    if (overlap_efficiency(k[K_TF], k[K_TB], k[K_TW], k[K_TFB], &s->overlap_eff, &lo, &hi))
      err(c, NULL, c->tfb_span, "TFB (an overlapped F and BW of one device share) must lie between max(TF, TB + TW) = %g and TF + TB + TW = %g, got %g",
          lo, hi, k[K_TFB]);
  }
  s->stages = arena_alloc(c->a, (size_t)(s->nstage + 1) * sizeof *s->stages);
  IrOffload *o = &c->off;
  if (!c->off_stages_set) { o->stage_lo = 0; o->stage_hi = s->nstage; }
  if (!c->off_mbs_set) { o->mb_lo = 0; o->mb_hi = s->nmb; }
  o->host_limit = c->cost_set[K_HOSTLIMIT] ? k[K_HOSTLIMIT] : -1;
  if (o->enabled && c->off_stages_set && o->stage_hi > s->nstage)
    err(c, NULL, o->span, "offload stages %d..%d out of range 0..%d", o->stage_lo, o->stage_hi, s->nstage);
  if (o->enabled && c->off_mbs_set && o->mb_hi > s->nmb)
    err(c, NULL, o->span, "offload microbatches %d..%d out of range 0..%d", o->mb_lo, o->mb_hi, s->nmb);
  s->offload = *o;
  IrRecompute *rp = &c->rc;
  if (!c->rc_stages_set) { rp->stage_lo = 0; rp->stage_hi = s->nstage; }
  if (rp->enabled && c->rc_stages_set && rp->stage_hi > s->nstage)
    err(c, NULL, c->rc_stages_span, "recompute stages %d..%d out of range 0..%d", rp->stage_lo, rp->stage_hi, s->nstage);
  s->recompute = *rp;
  for (int st = 0; st < s->nstage; st++) {
    IrStage *g = &s->stages[st];
    int d = c->stage_dev[st];
    double v = c->dev_nst[d] ? c->dev_nst[d] : 1;
    g->device = d;
    g->tf = k[K_TF] / v;
    g->tb = k[K_TB] / v;
    g->tw = k[K_TW] / v;
    g->tbw = c->cost_set[K_TBW] ? k[K_TBW] / v : (k[K_TB] + k[K_TW]) / v;
    g->act = k[K_ACT] / v;
    g->b_free = k[K_BFREE];
    g->offload = o->enabled && st >= o->stage_lo && st < o->stage_hi ? o->ratio : 0;
    g->offload_time = k[K_TOFF] / v;
    g->reload_time = c->cost_set[K_TRELOAD] ? k[K_TRELOAD] / v : 0;
    g->span = c->placespan;
    g->recompute = rp->enabled && st >= rp->stage_lo && st < rp->stage_hi ? rp->ratio : 0;
    g->input = c->cost_set[K_INPUT] ? k[K_INPUT] : -1;   /* -1: derived below, after the overrides */
    g->layer = c->cost_set[K_LAYER] ? k[K_LAYER] : -1;
  }
  if (cm.times && s->nstage > 0) { /* the input and output layers on the end stages */
    IrStage *f = &s->stages[0], *l = &s->stages[s->nstage - 1];
    if (!c->cost_set[K_TF]) { f->tf += cm.in_f; l->tf += cm.out_f; }
    if (!c->cost_set[K_TB]) { f->tb += cm.in_b; l->tb += cm.out_b; }
    if (!c->cost_set[K_TW]) { f->tw += cm.in_w; l->tw += cm.out_w; }
    if (!c->cost_set[K_TBW]) { f->tbw = f->tb + f->tw; l->tbw = l->tb + l->tw; }
  }
  uint8_t *tbw_set = arena_alloc(c->a, (size_t)s->nstage + 1);
  for (int i = 0; i < c->novr; i++) {
    Override *ov = &c->ovr[i];
    if (ov->stage < 0 || ov->stage >= s->nstage) {
      err(c, NULL, ov->span, "stage %lld out of range 0..%d", (long long)ov->stage, s->nstage);
      continue;
    }
    IrStage *g = &s->stages[ov->stage];
    switch (ov->key) {
    case K_TF: g->tf = ov->value; break;
    case K_TB: g->tb = ov->value; break;
    case K_TW: g->tw = ov->value; break;
    case K_TBW: g->tbw = ov->value; tbw_set[ov->stage] = 1; break;
    case K_TOFF: g->offload_time = ov->value; break;
    case K_TRELOAD: g->reload_time = ov->value; break;
    case K_ACT: g->act = ov->value; break;
    case K_BFREE: g->b_free = ov->value; break;
    case K_INPUT: g->input = ov->value; break;
    case K_LAYER: g->layer = ov->value; break;
    }
    if ((ov->key == K_TB || ov->key == K_TW) && !tbw_set[ov->stage]) g->tbw = g->tb + g->tw;
  }
  int both = -1;
  for (int st = 0; st < s->nstage; st++) {
    IrStage *g = &s->stages[st];
    if (g->input < 0) g->input = recompute_input_default(s, g);
    if (g->layer < 0) g->layer = 1.0 / recompute_stage_layers(s);
    if (g->recompute > 0 && g->offload > 0 && both < 0) both = st;
  }
  if (both >= 0)   /* a recomputed stage keeps only its input: nothing left worth a copy */
    err(c, NULL, rp->span, "recompute and offload both cover stage %d (offload stages %d..%d, recompute stages %d..%d): "
        "a recomputed stage keeps only its input; give each stage one of them", both, o->stage_lo, o->stage_hi,
        rp->stage_lo, rp->stage_hi);
}

/* "LO..HI" with 0 <= LO < HI <= max; 0 or -1. */
static int parse_range(const char *v, long max, int32_t *lo, int32_t *hi) {
  char *e1, *e2;
  long a = strtol(v, &e1, 10);
  if (e1 == v || strncmp(e1, "..", 2)) return -1;
  long b = strtol(e1 + 2, &e2, 10);
  if (e2 == e1 + 2 || *e2 || a < 0 || b <= a || b > max) return -1;
  *lo = (int32_t)a;
  *hi = (int32_t)b;
  return 0;
}

/* --policy KEY=V: replaces the file's offload, recompute or vocabulary policy
 * (docs/language.md, "Policies"): offload=none|all|RATIO, offload_stages=LO..HI,
 * offload_microbatches=LO..HI, recompute=none|all|RATIO, recompute_stages=LO..HI,
 * vocab=0|1|2, vocab_async=true|false. */
static void apply_policy(Ctx *c, const KeyOverride *o) {
  IrSchedule *s = c->s;
  const char *k = o->key, *v = o->value;
  const char *bad = NULL;
  if (!strcmp(k, "offload")) {
    char *e;
    double r = strtod(v, &e);
    c->off_auto = NULL;   /* a stated policy replaces `offload auto` too */
    c->sopt.offload_auto = 0;
    if (!strcmp(v, "none")) c->off.enabled = 0;
    else if (!strcmp(v, "all")) { c->off.enabled = 1; c->off.ratio = 1; c->off_stages_set = c->off_mbs_set = 0; }
    else if (e != v && !*e && r > 0 && r <= 1) { c->off.enabled = 1; c->off.ratio = r; c->off_stages_set = c->off_mbs_set = 0; }
    else bad = "none, all or a ratio in (0, 1]";
    if (!bad && c->off.enabled) c->off.span = s->span;
  } else if (!strcmp(k, "offload_stages") || !strcmp(k, "offload_microbatches")) {
    int st = k[8] == 's';
    int32_t lo, hi;
    if (parse_range(v, st ? s->nstage : s->nmb, &lo, &hi)) {
      bad = st ? "a range LO..HI of stages within 0..S" : "a range LO..HI of microbatches within 0..m";
    } else {
      if (!c->off.enabled) { c->off.enabled = 1; c->off.ratio = 1; c->off.span = s->span; }
      if (st) { c->off.stage_lo = lo; c->off.stage_hi = hi; c->off_stages_set = 1; }
      else { c->off.mb_lo = lo; c->off.mb_hi = hi; c->off_mbs_set = 1; }
      c->off_auto = NULL;
      c->sopt.offload_auto = 0;
    }
  } else if (!strcmp(k, "recompute")) {
    char *e;
    double r = strtod(v, &e);
    if (!strcmp(v, "none")) c->rc.enabled = 0;
    else if (!strcmp(v, "all")) { c->rc.enabled = 1; c->rc.ratio = 1; c->rc_stages_set = 0; }
    else if (e != v && !*e && r > 0 && r <= 1) { c->rc.enabled = 1; c->rc.ratio = r; c->rc_stages_set = 0; }
    else bad = "none, all or a ratio in (0, 1]";
    if (!bad && c->rc.enabled) c->rc.span = s->span;
  } else if (!strcmp(k, "recompute_stages")) {
    int32_t lo, hi;
    if (parse_range(v, s->nstage, &lo, &hi)) bad = "a range LO..HI of stages within 0..S";
    else {
      if (!c->rc.enabled) { c->rc.enabled = 1; c->rc.ratio = 1; c->rc.span = s->span; }
      c->rc.stage_lo = lo; c->rc.stage_hi = hi; c->rc_stages_set = 1;
    }
  } else if (!strcmp(k, "vocab")) {
    if (!strcmp(v, "0") || !strcmp(v, "none")) s->vocab.mode = 0;
    else if (!strcmp(v, "1") || !strcmp(v, "2")) { s->vocab.mode = v[0] - '0'; s->vocab.span = s->span; }
    else bad = "0 (none), 1 or 2";
  } else if (!strcmp(k, "vocab_async")) {
    if (!strcmp(v, "true")) s->vocab.async = 1;
    else if (!strcmp(v, "false")) s->vocab.async = 0;
    else bad = "true or false";
  } else {
    diag_error(c->d, (Span){0}, "--policy %s: unknown key (expected offload, offload_stages, offload_microbatches, recompute, recompute_stages, vocab or vocab_async)", k);
    *c->usage = 1;
    return;
  }
  if (bad) {
    diag_error(c->d, (Span){0}, "--policy %s=%s: expected %s", k, v, bad);
    *c->usage = 1;
  }
}

/* --cost KEY=V and --memory KEY=V: replace the schedule-wide value the file stated
 * (or the default), after the file ran; --policy KEY=V the same for a policy. A bad
 * key or value is a usage error. */
/* --hardware KEY=V and --model KEY=V: the block's key takes the value (added when the
 * file has none); costmodel.c then checks it as if the file said it. */
static void apply_block_key(Ctx *c, const KeyOverride *o) {
  int hw = o->memory == 3;
  const char *const *names = hw ? hardware_keys : model_keys;
  const char *opt = hw ? "--hardware" : "--model";
  int known = 0;
  for (int j = 0; names[j]; j++) known |= !strcmp(o->key, names[j]);
  if (!known) {
    char list[512] = "";
    for (int j = 0; names[j]; j++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", names[j]);
    diag_error(c->d, (Span){0}, "%s %s: unknown key (expected %s)", opt, o->key, list);
    *c->usage = 1;
    return;
  }
  Value v;
  if (parse_define(o->value, &v) || v.t == T_BOOL) {
    diag_error(c->d, (Span){0}, "%s %s=%s: expected a number", opt, o->key, o->value);
    *c->usage = 1;
    return;
  }
  double x = v.t == T_REAL ? v.u.r : (double)v.u.i;
  IrKeyVal **kv = hw ? &c->s->hardware : &c->s->model;
  int *n = hw ? &c->s->nhardware : &c->s->nmodel;
  for (int j = 0; j < *n; j++)   /* the flag's value, not the file's: no span points at the file's text */
    if (!strcmp((*kv)[j].key, o->key)) { (*kv)[j].value = x; (*kv)[j].span = (Span){0}; return; }
  IrKeyVal *grown = arena_alloc(c->a, sizeof *grown * (size_t)(*n + 1));
  if (*n) memcpy(grown, *kv, sizeof *grown * (size_t)*n);
  grown[*n] = (IrKeyVal){arena_strdup(c->a, o->key), x, (Span){0}};
  *kv = grown;
  (*n)++;
}

static void apply_key_overrides(Ctx *c) {
  for (int i = 0; i < c->in->nkeys; i++) {
    const KeyOverride *o = &c->in->keys[i];
    if (o->memory == 2) { apply_policy(c, o); continue; }
    if (o->memory >= 3) { apply_block_key(c, o); continue; }
    const char *opt = o->memory ? "--memory" : "--cost";
    int lo = o->memory ? K_ACT : K_TF, hi = o->memory ? K_N : K_TRELOAD + 1, k = -1;
    for (int j = lo; j < hi; j++)
      if (!strcmp(o->key, key_names[j])) k = j;
    if (k < 0) {
      diag_error(c->d, (Span){0}, "%s %s: unknown key (expected %s)", opt, o->key,
                 o->memory ? "act, b_free, limit, host_limit, act_s, input or layer" : "TF, TB, TW, TC, TBW, TIF, TIB, TS, TT, TCOLL or TOFF");
      *c->usage = 1;
      continue;
    }
    Value v;
    if (parse_define(o->value, &v) || v.t == T_BOOL) {
      diag_error(c->d, (Span){0}, "%s %s=%s: expected a number", opt, o->key, o->value);
      *c->usage = 1;
      continue;
    }
    double x = v.t == T_REAL ? v.u.r : (double)v.u.i;
    int frac = k == K_BFREE || k == K_INPUT || k == K_LAYER;
    if (x < 0 || (frac && x > 1)) {
      diag_error(c->d, (Span){0}, "%s %s=%s: %s", opt, o->key, o->value, frac ? "a fraction: 0..1" : "must not be negative");
      *c->usage = 1;
      continue;
    }
    c->cost[k] = x;
    c->cost_set[k] = 1;
    c->cost_span[k] = c->s->span;
  }
}

/* Times and memory the analysis adds up must stay finite: the sum of every pass's
 * cost (an upper bound on the makespan) and of every activation must be a number.
 * Blames the key (or stage override) that contributes most. */
static void check_totals(Ctx *c) {
  IrSchedule *s = c->s;
  double m = (double)s->nmb, P = (double)s->ndev, S = (double)s->nstage;
  double t_keys[K_N] = {0}, best = 0;
  int worst = -1, worst_ovr = -1;
  double time = 0, mem = 0;
  for (int st = 0; st < s->nstage; st++) {
    const IrStage *g = &s->stages[st];
    time += m * (g->tf + g->tb + g->tw + g->tbw + g->offload_time + (g->reload_time > 0 ? g->reload_time : g->offload_time));
    mem += m * g->act;
  }
  time += 2 * m * S * s->tc + m * P * (s->vocab.t_if + s->vocab.t_ib + s->vocab.t_s + s->vocab.t_t + 4 * s->vocab.t_coll);
  mem += m * s->vocab.act_s;
  const double big = 1e300;
  if (isfinite(time) && time < big && isfinite(mem) && mem < big) return;
  int is_time = !(isfinite(time) && time < big);
  /* the largest single contribution */
  t_keys[K_TF] = t_keys[K_TB] = t_keys[K_TW] = m * S; t_keys[K_TBW] = m * S; t_keys[K_TOFF] = 2 * m * S; t_keys[K_TRELOAD] = m * S; t_keys[K_TFB] = m * S;
  t_keys[K_TC] = 2 * m * S;
  t_keys[K_TIF] = t_keys[K_TIB] = t_keys[K_TS] = t_keys[K_TT] = m * P; t_keys[K_TCOLL] = 4 * m * P;
  t_keys[K_ACT] = m * S; t_keys[K_ACTS] = m;
  for (int k = 0; k < K_N; k++) {
    int timekey = k <= K_TRELOAD;
    if (!c->cost_set[k] || timekey != is_time || k == K_BFREE || k == K_LIMIT || k == K_HOSTLIMIT) continue;
    double x = c->cost[k] * t_keys[k];
    if (worst < 0 || x > best) { best = x; worst = k; }
  }
  for (int i = 0; i < c->novr; i++) {
    const Override *ov = &c->ovr[i];
    int timekey = ov->key <= K_TRELOAD;
    if (timekey != is_time || ov->key == K_BFREE) continue;
    double x = ov->value * m * (ov->key == K_TOFF ? 2 : 1);
    if ((worst < 0 && worst_ovr < 0) || x > best) { best = x; worst_ovr = i; worst = -1; }
  }
  const char *what = is_time ? "the schedule's total time" : "the activations held";
  if (worst_ovr >= 0) {
    const Override *ov = &c->ovr[worst_ovr];
    err(c, NULL, ov->span, "stage %lld's '%s' = %g is too large: %s would not be a finite number", (long long)ov->stage,
        key_names[ov->key], ov->value, what);
  } else if (worst >= 0) {
    err(c, NULL, c->cost_span[worst], "'%s' = %g is too large: %s over %d microbatches would not be a finite number",
        key_names[worst], c->cost[worst], what, s->nmb);
  } else {
    err(c, NULL, s->span, "costs too large: %s would not be a finite number", what);
  }
}

typedef struct DupSlot { uint64_t key; int32_t dev, idx; } DupSlot;

/* The same pass (kind, microbatch, stage; for vocabulary passes kind, microbatch,
 * device) written twice anywhere is an error at the second, with a note at the first.
 * Each source location reports at most once (a loop repeats the same mistake). */
/* The common case first: no duplicate, every pass in range. One bit per (kind,
 * microbatch, stage or device), a table that stays in the cache. Returns 1 when it
 * proved there is no duplicate, 0 when the hash table below must look (a duplicate,
 * which it reports with its first occurrence, or an op out of range). */
/* The table's size: bits per kind (microbatches times stages or devices), or 0 when
 * the schedule is too large for a table. */
static int64_t dup_per(const IrSchedule *s) {
  int64_t per = (int64_t)s->nmb * (s->nstage > s->ndev ? s->nstage : s->ndev);
  if (s->nmb <= 0 || s->nstage <= 0 || s->ndev <= 0 || s->nstage >= (1 << 24) || s->ndev >= (1 << 24) ||
      per > ((int64_t)1 << 26))
    return 0;
  return per;
}

/* The bit of op (on device d): -1 for a kind that is not checked here (send, recv,
 * collectives), -2 for an op out of range. */
static inline int64_t dup_bit(const IrSchedule *s, const IrOp *op, int d, int64_t per) {
  int64_t third, kind;
  if (op->kind <= IR_BW) kind = op->kind, third = op->stage;
  else if (op->kind == IR_OFFLOAD || op->kind == IR_RELOAD) kind = op->kind == IR_OFFLOAD ? 4 : 5, third = op->stage;
  else if (op->kind <= IR_T) kind = 6 + (op->kind - IR_IF), third = d;
  else return -1;
  if (op->mb < 0 || op->mb >= s->nmb || third < 0 || third >= (kind < 6 ? s->nstage : s->ndev)) return -2;
  return dup_index(kind, third, op->mb, s->nmb, per);
}

static uint64_t *dup_table(int64_t per) { return calloc((size_t)((10 * per + 63) / 64 + 1), sizeof(uint64_t)); }

/* Marks an op exec_pass wrote (see Ctx.dup_bits). */
static void dup_mark(Ctx *c, const IrOp *op, int d) {
  if (c->dup_off) return;
  if (!c->dup_bits) {
    c->dup_per = dup_per(c->s);
    if (!c->dup_per || !(c->dup_bits = dup_table(c->dup_per))) { c->dup_off = 1; return; }
  }
  int64_t k = dup_bit(c->s, op, d, c->dup_per);
  if (k == -1) { c->dup_ops++; return; }
  if (k >= 0 && !(c->dup_bits[k >> 6] & (1ull << (k & 63)))) {
    c->dup_bits[k >> 6] |= 1ull << (k & 63);
    c->dup_ops++;
    return;
  }
  c->dup_off = 1;   /* out of range, or a duplicate: the full check reports it */
  free(c->dup_bits);
  c->dup_bits = NULL;
}

static int no_duplicates_fast(const IrSchedule *s) {
  int64_t per = dup_per(s);
  if (!per) return 0;
  uint64_t *bit = dup_table(per);
  if (!bit) return 0;
  int ok = 1;
  for (int d = 0; d < s->ndev && ok; d++) {
    const IrDevice *dv = &s->devs[d];
    for (int i = 0; i < dv->nops; i++) {
      int64_t k = dup_bit(s, &dv->ops[i], d, per);
      if (k == -1) continue;
      if (k < 0 || (bit[k >> 6] & (1ull << (k & 63)))) { ok = 0; break; }
      bit[k >> 6] |= 1ull << (k & 63);
    }
  }
  free(bit);
  return ok;
}

static void check_duplicates(Ctx *c) {
  IrSchedule *s = c->s;
  if (s->total_ops == 0) return;
  if (!c->dup_off && c->dup_ops == s->total_ops) return;   /* every op marked as written, none twice */
  if (no_duplicates_fast(s)) return;
  size_t cap = 1024;
  while (cap < (size_t)s->total_ops * 2) cap *= 2;
  DupSlot *t = calloc(cap, sizeof *t);
  uint64_t *rep = calloc(256, sizeof *rep); /* spans already reported (small ring) */
  if (!t || !rep) { free(t); free(rep); return; }
  int nrep = 0;
  for (int d = 0; d < s->ndev && !c->stop; d++) {
    IrDevice *dv = &s->devs[d];
    for (int i = 0; i < dv->nops; i++) {
      IrOp *op = &dv->ops[i];
      uint64_t third;
      if (op->kind <= IR_BW || op->kind == IR_OFFLOAD || op->kind == IR_RELOAD) third = (uint64_t)op->stage;
      else if (op->kind <= IR_T) third = (uint64_t)d;
      else continue;
      uint64_t key = ((uint64_t)(op->kind + 1) << 56) | ((uint64_t)(uint32_t)op->mb << 24) | (third & 0xffffff);
      size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
      while (t[h].key && t[h].key != key) h = (h + 1) & (cap - 1);
      if (!t[h].key) {
        t[h].key = key;
        t[h].dev = d;
        t[h].idx = i;
        continue;
      }
      uint64_t sk = ((uint64_t)op->span.file << 48) ^ ((uint64_t)op->span.line << 16) ^ op->span.col;
      int seen = 0;
      for (int k = 0; k < nrep && k < 256; k++)
        if (rep[k] == sk) seen = 1;
      if (seen) continue;
      rep[nrep++ % 256] = sk;
      char buf[64];
      ir_format_op(s, op, buf, sizeof buf);
      const IrOp *first = &s->devs[t[h].dev].ops[t[h].idx];
      diag_error(c->d, op->span, "duplicate %s (already on device %d)", buf, t[h].dev);
      diag_note(c->d, first->span, "first written here");
      if (c->d->errors > 10000) c->stop = 1;
    }
  }
  free(t);
  free(rep);
}

static IrSchedule *elab_schedule(Ctx *c, const ElabInput *in, int *usage) {
  c->in = in;
  c->a = in->arena;
  c->d = in->diag;
  c->syms = in->syms;
  *usage = 0;
  c->usage = usage;
  Symtab *y = in->syms;
#define I(s) sym_intern(y, s, strlen(s))
  c->bsym[B_P] = I("P"); c->bsym[B_M] = I("m"); c->bsym[B_S] = I("S"); c->bsym[B_V] = I("v");
  c->f_min = I("min"); c->f_max = I("max"); c->f_abs = I("abs"); c->f_ceil = I("ceil");
  c->f_floor = I("floor"); c->f_round = I("round"); c->f_int = I("int"); c->f_real = I("real");
  c->t_int = c->f_int; c->t_real = c->f_real; c->t_bool = I("bool");
  c->w_stage = I("stage"); c->w_parallel = I("parallel");
  c->p_linear = I("linear"); c->p_interleaved = I("interleaved"); c->p_vshape = I("vshape");
  c->w_slot = I("slot"); c->w_eager = I("eager"); c->w_fill = I("fill");
  c->o_all = I("all"); c->o_ratio = I("ratio"); c->o_stages = I("stages"); c->o_mbs = I("microbatches");
  c->w_profile = I("profile");
#undef I
  c->binds = arena_alloc(c->a, (size_t)(y->n + 1) * sizeof *c->binds);
  c->pidx = arena_alloc(c->a, (size_t)(y->n + 1) * sizeof *c->pidx);
  c->cur_dev = -1;
  c->frame = c->next_frame = 1;
  long mo = in->max_ops > 0 ? in->max_ops : 1;
  c->step_limit = mo > (LONG_MAX - 1000000) / 2 ? LONG_MAX / 2 : 2 * mo + 1000000;
  c->cost[K_TF] = c->cost[K_TB] = c->cost[K_TW] = 1;
  c->cost[K_ACT] = 1;

  ScheduleDef *def = in->main;
  IrSchedule *s = arena_alloc(c->a, sizeof *s);
  c->s = s;
  s->max_ops = in->max_ops;
  s->name = sname(c, def->name);
  s->file = in->file;
  s->span = def->span;
  s->placement = "linear";
  c->placespan = def->span; /* until a placement statement says otherwise */

  /* parameters: -D values first, checked against the declarations */
  int np = def->nparams;
  Value *given = arena_alloc(c->a, (size_t)(np + 1) * sizeof *given);
  uint8_t *has = arena_alloc(c->a, (size_t)np + 1);
  for (int k = 0; k < in->ndefs; k++) {
    const Define *df = &in->defs[k];
    int i = 0, found = -1;
    for (Param *p = def->params; p; p = p->next, i++)
      if (!strcmp(sname(c, p->name), df->name)) found = i;
    if (found < 0) {
      diag_error(c->d, (Span){0}, "-D %s: schedule '%s' has no parameter '%s'", df->name, s->name, df->name);
      *usage = 1;
      continue;
    }
    Value v;
    if (parse_define(df->value, &v)) {
      diag_error(c->d, (Span){0}, "-D %s=%s: expected an int, a real, true or false", df->name, df->value);
      *usage = 1;
      continue;
    }
    Param *p = def->params;
    for (int j = 0; j < found; j++) p = p->next;
    int want = p->type == c->t_int ? T_INT : p->type == c->t_real ? T_REAL : p->type == c->t_bool ? T_BOOL : 0;
    if (want == T_REAL && v.t == T_INT) v = vreal((double)v.u.i);
    if (want && v.t != want) {
      diag_error(c->d, (Span){0}, "-D %s=%s: parameter '%s' is %s, got %s", df->name, df->value, df->name, tname(want), tname(v.t));
      *usage = 1;
      continue;
    }
    given[found] = v;
    has[found] = 1;
  }
  if (*usage) return NULL;
  def->using = 1;
  int errors_before = c->d->errors;
  bind_params(c, def, given, has, def->span, 1);
  if (*usage) return NULL;
  /* parameters for reports, after -D */
  s->params = arena_alloc(c->a, (size_t)(np + 1) * sizeof *s->params);
  for (Param *p = def->params; p; p = p->next) {
    Value v = c->binds[p->name].v;
    struct IrParam *ip = &s->params[s->nparams++];
    ip->name = sname(c, p->name);
    ip->is_int = v.t == T_INT || v.t == T_BOOL;
    ip->is_bool = v.t == T_BOOL;
    ip->value = v.t == T_REAL ? v.u.r : (double)v.u.i;
  }

  exec_list(c, def->body);
  def->using = 0;
  if (c->stop && !c->layout_done) return s->devs ? s : NULL;
  /* a missing statement after other errors is usually their echo: stay quiet */
  if ((!c->has_dev || !c->has_mb) && c->d->errors > errors_before) return NULL;
  if (!c->has_dev) { err(c, NULL, def->span, "schedule '%s' does not state 'devices'", s->name); return NULL; }
  if (!c->has_mb) { err(c, NULL, def->span, "schedule '%s' does not state 'microbatches'", s->name); return NULL; }
  if (ensure_layout(c, def->span)) return NULL;
  static const char *const pl[] = {"linear", "linear", "interleaved", "vshape", "explicit"};
  s->placement = pl[c->placement];
  s->v = (int32_t)c->pv;
  apply_key_overrides(c);
  build_stages(c);
  if (c->p2p) s->p2p_buffered = !strcmp(sname(c, c->p2p->sym), "buffered");
  if (c->profile && !c->stop && c->d->errors == errors_before) elab_profile(c->a, c->d, s, c->profile->str, c->profile->span2);
  check_totals(c);
  if (c->off_auto && !c->synth)
    err(c, NULL, c->off_auto->span, "'offload auto' needs 'synthesize' (it chooses what to offload for the synthesised order)");
  if (c->off_auto && c->off.enabled)
    err(c, NULL, c->off_auto->span, "'offload auto' and a stated offload policy: keep one");
  int synth = 0;
  if (c->synth && !c->stop && c->d->errors == errors_before) {
    if (s->total_ops > 0)
      err(c, NULL, c->synth->span, "'synthesize' chooses every pass: this schedule also writes passes (device blocks or a building block)");
    else
      synth = 1;   /* the order phase synthesizes (order.c); nothing is written to check for duplicates */
  }
  if (!c->stop) check_duplicates(c);
  if (c->in->order) {
    memset(c->in->order, 0, sizeof *c->in->order);
    c->in->order->synth = synth;
    c->in->order->sopt = c->sopt;
    if (c->sq && !c->stop && c->d->errors == errors_before) c->in->order->sq = c->sq;
  }
  return s;
}

IrSchedule *elab_run(const ElabInput *in, int *usage) {
  Ctx c;
  memset(&c, 0, sizeof c);
  IrSchedule *s = elab_schedule(&c, in, usage);
  free(c.dup_bits);
  return s;
}
