/* parse.h: state shared by the flex scanner (grammar/pps.l), the bison parser
 * (grammar/pps.y) and the AST constructors in parse.c. Private to the front end. */
#ifndef PPS_PARSE_H
#define PPS_PARSE_H
#include <stdint.h>
#include "ast.h"

/* A token's or rule's extent: start line/col and end (exclusive) line/col. */
typedef struct Loc { uint32_t line, col, eline, ecol, off; } Loc; /* off: byte offset of the start */

typedef struct OpenBrace {
  Loc loc;        /* where '{' was */
  int opener;     /* token that opened the construct (DEVICE, FOR, ...), or 0 */
  uint32_t indent;/* column of the first non-blank byte of its line */
} OpenBrace;

typedef struct ParseState {
  Arena *arena;
  Diag *diag;
  Symtab *syms;
  uint32_t file;
  const char *text;
  size_t size;
  void *scanner;          /* flex yyscan_t */
  uint32_t line, col, off; /* scanner position (next byte) */
  int invalid_byte;       /* value of the last INVALID token */
  ParseResult *result;
  /* tracking for messages */
  int prev_tok;           /* token before the one just read */
  int last_tok;           /* token just read */
  int head_tok;           /* first token of the current statement */
  Loc head_loc;
  Loc comment_loc;        /* where an open block comment started */
  Loc prev_end, last_end; /* end of the token before the last, and of the last */
  int last_opener;        /* latest DEVICE/FOR/IF/... keyword seen */
  OpenBrace braces[AST_MAX_NEST + 2];
  int nbraces;            /* open '{' */
  OpenBrace suspect;      /* first block closed by a '}' left of its indentation */
  int has_suspect;
  int nparens;            /* open '(' and '[' */
  /* the `if`s of the current statement not yet closed by their `else`, for
   * "expected 'else'" (the outermost 16 are remembered; deeper ones only counted) */
  Loc conds[16];
  uint8_t cond_then[16];  /* its `then` was read */
  int nconds;
  int fatal;              /* stop: nesting limit, scanner trouble */
  int depth_reported;
} ParseState;

typedef struct KvList { KeyVal *head, *tail; } KvList;
typedef struct ClauseList { OffloadClause *head, *tail; } ClauseList;
typedef struct ParamList { Param *head, *tail; int n; } ParamList;

Span loc_span(const ParseState *ps, Loc l);
Expr *ast_int(ParseState *ps, Loc l, int64_t v);
Expr *ast_real(ParseState *ps, Loc l, double v);
Expr *ast_bool(ParseState *ps, Loc l, int v);
Expr *ast_name(ParseState *ps, Loc l, Sym s);
Expr *ast_unary(ParseState *ps, Loc l, int op, Expr *a);
Expr *ast_binary(ParseState *ps, Loc l, int op, Expr *a, Expr *b);
Expr *ast_call(ParseState *ps, Loc l, Sym s, ExprList args);
Expr *ast_cond(ParseState *ps, Loc l, Expr *c, Expr *a, Expr *b);
void ast_list_push(ParseState *ps, ExprList *l, Expr *e);
Stmt *ast_stmt(ParseState *ps, int kind, Loc l);
void ast_append(StmtList *l, Stmt *s);
#endif
