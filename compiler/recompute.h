/* recompute.h: the activation-recomputation model (recompute.c), shared by the
 * simulator, the verifier's memory check, the reports and the C emitter. */
#ifndef PPS_RECOMPUTE_H
#define PPS_RECOMPUTE_H
#include "ir.h"

/* The stage input's share of g's act when `memory input` is not given: from model { }
 * and hardware { } bytes (one boundary activation, seq x micro_batch x hidden x
 * dtype_bytes, over the stage's act in bytes), else 0. */
double recompute_input_default(const IrSchedule *s, const IrStage *g);
/* Layers per stage (model { layers } over the stages, at least 1), and how many of
 * them the stage's ratio R recomputes: ceil(R L), the first ones (0: not recomputed). */
int recompute_stage_layers(const IrSchedule *s);
int recompute_layers(const IrSchedule *s, int stage);
/* Activation units F(i, stage) does not keep (B rebuilds them): (1 - input) act when
 * every layer is recomputed, else k layer act (at most that). */
double recompute_dropped(const IrSchedule *s, int stage);
/* For B or BW of a recomputed stage: the forward it runs again first (R TF), and the
 * units that rebuild adds at its start (recompute_dropped); 0 for every other op.
 * The forward again is (k / L) TF: the layers' share of the stage's forward. */
double recompute_time(const IrSchedule *s, const IrOp *op);
double recompute_rebuild(const IrSchedule *s, const IrOp *op);
/* The time device d's B/BW passes spend running forwards again (sum of recompute_time). */
double recompute_device_time(const IrSchedule *s, int d);
/* Whether any stage is recomputed. */
int recompute_any(const IrSchedule *s);
#endif
