# compiler/analysis.mk: lowering, verification, simulation, reports, CSV interop,
# their tests (tests/analysis/) and the simulator benchmark (bench/sim*).
libppsc_la_SOURCES += compiler/analysis.c compiler/analysis.h \
  compiler/lower.c compiler/lower.h compiler/verify.c compiler/verify.h \
  compiler/sim.c compiler/sim.h compiler/report.c compiler/report.h compiler/csv.c
libppsc_la_SOURCES += compiler/cmd_build.c

# C tests on IR built in memory (no parser needed)
check_PROGRAMS += tests/analysis/test_analysis
tests_analysis_test_analysis_SOURCES = tests/analysis/test_analysis.c tests/analysis/irbuild.h
tests_analysis_test_analysis_CPPFLAGS = $(libppsc_la_CPPFLAGS)
tests_analysis_test_analysis_LDADD = libppsc.la -lm
TESTS += tests/analysis/test_analysis
