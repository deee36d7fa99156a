#!/bin/sh
# tests/gpu/moe_emu.sh: mixture-of-experts layers (--num-experts; runtime/moe.c and the
# moe_* kernels of kernels.cu: the routing, its backward, the permutation and the
# weighted combine) on the CUDA backend in whole schedules, on the emulator
# (tests/gpu/emu), with --check against the one-device reference:
#  - 1F1B at P = 2 on 2 emulated GPUs with NCCL, GPT's layer (top 2, the load-balancing
#    loss) and Llama's (top 1);
#  - ZB-H1 (W apart from B) at P = 2;
#  - --tensor-parallel 2 --sequence-parallel on 4 emulated GPUs;
#  - the first iteration's loss within 2e-3 (relative; bfloat16 storage) of the CPU
#    backend's, for both layers: the device routing picks the CPU's experts;
#  - the race detector and deadlock checks of the emulator on all of it (exit 66/67).
# Not run on a real GPU here (docs/models.md says so). Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
M="--model gpt --hidden 32 --heads 4 --query-groups 2 --seq 8 --vocab 64 --num-experts 4 --moe-aux-loss-coeff 0.01"
L="$M --arch llama --ffn-hidden 48 --moe-topk 1"
emu() { gpus=$1; shift; env PPSRT_EMU_GPUS=$gpus LD_PRELOAD="$EMU" "$@" --backend cuda --transport nccl; }
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build zh "$top_srcdir/stdlib/zb_h1.pps" -D P=2 -D m=4 || { fail "build zb_h1"; finish; }
for x in "$M" "$L"; do
  name=$(echo "$x" | grep -q llama && echo llama || echo gpt)
  expect_exit 0 "1F1B P=2 $name E = 4, NCCL on 2 emulated GPUs --check" emu 2 "$WORK/a" $x --optimizer adam --check --iterations 2 -q
  expect_grep "^check: passed" "1F1B $name: check passes"
  expect_exit 0 "ZB-H1 P=2 $name E = 4 --check" emu 2 "$WORK/zh" $x --check -q
  expect_grep "^check: passed" "ZB-H1 $name: check passes"
  "$WORK/a" $x --json -q > "$WORK/cpu" 2>&1 || fail "$name: the CPU run"
  emu 2 "$WORK/a" $x --json -q > "$WORK/gpu" 2>&1 || fail "$name: the emulated CUDA run"
  python3 - "$WORK/cpu" "$WORK/gpu" <<'PY' && pass "$name: CUDA's first loss is the CPU's within 2e-3" || fail "$name: CUDA's loss against the CPU's"
import json, sys
c, g = [json.load(open(f))["iterations"][0]["loss"] for f in sys.argv[1:3]]
assert abs(c - g) <= 2e-3 * abs(c), (c, g)
PY
done
expect_exit 0 "T = 2 --sequence-parallel llama E = 4 on 4 emulated GPUs --check" emu 4 "$WORK/a" $L --tensor-parallel 2 \
  --sequence-parallel --check -q
expect_grep "^check: passed" "T = 2, SP: check passes"
finish
