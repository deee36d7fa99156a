#!/bin/sh
# tests/gpu/dp_emu.sh: --data-parallel 2 on the CUDA backend without a GPU (the
# emulator, tests/gpu/emu, its race and deadlock detectors on): each stage's gradients
# all-reduced across its replicas on the backend's DP stream right after the stage's
# last W (runtime/replica.c), the optimizer after the compute stream waited for it.
# --check (one device at the global batch) passes at P=2 on the threads transport
# (1F1B mlp, a V shape with two stages a device, gpt) and under mpirun -np 4 with the
# MPI transport (one emulated GPU per process); --transport nccl is refused with
# --data-parallel (not done yet). Skipped (77) without the emulator; the MPI part
# without MPI (said so).
. "$(dirname "$0")/../runtime/lib.sh"
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
[ -f "$EMU" ] || { echo "skip: $EMU not built"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export PPS_EMU_TIMEOUT=30
GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"
build l2 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build v2 "$top_srcdir/stdlib/1f1b_v.pps" -D P=2 -D m=4 || { fail "build 1f1b_v"; finish; }
emu() { seed=$1; shift; env PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$@" --backend cuda; }

expect_exit 0 "1F1B P=2 --data-parallel 2 --check, threads" emu 1 "$WORK/l2" --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "1F1B: check passes"
expect_exit 0 "V shape P=2 (two stages a device) --data-parallel 2 --check, threads" emu 2 "$WORK/v2" --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "V shape: check passes"
expect_exit 0 "gpt 1F1B P=2 --data-parallel 2 --check, threads" emu 3 "$WORK/l2" $GPT --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "gpt: check passes"
expect_exit 2 "--transport nccl with --data-parallel refused" emu 1 "$WORK/l2" --transport nccl --data-parallel 2 --iterations 1
expect_grep "data-parallel does not run with --transport nccl" "the refusal names --transport nccl"

if have_mpi; then
  export TMPDIR="$WORK"
  expect_exit 0 "V shape P=2 --data-parallel 2 --check, mpirun -np 4, MPI transport" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=1 "$WORK/v2" --backend cuda --transport mpi --data-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "MPI: check passes"
else
  echo "skip: the MPI part (no MPI in this build)"
fi
finish
