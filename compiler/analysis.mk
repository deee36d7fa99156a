# compiler/analysis.mk: lowering, verification, simulation, reports, CSV interop,
# their tests (tests/analysis/) and the simulator benchmark (bench/sim*).
libppsc_la_SOURCES += compiler/analysis.c compiler/analysis.h \
  compiler/opindex.c compiler/opindex.h compiler/exec.c compiler/exec.h \
  compiler/lower.c compiler/lower.h compiler/verify.c compiler/verify.h \
  compiler/sim.c compiler/sim.h compiler/report.c compiler/report.h compiler/csv.c \
  compiler/grid.c compiler/compare.c compiler/svg.c \
  compiler/overlap.c compiler/overlap.h compiler/costmodel.c compiler/costmodel.h \
  compiler/recompute.c compiler/recompute.h \
  compiler/dp.c compiler/dp.h
libppsc_la_SOURCES += compiler/cmd_build.c compiler/cmd_check.c
libppsc_la_SOURCES += compiler/torch_csv.c

# C tests on IR built in memory (no parser needed)
check_PROGRAMS += tests/analysis/test_analysis
tests_analysis_test_analysis_SOURCES = tests/analysis/test_analysis.c tests/analysis/irbuild.h
tests_analysis_test_analysis_CPPFLAGS = $(libppsc_la_CPPFLAGS)
tests_analysis_test_analysis_LDADD = libppsc.la -lm
TESTS += tests/analysis/test_analysis

# Simulator benchmark (make bench-sim; never part of make check)
noinst_PROGRAMS += bench/sim_bench
bench_sim_bench_SOURCES = bench/sim_bench.c
bench_sim_bench_CPPFLAGS = $(libppsc_la_CPPFLAGS)
bench_sim_bench_LDADD = libppsc.la -lm
EXTRA_DIST += bench/sim_bench.sh bench/sim_interleaved.pps
# `ppsc sim` against a reference commit, and byte identity across a refactor (run from
# the source tree; bench/README.md)
EXTRA_DIST += bench/sim_vs_ref.sh bench/identity.sh bench/rendezvous_cost.sh bench/peers_sim.sh
bench-sim: bench/sim_bench$(EXEEXT) ppsc$(EXEEXT)
	srcdir=$(srcdir) top_builddir=$(top_builddir) $(SHELL) $(srcdir)/bench/sim_bench.sh

