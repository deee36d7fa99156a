#!/bin/sh
# tests/gpu/conformance_gpu.sh: the conformance program (tests/gpu/conformance.c) on the
# real CUDA runtime, cuBLAS and NCCL, compared with the record the emulator is held to
# (tests/gpu/conformance.expected): every disagreement is printed and fails the test.
# A GPU session that finds one refreshes the record from the output it prints (after
# checking that the GPU, not the record, is right) and then makes the emulator agree
# (tests/gpu/conformance_emu.sh). Skipped (77) when no GPU is visible.
. "$(dirname "$0")/../runtime/lib.sh"
. "$top_srcdir/tests/gpu/conformance_lib.sh"
CONF=$top_builddir/tests/gpu/conformance
[ -x "$CONF" ] || { echo "skip: $CONF not built"; exit 77; }
ngpu=$("$top_builddir/tests/gpu/cuda_kernels" --count 2>/dev/null) || ngpu=0
if [ "${ngpu:-0}" -eq 0 ]; then echo "skip: no CUDA device visible"; exit 77; fi
"$CONF" > "$WORK/gpu.out" 2> "$WORK/gpu.err"
st=$?
sed 's/^/    /' "$WORK/gpu.out"
if [ $st -ne 0 ]; then fail "conformance on the GPU exited $st"; sed 's/^/    /' "$WORK/gpu.err" >&2; finish; fi
if conf_compare "$top_srcdir/tests/gpu/conformance.expected" "$WORK/gpu.out" GPU > "$WORK/diff"; then
  pass "the GPU answers as recorded in tests/gpu/conformance.expected ($(grep -c ': ' "$WORK/gpu.out") lines)"
else
  cat "$WORK/diff" >&2
  fail "$(wc -l < "$WORK/diff") answer(s) of the GPU differ from tests/gpu/conformance.expected"
fi
finish
