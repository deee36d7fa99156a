#!/bin/sh
# tests/gpu/nodevice.sh: on a machine WITHOUT a GPU, asking for the CUDA backend fails
# cleanly: ppsrt_cuda_backend_create returns PPSRT_E_BACKEND with "no CUDA device
# visible" and a hint (tests/gpu/cuda_kernels --no-device), and a built schedule run
# with --backend cuda (threads or nccl transport) exits 1, not by a signal, with that
# message. Skipped (77) where a GPU is visible: tests/gpu/e2e.sh runs there instead.
. "$(dirname "$0")/../runtime/lib.sh"
KERNELS=$top_builddir/tests/gpu/cuda_kernels
ngpu=$("$KERNELS" --count) || { echo "FAIL: $KERNELS --count failed (a CUDA error, not an absent GPU)" >&2; exit 1; }
if [ "${ngpu:-0}" -gt 0 ]; then echo "skip: $ngpu GPU(s) visible"; exit 77; fi

expect_exit 0 "library: ppsrt_cuda_backend_create without a GPU" "$KERNELS" --no-device

if build nogpu "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
  expect_exit 1 "--backend cuda without a GPU" "$WORK/nogpu" --backend cuda --iterations 1 -q
  expect_grep "no CUDA device visible" "--backend cuda names the cause"
  expect_grep "hint:" "--backend cuda gives a hint"
  if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
    expect_exit 1 "--backend cuda --transport nccl without a GPU" "$WORK/nogpu" --backend cuda --transport nccl \
      --iterations 1 -q
    expect_grep "no CUDA device visible" "--transport nccl names the cause"
  fi
else
  fail "ppsc build examples/1f1b.pps"
fi
finish
