# runtime/core.mk: libppsrt: public header, interpreter, activation store, offload,
# transports (threads, MPI), metrics, the executable's CLI, --check, the mlp model.
# models.mk (gpt, CPU backend kernels) and cuda.mk append to libppsrt_la_SOURCES;
# they are included after this file.
lib_LTLIBRARIES += libppsrt.la
include_HEADERS += runtime/ppsrt.h runtime/ppsrt_ops.h
libppsrt_la_SOURCES = runtime/ppsrt.h runtime/ppsrt_ops.h runtime/backend.h runtime/moe_router.h runtime/dropout.h runtime/transport.h runtime/model.h \
  runtime/rt.h runtime/error.c runtime/rt_util.c runtime/param.c runtime/iobox.c runtime/interp.c runtime/actstore.c runtime/offload.c runtime/recompute.c \
  runtime/transport_threads.c runtime/metrics.c runtime/cli.c runtime/check.c \
  runtime/model_mlp.c
libppsrt_la_SOURCES += runtime/coll_lane.c
libppsrt_la_SOURCES += runtime/data.c runtime/checkpoint.c runtime/validate.c runtime/safeio.h runtime/replica.c runtime/cp.c runtime/ep.c
libppsrt_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)
libppsrt_la_CFLAGS = $(AM_CFLAGS) -pthread
libppsrt_la_LDFLAGS = -version-info 0:0:0 -export-symbols-regex '^ppsrt_' -pthread
libppsrt_la_LIBADD = $(OPENBLAS_LIBS) -lm
if HAVE_MPI
libppsrt_la_SOURCES += runtime/transport_mpi.c
libppsrt_la_CPPFLAGS += $(MPI_CFLAGS)
libppsrt_la_LIBADD += $(MPI_LIBS)
endif
pkgconfig_DATA += runtime/ppsrt.pc

# ---- code generation in the compiler (ppsc emit-c / build); cmd_build.c is in analysis.mk ----
libppsc_la_SOURCES += compiler/emit_c.c compiler/emit_c.h
EXTRA_DIST += runtime/transport_mpi.c

# ---- tests of the runtime (tests/runtime/) ----
# C programs with hand-written op tables (timeouts, dying ranks, bad flags, memory).
check_PROGRAMS += tests/runtime/rt_tables
tests_runtime_rt_tables_SOURCES = tests/runtime/rt_tables.c
tests_runtime_rt_tables_LDADD = libppsrt.la
TESTS += tests/runtime/tables.sh tests/runtime/flags.sh tests/runtime/e2e.sh tests/runtime/mpi.sh
# reduce_scatter_f32 and allgather on each transport (threads, MPI, NCCL on the emulator)
check_PROGRAMS += tests/runtime/coll_blocks
tests_runtime_coll_blocks_SOURCES = tests/runtime/coll_blocks.c
tests_runtime_coll_blocks_LDADD = libppsrt.la
tests_runtime_coll_blocks_LDFLAGS = -pthread
TESTS += tests/runtime/coll_blocks.sh
EXTRA_DIST += tests/runtime/coll_blocks.sh
TESTS += tests/runtime/mfu.sh
TESTS += tests/runtime/train.sh tests/runtime/ckpt.sh tests/runtime/dp.sh tests/runtime/optim.sh tests/runtime/distopt.sh tests/runtime/tp.sh tests/runtime/vocab_tp.sh tests/runtime/sp.sh tests/runtime/llama.sh tests/runtime/qknorm.sh tests/runtime/kvch.sh tests/runtime/normeps.sh tests/runtime/tied.sh tests/runtime/hf.sh tests/runtime/hf_moe.sh tests/runtime/hf_qwen2.sh tests/runtime/hf_qwen3.sh tests/runtime/dropout.sh tests/runtime/moe.sh tests/runtime/moe_router.sh
EXTRA_DIST += tests/runtime/ckpt.sh tests/runtime/dp.sh tests/runtime/optim.sh tests/runtime/distopt.sh tests/runtime/tp.sh tests/runtime/vocab_tp.sh tests/runtime/sp.sh \
  tests/runtime/split_lib.sh tests/runtime/ckpt_tensors.py tests/runtime/hf_lib.sh
