# compiler/front.mk: the front end: grammar (flex + bison), AST, elaboration into
# the IR, building blocks, `ppsc expand`; its tests, fuzz target and benchmark.
#
# flex and bison are required at build time (configure checks them); the generated
# scanner and parser are written to the build directory and never committed or
# distributed, so `make distcheck` regenerates them from grammar/pps.[ly].

# ---- grammar: a separate convenience library (generated code gets relaxed warnings) ----
noinst_LTLIBRARIES += libppsgram.la
nodist_libppsgram_la_SOURCES = grammar/pps.c grammar/pps.h grammar/lex.c grammar/lex.h
libppsgram_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_builddir)/grammar -I$(top_srcdir)/grammar
libppsgram_la_CFLAGS = $(AM_CFLAGS) -Wno-sign-compare -Wno-unused-function -Wno-shadow -Wno-missing-prototypes
BUILT_SOURCES += grammar/pps.c grammar/pps.h grammar/lex.c grammar/lex.h
CLEANFILES += grammar/pps.c grammar/pps.h grammar/lex.c grammar/lex.h grammar/pps.output
EXTRA_DIST += grammar/pps.y grammar/pps.l

grammar/pps.c: $(srcdir)/grammar/pps.y
	@$(MKDIR_P) grammar
	$(AM_V_GEN)$(YACC) -Wall -Werror -d -o grammar/pps.c $(srcdir)/grammar/pps.y
grammar/pps.h: grammar/pps.c
	@test -f $@ || { rm -f grammar/pps.c; $(MAKE) $(AM_MAKEFLAGS) grammar/pps.c; }
grammar/lex.c: $(srcdir)/grammar/pps.l grammar/pps.h
	@$(MKDIR_P) grammar
	$(AM_V_GEN)$(LEX) --header-file=grammar/lex.h -o grammar/lex.c $(srcdir)/grammar/pps.l
grammar/lex.h: grammar/lex.c
	@test -f $@ || { rm -f grammar/lex.c; $(MAKE) $(AM_MAKEFLAGS) grammar/lex.c; }

# ---- the front end proper ----
libppsc_la_SOURCES += compiler/ast.h compiler/parse.h compiler/parse.c compiler/elab.h \
  compiler/elab.c compiler/block.c compiler/order.c compiler/front.c
libppsc_la_SOURCES += compiler/synth.h compiler/synth.c compiler/profile.c compiler/cmd_synth.c
# the standard schedules `synthesize` seeds its search with, embedded at build time
# (the seeds never depend on an installed stdlib or on $PPS_STDLIB)
SYNTH_SEEDS = stdlib/1f1b.pps stdlib/gpipe.pps stdlib/zb_h2.pps stdlib/zb_v.pps stdlib/v_half.pps \
  stdlib/v_min.pps stdlib/1f1b_v.pps stdlib/dualpipe_v.pps stdlib/interleaved_1f1b.pps
nodist_libppsc_la_SOURCES = compiler/synth_seeds.c
BUILT_SOURCES += compiler/synth_seeds.c
CLEANFILES += compiler/synth_seeds.c
EXTRA_DIST += tools/synth-seeds.sh
compiler/synth_seeds.c: $(srcdir)/tools/synth-seeds.sh $(srcdir)/stdlib/1f1b.pps $(srcdir)/stdlib/gpipe.pps \
  $(srcdir)/stdlib/zb_h2.pps $(srcdir)/stdlib/zb_v.pps $(srcdir)/stdlib/v_half.pps $(srcdir)/stdlib/v_min.pps \
  $(srcdir)/stdlib/1f1b_v.pps $(srcdir)/stdlib/dualpipe_v.pps $(srcdir)/stdlib/interleaved_1f1b.pps
	@$(MKDIR_P) compiler
	$(AM_V_GEN)$(SHELL) $(srcdir)/tools/synth-seeds.sh $(srcdir) $(SYNTH_SEEDS) > $@.tmp && mv $@.tmp $@
libppsc_la_LIBADD += libppsgram.la

# ---- tests: golden diagnostics, expand outputs, documentation examples, limits ----
TESTS += tests/front/run-bad.sh tests/front/run-expand.sh tests/front/doc-examples.sh tests/front/limits.sh
EXTRA_DIST += tests/front/run-bad.sh tests/front/run-expand.sh tests/front/doc-examples.sh \
  tests/front/limits.sh tests/front/bad tests/front/good examples
# `squeeze;` reaches the reference figures of V-Half and 1F1B-V (inline blocks)
TESTS += tests/front/block-squeeze.sh
# squeeze's evaluator against the executor (the reference) on random points
TESTS += tests/front/squeeze_eval.sh
EXTRA_DIST += tests/front/squeeze_eval.sh
EXTRA_DIST += tests/front/block-squeeze.sh
TESTS += tests/front/cli.sh
EXTRA_DIST += tests/front/cli.sh
TESTS += tests/front/outfiles.sh tests/front/hardening.sh tests/front/figures.sh tests/front/dist_files.sh
EXTRA_DIST += tests/front/outfiles.sh tests/front/hardening.sh tests/front/figures.sh tests/front/expect.sh tests/front/dist_files.sh

