/* block.c: building blocks ("Pipeline Parallelism with Controllable Memory").
 *
 * A block gives, for microbatch 0, the slot at which each pass of each stage starts
 * (`F(s) at t;`), a repeat interval k, and a rule for W. Microbatch i's pass runs at
 * slot t + i*k. Each device's order is its passes sorted by
 *
 *     (slot, kind rank, microbatch, stage)   with kind rank B < BW < W < F
 *
 * so that at a tie a backward runs first (it frees memory). The W rule:
 *   slot  - W(s) at its own written slot, like any pass;
 *   eager - W(i,s) right after B(i,s) (same key as that B, ordered just after it);
 *   fill  - W(i,s) goes into the first slot after B(i,s) that no F, B or BW of that
 *           device occupies and no earlier W took (W's keep the order of their B's).
 * A slot is a unit of the block's time grid, not of real time: the simulator squeezes
 * out empty slots with the real costs. This file only orders; elab.c has already
 * checked stages and slots. */
#include "elab.h"
#include <stdlib.h>
#include <string.h>

typedef struct Item {
  int64_t slot;
  int32_t rank;   /* B 0, BW 1, W 2, F 3 */
  int32_t mb;
  int32_t stage;
  int32_t sub;    /* eager W: 1, ordered right after its B */
  uint8_t kind;
  int32_t entry;  /* index of the BlockEntry (for the span) */
} Item;

static int kind_rank(int k) { return k == IR_B ? 0 : k == IR_BW ? 1 : k == IR_W ? 2 : 3; }

static int item_cmp(const void *pa, const void *pb) {
  const Item *a = pa, *b = pb;
  if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
  if (a->rank != b->rank) return a->rank - b->rank;
  if (a->mb != b->mb) return a->mb < b->mb ? -1 : 1;
  if (a->stage != b->stage) return a->stage < b->stage ? -1 : 1;
  return a->sub - b->sub;
}

int block_expand(Arena *a, Diag *d, IrSchedule *s, const int32_t *stage_dev, const BlockEntry *e, int n, int64_t interval,
                 int w_rule, Span at, long max_ops) {
  int64_t m = s->nmb;
  for (int dev = 0; dev < s->ndev; dev++) {
    /* the items of this device */
    int64_t cnt = 0;
    for (int k = 0; k < n; k++)
      if (stage_dev[e[k].stage] == dev) cnt += (w_rule != BLOCK_W_SLOT && e[k].kind == IR_B) ? 2 : 1;
    if (cnt == 0) continue;
    if (cnt * m + s->total_ops > max_ops) {
      diag_error(d, at, "the schedule generates more than %ld ops (limit: --max-ops)", max_ops);
      return -1;
    }
    Item *it = malloc((size_t)(cnt * m) * sizeof *it);
    if (!it) { diag_error(d, at, "out of memory expanding the building block"); return -1; }
    int64_t ni = 0;
    for (int k = 0; k < n; k++) {
      if (stage_dev[e[k].stage] != dev) continue;
      for (int64_t i = 0; i < m; i++) {
        Item *x = &it[ni++];
        x->slot = e[k].slot + i * interval; /* |slot| <= 2^40, i*interval <= 2^60: no overflow */
        x->rank = kind_rank(e[k].kind);
        x->mb = (int32_t)i;
        x->stage = e[k].stage;
        x->sub = 0;
        x->kind = e[k].kind;
        x->entry = k;
      }
    }
    qsort(it, (size_t)ni, sizeof *it, item_cmp);
    if (w_rule == BLOCK_W_EAGER) {
      int64_t base = ni;
      for (int64_t j = 0; j < base; j++)
        if (it[j].kind == IR_B) {
          Item *w = &it[ni++];
          *w = it[j];
          w->kind = IR_W;
          w->sub = 1;
        }
      qsort(it, (size_t)ni, sizeof *it, item_cmp);
    } else if (w_rule == BLOCK_W_FILL) {
      /* it[0..base) are sorted by slot; occupied slots are theirs */
      int64_t base = ni, p = 0, last = INT64_MIN;
      for (int64_t j = 0; j < base; j++) {
        if (it[j].kind != IR_B) continue;
        int64_t cand = it[j].slot + 1;
        if (last != INT64_MIN && cand <= last) cand = last + 1;
        while (p < base && it[p].slot < cand) p++;
        while (p < base && it[p].slot == cand) {
          cand++;
          while (p < base && it[p].slot < cand) p++;
        }
        Item *w = &it[ni++];
        *w = it[j];
        w->kind = IR_W;
        w->rank = kind_rank(IR_W);
        w->slot = cand;
        last = cand;
      }
      qsort(it, (size_t)ni, sizeof *it, item_cmp);
    }
    for (int64_t j = 0; j < ni; j++) {
      IrOp *op = ir_push(a, s, dev);
      op->kind = it[j].kind;
      op->mb = it[j].mb;
      op->stage = it[j].stage;
      op->span = e[it[j].entry].span;
    }
    free(it);
  }
  return 0;
}
