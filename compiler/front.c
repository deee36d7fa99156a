/* front.c: the front end's entry points: front_compile (read, import, parse,
 * elaborate) and `ppsc expand` (print the elaborated per-device orders as a complete,
 * valid PPS file).
 *
 * Imports: `import "x.pps";` is resolved relative to the importing file, then in the
 * stdlib directory. A file is loaded once however often it is imported (identity is
 * its real path); an import cycle is an error that shows the chain. When any file has
 * a syntax error, elaboration does not run (its errors would mostly be echoes). */
#include "config.h"
#include "driver.h"
#include "elab.h"
#include "recompute.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_IMPORT_DEPTH = 64, MAX_FILE_SIZE = 1 << 30 };

typedef struct Loaded { char *real; const char *shown; } Loaded;

typedef struct Front {
  Compilation *c;
  Symtab syms;
  Loaded *loaded; int nloaded, caploaded;
  const char **lhash; size_t lcap;   /* real paths loaded: open addressing, for O(1) lookups */
  Loaded *stack; int nstack, capstack;
  ScheduleDef *all; /* every schedule of every file, chained through ->next copies */
  ScheduleDef **defs; int ndefs, capdefs;
  ScheduleDef *main_last;
  int fatal;
} Front;

/* Reads a whole file (or stdin for "-"), at most MAX_FILE_SIZE bytes; an import
 * must be a regular file (see fileio.c). Returns NULL with errno set on failure. */
static char *read_all(const char *path, size_t *size, int is_import) {
  return read_input(path, is_import, MAX_FILE_SIZE, size);
}

static char *dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return arena_strdup(a, ".");
  return arena_strndup(a, path, (size_t)(slash - path));
}

static void load(Front *fr, const char *path, char *real, Span from);

static size_t path_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

/* Whether a real path was loaded already; with add, records it. */
static int loaded_seen(Front *fr, const char *real, int add) {
  if (add && (fr->nloaded + 1) * 2 > (int)fr->lcap) {
    size_t nc = fr->lcap ? fr->lcap * 2 : 64;
    const char **nh = arena_alloc(&fr->c->arena, nc * sizeof *nh);
    for (size_t k = 0; k < fr->lcap; k++)
      if (fr->lhash[k]) {
        size_t i = path_hash(fr->lhash[k]) & (nc - 1);
        while (nh[i]) i = (i + 1) & (nc - 1);
        nh[i] = fr->lhash[k];
      }
    fr->lhash = nh;
    fr->lcap = nc;
  }
  if (!fr->lcap) return 0;
  size_t i = path_hash(real) & (fr->lcap - 1);
  while (fr->lhash[i]) {
    if (!strcmp(fr->lhash[i], real)) return 1;
    i = (i + 1) & (fr->lcap - 1);
  }
  if (add) fr->lhash[i] = real;
  return 0;
}

