/* parse.c: the symbol table and the AST constructors the grammar (grammar/pps.y)
 * calls. Constructors bound the depth of expression trees so that elaboration's
 * recursive evaluation can never run out of C stack. */
#include "parse.h"
#include <string.h>

static uint32_t hash_str(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

Sym sym_intern(Symtab *t, const char *s, size_t len) {
  if (t->n + 1 >= t->hcap / 2) {
    int ncap = t->hcap ? 2 * t->hcap : 256;
    uint32_t *nh = arena_alloc(t->arena, (size_t)ncap * sizeof *nh);
    for (int i = 0; i < t->hcap; i++) {
      uint32_t sym = t->hash[i];
      if (!sym) continue;
      const char *nm = t->names[sym];
      uint32_t h = hash_str(nm, strlen(nm)) & (uint32_t)(ncap - 1);
      while (nh[h]) h = (h + 1) & (uint32_t)(ncap - 1);
      nh[h] = sym;
    }
    t->hash = nh;
    t->hcap = ncap;
  }
  if (t->n == 0) { /* symbol 0 is "none" */
    const char **nn = arena_alloc(t->arena, 64 * sizeof *nn);
    t->names = nn;
    t->cap = 64;
    t->names[0] = "";
    t->n = 1;
  }
  uint32_t h = hash_str(s, len) & (uint32_t)(t->hcap - 1);
  while (t->hash[h]) {
    const char *nm = t->names[t->hash[h]];
    if (strncmp(nm, s, len) == 0 && nm[len] == 0) return (Sym)t->hash[h];
    h = (h + 1) & (uint32_t)(t->hcap - 1);
  }
  if (t->n >= t->cap) {
    t->names = arena_grow(t->arena, t->names, (size_t)t->cap * sizeof *t->names, (size_t)t->cap * 2 * sizeof *t->names);
    t->cap *= 2;
  }
  Sym sym = t->n++;
  t->names[sym] = arena_strndup(t->arena, s, len);
  t->hash[h] = (uint32_t)sym;
  return sym;
}

const char *sym_name(const Symtab *t, Sym s) { return s > 0 && s < t->n ? t->names[s] : "?"; }

Span loc_span(const ParseState *ps, Loc l) {
  Span s = {ps->file, l.line, l.col, 1};
  if (l.eline == l.line && l.ecol > l.col) s.len = l.ecol - l.col;
  return s;
}

static Expr *node(ParseState *ps, int kind, Loc l) {
  Expr *e = arena_alloc(ps->arena, sizeof *e);
  e->kind = (uint8_t)kind;
  e->span = loc_span(ps, l);
  e->depth = 1;
  return e;
}

Expr *ast_int(ParseState *ps, Loc l, int64_t v) { Expr *e = node(ps, EX_INT, l); e->u.i = v; return e; }
Expr *ast_real(ParseState *ps, Loc l, double v) { Expr *e = node(ps, EX_REAL, l); e->u.r = v; return e; }
Expr *ast_bool(ParseState *ps, Loc l, int v) { Expr *e = node(ps, EX_BOOL, l); e->u.i = v; return e; }
Expr *ast_name(ParseState *ps, Loc l, Sym s) { Expr *e = node(ps, EX_NAME, l); e->sym = s; return e; }

static void check_depth(ParseState *ps, Expr *e, int depth) {
  if (depth > AST_MAX_EXPR_DEPTH) {
    if (!ps->depth_reported)
      diag_error(ps->diag, e->span, "expression too deeply nested (more than %d levels)", AST_MAX_EXPR_DEPTH);
    ps->depth_reported = 1;
    ps->result->fatal = 1;
    depth = AST_MAX_EXPR_DEPTH;
  }
  e->depth = (uint16_t)depth;
}

Expr *ast_unary(ParseState *ps, Loc l, int op, Expr *a) {
  Expr *e = node(ps, EX_UNARY, l);
  e->op = (uint8_t)op;
  e->u.bin.a = a;
  check_depth(ps, e, a->depth + 1);
  return e;
}

Expr *ast_binary(ParseState *ps, Loc l, int op, Expr *a, Expr *b) {
  Expr *e = node(ps, EX_BINARY, l);
  e->op = (uint8_t)op;
  e->u.bin.a = a;
  e->u.bin.b = b;
  check_depth(ps, e, (a->depth > b->depth ? a->depth : b->depth) + 1);
  return e;
}

Expr *ast_call(ParseState *ps, Loc l, Sym s, ExprList args) {
  Expr *e = node(ps, EX_CALL, l);
  e->sym = s;
  e->nargs = args.n;
  e->u.args = args.v;
  int d = 0;
  for (int i = 0; i < args.n; i++)
    if (args.v[i]->depth > d) d = args.v[i]->depth;
  check_depth(ps, e, d + 1);
  return e;
}

/* if c then a else b: the three operands in args[0..3) */
Expr *ast_cond(ParseState *ps, Loc l, Expr *c, Expr *a, Expr *b) {
  Expr *e = node(ps, EX_COND, l);
  Expr **v = arena_alloc(ps->arena, 3 * sizeof *v);
  v[0] = c;
  v[1] = a;
  v[2] = b;
  e->nargs = 3;
  e->u.args = v;
  int d = c->depth;
  if (a->depth > d) d = a->depth;
  if (b->depth > d) d = b->depth;
  check_depth(ps, e, d + 1);
  return e;
}

/* Lists start small: most are pass arguments (one or two). */
void ast_list_push(ParseState *ps, ExprList *l, Expr *e) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 2;
    l->v = arena_grow(ps->arena, l->v, (size_t)l->cap * sizeof *l->v, (size_t)cap * sizeof *l->v);
    l->cap = cap;
  }
  l->v[l->n++] = e;
}

Stmt *ast_stmt(ParseState *ps, int kind, Loc l) {
  Stmt *s = arena_alloc(ps->arena, sizeof *s);
  s->kind = (uint8_t)kind;
  s->span = loc_span(ps, l);
  return s;
}

void ast_append(StmtList *l, Stmt *s) {
  if (l->tail) l->tail->next = s;
  else l->head = s;
  l->tail = s;
}
