#!/bin/sh
# tests/gpu/e2e_emu.sh: whole schedules on the CUDA backend with NO GPU: programs built
# with `ppsc build` run with LD_PRELOAD=tests/gpu/emu/libppsrt_emu.so, which carries the
# emulated kernels (kernels.cu on host fibers) and the fake cudart/cuBLAS/NCCL, so the
# runtime's interpreter, models, offload and transports drive the real CUDA backend code.
#  - every stdlib/example schedule at the largest valid P of 4, 3, 2 with
#    --backend cuda --transport nccl --check (copy channel: ranks share one "GPU"):
#    the mlp model, or gpt for vocabulary-parallel schedules;
#  - the NCCL mode (4 emulated GPUs, fake in-process NCCL), the threads transport, full
#    offload, the gpt model;
#  - the gpt loss on the CUDA backend (bf16) against the CPU backend (F32), first
#    iteration, relative difference <= 1e-2.
# Runs in every CUDA build; what it cannot see is listed in docs/gpu.md.
. "$(dirname "$0")/../runtime/lib.sh"
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
[ -f "$EMU" ] || { echo "skip: $EMU not built"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"
emu() { LD_PRELOAD=$EMU "$@"; }

n=0
for f in $(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null); do
  base=$(basename "$f" .pps)
  P=
  for p in 4 3 2; do
    if "$PPSC" check "$f" -D P=$p -D m=$((2 * p)) -q > /dev/null 2>&1; then P=$p; break; fi
  done
  [ -n "$P" ] || { echo "skip: $base (not valid at P = 4, 3, 2 with -D)"; continue; }
  build "$base" "$f" -D P=$P -D m=$((2 * P)) || { fail "build $base"; continue; }
  model=
  emu "$WORK/$base" --backend cuda --iterations 1 -q > "$WORK/probe" 2>&1 || \
    { grep -q "no vocabulary layers" "$WORK/probe" && model=$GPT; }
  expect_exit 0 "$base P=$P ${model:+gpt }cuda/nccl --check (emulated)" \
    env LD_PRELOAD="$EMU" "$WORK/$base" --backend cuda --transport nccl --check --iterations 2 -q $model
  n=$((n + 1))
done
[ $n -ge 8 ] && pass "$n schedules ran on the emulated GPU" || fail "only $n schedules ran on the emulated GPU"

if build one "$top_srcdir/examples/1f1b.pps" -D P=4 -D m=8; then
  expect_exit 0 "1f1b P=4 NCCL mode, 4 emulated GPUs --check" \
    env PPSRT_EMU_GPUS=4 LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --transport nccl --check --iterations 2 -q
  expect_exit 0 "1f1b P=4 threads transport --check (emulated)" \
    env LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --transport threads --check --iterations 2 -q
else fail "build 1f1b P=4"; fi

sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 1;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
if build off "$WORK/off.pps" -D P=3 -D m=6; then
  expect_exit 0 "1f1b full offload cuda --check (emulated)" \
    env LD_PRELOAD="$EMU" "$WORK/off" --backend cuda --transport nccl --check --iterations 2 -q
else fail "build offload"; fi

if build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
  expect_exit 0 "gpt 1f1b P=2 cuda/nccl --check (emulated)" \
    env LD_PRELOAD="$EMU" "$WORK/g" --backend cuda --transport nccl --check --iterations 2 -q $GPT
  "$WORK/g" --backend cpu --iterations 1 --json $GPT > "$WORK/cpu.json" 2> "$WORK/cpu.err"
  emu "$WORK/g" --backend cuda --iterations 1 --json $GPT > "$WORK/cuda.json" 2> "$WORK/cuda.err"
  if python3 - "$WORK/cpu.json" "$WORK/cuda.json" > "$WORK/out" 2>&1 <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["iterations"][0]["loss"]
b = json.load(open(sys.argv[2]))["iterations"][0]["loss"]
d = abs(a - b) / abs(a)
print("gpt loss cpu %.7g, cuda %.7g, relative difference %.2e (tolerance 1e-2)" % (a, b, d))
sys.exit(0 if d <= 1e-2 else 1)
PY
  then pass "$(cat "$WORK/out")"; else fail "CPU and CUDA losses differ: $(cat "$WORK/out")"; fi
else fail "build gpt 1f1b"; fi
finish