/* Parses one file's text and follows its imports. */
static void load_text(Front *fr, const char *path, char *real, const char *text, size_t size, int is_main) {
  Compilation *c = fr->c;
  uint32_t file = diag_add_file(&c->diag, path, text, size);
  loaded_seen(fr, real, 1);
  Loaded *l = VEC_PUSH(&c->arena, fr->loaded, fr->nloaded, fr->caploaded);
  l->real = real;
  l->shown = diag_file_path(&c->diag, file);
  ParseResult r = {0};
  int errors_before = c->diag.errors;
  parse_file(&c->arena, &c->diag, &fr->syms, file, c->diag.files[file].text, size, &r);
  if (r.fatal) fr->fatal = 1;
  for (ScheduleDef *d = r.schedules; d; d = d->next) {
    ScheduleDef **slot = VEC_PUSH(&c->arena, fr->defs, fr->ndefs, fr->capdefs);
    *slot = d;
    if (is_main) fr->main_last = d;
  }
  if (fr->fatal || c->diag.errors > errors_before) return; /* imports of a broken file: skip */
  Loaded *st = VEC_PUSH(&c->arena, fr->stack, fr->nstack, fr->capstack);
  st->real = real;
  st->shown = l->shown;
  char *dir = dir_of(&c->arena, path);
  for (ImportDecl *im = r.imports; im && !fr->fatal; im = im->next) {
    char *cand = im->path[0] == '/' || !strcmp(dir, ".") ? arena_strdup(&c->arena, im->path)
                                                         : arena_printf(&c->arena, "%s/%s", dir, im->path);
    char *rp = realpath(cand, NULL);
    /* then the stdlib directory, then, when that is the default (installed) one, the
       source tree's stdlib/ (a ppsc run from its build tree, nothing installed) */
    const char *dirs[2] = {c->opt->stdlib_dir, NULL};
#if defined(PPS_SRCDIR) && defined(PPS_STDLIB_DIR)
    if (*PPS_SRCDIR && (!dirs[0] || !strcmp(dirs[0], PPS_STDLIB_DIR))) dirs[1] = PPS_SRCDIR "/stdlib";
#endif
    for (int k = 0; k < 2 && !rp && im->path[0] != '/'; k++) {
      if (!dirs[k] || (k == 1 && dirs[0] && !strcmp(dirs[0], dirs[1]))) continue;
      cand = arena_printf(&c->arena, "%s/%s", dirs[k], im->path);
      rp = realpath(cand, NULL);
    }
    if (!rp) {
      char where[1024];
      int n = snprintf(where, sizeof where, "%s", dir);
      for (int k = 0; k < 2 && im->path[0] != '/' && n > 0 && (size_t)n < sizeof where; k++)
        if (dirs[k] && !(k == 1 && dirs[0] && !strcmp(dirs[0], dirs[1])))
          n += snprintf(where + n, sizeof where - (size_t)n, ", %s", dirs[k]);
      diag_error(&c->diag, im->span, "cannot find import \"%s\" (looked in %s; --stdlib DIR or $PPS_STDLIB name another)",
                 im->path, where);
      continue;
    }
    char *real2 = arena_strdup(&c->arena, rp);
    free(rp);
    int on_stack = -1;
    for (int k = 0; k < fr->nstack; k++)
      if (!strcmp(fr->stack[k].real, real2)) on_stack = k;
    if (on_stack >= 0) {
      char chain[1024];
      size_t n = 0;
      for (int k = on_stack; k < fr->nstack && n < sizeof chain; k++)
        n += (size_t)snprintf(chain + n, sizeof chain - n, "%s -> ", fr->stack[k].shown);
      if (n < sizeof chain) snprintf(chain + n, sizeof chain - n, "%s", fr->stack[on_stack].shown);
      diag_error(&c->diag, im->span, "import cycle: %s", chain);
      continue;
    }
    if (loaded_seen(fr, real2, 0)) continue;
    if (fr->nstack >= MAX_IMPORT_DEPTH) {
      diag_error(&c->diag, im->span, "imports nested more than %d deep", MAX_IMPORT_DEPTH);
      continue;
    }
    load(fr, cand, real2, im->span);
  }
  fr->nstack--;
}

static void load(Front *fr, const char *path, char *real, Span from) {
  size_t size = 0;
  char *text = read_all(path, &size, 1);
  if (!text) {
    diag_error(&fr->c->diag, from, "cannot read \"%s\": %s", path, read_input_error(errno));
    return;
  }
  load_text(fr, path, real, text, size, 0);
  free(text);
}

static int has_param(const Front *fr, const ScheduleDef *d, const char *name) {
  for (const Param *p = d->params; p; p = p->next)
    if (!strcmp(sym_name(&fr->syms, p->name), name)) return 1;
  return 0;
}

