# compiler/front.mk: grammar (flex + bison), AST and elaboration into the IR.
libppsc_la_SOURCES += compiler/front.c
