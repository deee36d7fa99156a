/* pps.y: the PPS grammar (bison, pure, with locations). Builds the AST of ast.h in
 * the arena (so no %destructor is needed: nothing is owned by a semantic value).
 * Syntax errors are reported by yyreport_syntax_error below in the project's style
 * ("expected ';' after 'devices' statement"); `error` rules resynchronise at ';' and
 * '}' so that one file reports all its mistakes. Nesting is bounded by the token
 * wrapper (pps_yylex), so hostile input cannot exhaust the C stack later. */
%require "3.5"
%define api.pure full
%define api.prefix {pps_yy}
%define api.location.type {Loc}
%define parse.error custom
%locations
%expect 0
%parse-param {ParseState *ps}
%lex-param {ParseState *ps}

%code requires {
#include "parse.h"
}

%code {
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                         \
  do {                                                                      \
    if (N) {                                                                \
      (Cur).line = YYRHSLOC(Rhs, 1).line; (Cur).col = YYRHSLOC(Rhs, 1).col; \
      (Cur).off = YYRHSLOC(Rhs, 1).off;                                     \
      (Cur).eline = YYRHSLOC(Rhs, N).eline; (Cur).ecol = YYRHSLOC(Rhs, N).ecol; \
    } else {                                                                \
      (Cur).line = (Cur).eline = YYRHSLOC(Rhs, 0).eline;                    \
      (Cur).col = (Cur).ecol = YYRHSLOC(Rhs, 0).ecol;                       \
      (Cur).off = YYRHSLOC(Rhs, 0).off;                                     \
    }                                                                       \
  } while (0)

static int pps_yylex(PPS_YYSTYPE *lval, Loc *lloc, ParseState *ps);
static void pps_yyerror(Loc *lloc, ParseState *ps, const char *msg);
#define SP(l) loc_span(ps, (l))

static Stmt *pass_stmt(ParseState *ps, Loc l, int kind, ExprList args) {
  Stmt *s = ast_stmt(ps, ST_PASS, l);
  s->op = (uint8_t)kind;
  s->list = args;
  return s;
}
static KeyVal *kv_new(ParseState *ps, Loc l, Sym key, Expr *v) {
  KeyVal *k = arena_alloc(ps->arena, sizeof *k);
  k->key = key;
  k->span = SP(l);
  k->value = v;
  return k;
}
static void kv_add(KvList *l, KeyVal *k) {
  if (l->tail) l->tail->next = k; else l->head = k;
  l->tail = k;
}
}

%union {
  int64_t i;
  double r;
  Sym sym;
  const char *str;
  Expr *e;
  ExprList el;
  Stmt *st;
  StmtList sl;
  KeyVal *kv;
  KvList kvl;
  OffloadClause *cl;
  ClauseList cll;
  Param *pa;
  ParamList pal;
}

%token <sym> IDENT "identifier"
%token <i> INT "integer"
%token <r> REAL "real number"
%token <str> STRING "string"
%token <i> INVALID "invalid character"
%token SCHEDULE "'schedule'" IMPORT "'import'" DEVICES "'devices'" MICROBATCHES "'microbatches'"
%token STAGES "'stages'" PLACEMENT "'placement'" COST "'cost'" MEMORY "'memory'"
%token MODEL "'model'" HARDWARE "'hardware'" OFFLOAD "'offload'" RELOAD "'reload'" RECOMPUTE "'recompute'"
%token VOCAB "'vocab'" LET "'let'" REQUIRE "'require'" ELSE "'else'" EXPECT "'expect'"
%token USE "'use'" FOR "'for'" IN "'in'" STEP "'step'" IF "'if'" THEN "'then'" DEVICE "'device'"
%token BLOCK "'block'" AT "'at'" INTERVAL "'interval'" W_RULE "'w_rule'" SQUEEZE "'squeeze'"
%token TRUE "'true'" FALSE "'false'" AND "'and'" OR "'or'" NOT "'not'" DIV "'div'" MOD "'mod'"
%token ALL "'all'" SEND "'send'" RECV "'recv'" COLL "'coll'"
%token SYNTHESIZE "'synthesize'" P2P "'p2p'"
%token OVERLAP "'overlap'"
%token P_F "'F'" P_B "'B'" P_W "'W'" P_BW "'BW'" P_IF "'IF'" P_IB "'IB'" P_S "'S'" P_T "'T'"
%token DOTDOT "'..'" EQ "'=='" NE "'!='" LE "'<='" GE "'>='"
%token '<' "'<'" '>' "'>'" '=' "'='" '+' "'+'" '-' "'-'" '*' "'*'" '/' "'/'"
%token '(' "'('" ')' "')'" '{' "'{'" '}' "'}'" '[' "'['" ']' "']'" ',' "','" ';' "';'" ':' "':'"