# Script tests: golden diagnostics, outputs (JSON, trace, SVG, CSV), robustness
TESTS += tests/analysis/golden.sh tests/analysis/outputs.sh tests/analysis/robust.sh tests/analysis/closed_form.sh
TESTS += tests/analysis/svg.sh
TESTS += tests/analysis/makespan_exact.sh
EXTRA_DIST += tests/analysis/makespan_exact.sh
TESTS += tests/analysis/rendezvous.sh
EXTRA_DIST += tests/analysis/rendezvous.sh
# the compiler's phases call one way: no circle among libppsc's objects (nm)
TESTS += tests/analysis/depcycles.sh
EXTRA_DIST += tests/analysis/depcycles.sh tools/depcycles.py
EXTRA_DIST += tests/analysis/svg.sh
TESTS += tests/analysis/costmodel.sh
TESTS += tests/analysis/recompute.sh
EXTRA_DIST += tests/analysis/recompute.sh
TESTS += tests/analysis/offload_plan.sh
EXTRA_DIST += tests/analysis/offload_plan.sh
EXTRA_DIST += tests/analysis/costmodel.sh
TESTS += tests/analysis/dp.sh tests/analysis/dp_dist.sh tests/analysis/tp.sh tests/analysis/tie.sh tests/analysis/cp.sh tests/analysis/moe.sh tests/analysis/ep.sh
EXTRA_DIST += tests/analysis/dp.sh tests/analysis/dp_dist.sh tests/analysis/tp.sh tests/analysis/tie.sh tests/analysis/cp.sh tests/analysis/moe.sh tests/analysis/ep.sh tests/analysis/lib.sh
TESTS += tests/analysis/torch_csv.sh
EXTRA_DIST += tests/analysis/torch_csv.sh
# against PyTorch itself (skipped without torch; docs/pytorch.md)
TESTS += tests/torch/pytorch.sh
EXTRA_DIST += tests/torch/pytorch.sh tests/torch/torchsched.py python/pps_torch.py python/example_pps_torch.py
EXTRA_DIST += tests/analysis/golden.sh tests/analysis/outputs.sh tests/analysis/robust.sh tests/analysis/closed_form.sh \
  tests/analysis/cases/coll_order.err \
  tests/analysis/cases/coll_order.pps \
  tests/analysis/cases/coll_order_async.err \
  tests/analysis/cases/coll_order_async.pps \
  tests/analysis/cases/copy_engines.pps \
  tests/analysis/cases/duplex.pps \
  tests/analysis/cases/host_link.pps \
  tests/analysis/cases/host_link_zero.pps \
  tests/analysis/cases/host_link_order.pps \
  tests/analysis/cases/reload_cancels.pps \
  tests/analysis/cases/comm_missing.err \
  tests/analysis/cases/comm_missing.pps \
  tests/analysis/cases/comm_written.err \
  tests/analysis/cases/comm_written.pps \
  tests/analysis/cases/compute_deadlock.err \
  tests/analysis/cases/compute_deadlock.pps \
  tests/analysis/cases/deadlock.err \
  tests/analysis/cases/deadlock.pps \
  tests/analysis/cases/deadlock_large_p.err \
  tests/analysis/cases/deadlock_large_p.pps \
  tests/analysis/cases/expect.err \
  tests/analysis/cases/expect.pps \
  tests/analysis/cases/host_limit.err \
  tests/analysis/cases/host_limit.pps \
  tests/analysis/cases/loop_bindings.err \
  tests/analysis/cases/loop_bindings.pps \
  tests/analysis/cases/loop_bindings_block.err \
  tests/analysis/cases/loop_bindings_block.pps \
  tests/analysis/cases/memory.err \
  tests/analysis/cases/memory.pps \
  tests/analysis/cases/memory_tiny.err \
  tests/analysis/cases/memory_tiny.pps \
  tests/analysis/cases/memory_tiny_peak.pps \
  tests/analysis/cases/missing.err \
  tests/analysis/cases/missing.pps \
  tests/analysis/cases/missing_many.err \
  tests/analysis/cases/missing_many.pps \
  tests/analysis/cases/missing_runs.err \
  tests/analysis/cases/missing_runs.pps \
  tests/analysis/cases/offload.pps \
  tests/analysis/cases/offload_order.err \
  tests/analysis/cases/offload_order.pps \
  tests/analysis/cases/one_f_one_b.pps \
  tests/analysis/cases/overlap.pps \
  tests/analysis/cases/overlap_elab.err \
  tests/analysis/cases/overlap_elab.pps \
  tests/analysis/cases/overlap_mb.err \
  tests/analysis/cases/overlap_mb.pps \
  tests/analysis/cases/overlap_offload.pps \
  tests/analysis/cases/overlap_vocab.pps \
  tests/analysis/cases/vocab_async.pps \
  tests/analysis/cases/vocab_async_ok.pps \
  tests/analysis/cases/vocab_async_rdv.pps \
  tests/analysis/cases/order.err \
  tests/analysis/cases/order.pps \
  tests/analysis/cases/order_devices.err \
  tests/analysis/cases/order_devices.pps \
  tests/analysis/cases/rendezvous.err \
  tests/analysis/cases/rendezvous.pps \
  tests/analysis/cases/rendezvous_group.pps \
  tests/analysis/cases/rendezvous_first_group.pps \
  tests/analysis/cases/rendezvous_lowered.pps \
  tests/analysis/cases/rendezvous_buffered.pps \
  tests/analysis/cases/vocab.pps \
  tests/analysis/cases/coll_count.err \
  tests/analysis/cases/coll_count.pps \
  tests/analysis/cases/coll_first.err \
  tests/analysis/cases/coll_first.pps \
  tests/analysis/cases/coll_first_op.err \
  tests/analysis/cases/coll_first_op.pps \
  tests/analysis/cases/coll_kind.err \
  tests/analysis/cases/coll_kind.pps \
  tests/analysis/cases/comm_m16.err \
  tests/analysis/cases/comm_m16.pps \
  tests/analysis/cases/comm_recv_first.err \
  tests/analysis/cases/comm_recv_first.pps \
  tests/analysis/cases/comm_send_order.err \
  tests/analysis/cases/comm_send_order.pps \
  tests/analysis/cases/comm_unreceived_first.err \
  tests/analysis/cases/comm_unreceived_first.pps \
  tests/analysis/cases/deadlock_coll3.err \
  tests/analysis/cases/deadlock_coll3.pps \
  tests/analysis/cases/deadlock_first_op.err \
  tests/analysis/cases/deadlock_first_op.pps \
  tests/analysis/cases/deadlock_lane.err \
  tests/analysis/cases/deadlock_lane.pps \
  tests/analysis/cases/deadlock_lane3.err \
  tests/analysis/cases/deadlock_lane3.pps \
  tests/analysis/cases/deadlock_lane_overlap.err \
  tests/analysis/cases/deadlock_lane_overlap.pps \
  tests/analysis/cases/deadlock_lane_rdv.err \
  tests/analysis/cases/deadlock_lane_rdv.pps \
  tests/analysis/cases/deadlock_lane_wide.err \
  tests/analysis/cases/deadlock_lane_wide.pps \
  tests/analysis/cases/lane_wait_ok.pps \
  tests/analysis/cases/deadlock_loops.err \
  tests/analysis/cases/deadlock_loops.pps \
  tests/analysis/cases/deadlock_tail.err \
  tests/analysis/cases/deadlock_tail.pps \
  tests/analysis/cases/fifo_many.err \
  tests/analysis/cases/fifo_many.pps \
  tests/analysis/cases/fifo_stage.err \
  tests/analysis/cases/fifo_stage.pps \
  tests/analysis/cases/memory_bfree.err \
  tests/analysis/cases/memory_bfree.pps \
  tests/analysis/cases/offload_deps.err \
  tests/analysis/cases/offload_deps.pps \
  tests/analysis/cases/offload_frees_first.pps \
  tests/analysis/cases/offload_ties.pps \
  tests/analysis/cases/overlap_memory.err \
  tests/analysis/cases/overlap_memory.pps \
  tests/analysis/cases/overlap_recompute.err \
  tests/analysis/cases/overlap_recompute.pps \
  tests/analysis/cases/recompute_offload_time.pps \
  tests/analysis/cases/short_run.pps \
  tests/analysis/cases/w_first.err \
  tests/analysis/cases/w_first.pps \
  tests/analysis/cases/w_first_bw.err \
  tests/analysis/cases/w_first_bw.pps \
  tests/analysis/cases/zero_memory.pps