/* The option that sets a cost, memory key or policy named NAME in any file, or NULL. */
static const char *override_for(const char *name) {
  static const char *const cost[] = {"TF", "TB", "TW", "TC", "TBW", "TIF", "TIB", "TS", "TT", "TCOLL", "TOFF", "TFB", "TRELOAD", NULL};
  static const char *const mem[] = {"act", "b_free", "limit", "host_limit", "act_s", "input", NULL};
  static const char *const pol[] = {"offload", "offload_stages", "offload_microbatches", "recompute", "recompute_stages", "vocab", "vocab_async", NULL};
  for (int k = 0; cost[k]; k++) if (!strcmp(name, cost[k])) return "--cost";
  for (int k = 0; mem[k]; k++) if (!strcmp(name, mem[k])) return "--memory";
  for (int k = 0; pol[k]; k++) if (!strcmp(name, pol[k])) return "--policy";
  return NULL;
}

/* A -D that names no parameter of the compiled schedule is a usage error that says
 * which schedule is compiled and which schedules of the file do have the parameter
 * (a file with several schedules compiles the last one). */
static int check_defines(Compilation *c, Front *fr, const ScheduleDef *main) {
  int bad = 0;
  for (int k = 0; k < c->opt->ndefs; k++) {
    const char *nm = c->opt->defs[k].name;
    if (has_param(fr, main, nm)) continue;
    char list[512] = "";
    size_t n = 0;
    int cnt = 0;
    for (int j = 0; j < fr->ndefs; j++)
      if (fr->defs[j] != main && has_param(fr, fr->defs[j], nm) && n < sizeof list - 64) {
        n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", cnt++ ? ", " : "", sym_name(&fr->syms, fr->defs[j]->name));
      }
    if (cnt)
      diag_error(&c->diag, (Span){0}, "-D %s: the compiled schedule '%s' has no parameter '%s' (%s %s it: use --schedule NAME)",
                 nm, sym_name(&fr->syms, main->name), nm, list, cnt > 1 ? "have" : "has");
    else if (override_for(nm))   /* a cost, memory setting or policy: say how to set it in any file */
      diag_error(&c->diag, (Span){0}, "-D %s: schedule '%s' has no parameter '%s' (to set it in any file: %s %s=%s)", nm,
                 sym_name(&fr->syms, main->name), nm, override_for(nm), nm, c->opt->defs[k].value);
    else
      diag_error(&c->diag, (Span){0}, "-D %s: schedule '%s' has no parameter '%s'", nm, sym_name(&fr->syms, main->name), nm);
    bad = 1;
  }
  return bad;
}

