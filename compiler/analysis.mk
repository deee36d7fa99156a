# compiler/analysis.mk: lowering, verification, simulation, reports, CSV interop.
libppsc_la_SOURCES += compiler/analysis.c
libppsc_la_SOURCES += compiler/cmd_build.c