%left OR
%left AND
%precedence NOT
%nonassoc '<' '>' LE GE EQ NE
%left '+' '-'
%left '*' '/' DIV MOD
%precedence UMINUS

%type <e> expr opexpr primary opt_step opt_index
%type <el> args opt_args
%type <st> stmt pass if_stmt
%type <sl> stmts body
%type <kv> kv uarg
%type <kvl> kvs mkvs uargs opt_uargs
%type <cl> clause
%type <cll> clauses
%type <pa> param
%type <pal> params opt_params
%type <i> pkind xkind cmp
%type <sym> mkey

%%

file: %empty
    | file item
    ;

item: IMPORT STRING semi {
        ImportDecl *d = arena_alloc(ps->arena, sizeof *d);
        d->path = $2;
        d->span = SP(@2);
        ImportDecl **p = ps->result->imports_last ? &ps->result->imports_last->next : &ps->result->imports;
        *p = ps->result->imports_last = d;
      }
    | SCHEDULE IDENT opt_params body {
        ScheduleDef *d = arena_alloc(ps->arena, sizeof *d);
        d->name = $2;
        d->span = SP(@2);
        d->params = $3.head;
        d->nparams = $3.n;
        d->body = $4.head;
        d->file = ps->file;
        ScheduleDef **p = ps->result->schedules_last ? &ps->result->schedules_last->next : &ps->result->schedules;
        *p = ps->result->schedules_last = d;
      }
    | error ';'
    | error '}'
    ;

opt_params: %empty { $$ = (ParamList){0}; }
    | '(' ')' { $$ = (ParamList){0}; }
    | '(' params ')' { $$ = $2; }
    | '(' params error { $$ = $2; }  /* a missing ')': go on with the body */
    ;

params: param { $$ = (ParamList){$1, $1, 1}; }
    | params ',' param { $$ = $1; $$.tail->next = $3; $$.tail = $3; $$.n++; }
    ;

param: IDENT { $$ = arena_alloc(ps->arena, sizeof *$$); $$->name = $1; $$->span = SP(@1); }
    | IDENT '=' expr { $$ = arena_alloc(ps->arena, sizeof *$$); $$->name = $1; $$->span = SP(@1); $$->def = $3; }
    | IDENT ':' IDENT { $$ = arena_alloc(ps->arena, sizeof *$$); $$->name = $1; $$->span = SP(@1); $$->type = $3; }
    | IDENT ':' IDENT '=' expr {
        $$ = arena_alloc(ps->arena, sizeof *$$); $$->name = $1; $$->span = SP(@1); $$->type = $3; $$->def = $5;
      }
    ;

body: '{' stmts '}' { $$ = $2; }
    | '{' stmts error '}' { $$ = $2; }
    ;

stmts: %empty { $$ = (StmtList){0}; }
    | stmts stmt { $$ = $1; if ($2) ast_append(&$$, $2); }
    ;

