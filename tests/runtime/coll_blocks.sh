#!/bin/sh
# tests/runtime/coll_blocks.sh: the transports' reduce_scatter_f32 and allgather (the
# distributed optimizer's collectives, runtime/transport.h), by tests/runtime/coll_blocks
# (its header says what it checks), on every transport this build has, for D = 1, 2, 3:
#  - threads, host buffers (b = NULL, the CPU path);
#  - MPI under mpirun -np D, host buffers (skipped, said so, without MPI);
#  - on the CUDA emulator (tests/gpu/emu, skipped, said so, where it is not built),
#    device buffers of the CUDA backend: threads (3 emulated GPUs) and MPI (staged
#    through the host by the transport); the NCCL transport in process on 3 GPUs (NCCL:
#    ncclReduceScatter / ncclAllGather), on 1 and 2 GPUs (the copy channel, ranks sharing
#    a GPU and not), and over MPI (ncclCommInitRank across processes, -np 1, 2, 3); and
#    on the groups of ppsrt_nccl_transport_group (replica groups: the transport the
#    distributed optimizer calls them on: 2 devices, D = 3 in process on 6 GPUs and on
#    the copy channel, D = 2 over mpirun -np 4; groups of neighbouring ranks as
#    --tensor-parallel makes them, the same ways); under the emulator's race and deadlock
#    detectors.
# Seconds in all.
. "$(dirname "$0")/lib.sh"
CB=$top_builddir/tests/runtime/coll_blocks
for d in 1 2 3; do
  expect_exit 0 "threads, host buffers, D=$d" "$CB" threads host $d
done
if have_mpi; then
  for d in 1 2 3; do
    expect_exit 0 "MPI, host buffers, mpirun -np $d" mpirun_np $d "$CB" mpi host
  done
else
  skip "MPI (not in this build)"
fi
if [ -f "$EMU" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" PPS_EMU_TIMEOUT=30
  for d in 1 3; do
    expect_exit 0 "threads, device buffers (emulated CUDA), D=$d" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=3 "$CB" threads cuda $d
  done
  if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
    for d in 1 2 3; do
      expect_exit 0 "NCCL transport in process, 3 emulated GPUs, D=$d" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=3 PPS_EMU_SEED=$d "$CB" nccl cuda $d
    done
    expect_exit 0 "NCCL transport's copy channel, 1 emulated GPU, D=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=1 "$CB" nccl cuda 3
    expect_exit 0 "NCCL transport's copy channel, 2 emulated GPUs, D=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=2 PPS_EMU_SEED=2 "$CB" nccl cuda 3
    # the distributed optimizer's transport: each device's replica group (2 devices, D = 3)
    expect_exit 0 "NCCL replica groups in process, 6 emulated GPUs, D=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=6 PPS_EMU_SEED=3 "$CB" nccl-groups cuda 3
    expect_exit 0 "NCCL replica groups on the copy channel, 1 emulated GPU, D=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=1 "$CB" nccl-groups cuda 3
    # --tensor-parallel's groups: neighbouring ranks (2 groups of 3)
    expect_exit 0 "NCCL groups of neighbours in process, 6 emulated GPUs, T=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=6 PPS_EMU_SEED=2 "$CB" nccl-tgroups cuda 3
    expect_exit 0 "NCCL groups of neighbours on the copy channel, 1 emulated GPU, T=3" env LD_PRELOAD="$EMU" PPSRT_EMU_GPUS=1 "$CB" nccl-tgroups cuda 3
  else
    skip "the NCCL transport (no NCCL in this build)"
  fi
  if have_mpi; then
    export TMPDIR="$WORK"
    expect_exit 0 "MPI, device buffers (emulated CUDA), mpirun -np 2" mpirun_np 2 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$CB" mpi cuda
    if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
      for d in 1 2 3; do
        expect_exit 0 "NCCL transport over MPI (emulated), mpirun -np $d" mpirun_np $d env LD_PRELOAD="$EMU" PPS_EMU_SEED=$d "$CB" nccl-mpi cuda
      done
      expect_exit 0 "NCCL replica groups over MPI (emulated), mpirun -np 4 (2 devices, D = 2)" \
        mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=1 "$CB" nccl-mpi-groups cuda
      expect_exit 0 "NCCL groups of neighbours over MPI (emulated), mpirun -np 4 (2 groups of 2)" \
        mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$CB" nccl-mpi-tgroups cuda
      left=$(ls "$WORK" | grep -c pps-emu-nccl)
      [ "$left" = 0 ] && pass "no emulated-NCCL file left in TMPDIR" || fail "$left emulated-NCCL files left in TMPDIR"
    fi
  fi
else
  skip "device buffers: $EMU not built"
fi
finish
