# runtime/models.mk: the CPU backend (memory, streams, gemm, kernels) and the gpt model,
# appended to libppsrt (core.mk defines libppsrt_la_SOURCES, its CPPFLAGS with
# $(OPENBLAS_CFLAGS) and LIBADD with $(OPENBLAS_LIBS)); the kernel tests (tests/kernels/).
libppsrt_la_SOURCES += runtime/cpu_backend.h runtime/cpu_backend.c runtime/cpu_kernels.c runtime/gpt.h \
  runtime/model_gpt.c runtime/moe.h runtime/moe.c

# ---- kernel tests: every backward vs finite differences, attention, sharded softmax ----
check_PROGRAMS += tests/kernels/test_kernels
tests_kernels_test_kernels_SOURCES = tests/kernels/test_kernels.c
tests_kernels_test_kernels_LDADD = libppsrt.la
TESTS += tests/kernels/test_kernels

# ---- the gpt model's gradients vs finite differences of its loss (one device) ----
check_PROGRAMS += tests/kernels/gpt_grad
tests_kernels_gpt_grad_SOURCES = tests/kernels/gpt_grad.c
tests_kernels_gpt_grad_LDADD = libppsrt.la
TESTS += tests/kernels/gpt_grad

# ---- gpt end to end through ppsrt_main (hand-written tables, vocabulary parallelism) ----
check_PROGRAMS += tests/kernels/gpt_tables
tests_kernels_gpt_tables_SOURCES = tests/kernels/gpt_tables.c
tests_kernels_gpt_tables_LDADD = libppsrt.la
TESTS += tests/kernels/gpt_e2e.sh
EXTRA_DIST += tests/kernels/gpt_e2e.sh
EXTRA_DIST += docs/models.md
