/* cmd_build.c: placeholder until code generation lands. */
#include "driver.h"
int cmd_emit_c(Compilation *c) { diag_error(&c->diag, (Span){0}, "emit-c: not built yet"); return PPSC_USAGE; }
int cmd_build(Compilation *c) { diag_error(&c->diag, (Span){0}, "build: not built yet"); return PPSC_USAGE; }
