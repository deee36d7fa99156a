#!/bin/sh
# tests/gpu/emu_api.sh: the emulator (tests/gpu/emu/libppsrt_emu.so) on a small CUDA/NCCL
# program that knows nothing of PPS (tests/gpu/emu/api_demo.c), under three seeds: each
# deliberate ordering bug must fail the run (a stream race exits 66 naming the buffer,
# both streams and both operations; an NCCL deadlock exits 67 listing the pending
# operations), its fixed twin must pass with the right numbers. Also: the runtime queries
# an ordinary program makes work, and a call the emulator does not implement, a launch of
# the program's own kernel, or a destroyed stream, event or communicator used (undefined
# in CUDA and NCCL) stops the run with exit 69 naming the call instead of falling through
# to the real cudart. ncclReduceScatter / ncclAllGather: values in place and not, a race
# on an all-gather's result read without an event (66), buffers overlapping other than
# in place (undefined in NCCL: 69); ncclCommAbort ends a collective a peer never joined.
. "$(dirname "$0")/../runtime/lib.sh"
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
DEMO=$top_builddir/tests/gpu/emu/api_demo
[ -f "$EMU" ] && [ -x "$DEMO" ] || { echo "skip: $EMU or $DEMO not built"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
run() { env LD_PRELOAD="$EMU" PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=1 "$DEMO" "$@"; }

for seed in 1 2 3; do
  expect_exit 66 "seed $seed: write on one stream, read on another without an event: race" run streams-race
  expect_grep "RACE on device buffer" "seed $seed: the race names the buffer"
  expect_grep "cudaMemsetAsync of 4096 bytes (write) on stream" "seed $seed: ... the writer and its stream"
  expect_grep "cudaMemcpyAsync of 4096 bytes, device to device (read) on stream" "seed $seed: ... the reader and its stream"
  expect_exit 0 "seed $seed: the same with cudaEventRecord + cudaStreamWaitEvent" run streams-event
  expect_exit 66 "seed $seed: pageable cudaMemcpy upload read on a non-blocking stream: race" run upload-race
  expect_grep "cudaMemcpy of 4096 bytes, pageable to device (write) on the legacy default stream" \
    "seed $seed: ... names the legacy stream's copy"
  expect_exit 0 "seed $seed: pinned staging + cudaMemcpyAsync on the consuming stream" run upload-pinned
  expect_exit 0 "seed $seed: a blocking stream after the legacy stream, events, host syncs" run legacy
  expect_exit 0 "seed $seed: cudaMemGetInfo, cudaPointerGetAttributes, cudaDeviceGetAttribute, stream queries, cudaLaunchHostFunc" \
    run queries
done
expect_exit 69 "a CUDA runtime call the emulator does not implement stops the run" run unsupported
expect_grep "pps-emu: cudaMemcpy2D is not emulated" "... naming the call"
expect_exit 69 "a launch of the program's own kernel stops the run" run launch
expect_grep "pps-emu: cudaLaunchKernel: the program launches a kernel of its own" "... saying why"
expect_exit 69 "work queued on a destroyed stream (undefined in CUDA) stops the run" run destroyed-stream
expect_grep "pps-emu: cudaMemsetAsync names stream .*, which was destroyed or never created" "... naming the call"
expect_exit 69 "an event recorded after cudaEventDestroy stops the run" run destroyed-event
expect_grep "pps-emu: cudaEventRecord names event .*, which was destroyed" "... naming the call"
if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
  expect_exit 69 "an NCCL communicator used after ncclCommDestroy stops the run" run destroyed-comm
  expect_grep "pps-emu: ncclAllReduce names NCCL communicator .*, which was destroyed" "... naming the call"
  expect_exit 0 "ncclCommAbort ends a rank's all-reduce that a peer never joins (its stream finishes)" \
    env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" PPS_EMU_TIMEOUT=2 "$DEMO" nccl-abort-coll
  expect_exit 69 "ncclReduceScatter with recvbuff overlapping sendbuff other than in place (undefined in NCCL) stops the run" \
    env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" "$DEMO" nccl-rs-overlap
  expect_grep "pps-emu: ncclReduceScatter on rank 0: recvbuff .* overlaps sendbuff .* undefined in NCCL" "... naming the call"
  expect_exit 69 "ncclAllGather with sendbuff overlapping recvbuff other than in place stops the run" \
    env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" "$DEMO" nccl-ag-overlap
  expect_grep "pps-emu: ncclAllGather on rank 0: sendbuff .* overlaps recvbuff .* undefined in NCCL" "... naming the call"
fi
for seed in 1 2 3; do
  if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
    expect_exit 67 "seed $seed: NCCL ring of ungrouped send-then-recv deadlocks (rendezvous)" run nccl-ungrouped
    expect_grep "ncclSend of 256 bytes to rank" "seed $seed: ... the pending sends are listed"
    expect_exit 0 "seed $seed: the same ring in ncclGroupStart/End" run nccl-grouped
    expect_exit 0 "seed $seed: all-reduce over 3 ranks from ncclGetUniqueId + ncclCommInitRank" run nccl-allreduce
    expect_exit 0 "seed $seed: ncclReduceScatter and ncclAllGather on 2 GPUs, in place and not, result read after an event" \
      env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=1 "$DEMO" nccl-blocks-event
    expect_exit 66 "seed $seed: an all-gather's block 1 read on another stream without an event: race" \
      env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=1 "$DEMO" nccl-blocks-race
    expect_grep "ncclAllGather of 12 bytes a rank (rank 0 of 2) (write)" "seed $seed: ... naming the all-gather"
  fi
done
finish
