/* elab.h: elaboration, the step from the AST (ast.h) to the schedule IR (ir.h):
 * parameters (-D), lets, loops, ifs, `use`, building blocks and literal passes are
 * evaluated into plain per-device op arrays, with the structural checks that need
 * only one op at a time (ranges, placement, duplicates). Private to the front end. */
#ifndef PPS_ELAB_H
#define PPS_ELAB_H
#include "ast.h"
#include "driver.h"
#include "ir.h"

typedef struct ElabInput {
  Arena *arena;
  Diag *diag;
  Symtab *syms;
  ScheduleDef **by_sym;     /* [syms->n]: schedule named by each symbol, or NULL */
  ScheduleDef *main;        /* the schedule to compile */
  const char *file;         /* main file path */
  const Define *defs;       /* -D NAME=VALUE */
  int ndefs;
  long max_ops;
} ElabInput;

/* Elaborates in->main. Returns the IR (possibly with errors reported) or NULL when
 * nothing useful could be built. Sets *usage to 1 when a -D option was wrong. */
IrSchedule *elab_run(const ElabInput *in, int *usage);

/* One pass of a building block: microbatch 0's `kind(stage) at slot`. */
typedef struct BlockEntry {
  uint8_t kind;     /* IR_F, IR_B, IR_W, IR_BW */
  int32_t stage;
  int64_t slot;
  Span span;
} BlockEntry;

enum { BLOCK_W_SLOT, BLOCK_W_EAGER, BLOCK_W_FILL };

/* Repeats a block (stage_dev: the placement) for every microbatch and appends the resulting per-device orders
 * to s (see block.c for the ordering rule). Returns 0, or -1 after reporting an
 * error (too many ops, slot overflow). */
int block_expand(Arena *a, Diag *d, IrSchedule *s, const int32_t *stage_dev, const BlockEntry *e, int n, int64_t interval,
                 int w_rule, Span at, long max_ops);
#endif
