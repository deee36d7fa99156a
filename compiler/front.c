/* front.c: placeholder until the front end lands (lexer, parser, elaboration). */
#include "driver.h"
IrSchedule *front_compile(Compilation *c, int *io_error) {
  *io_error = 0;
  diag_error(&c->diag, (Span){0}, "the front end is not built yet");
  return NULL;
}
int cmd_expand(Compilation *c) { (void)front_compile; diag_error(&c->diag, (Span){0}, "expand: not built yet"); return PPSC_USAGE; }