IrSchedule *front_compile(Compilation *c, int *io_error) {
  *io_error = 0;
  const Options *opt = c->opt;
  Front fr;
  memset(&fr, 0, sizeof fr);
  fr.c = c;
  fr.syms.arena = &c->arena;
  size_t size = 0;
  char *text = opt->src_text ? NULL : read_all(opt->file, &size, 0);
  if (opt->src_text && (text = malloc(opt->src_size + 1)) != NULL) {  /* import-csv: text in memory */
    memcpy(text, opt->src_text, opt->src_size);
    text[size = opt->src_size] = 0;
  }
  if (!text) {
    fprintf(c->diag.out ? c->diag.out : stderr, "ppsc: cannot read '%s': %s\n", opt->file, read_input_error(errno));
    *io_error = 1;
    return NULL;
  }
  char *rp = strcmp(opt->file, "-") ? realpath(opt->file, NULL) : NULL;
  char *real = arena_strdup(&c->arena, rp ? rp : opt->file);
  free(rp);
  load_text(&fr, strcmp(opt->file, "-") ? opt->file : "<stdin>", real, text, size, 1);
  free(text);
  if (fr.fatal || c->diag.errors) return NULL;

  /* schedule names: unique across files */
  ScheduleDef **by_sym = arena_alloc(&c->arena, (size_t)(fr.syms.n + 64) * sizeof *by_sym);
  for (int k = 0; k < fr.ndefs; k++) {
    ScheduleDef *d = fr.defs[k];
    if (by_sym[d->name]) {
      diag_error(&c->diag, d->span, "schedule '%s' is already defined", sym_name(&fr.syms, d->name));
      diag_note(&c->diag, by_sym[d->name]->span, "first defined here");
      continue;
    }
    by_sym[d->name] = d;
  }
  if (c->diag.errors) return NULL;
  ScheduleDef *main = fr.main_last;
  if (opt->schedule) {
    main = NULL;
    for (int k = 0; k < fr.ndefs; k++)
      if (!strcmp(sym_name(&fr.syms, fr.defs[k]->name), opt->schedule)) main = fr.defs[k];
    if (!main) {
      diag_error(&c->diag, (Span){0}, "--schedule %s: no schedule of that name in '%s' or its imports", opt->schedule, opt->file);
      *io_error = 1;
      return NULL;
    }
  }
  if (!main) {
    diag_error(&c->diag, (Span){1, 1, 1, 1}, "no schedule in this file (expected 'schedule NAME { ... }')");
    return NULL;
  }
  const Define *defs = opt->defs;
  int ndefs = opt->ndefs;
  if (opt->def_used) {   /* compare: only the -D the schedule has (compare.c reports the rest) */
    Define *keep = arena_alloc(&c->arena, sizeof(Define) * (size_t)(ndefs + 1));
    int n = 0;
    for (int k = 0; k < opt->ndefs; k++)
      if ((opt->def_used[k] = (unsigned char)has_param(&fr, main, opt->defs[k].name))) keep[n++] = opt->defs[k];
    defs = keep;
    ndefs = n;
  } else if (check_defines(c, &fr, main)) {
    *io_error = 1;
    return NULL;
  }
  ElabOrder ord;
  memset(&ord, 0, sizeof ord);
  ElabInput in = {&c->arena, &c->diag, &fr.syms, by_sym, main, opt->file, defs, ndefs, opt->max_ops,
                  opt->keys, opt->nkeys, opt->stdlib_dir, front_seed, &ord};
  int usage = 0;
  /* by_sym must cover symbols interned during elaboration */
  IrSchedule *s = elab_run(&in, &usage);
  /* the order phase: synthesize, squeeze (what the file asked elaboration for) */
  ord.sopt.check = opt->synth_check;
  if (s && !usage) order_run(&c->arena, &c->diag, s, &ord);
  if (usage) *io_error = 1;
  if (s && opt->p2p_buffered) s->p2p_buffered = 1;   /* --p2p buffered overrides the file */
  if (s && opt->transport_nccl) s->recv_wait_posted = 1;
  return s;
}

/* `synthesize`'s seeds (synth.h): a standard schedule, embedded in ppsc
 * (synth_seed_srcs: the same whatever the environment), compiled by the front end
 * with the asking schedule's P, m and costs (exact: %.17g reads back the same
 * double); its IR goes to the synthesizer, which never parses. Diagnostics are
 * dropped (a seed that does not compile is no seed). */
IrSchedule *front_seed(Arena *a, const SynthSeedReq *rq) {
  const SynthSeedSrc *src = NULL;
  for (const SynthSeedSrc *q = synth_seed_srcs; q->file; q++)
    if (!strcmp(q->file, rq->file)) src = q;
  if (!src) return NULL;
  char path[128];
  snprintf(path, sizeof path, "<stdlib>/%s", rq->file);
  char d[8][64];
  Define defs[8];
  int nd = 0;
  snprintf(d[nd++], 64, "%d", rq->P);
  snprintf(d[nd++], 64, "%d", rq->m);
  snprintf(d[nd++], 64, "%.17g", rq->tf);
  snprintf(d[nd++], 64, "%.17g", rq->tb);
  snprintf(d[nd++], 64, "%.17g", rq->tw);
  snprintf(d[nd++], 64, "%.17g", rq->tc);
  static const char *const names[] = {"P", "m", "TF", "TB", "TW", "TC"};
  for (int k = 0; k < nd; k++) { defs[k].name = names[k]; defs[k].value = d[k]; }
  const char *xs[2] = {rq->x1, rq->x2};
  for (int k = 0; k < 2; k++) {
    const char *eq = xs[k] ? strchr(xs[k], '=') : NULL;
    if (!eq) continue;
    snprintf(d[nd], 64, "%.*s", (int)(eq - xs[k]), xs[k]);
    defs[nd].name = d[nd];
    defs[nd].value = eq + 1;
    nd++;
  }
  Options opt;
  memset(&opt, 0, sizeof opt);
  opt.cmd = "expand";
  opt.file = path;
  opt.src_text = src->text;
  opt.src_size = src->size;
  opt.schedule = rq->name;
  opt.stdlib_dir = NULL;
  opt.defs = defs;
  opt.ndefs = nd;
  opt.max_errors = 1;
  opt.max_ops = 50000000;
  Compilation c2;
  memset(&c2, 0, sizeof c2);
  c2.opt = &opt;
  diag_init(&c2.diag, &c2.arena);
  c2.diag.out = NULL;
  int io = 0;
  IrSchedule *t = front_compile(&c2, &io);
  if (io || c2.diag.errors || (t && !t->devs)) t = NULL;
  *a = c2.arena;   /* the caller frees the seed's memory */
  return t;
}

