#!/bin/sh
# tests/gpu/epilogue_e2e.sh: the fused GEMM epilogues (PPSRT_CUDA_EPILOGUE=lt, through
# cuBLASLt) in the whole runtime: the gpt model under 1F1B at P = 2 passes --check (loss,
# every gradient and the peak memory against a one-device run) on the threads and NCCL
# transports, and after one SGD step (lr 0.5: the second loss depends on every gradient,
# the biases' too) its loss is within 1e-2 of the unfused path's and of the CPU backend's
# (a bias gradient summed over the wrong operand put it 0.67 off on the emulator).
# On a GPU when one is visible; otherwise on the emulator (LD_PRELOAD=
# tests/gpu/emu/libppsrt_emu.so, which also counts the cublasLtMatmul calls: none is a
# failure); 77 when neither.
. "$(dirname "$0")/../runtime/lib.sh"
ngpu=$("$top_builddir/tests/gpu/cuda_kernels" --count) || { fail "cuda_kernels --count failed"; finish; }
EMU=
if [ "${ngpu:-0}" -gt 0 ]; then
  where="the GPU"
  GPT="--model gpt --hidden 256 --heads 4 --query-groups 2 --seq 128 --vocab 512 --micro-batch 2"
else
  EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
  [ -f "$EMU" ] || { echo "skip: no CUDA device visible and $EMU not built"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  where="the emulator"
  GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"
fi
# on: the program on the GPU, or on the emulator (2 emulated GPUs, counting cuBLASLt calls)
on() { env ${EMU:+LD_PRELOAD=$EMU PPS_EMU_STATS=1 PPSRT_EMU_GPUS=2} "$@"; }
build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
for tr in threads nccl; do
  expect_exit 0 "gpt 1f1b P=2 $tr on $where, PPSRT_CUDA_EPILOGUE=lt --check" \
    on PPSRT_CUDA_EPILOGUE=lt "$WORK/g" --backend cuda --transport $tr --check --iterations 2 -q $GPT
  if [ -n "$EMU" ]; then
    k=$(sed -n 's/.*cublasLtMatmul \([0-9]*\).*/\1/p' "$WORK/out")
    [ "${k:-0}" -gt 0 ] && pass "... $k cublasLtMatmul calls" || fail "... no cublasLtMatmul call with PPSRT_CUDA_EPILOGUE=lt"
  fi
done
sgd="--iterations 2 --optimizer sgd --lr 0.5 --json $GPT"
"$WORK/g" --backend cpu $sgd > "$WORK/cpu.json" 2> "$WORK/cpu.err" || fail "the CPU run: $(cat "$WORK/cpu.err")"
on PPSRT_CUDA_EPILOGUE=none "$WORK/g" --backend cuda $sgd > "$WORK/none.json" 2> "$WORK/none.err" ||
  fail "the unfused run: $(cat "$WORK/none.err")"
on PPSRT_CUDA_EPILOGUE=lt "$WORK/g" --backend cuda $sgd > "$WORK/lt.json" 2> "$WORK/lt.err" ||
  fail "the fused run: $(cat "$WORK/lt.err")"
if python3 - "$WORK/cpu.json" "$WORK/none.json" "$WORK/lt.json" > "$WORK/out" 2>&1 <<'PY'
import json, sys
c, n, f = [json.load(open(a))["iterations"][1]["loss"] for a in sys.argv[1:]]
d = max(abs(f - n) / abs(n), abs(f - c) / abs(c))
print("gpt loss after one SGD step: cpu %.7g, cuda unfused %.7g, fused epilogues %.7g, largest relative difference "
      "of the fused one %.2e (tolerance 1e-2)" % (c, n, f, d))
sys.exit(0 if d <= 1e-2 else 1)
PY
then pass "$(cat "$WORK/out") on $where"; else fail "fused epilogues on $where: $(cat "$WORK/out")"; fi
finish