EXTRA_DIST += tests/runtime/train.sh tests/runtime/llama.sh tests/runtime/qknorm.sh tests/runtime/kvch.sh tests/runtime/normeps.sh tests/runtime/tied.sh tests/runtime/hf.sh tests/runtime/hf_moe.sh tests/runtime/hf_qwen2.sh tests/runtime/hf_qwen3.sh tests/runtime/hf_ref.py tests/runtime/hf_rope.py tests/runtime/dropout.sh tests/runtime/moe.sh tests/runtime/moe_router.sh python/pps_hf.py
TESTS += tests/runtime/moe_cap.sh tests/runtime/moe_shared.sh tests/runtime/moe_replay.sh
TESTS += tests/runtime/init.sh
EXTRA_DIST += tests/runtime/init.sh
EXTRA_DIST += tests/runtime/moe_cap.sh tests/runtime/moe_shared.sh tests/runtime/moe_replay.sh
# --check's mismatches of every rank (replicas, context ranks, the routing's gather; check.c, interp.c)
TESTS += tests/runtime/check_ranks.sh
EXTRA_DIST += tests/runtime/check_ranks.sh
EXTRA_DIST += tests/runtime/mfu.sh
TESTS += tests/runtime/hardening.sh tests/runtime/cp.sh tests/runtime/ep.sh tests/runtime/ep_a2a.sh
EXTRA_DIST += tests/runtime/cp.sh tests/runtime/ep.sh tests/runtime/ep_a2a.sh
TESTS += tests/runtime/data.sh
EXTRA_DIST += tests/runtime/data.sh python/pps_data.py
# Megatron-LM checkpoints -> PPS (python/pps_megatron.py)
TESTS += tests/runtime/megatron.sh tests/runtime/split.sh
EXTRA_DIST += tests/runtime/split.sh tests/runtime/megatron.sh tests/runtime/megatron_ckpt.py python/pps_megatron.py
TESTS += tests/runtime/posted.sh
TESTS += tests/runtime/offload.sh tests/runtime/vocab_memory.sh
TESTS += tests/runtime/recompute.sh
EXTRA_DIST += tests/runtime/recompute.sh tests/runtime/cases/recompute.pps
EXTRA_DIST += tests/runtime/offload.sh tests/runtime/cases/offload_cancel.pps
EXTRA_DIST += tests/runtime/vocab_memory.sh tests/runtime/cases/vocab_memory.pps
TESTS += tests/runtime/fault.sh
EXTRA_DIST += tests/runtime/fault.sh
EXTRA_DIST += tests/runtime/posted.sh tests/runtime/posted.awk
EXTRA_DIST += tests/runtime/hardening.sh
EXTRA_DIST += tests/runtime/tables.sh tests/runtime/flags.sh tests/runtime/e2e.sh tests/runtime/mpi.sh \
  tests/runtime/lib.sh

# ---- runtime overhead benchmark (make bench-runtime; never part of make check) ----
noinst_PROGRAMS += bench/runtime_overhead
bench_runtime_overhead_SOURCES = bench/runtime_overhead.c
bench_runtime_overhead_LDADD = libppsrt.la
EXTRA_DIST += bench/runtime_bench.sh bench/runtime_emit.sh
bench-runtime: bench/runtime_overhead$(EXEEXT) ppsc$(EXEEXT)
	$(SHELL) $(srcdir)/bench/runtime_bench.sh
# how long emit-c and the C compiler take on 25k..200k-op tables
bench-emit: ppsc$(EXEEXT)
	top_srcdir=$(abs_top_srcdir) PPSC=./ppsc$(EXEEXT) CC='$(CC)' $(SHELL) $(srcdir)/bench/runtime_emit.sh
# validation as forward-only evaluation through the pipeline, --eval-iters (validate.c)
TESTS += tests/runtime/eval.sh
EXTRA_DIST += tests/runtime/eval.sh
