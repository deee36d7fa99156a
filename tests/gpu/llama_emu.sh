#!/bin/sh
# tests/gpu/llama_emu.sh: Llama's layer (--arch llama: the RMS norm, RoPE and SwiGLU
# kernels of kernels.cu) and tied embeddings (--embeddings tied: the copy's gradient
# summed over the NCCL transport) on the CUDA backend in whole schedules, on the
# emulator (tests/gpu/emu), with --check against the one-device reference:
#  - 1F1B at P = 4 on 4 emulated GPUs with NCCL (tied: devices 0 and 3 hold the matrix,
#    1 and 2 join its all-reduce with zeros), seeds 1 and 2;
#  - ZB-V at P = 2 (two stages a device) and V-Half's vocabulary passes on the
#    collective lanes (Vocab-1 async, P = 4);
#  - --tensor-parallel 2 --sequence-parallel on 4 emulated GPUs (the SwiGLU matrix split
#    by both halves, the RMS norms' gammas summed over the groups);
#  - --qk-layernorm (the query and key heads' RMS norms through the norm kernels with
#    C = D, the strided copies out of and into the QKV rows): ZB-V at P = 2, and
#    --tensor-parallel 2 on 4 emulated GPUs (the gains' gradients summed over the groups);
#  - the race detector and deadlock checks of the emulator on all of it (exit 66/67).
# Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
L="--model gpt --arch llama --embeddings tied --hidden 32 --heads 4 --query-groups 2 --seq 8 --vocab 64 --ffn-hidden 48"
emu() { gpus=$1 seed=$2; shift 2; env PPSRT_EMU_GPUS=$gpus PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$@" --backend cuda; }
if build a "$top_srcdir/stdlib/1f1b.pps" -D P=4 -D m=8; then
  for seed in 1 2; do
    expect_exit 0 "1F1B P=4 llama tied, NCCL on 4 emulated GPUs, seed $seed --check" emu 4 $seed "$WORK/a" $L \
      --transport nccl --optimizer adam --check --iterations 2 -q
    expect_grep "^check: passed" "1F1B seed $seed: check passes"
  done
else fail "build 1f1b"; fi
if build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4; then
  expect_exit 0 "ZB-V P=2 llama tied, NCCL --check" emu 2 3 "$WORK/z" $L --transport nccl --check --iterations 2 -q
  expect_grep "^check: passed" "ZB-V: check passes"
  expect_exit 0 "ZB-V P=2 llama tied --qk-layernorm, NCCL --check" emu 2 1 "$WORK/z" $L --qk-layernorm --transport nccl --check \
    --iterations 2 -q
  expect_grep "^check: passed" "ZB-V --qk-layernorm: check passes"
else fail "build zb_v"; fi
if build vh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=4 -D async=true; then
  expect_exit 0 "V-Half Vocab-1 async P=4 llama tied, NCCL --check" emu 4 1 "$WORK/vh" $L --transport nccl --check --iterations 2 -q
  expect_grep "^check: passed" "V-Half vocabulary: check passes"
else fail "build vocab_v_half"; fi
if build t "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4; then
  expect_exit 0 "1F1B P=2 llama tied --tensor-parallel 2 --sequence-parallel, NCCL on 4 emulated GPUs --check" emu 4 2 "$WORK/t" \
    $L --transport nccl --tensor-parallel 2 --sequence-parallel --check --iterations 2 -q
  expect_grep "^check: passed" "TP x SP: check passes"
  expect_exit 0 "1F1B P=2 llama tied --qk-layernorm --tensor-parallel 2, NCCL on 4 emulated GPUs --check" emu 4 1 "$WORK/t" \
    $L --qk-layernorm --transport nccl --tensor-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "TP --qk-layernorm: check passes"
else fail "build 1f1b P=2"; fi
finish