# ---- fuzzing: `make fuzz` builds the libFuzzer targets with clang (not part of check):
# fuzz_front (a .pps through the front end, the reports and emit-c) and fuzz_inputs (the
# other files PPS reads: schedule CSVs, profiles, token files, checkpoints) ----
EXTRA_DIST += tests/fuzz/fuzz_front.c tests/fuzz/fuzz_inputs.c tests/fuzz/run-fuzz.sh tests/fuzz/pps.dict tests/fuzz/corpus \
  tests/fuzz/corpus-inputs
# the fuzzers are compiled from every C file of the compiler library, and fuzz_inputs also
# of the runtime library (the recipe picks the .c files of libppsc_la_SOURCES and
# libppsrt_la_SOURCES, so a new source cannot be forgotten here)
FUZZ_SRCS = tests/fuzz/fuzz_front.c $(libppsc_la_SOURCES)
FUZZ_IN_SRCS = tests/fuzz/fuzz_inputs.c $(libppsc_la_SOURCES) $(libppsrt_la_SOURCES)
FUZZ_CFLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I$(top_srcdir)/compiler -I$(top_srcdir)/runtime -I$(top_builddir) -I$(top_builddir)/grammar -DPPS_STDLIB_DIR='"/nonexistent"' \
  -DPPS_LIBDIR='"/nonexistent"' -DPPS_INCLUDEDIR='"/nonexistent"' -DPPS_BUILDDIR='"/nonexistent"' \
  -DPPS_SRCDIR='"/nonexistent"'
FUZZ_PICK_C = for f in $$srcs; do case $$f in *.c) echo $(srcdir)/$$f;; esac; done
if HAVE_CLANG
fuzz: tests/fuzz/fuzz_front$(EXEEXT) tests/fuzz/fuzz_inputs$(EXEEXT)
tests/fuzz/fuzz_front$(EXEEXT): $(FUZZ_SRCS) $(BUILT_SOURCES)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_CCLD)srcs='$(FUZZ_SRCS)'; $(CLANG) $(FUZZ_CFLAGS) -o $@ $$($(FUZZ_PICK_C)) \
	  grammar/pps.c grammar/lex.c compiler/synth_seeds.c -lm
tests/fuzz/fuzz_inputs$(EXEEXT): $(FUZZ_IN_SRCS) $(BUILT_SOURCES)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_CCLD)srcs='$(FUZZ_IN_SRCS)'; $(CLANG) $(FUZZ_CFLAGS) $(OPENBLAS_CFLAGS) $(MPI_CFLAGS) -pthread -o $@ $$($(FUZZ_PICK_C)) \
	  grammar/pps.c grammar/lex.c compiler/synth_seeds.c $(OPENBLAS_LIBS) $(MPI_LIBS) -lm
else
fuzz:
	@echo "make fuzz needs clang (configure did not find it)"; exit 1
endif
CLEANFILES += tests/fuzz/fuzz_front$(EXEEXT) tests/fuzz/fuzz_inputs$(EXEEXT)
.PHONY: fuzz

# ---- benchmark: front-end speed on 1,000,000 ops (bench/README.md, "Elaboration") ----
EXTRA_DIST += bench/elab_1m.sh bench/elab_inputs.sh bench/rows_vs_ref.sh
bench-elab: ppsc$(EXEEXT)
	$(SHELL) $(srcdir)/bench/elab_1m.sh ./ppsc$(EXEEXT)
.PHONY: bench-elab

# ---- synthesis (`synthesize;`, ppsc synth): end to end, and against the stdlib ----
TESTS += tests/synth/cli.sh tests/synth/quality.sh tests/synth/profile.sh tests/synth/reference.sh
TESTS += tests/synth/bound.sh tests/synth/published.sh
EXTRA_DIST += tests/synth/bound.sh tests/synth/published.sh tests/synth/published tools/published-orders.py
# the synthesizer's evaluators against the executor (the reference) on random points
TESTS += tests/synth/evaluator.sh
EXTRA_DIST += tests/synth/evaluator.sh
EXTRA_DIST += tests/synth/cli.sh tests/synth/quality.sh tests/synth/profile.sh tests/synth/issue.pps tests/synth/synth_any.pps \
  tests/synth/reference.sh tests/synth/ref_greedy.awk tests/synth/lib.sh
# `make bench-synth`: search time of `synthesize` (bench/README.md, "Synthesis")
EXTRA_DIST += bench/synth_bench.sh bench/synth_loop.sh bench/synth_vs_zbv.sh tools/synth-table.sh
bench-synth: ppsc$(EXEEXT)
	$(SHELL) $(srcdir)/bench/synth_bench.sh ./ppsc$(EXEEXT) $(abs_top_srcdir)/stdlib
.PHONY: bench-synth
