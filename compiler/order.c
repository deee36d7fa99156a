/* order.c: the order phase, between elaboration and lowering: where the file asks
 * for it, the compiler chooses or re-times the devices' pass orders. `synthesize;`
 * runs the synthesizer (synth.c), whose seeds the front end compiles (front_seed);
 * a `squeeze;`d building block is re-timed (block.c, block_squeeze). Elaboration
 * (elab.c) says what to do (ElabOrder) and never does it itself. */
#include "elab.h"

void order_run(Arena *a, Diag *d, IrSchedule *s, const ElabOrder *o) {
  int e0 = d->errors;
  if (o->synth) synth_run(a, d, s, &o->sopt);
  if (o->sq && d->errors == e0) block_squeeze(d, s, o->sq);
}