stmt: DEVICES expr semi { $$ = ast_stmt(ps, ST_DEVICES, @1); $$->e1 = $2; }
    | MICROBATCHES expr semi { $$ = ast_stmt(ps, ST_MICROBATCHES, @1); $$->e1 = $2; }
    | STAGES expr semi { $$ = ast_stmt(ps, ST_STAGES, @1); $$->e1 = $2; }
    | PLACEMENT IDENT semi { $$ = ast_stmt(ps, ST_PLACEMENT, @1); $$->sym = $2; $$->span2 = SP(@2); }
    | PLACEMENT IDENT '(' expr ')' semi {
        $$ = ast_stmt(ps, ST_PLACEMENT, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $4;
      }
    | PLACEMENT '[' args ']' semi { $$ = ast_stmt(ps, ST_PLACEMENT, @1); $$->list = $3; $$->span2 = SP(@2); }
    | PLACEMENT '[' expr FOR IDENT IN expr DOTDOT expr ']' semi {
        $$ = ast_stmt(ps, ST_PLACEMENT, @1); $$->e1 = $3; $$->sym2 = $5; $$->e2 = $7; $$->e3 = $9; $$->span2 = SP(@2);
      }
    | COST kvs semi { $$ = ast_stmt(ps, ST_COST, @1); $$->kv = $2.head; }
    | COST IDENT expr ':' kvs semi {
        $$ = ast_stmt(ps, ST_COST, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $3; $$->kv = $5.head;
      }
    | MEMORY kvs semi { $$ = ast_stmt(ps, ST_MEMORY, @1); $$->kv = $2.head; }
    | MEMORY IDENT expr ':' kvs semi {
        $$ = ast_stmt(ps, ST_MEMORY, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $3; $$->kv = $5.head;
      }
    | MODEL '{' mkvs '}' { $$ = ast_stmt(ps, ST_MODEL, @1); $$->kv = $3.head; }
    | HARDWARE '{' mkvs '}' { $$ = ast_stmt(ps, ST_HARDWARE, @1); $$->kv = $3.head; }
    | OFFLOAD clauses semi { $$ = ast_stmt(ps, ST_OFFLOAD, @1); $$->clauses = $2.head; }
    | OFFLOAD IDENT semi { /* offload auto; (synth.c chooses) */
        $$ = ast_stmt(ps, ST_OFFLOAD, @1); $$->sym = $2; $$->span2 = SP(@2);
      }
    | RECOMPUTE clauses semi { $$ = ast_stmt(ps, ST_RECOMPUTE, @1); $$->clauses = $2.head; }
    | VOCAB IDENT expr semi { $$ = ast_stmt(ps, ST_VOCAB, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $3; }
    | LET IDENT '=' expr semi { $$ = ast_stmt(ps, ST_LET, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $4; }
    | REQUIRE expr ELSE STRING semi { $$ = ast_stmt(ps, ST_REQUIRE, @1); $$->e1 = $2; $$->str = $4; }
    | EXPECT IDENT opt_index cmp expr semi {
        $$ = ast_stmt(ps, ST_EXPECT, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $3; $$->op = (uint8_t)$4; $$->e2 = $5;
        $$->span = SP(@$);
      }
    | USE IDENT '(' opt_uargs ')' semi { $$ = ast_stmt(ps, ST_USE, @2); $$->sym = $2; $$->kv = $4.head; }
    | FOR IDENT IN expr DOTDOT expr opt_step body {
        $$ = ast_stmt(ps, ST_FOR, @1); $$->sym = $2; $$->span2 = SP(@2); $$->e1 = $4; $$->e2 = $6; $$->e3 = $7;
        $$->body = $8.head;
      }
    | if_stmt { $$ = $1; }
    | DEVICE expr body { $$ = ast_stmt(ps, ST_DEVICE, @1); $$->e1 = $2; $$->body = $3.head; }
    | BLOCK body { $$ = ast_stmt(ps, ST_BLOCK, @1); $$->body = $2.head; }
    | INTERVAL expr semi { $$ = ast_stmt(ps, ST_INTERVAL, @1); $$->e1 = $2; }
    | W_RULE IDENT semi { $$ = ast_stmt(ps, ST_WRULE, @1); $$->sym = $2; $$->span2 = SP(@2); }
    | SQUEEZE semi { $$ = ast_stmt(ps, ST_SQUEEZE, @1); }
    | SYNTHESIZE semi { $$ = ast_stmt(ps, ST_SYNTH, @1); }
    | P2P IDENT semi { $$ = ast_stmt(ps, ST_P2P, @1); $$->sym = $2; $$->span2 = SP(@2); }
    | SYNTHESIZE kvs semi { $$ = ast_stmt(ps, ST_SYNTH, @1); $$->kv = $2.head; }
    | COST IDENT STRING semi { $$ = ast_stmt(ps, ST_PROFILE, @1); $$->sym = $2; $$->span2 = SP(@3); $$->str = $3; }
    | OVERLAP '{' pass pass '}' { $$ = ast_stmt(ps, ST_OVERLAP, @1); $$->body = $3; $3->next = $4; }
    | pass { $$ = $1; }
    | pass AT expr semi { $$ = $1; $$->e3 = $3; $$->span2 = SP(@3); }
    | ';' { $$ = NULL; }
    | error ';' { $$ = NULL; }
    ;

/* A missing ';' is reported once and then taken as written, so that parsing goes
 * on at the next statement instead of skipping to the next ';'. */
semi: ';'
    | error
    ;

if_stmt: IF expr body { $$ = ast_stmt(ps, ST_IF, @1); $$->e1 = $2; $$->body = $3.head; }
    | IF expr body ELSE body { $$ = ast_stmt(ps, ST_IF, @1); $$->e1 = $2; $$->body = $3.head; $$->els = $5.head; }
    | IF expr body ELSE if_stmt { $$ = ast_stmt(ps, ST_IF, @1); $$->e1 = $2; $$->body = $3.head; $$->els = $5; }
    ;

opt_step: %empty { $$ = NULL; }
    | STEP expr { $$ = $2; }
    ;

pass: pkind '(' args ')' { $$ = pass_stmt(ps, @$, (int)$1, $3); }
    | SEND xkind '(' args ')' { $$ = pass_stmt(ps, @$, IR_SEND, $4); $$->xfer = (uint8_t)$2; }
    | RECV xkind '(' args ')' { $$ = pass_stmt(ps, @$, IR_RECV, $4); $$->xfer = (uint8_t)$2; }
    | COLL IDENT '(' args ')' { $$ = pass_stmt(ps, @$, IR_COLL, $4); $$->sym = $2; $$->span2 = SP(@2); }
    ;

pkind: P_F { $$ = IR_F; } | P_B { $$ = IR_B; } | P_W { $$ = IR_W; } | P_BW { $$ = IR_BW; }
    | P_IF { $$ = IR_IF; } | P_IB { $$ = IR_IB; } | P_S { $$ = IR_S; } | P_T { $$ = IR_T; }
    | OFFLOAD { $$ = IR_OFFLOAD; } | RELOAD { $$ = IR_RELOAD; }
    ;

xkind: P_F { $$ = IR_XFER_ACT; } | P_B { $$ = IR_XFER_GRAD; } | P_BW { $$ = IR_XFER_GRAD; } ;

cmp: '<' { $$ = IR_CMP_LT; } | LE { $$ = IR_CMP_LE; } | EQ { $$ = IR_CMP_EQ; }
    | NE { $$ = IR_CMP_NE; } | GE { $$ = IR_CMP_GE; } | '>' { $$ = IR_CMP_GT; }
    ;

opt_index: %empty { $$ = NULL; }
    | '[' expr ']' { $$ = $2; }
    ;

kvs: kv { $$ = (KvList){0}; kv_add(&$$, $1); }
    | kvs ',' kv { $$ = $1; kv_add(&$$, $3); }
    ;

kv: IDENT '=' expr { $$ = kv_new(ps, @1, $1, $3); }
    ;

mkvs: %empty { $$ = (KvList){0}; }
    | mkvs mkey '=' expr ';' { $$ = $1; kv_add(&$$, kv_new(ps, @2, $2, $4)); }
    | mkvs error ';' { $$ = $1; }
    ;

mkey: IDENT { $$ = $1; }
    | VOCAB { $$ = sym_intern(ps->syms, "vocab", 5); }
    | MEMORY { $$ = sym_intern(ps->syms, "memory", 6); }
    ;

clauses: clause { $$ = (ClauseList){$1, $1}; }
    | clauses clause { $$ = $1; $$.tail->next = $2; $$.tail = $2; }
    ;

clause: ALL {
        $$ = arena_alloc(ps->arena, sizeof *$$); $$->word = sym_intern(ps->syms, "all", 3); $$->span = SP(@1);
      }
    | IDENT expr { /* ratio EXPR (elaboration checks the word) */
        $$ = arena_alloc(ps->arena, sizeof *$$); $$->word = $1; $$->span = SP(@1);
        $$->lo = $2;
      }
    | STAGES expr DOTDOT expr {
        $$ = arena_alloc(ps->arena, sizeof *$$); $$->word = sym_intern(ps->syms, "stages", 6); $$->span = SP(@1);
        $$->lo = $2; $$->hi = $4;
      }
    | MICROBATCHES expr DOTDOT expr {
        $$ = arena_alloc(ps->arena, sizeof *$$); $$->word = sym_intern(ps->syms, "microbatches", 12); $$->span = SP(@1);
        $$->lo = $2; $$->hi = $4;
      }
    ;

opt_uargs: %empty { $$ = (KvList){0}; }
    | uargs { $$ = $1; }
    ;

uargs: uarg { $$ = (KvList){0}; kv_add(&$$, $1); }
    | uargs ',' uarg { $$ = $1; kv_add(&$$, $3); }
    ;

uarg: expr { $$ = kv_new(ps, @1, 0, $1); }
    | IDENT '=' expr { $$ = kv_new(ps, @1, $1, $3); }
    ;

opt_args: %empty { $$ = (ExprList){0}; }
    | args { $$ = $1; }
    ;

args: expr { $$ = (ExprList){0}; ast_list_push(ps, &$$, $1); }
    | args ',' expr { $$ = $1; ast_list_push(ps, &$$, $3); }
    ;

/* A conditional expression is a whole expression, never an operand: the else branch
 * extends as far as possible, and `1 + if ...` is a syntax error (parenthesize it).
 * So expr (anything that takes a value) is opexpr or a conditional, and the
 * operators combine opexprs only. */
expr: opexpr { $$ = $1; }
    | IF expr THEN expr ELSE expr { $$ = ast_cond(ps, @$, $2, $4, $6); }
    ;

opexpr: opexpr OR opexpr { $$ = ast_binary(ps, @$, '|', $1, $3); }
    | opexpr AND opexpr { $$ = ast_binary(ps, @$, '&', $1, $3); }
    | NOT opexpr { $$ = ast_unary(ps, @$, 'n', $2); }
    | opexpr '<' opexpr { $$ = ast_binary(ps, @$, '<', $1, $3); }
    | opexpr '>' opexpr { $$ = ast_binary(ps, @$, '>', $1, $3); }
    | opexpr LE opexpr { $$ = ast_binary(ps, @$, 'l', $1, $3); }
    | opexpr GE opexpr { $$ = ast_binary(ps, @$, 'g', $1, $3); }
    | opexpr EQ opexpr { $$ = ast_binary(ps, @$, 'e', $1, $3); }
    | opexpr NE opexpr { $$ = ast_binary(ps, @$, 'n', $1, $3); }
    | opexpr '+' opexpr { $$ = ast_binary(ps, @$, '+', $1, $3); }
    | opexpr '-' opexpr { $$ = ast_binary(ps, @$, '-', $1, $3); }
    | opexpr '*' opexpr { $$ = ast_binary(ps, @$, '*', $1, $3); }
    | opexpr '/' opexpr { $$ = ast_binary(ps, @$, '/', $1, $3); }
    | opexpr DIV opexpr { $$ = ast_binary(ps, @$, 'd', $1, $3); }
    | opexpr MOD opexpr { $$ = ast_binary(ps, @$, 'm', $1, $3); }
    | '-' opexpr %prec UMINUS { $$ = ast_unary(ps, @$, '-', $2); }
    | primary { $$ = $1; }
    ;

primary: INT { $$ = ast_int(ps, @1, $1); }
    | REAL { $$ = ast_real(ps, @1, $1); }
    | TRUE { $$ = ast_bool(ps, @1, 1); }
    | FALSE { $$ = ast_bool(ps, @1, 0); }
    | IDENT { $$ = ast_name(ps, @1, $1); }
    | P_S { $$ = ast_name(ps, @1, sym_intern(ps->syms, "S", 1)); }
    | IDENT '(' opt_args ')' { $$ = ast_call(ps, @$, $1, $3); }
    | '(' expr ')' { $$ = $2; }
    ;

%%

/* The token wrapper: runs the scanner, then keeps what messages need (statement
 * head, previous token end, open braces) and enforces the nesting limit. */
void *lex_open(ParseState *ps);
void lex_close(void *sc);
int ppsl_lex(PPS_YYSTYPE *lval, Loc *lloc, void *scanner);

static int is_opener(int t) {
  return t == SCHEDULE || t == DEVICE || t == FOR || t == IF || t == ELSE || t == BLOCK || t == MODEL ||
         t == HARDWARE || t == OVERLAP;
}

/* Keeps ps->conds, the `if`s of the current statement still waiting for their
 * `else`, up to date with token t (at l). pps_yylex applies a token only when the
 * next one is read, so that when a syntax error is reported the state describes the
 * tokens before the offending one. Statement `if`s are dropped at their '{'. */
enum { MAX_CONDS = (int)(sizeof ((ParseState *)0)->conds / sizeof (Loc)) };
static void track_cond(ParseState *ps, int t, Loc l) {
  int n = ps->nconds;
  if (t == ';' || t == '{' || t == '}') ps->nconds = 0;
  else if (t == IF) {
    if (n < MAX_CONDS) { ps->conds[n] = l; ps->cond_then[n] = 0; }
    ps->nconds = n + 1;
  } else if (t == THEN) {
    if (n > 0 && n <= MAX_CONDS) ps->cond_then[n - 1] = 1;
  } else if (t == ELSE) {
    if (n > MAX_CONDS || (n > 0 && ps->cond_then[n - 1])) ps->nconds = n - 1;
  }
}

static int pps_yylex(PPS_YYSTYPE *lval, Loc *lloc, ParseState *ps) {
  if (ps->fatal) return PPS_YYEOF;
  track_cond(ps, ps->last_tok, ps->last_end);
  int t = ppsl_lex(lval, lloc, ps->scanner);
  if (t == PPS_YYEOF) { /* end of file: point just after the last token */
    Loc e = ps->last_end;
    if (e.eline == 0) e = (Loc){1, 1, 1, 1, 0};
    *lloc = (Loc){e.eline, e.ecol, e.eline, e.ecol + 1, (uint32_t)ps->size};
  }
  if (t == INVALID) ps->invalid_byte = (int)lval->i;
  if (ps->last_tok == 0 || ps->last_tok == ';' || ps->last_tok == '{' || ps->last_tok == '}') {
    ps->head_tok = t;
    ps->head_loc = *lloc;
  }
  ps->prev_tok = ps->last_tok;
  ps->last_tok = t;
  ps->prev_end = ps->last_end;
  ps->last_end = *lloc;
  /* `if` and `else` open blocks only as statements: a statement `if` starts a
   * statement (or follows a statement `else`), a statement `else` follows '}' */
  if (is_opener(t)) {
    int p = ps->prev_tok, stmt_if = p == 0 || p == ';' || p == '{' || p == '}' ||
                                    (p == ELSE && ps->last_opener == ELSE);
    if ((t != IF || stmt_if) && (t != ELSE || p == '}')) ps->last_opener = t;
  }
  if (t == '{' || t == '(' || t == '[') {
    if (ps->nbraces + ps->nparens >= AST_MAX_NEST) {
      diag_error(ps->diag, loc_span(ps, *lloc), "nesting too deep (more than %d levels)", AST_MAX_NEST);
      ps->fatal = 1;
      ps->result->fatal = 1;
      return PPS_YYEOF;
    }
    if (t == '{') {
      ps->braces[ps->nbraces].loc = *lloc;
      ps->braces[ps->nbraces].opener = ps->last_opener;
      uint32_t ls = lloc->off;
      while (ls > 0 && ps->text[ls - 1] != '\n') ls--;
      uint32_t ind = 1;
      while (ls + ind - 1 < ps->size && (ps->text[ls + ind - 1] == ' ' || ps->text[ls + ind - 1] == '\t')) ind++;
      ps->braces[ps->nbraces].indent = ind;
      ps->nbraces++;
      ps->last_opener = 0;
    } else {
      ps->nparens++;
    }
  } else if (t == '}') {
    if (ps->nbraces > 0) {
      ps->nbraces--;
      /* a '}' left of its block's indentation probably closes an outer block:
       * remember the inner one as the likely unterminated block */
      OpenBrace *o = &ps->braces[ps->nbraces];
      if (!ps->has_suspect && lloc->col < o->indent && o->loc.line != lloc->line) {
        ps->suspect = *o;
        ps->has_suspect = 1;
      }
    }
  } else if (t == ')' || t == ']') {
    if (ps->nparens > 0) ps->nparens--;
  }
  return t;
}

static void pps_yyerror(Loc *lloc, ParseState *ps, const char *msg) {
  if (ps->fatal) return;
  if (!strcmp(msg, "memory exhausted"))
    diag_error(ps->diag, loc_span(ps, *lloc), "too deeply nested (parser stack exhausted)");
  else
    diag_error(ps->diag, loc_span(ps, *lloc), "%s", msg);
  ps->fatal = 1;
  ps->result->fatal = 1;
}

/* Token names without the quotes bison keeps around string aliases. */
static const char *tok_name(yysymbol_kind_t k) {
  const char *n = yysymbol_name(k);
  return n;
}

static const char *opener_name(int t) {
  switch (t) {
  case SCHEDULE: return "schedule body";
  case DEVICE: return "device block";
  case FOR: return "for loop";
  case IF: return "if block";
  case ELSE: return "else block";
  case BLOCK: return "building block";
  case MODEL: return "model block";
  case HARDWARE: return "hardware block";
  case OVERLAP: return "overlap block";
  default: return "block";
  }
}

static int needs_semicolon(int t) {
  switch (t) {
  case DEVICES: case MICROBATCHES: case STAGES: case PLACEMENT: case COST: case MEMORY:
  case VOCAB: case LET: case REQUIRE: case EXPECT: case USE: case INTERVAL: case W_RULE:
  case SQUEEZE: case IMPORT:
  case SYNTHESIZE: case P2P:
    return 1;
  default:
    return 0;
  }
}

static const char *head_name(int t) {
  switch (t) {
  case DEVICES: return "devices"; case MICROBATCHES: return "microbatches"; case STAGES: return "stages";
  case PLACEMENT: return "placement"; case COST: return "cost"; case MEMORY: return "memory";
  case VOCAB: return "vocab"; case LET: return "let"; case REQUIRE: return "require";
  case EXPECT: return "expect"; case USE: return "use"; case INTERVAL: return "interval";
  case W_RULE: return "w_rule"; case SQUEEZE: return "squeeze"; case IMPORT: return "import"; case OFFLOAD: return "offload";
  case RECOMPUTE: return "recompute";
  case SYNTHESIZE: return "synthesize"; case P2P: return "p2p";
  default: return "?";
  }
}

/* The text of the offending token, for "found '...'". */
static void found_text(ParseState *ps, yysymbol_kind_t tok, const Loc *l, char *buf, size_t size) {
  if (tok == YYSYMBOL_YYEOF) { snprintf(buf, size, "end of file"); return; }
  if (tok == YYSYMBOL_INVALID) {
    int c = ps->invalid_byte;
    if (c == 0) snprintf(buf, size, "a NUL byte");
    else if (c >= 0x20 && c < 0x7f) snprintf(buf, size, "'%c'", c);
    else snprintf(buf, size, "byte 0x%02x", c);
    return;
  }
  size_t n = 0;
  if (l->off < ps->size) {
    const char *p = ps->text + l->off;
    while (n < 24 && l->off + n < ps->size && p[n] != '\n' && p[n] != '\r' && p[n] &&
           (l->eline > l->line || l->off + n < l->off + (l->ecol - l->col)))
      n++;
    if (n) {
      snprintf(buf, size, "'%.*s%s'", (int)n, p, n == 24 ? "..." : "");
      return;
    }
  }
  snprintf(buf, size, "%s", tok_name(tok));
}

/* Token groups for messages, by the names bison gives them (its numbering of
 * character tokens shifts whenever a token is added). */
static int in_list(yysymbol_kind_t x, const char *const *names) {
  const char *n = yysymbol_name(x);
  for (; *names; names++)
    if (!strcmp(n, *names)) return 1;
  return 0;
}
static int is_operator(yysymbol_kind_t x) {
  static const char *const ops[] = {"'or'", "'and'", "'=='", "'!='", "'<='", "'>='", "'<'", "'>'", "'+'",
                                    "'-'", "'*'", "'/'", "'div'", "'mod'", NULL};
  return in_list(x, ops);
}
static int is_expr_start(yysymbol_kind_t x) {
  static const char *const st[] = {"integer", "real number", "'true'", "'false'", "identifier", "'('",
                                   "'-'", "'not'", "'S'", "'if'", NULL};
  return in_list(x, st);
}
static int is_stmt_start(yysymbol_kind_t x) {
  static const char *const st[] = {"'devices'", "'microbatches'", "'stages'", "'placement'", "'cost'",
    "'memory'", "'model'", "'hardware'", "'offload'", "'reload'", "'recompute'", "'vocab'", "'let'", "'require'",
    "'expect'", "'use'", "'for'", "'if'", "'device'", "'block'", "'interval'", "'w_rule'", "'squeeze'", "'send'",
    "'recv'", "'coll'", "'synthesize'", "'p2p'", "'overlap'", "'F'", "'B'", "'W'", "'BW'", "'IF'", "'IB'", "'S'", "'T'", "';'", NULL};
  return in_list(x, st);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, ParseState *ps) {
  if (ps->fatal) return 0;
  yysymbol_kind_t tok = yypcontext_token(ctx);
  const Loc *l = yypcontext_location(ctx);
  Span at = loc_span(ps, *l);
  char found[64];
  found_text(ps, tok, l, found, sizeof found);
  if (tok == YYSYMBOL_INVALID) {
    int c = ps->invalid_byte;
    if (c >= 0x20 && c < 0x7f) diag_error(ps->diag, at, "unexpected character '%c'", c);
    else if (c == 0) diag_error(ps->diag, at, "unexpected NUL byte");
    else diag_error(ps->diag, at, "invalid byte 0x%02x in program text", c);
    return 0;
  }
  if (tok == YYSYMBOL_YYEOF && ps->nbraces > 0) {
    OpenBrace *o = ps->has_suspect ? &ps->suspect : &ps->braces[ps->nbraces - 1];
    diag_error(ps->diag, at, "unterminated %s opened at line %u", opener_name(o->opener), o->loc.line);
    diag_note(ps->diag, loc_span(ps, o->loc), "'{' opened here; expected '}'");
    return 0;
  }
  yysymbol_kind_t exp[64];
  int n = yypcontext_expected_tokens(ctx, exp, 64);
  if (n < 0) n = 0;
  int semi = 0, comma = 0, expr = 0, stmt = 0, sched = 0, els = 0, then = 0, brace = 0;
  for (int k = 0; k < n; k++) {
    if (!strcmp(yysymbol_name(exp[k]), "';'")) semi = 1;
    if (!strcmp(yysymbol_name(exp[k]), "'{'")) brace = 1;
    if (exp[k] == YYSYMBOL_ELSE) els = 1;
    if (exp[k] == YYSYMBOL_THEN) then = 1;
    if (!strcmp(yysymbol_name(exp[k]), "','")) comma = 1;
    if (exp[k] == YYSYMBOL_INT) expr = 1;
    if (exp[k] == YYSYMBOL_DEVICE) stmt = 1;
    if (exp[k] == YYSYMBOL_SCHEDULE) sched = 1;
  }
  /* conditional expressions: a missing else, an unparenthesized operand, and
   * `then` and braces mixed up between the expression and the if statement */
  int nc = ps->nconds;
  if (els && nc > 0 && nc <= MAX_CONDS && ps->cond_then[nc - 1]) {
    diag_error(ps->diag, at, "expected 'else' in conditional expression, found %s", found);
    diag_note(ps->diag, loc_span(ps, ps->conds[nc - 1]),
              "conditional expression starts here; it needs both branches: 'if COND then A else B'");
    return 0;
  }
  if (tok == YYSYMBOL_IF && expr) {
    diag_error(ps->diag, at, "a conditional expression that is an operand must be in parentheses: "
               "'(if COND then A else B)'");
    return 0;
  }
  if (then && !strcmp(yysymbol_name(tok), "'{'")) {
    diag_error(ps->diag, at, "expected 'then', found '{' (an 'if' inside an expression is "
               "'if COND then A else B'; braces belong to the if statement)");
    return 0;
  }
  if (brace && tok == YYSYMBOL_THEN) {
    diag_error(ps->diag, at, "expected '{', found 'then' (an if statement is 'if COND { ... }'; "
               "'then' belongs to the conditional expression 'if COND then A else B')");
    return 0;
  }
  if (semi && needs_semicolon(ps->head_tok) && !expr) {
    Loc e = ps->prev_end;
    Loc p = {e.eline, e.ecol, e.eline, e.ecol + 1, 0};
    if (comma)
      diag_error(ps->diag, loc_span(ps, p), "expected ',' or ';' in '%s' statement", head_name(ps->head_tok));
    else
      diag_error(ps->diag, loc_span(ps, p), "expected ';' after '%s' statement", head_name(ps->head_tok));
    return 0;
  }
  if (semi && needs_semicolon(ps->head_tok) && tok != YYSYMBOL_YYEOF && ps->prev_end.eline < l->line) {
    /* the statement ended at the end of the previous line */
    Loc e = ps->prev_end;
    Loc p = {e.eline, e.ecol, e.eline, e.ecol + 1, 0};
    diag_error(ps->diag, loc_span(ps, p), "expected ';' after '%s' statement", head_name(ps->head_tok));
    return 0;
  }
  /* Describe what was expected in groups: "an expression", "a statement", "a
   * comparison", then single tokens; operators that could continue a complete
   * expression are left out (they are never what the user forgot). */
  const char *items[8];
  int ni = 0, arith = 0, cmp = 0;
  for (int k = 0; k < n; k++) {
    yysymbol_kind_t x = exp[k];
    const char *nm = yysymbol_name(x);
    if (!strcmp(nm, "'+'") || x == YYSYMBOL_OR) arith = 1;
    if (!strcmp(nm, "'<'") || x == YYSYMBOL_EQ) cmp = 1;
  }
  if (stmt) items[ni++] = "a statement";
  if (expr) items[ni++] = "an expression";
  if (cmp && !arith) items[ni++] = "a comparison";
  for (int k = 0; k < n && ni < 8; k++) {
    yysymbol_kind_t x = exp[k];
    int skip = 0;
    if (stmt && is_stmt_start(x)) skip = 1;
    if (expr && is_expr_start(x)) skip = 1;
    if ((arith || cmp) && is_operator(x)) skip = 1;
    if (!skip) items[ni++] = tok_name(x);
  }
  if (sched && !stmt) {
    diag_error(ps->diag, at, "expected 'schedule' or 'import', found %s", found);
    return 0;
  }
  if (ni > 0 && ni <= 4) {
    char list[256] = "";
    size_t len = 0;
    for (int k = 0; k < ni && len < sizeof list; k++) {
      const char *sep = k == 0 ? "" : k == ni - 1 ? " or " : ", ";
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep, items[k]);
    }
    diag_error(ps->diag, at, "expected %s, found %s", list, found);
    return 0;
  }
  diag_error(ps->diag, at, "unexpected %s", found);
  return 0;
}

void parse_file(Arena *a, Diag *d, Symtab *syms, uint32_t file, const char *text, size_t size,
                ParseResult *r) {
  ParseState *ps = calloc(1, sizeof *ps);
  if (!ps) { r->fatal = 1; return; }
  ps->arena = a;
  ps->diag = d;
  ps->syms = syms;
  ps->file = file;
  ps->text = text;
  ps->size = size;
  ps->line = 1;
  ps->col = 1;
  ps->result = r;
  ps->scanner = lex_open(ps);
  if (!ps->scanner) {
    diag_error(d, (Span){file, 1, 1, 1}, "cannot start the scanner");
    r->fatal = 1;
    free(ps);
    return;
  }
  pps_yyparse(ps);
  lex_close(ps->scanner);
  free(ps);
}
