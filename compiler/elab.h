/* elab.h: elaboration, the step from the AST (ast.h) to the schedule IR (ir.h):
 * parameters (-D), lets, loops, ifs, `use`, building blocks and literal passes are
 * evaluated into plain per-device op arrays, with the structural checks that need
 * only one op at a time (ranges, placement, duplicates). Private to the front end. */
#ifndef PPS_ELAB_H
#define PPS_ELAB_H
#include "ast.h"
#include "driver.h"
#include "synth.h"
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
  const KeyOverride *keys;  /* --cost / --memory KEY=VALUE */
  int nkeys;
  const char *stdlib_dir;   /* --stdlib: where `synthesize` finds its seeds */
  SynthSeedFn seed;         /* compiles `synthesize`'s seeds into IR (front.c's front_seed) */
  struct ElabOrder *order;  /* out: what the order phase is to do (order.c) */
} ElabInput;

/* Elaborates in->main. Returns the IR (possibly with errors reported) or NULL when
 * nothing useful could be built. Sets *usage to 1 when a -D option was wrong. Fills
 * *in->order with the ordering the file asks for, which the order phase does next
 * (order_run): elaboration itself never synthesizes or squeezes. */
IrSchedule *elab_run(const ElabInput *in, int *usage);

/* One pass of a building block: microbatch 0's `kind(stage) at slot`. */
typedef struct BlockEntry {
  uint8_t kind;     /* IR_F, IR_B, IR_W, IR_BW */
  int32_t stage;
  int64_t slot;
  Span span;
  uint32_t frame;   /* loop bindings of the pass (IrFrame), given to every op made from it */
} BlockEntry;

enum { BLOCK_W_SLOT, BLOCK_W_EAGER, BLOCK_W_FILL };

/* What `squeeze;` needs after expansion: where the block's ops are on each device and
 * their slots (block_expand fills it when given one), and the slot bounds of the
 * steady state: a pass at slot t is warm-up when t < cut1 and t <= cut2, cool-down
 * when t > cut2, steady otherwise. */
typedef struct BlockSqueeze {
  int32_t *start, *count;   /* [ndev]: first op of the block on each device, how many */
  int64_t **slot;           /* [ndev][count]: the slot of each (arena) */
  int64_t cut1, cut2;
  Span span;
} BlockSqueeze;

/* The order phase's work (elab_run fills it; order.c does it): `synthesize;` (the
 * synthesizer chooses every pass) or a `squeeze;`d building block (re-timed). Each
 * only when elaboration went through without an error. */
typedef struct ElabOrder {
  int synth;                /* run synth_run with sopt */
  SynthOptions sopt;
  const BlockSqueeze *sq;   /* run block_squeeze on it (NULL: none) */
} ElabOrder;
/* The order phase, after elaboration: synthesize, then squeeze (order.c). */
void order_run(Arena *a, Diag *d, IrSchedule *s, const ElabOrder *o);

/* Repeats a block (stage_dev: the placement) for every microbatch and appends the resulting per-device orders
 * to s (see block.c for the ordering rule). sq (may be NULL) records the ops for
 * block_squeeze. Returns 0, or -1 after reporting an error (too many ops, slot
 * overflow). */
int block_expand(Arena *a, Diag *d, IrSchedule *s, const int32_t *stage_dev, const BlockEntry *e, int n, int64_t interval,
                 int w_rule, Span at, long max_ops, BlockSqueeze *sq);

/* `squeeze;`: reorders the warm-up and cool-down passes of an expanded block (see
 * block.c) once the stage costs are known (s->stages built). Returns 0, or -1 when
 * out of memory (reported). */
int block_squeeze(Diag *d, IrSchedule *s, const BlockSqueeze *sq);
#endif
