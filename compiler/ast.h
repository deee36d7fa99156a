/* ast.h: the syntax tree the parser (grammar/pps.y) builds and elaboration (elab.c)
 * walks. Every node is allocated in the compilation's arena and keeps the Span of
 * the text it came from. Identifiers are interned to small integers (Sym) so that
 * elaboration never compares strings in a loop. Nothing here knows about the IR. */
#ifndef PPS_AST_H
#define PPS_AST_H
#include <stdint.h>
#include "arena.h"
#include "diag.h"

typedef int32_t Sym; /* index into the symbol table; 0 = none */

/* Expression kinds. */
typedef enum ExprKind {
  EX_INT,    /* integer literal: i */
  EX_REAL,   /* real literal: r */
  EX_BOOL,   /* true / false: i */
  EX_NAME,   /* identifier: sym */
  EX_UNARY,  /* op a: '-' or 'n' (not) */
  EX_BINARY, /* a op b: + - * / d(div) m(mod) < > l(<=) g(>=) e(==) n(!=) & (and) | (or) */
  EX_CALL,   /* sym(args[0..nargs)) */
  EX_COND    /* if args[0] then args[1] else args[2] (nargs = 3) */
} ExprKind;

/* Expression node depth limit: deeper trees are a syntax error (no deep recursion). */
enum { AST_MAX_EXPR_DEPTH = 400, AST_MAX_NEST = 256 };

typedef struct Expr {
  uint8_t kind;    /* ExprKind */
  uint8_t op;      /* operator character for UNARY/BINARY */
  uint8_t errored; /* an error was already reported here (report once per node) */
  uint16_t depth;  /* height of this subtree */
  int32_t nargs;   /* CALL */
  Sym sym;         /* NAME, CALL */
  Span span;
  union {
    int64_t i;
    double r;
    struct { struct Expr *a, *b; } bin;
    struct Expr **args;
  } u;
  const struct XProg *prog; /* elaboration's compiled form of this expression (elab.c), made on
                               first use; NULL = not made yet */
} Expr;

typedef struct ExprList { Expr **v; int n, cap; } ExprList;

/* key = value pairs (cost, memory, model, hardware) and named arguments of `use`. */
typedef struct KeyVal {
  Sym key;         /* 0 for a positional argument */
  Span span;       /* the key (or the argument) */
  Expr *value;
  struct KeyVal *next;
} KeyVal;

/* Statement kinds; the comment says which Stmt fields each one uses. */
typedef enum StmtKind {
  ST_DEVICES, ST_MICROBATCHES, ST_STAGES,
  ST_PLACEMENT,   /* sym = linear|interleaved|vshape (e1 = v), or list (sym 0) */
  ST_COST,        /* kv; e1 = stage for `cost stage E:` */
  ST_MEMORY,      /* kv; e1 = stage */
  ST_MODEL, ST_HARDWARE, /* kv */
  ST_OFFLOAD,     /* clauses: all, ratio E, stages E..E, microbatches E..E */
  ST_VOCAB,       /* sym = the word after vocab (parallel), e1 = mode */
  ST_LET,         /* sym = e1 */
  ST_REQUIRE,     /* e1, str */
  ST_EXPECT,      /* sym = metric, e1 = index or NULL, op = cmp, e2 = value */
  ST_USE,         /* sym = schedule, kv = args */
  ST_FOR,         /* sym in e1..e2 step e3 { body } */
  ST_IF,          /* if e1 { body } else { els } */
  ST_DEVICE,      /* device e1 { body } */
  ST_BLOCK,       /* block { body } */
  ST_INTERVAL,    /* e1 */
  ST_WRULE,       /* sym */
  ST_SQUEEZE,     /* building block: reorder warm-up and cool-down (block.c) */
  ST_SYNTH,       /* synthesize [KEY = EXPR, ...]: kv (synth.c chooses the order) */
  ST_P2P,        /* p2p buffered|both: sym = the word (span2): the point-to-point model to prove */
  ST_PROFILE,     /* cost profile "FILE": sym = the word, str = the path (span2) */
  ST_PASS,        /* op = IrKind, list = arguments, xfer (send/recv), sym = collective; e3 = `at` slot */
  ST_EMPTY,       /* unused: `;` alone produces no node */
  ST_OVERLAP,     /* overlap { pass pass }: body = the two passes (overlap.c) */
  ST_RECOMPUTE    /* clauses: all, ratio E, stages E..E (recompute.c models it) */
} StmtKind;

typedef struct OffloadClause {
  Sym word;        /* all, ratio, stages, microbatches (interned) */
  Span span;
  Expr *lo, *hi;   /* ratio: lo; ranges: lo..hi */
  struct OffloadClause *next;
} OffloadClause;

typedef struct Stmt {
  uint8_t kind;    /* StmtKind */
  uint8_t op;      /* ST_PASS: IrKind; ST_EXPECT: IrCmp */
  uint8_t xfer;    /* ST_PASS send/recv: IrXfer */
  uint8_t coll;    /* ST_PASS coll: IrColl */
  uint8_t errored; /* an error was already reported here (report once per node) */
  Sym sym;
  Span span;       /* the statement's head (keyword or pass) */
  Span span2;      /* a second location (placement name, the `at` clause, the string) */
  Expr *e1, *e2, *e3;
  ExprList list;   /* placement list, pass arguments */
  Sym sym2;        /* placement [E for NAME in A..B]: NAME (e1 = E, e2 = A, e3 = B) */
  union {
    KeyVal *kv;              /* cost, memory, model, hardware, use */
    OffloadClause *clauses;  /* offload, recompute */
    const char *str;         /* require message */
  };
  struct Stmt *body, *els;
  struct Stmt *next;
} Stmt;

typedef struct StmtList { Stmt *head, *tail; } StmtList;

typedef struct Param {
  Sym name;
  Sym type;        /* int, real, bool, or 0 (inferred from the default) */
  Span span;
  Expr *def;       /* may be NULL */
  struct Param *next;
} Param;

typedef struct ScheduleDef {
  Sym name;
  Span span;       /* the name in the header */
  Param *params;
  int nparams;
  Stmt *body;
  uint32_t file;   /* Diag file index */
  int using;       /* elaboration: on the `use` stack now */
  struct ScheduleDef *next;
} ScheduleDef;

typedef struct ImportDecl {
  const char *path;
  Span span;
  struct ImportDecl *next;
} ImportDecl;

/* Symbol table shared by every file of a compilation. */
typedef struct Symtab {
  Arena *arena;
  const char **names;   /* [n] */
  uint32_t *hash;       /* open addressing: sym or 0 */
  int n, cap, hcap;
} Symtab;

Sym sym_intern(Symtab *t, const char *s, size_t len);
const char *sym_name(const Symtab *t, Sym s);

/* What parsing one file produces. */
typedef struct ParseResult {
  ScheduleDef *schedules;  /* in file order */
  ImportDecl *imports;     /* in file order */
  int fatal;               /* nesting limit hit or similar: stop */
  ScheduleDef *schedules_last; /* the lists' ends, so that appending is O(1) */
  ImportDecl *imports_last;
} ParseResult;

/* Parses text (registered as Diag file `file`) into r; errors go to d. */
void parse_file(Arena *a, Diag *d, Symtab *syms, uint32_t file, const char *text, size_t size,
                ParseResult *r);
/* Whether s, whole, is a keyword of the language (grammar/pps.l's own rules). */
int pps_is_keyword(const char *s);
#endif