/* ---- ppsc expand ---- */

/* A number the way PPS reads it back exactly: an integral value as an integer,
 * else the shortest of %.15g / %.17g (every place expand writes one takes either). */
static void put_real(StrBuf *b, double v) {
  char buf[64];
  if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {   /* the range first: a cast out of range is undefined */
    snprintf(buf, sizeof buf, "%lld", (long long)v);
  } else {
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
  }
  sb_puts(b, buf);
}

static char *put_int(char *p, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
  do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
  if (v < 0) *p++ = '-';
  while (n) *p++ = tmp[--n];
  return p;
}

static const char *cmp_text(int c) {
  static const char *const t[] = {"<", "<=", "==", "!=", ">=", ">"};
  return c >= 0 && c < 6 ? t[c] : "?";
}

/* Writes the schedule as PPS: header, costs and policies, one device line each. */
void expand_write(const IrSchedule *s, StrBuf *b) {
  sb_printf(b, "// expanded by ppsc from %s", s->file);
  for (int k = 0; k < s->nparams; k++) {
    sb_printf(b, "%s%s = ", k ? ", " : " (", s->params[k].name);
    if (s->params[k].is_bool) sb_puts(b, s->params[k].value != 0 ? "true" : "false");
    else put_real(b, s->params[k].value);
    if (k == s->nparams - 1) sb_puts(b, ")");
  }
  sb_printf(b, "\nschedule %s {\n", s->name);
  sb_printf(b, "  devices %d;\n  microbatches %d;\n", s->ndev, s->nmb);
  int v = s->v;
  if (!strcmp(s->placement, "linear")) sb_puts(b, "  placement linear;\n");
  else if (!strcmp(s->placement, "interleaved")) sb_printf(b, "  placement interleaved(%d);\n", v);
  else if (!strcmp(s->placement, "vshape")) sb_puts(b, "  placement vshape;\n");
  else {
    sb_puts(b, "  placement [");
    for (int k = 0; k < s->nstage; k++) sb_printf(b, "%s%d", k ? ", " : "", s->stages[k].device);
    sb_puts(b, "];\n");
  }
  sb_puts(b, "  cost TF = "); put_real(b, s->tf);
  sb_puts(b, ", TB = "); put_real(b, s->tb);
  sb_puts(b, ", TW = "); put_real(b, s->tw);
  sb_puts(b, ", TC = "); put_real(b, s->tc);
  sb_puts(b, ";\n");
  if (s->act != 1 || s->b_free != 0) {
    sb_puts(b, "  memory act = "); put_real(b, s->act);
    sb_puts(b, ", b_free = "); put_real(b, s->b_free);
    sb_puts(b, ";\n");
  }
  if (s->toff != 0) { sb_puts(b, "  cost TOFF = "); put_real(b, s->toff); sb_puts(b, ";\n"); }
  if (s->treload > 0) { sb_puts(b, "  cost TRELOAD = "); put_real(b, s->treload); sb_puts(b, ";\n"); }
  if (s->tfb > 0) { sb_puts(b, "  cost TFB = "); put_real(b, s->tfb); sb_puts(b, ";\n"); }
  /* per-stage values that differ from the defaults, written absolute */
  int *cnt = calloc((size_t)s->ndev + 1, sizeof *cnt);
  for (int k = 0; k < s->nstage && cnt; k++) cnt[s->stages[k].device]++;
  for (int k = 0; k < s->nstage && cnt; k++) {
    const IrStage *g = &s->stages[k];
    double vd = cnt[g->device] ? cnt[g->device] : 1;
    int tf = g->tf != s->tf / vd, tb = g->tb != s->tb / vd, tw = g->tw != s->tw / vd;
    int tbw = g->tbw != g->tb + g->tw;
    int toff = g->offload_time != s->toff / vd;
    int trl = g->reload_time != s->treload / vd && g->reload_time > 0;
    if (tf || tb || tw || tbw || toff || trl) {
      sb_printf(b, "  cost stage %d:", k);
      const char *sep = " ";
      if (tf) { sb_printf(b, "%sTF = ", sep); put_real(b, g->tf); sep = ", "; }
      if (tb) { sb_printf(b, "%sTB = ", sep); put_real(b, g->tb); sep = ", "; }
      if (tw) { sb_printf(b, "%sTW = ", sep); put_real(b, g->tw); sep = ", "; }
      if (tbw) { sb_printf(b, "%sTBW = ", sep); put_real(b, g->tbw); sep = ", "; }
      if (toff) { sb_printf(b, "%sTOFF = ", sep); put_real(b, g->offload_time); sep = ", "; }
      if (trl && g->reload_time > 0) { sb_printf(b, "%sTRELOAD = ", sep); put_real(b, g->reload_time); }
      sb_puts(b, ";\n");
    }
    int act = g->act != s->act / vd, bf = g->b_free != s->b_free, in = g->input != 0 && g->recompute > 0;
    int ly = g->recompute > 0 && g->recompute < 1 && g->layer != 1.0 / recompute_stage_layers(s);
    if (act || bf || in || ly) {
      sb_printf(b, "  memory stage %d:", k);
      if (act) { sb_puts(b, " act = "); put_real(b, g->act); }
      if (bf) { sb_puts(b, act ? ", b_free = " : " b_free = "); put_real(b, g->b_free); }
      if (in) { sb_puts(b, act || bf ? ", input = " : " input = "); put_real(b, g->input); }
      if (ly) { sb_puts(b, act || bf || in ? ", layer = " : " layer = "); put_real(b, g->layer); }
      sb_puts(b, ";\n");
    }
  }
  free(cnt);
  if (s->mem_limit >= 0) { sb_puts(b, "  memory limit = "); put_real(b, s->mem_limit); sb_puts(b, ";\n"); }
  if (s->offload.host_limit >= 0) { sb_puts(b, "  memory host_limit = "); put_real(b, s->offload.host_limit); sb_puts(b, ";\n"); }
  if (s->vocab.mode) {
    sb_printf(b, "  vocab parallel %d;\n  cost TIF = ", s->vocab.mode);
    put_real(b, s->vocab.t_if); sb_puts(b, ", TIB = "); put_real(b, s->vocab.t_ib);
    sb_puts(b, ", TS = "); put_real(b, s->vocab.t_s); sb_puts(b, ", TT = "); put_real(b, s->vocab.t_t);
    sb_puts(b, ", TCOLL = "); put_real(b, s->vocab.t_coll); sb_puts(b, ";\n");
  }
  if (s->vocab.async) sb_puts(b, "  vocab async true;\n");
  if (s->p2p_buffered) sb_puts(b, "  p2p buffered;\n");
  if (s->vocab.act_s != 0) { sb_puts(b, "  memory act_s = "); put_real(b, s->vocab.act_s); sb_puts(b, ";\n"); }
  if (s->offload.enabled) {
    sb_puts(b, "  offload ratio ");
    put_real(b, s->offload.ratio);
    sb_printf(b, " stages %d..%d microbatches %d..%d;\n", s->offload.stage_lo, s->offload.stage_hi, s->offload.mb_lo,
              s->offload.mb_hi);
  }
  if (s->recompute.enabled) {
    sb_puts(b, "  recompute ratio ");
    put_real(b, s->recompute.ratio);
    sb_printf(b, " stages %d..%d;\n", s->recompute.stage_lo, s->recompute.stage_hi);
  }
  if (s->nmodel) {
    sb_puts(b, "  model {");
    for (int k = 0; k < s->nmodel; k++) { sb_printf(b, " %s = ", s->model[k].key); put_real(b, s->model[k].value); sb_puts(b, ";"); }
    sb_puts(b, " }\n");
  }
  if (s->nhardware) {
    sb_puts(b, "  hardware {");
    for (int k = 0; k < s->nhardware; k++) { sb_printf(b, " %s = ", s->hardware[k].key); put_real(b, s->hardware[k].value); sb_puts(b, ";"); }
    sb_puts(b, " }\n");
  }
  for (int k = 0; k < s->nexpects; k++) {
    const IrExpect *x = &s->expects[k];
    sb_printf(b, "  expect %s", ir_metric_name((IrMetric)x->metric));
    if (x->device >= 0) sb_printf(b, "[%d]", x->device);
    sb_printf(b, " %s ", cmp_text(x->cmp));
    put_real(b, x->value);
    sb_puts(b, ";\n");
  }
  int one_stage = s->nstage == s->ndev && s->placement[0] == 'l';
  for (int d = 0; d < s->ndev; d++) {
    const IrDevice *dv = &s->devs[d];
    /* worst case per op: "BW(2147483647,2147483647) " plus send/recv words */
    size_t need = (size_t)dv->nops * 48 + 64;
    if (b->len + need + 1 > b->cap) {
      size_t cap = b->cap ? b->cap : 4096;
      while (cap < b->len + need + 1) cap *= 2;
      char *nd = realloc(b->data, cap);
      if (!nd) arena_out_of_memory(cap);
      b->data = nd;
      b->cap = cap;
    }
    char *p = b->data + b->len;
    p += sprintf(p, "  device %d {", d);
    for (int i = 0; i < dv->nops; i++) {
      const IrOp *op = &dv->ops[i];
      *p++ = ' ';
      if (op->flags & IR_FLAG_OVERLAP) { memcpy(p, "overlap { ", 10); p += 10; }
      if (op->kind <= IR_BW) { /* the common case, without snprintf */
        const char *k = ir_kind_name(op->kind);
        while (*k) *p++ = *k++;
        *p++ = '(';
        p = put_int(p, op->mb);
        if (!one_stage) { *p++ = ','; p = put_int(p, op->stage); }
        *p++ = ')';
      } else {
        p += ir_format_op(s, op, p, 48);
      }
      if (i > 0 && (dv->ops[i - 1].flags & IR_FLAG_OVERLAP)) { memcpy(p, " }", 2); p += 2; }
    }
    memcpy(p, " }\n", 4);
    p += 3;
    b->len = (size_t)(p - b->data);
  }
  sb_puts(b, "}\n");
}

int cmd_expand(Compilation *c) {
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  if (!s || c->diag.errors) {
    diag_summary(&c->diag);
    return io ? PPSC_USAGE : PPSC_INVALID;
  }
  StrBuf b = {0};
  expand_write(s, &b);
  int rc = PPSC_OK;
  if (c->opt->out) {
    if (write_file_atomic(c->opt->out, b.data, b.len)) rc = PPSC_USAGE;
  } else if (fwrite(b.data, 1, b.len, stdout) != b.len) {
    rc = PPSC_USAGE;
  }
  sb_free(&b);
  diag_summary(&c->diag);
  return rc;
}
