/* emit_c.h: C code generation for libppsrt from a lowered, verified, simulated IR. */
#ifndef PPS_EMIT_C_H
#define PPS_EMIT_C_H
#include "analysis.h"
#include "driver.h"

/* Appends to out the C translation unit of schedule s: static op tables per device,
 * the stage table, the model and hardware blocks, the predicted peaks and makespan,
 * and main(). */
void emit_c(const IrSchedule *s, const Analysis *an, const Diag *dg, StrBuf *out);
#endif
