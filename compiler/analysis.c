/* analysis.c: placeholder until lowering, verification and simulation land. */
#include "driver.h"
int cmd_check(Compilation *c) {
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  diag_summary(&c->diag);
  if (io) return PPSC_USAGE;
  return s && !c->diag.errors ? PPSC_OK : PPSC_INVALID;
}
int cmd_sim(Compilation *c) { diag_error(&c->diag, (Span){0}, "sim: not built yet"); return PPSC_USAGE; }
int cmd_import_csv(Compilation *c) { diag_error(&c->diag, (Span){0}, "import-csv: not built yet"); return PPSC_USAGE; }
int cmd_export_csv(Compilation *c) { diag_error(&c->diag, (Span){0}, "export-csv: not built yet"); return PPSC_USAGE; }
