#!/bin/sh
# tests/gpu/mpi_nccl_emu.sh: the path a multi-node user runs, `mpirun -np P prog --backend
# cuda --transport nccl`, with NO GPU: one process per rank, each with one emulated GPU
# (LD_PRELOAD=tests/gpu/emu/libppsrt_emu.so), the emulated NCCL connecting the processes
# through files in TMPDIR (fake_nccl.inc: the control file found from the ncclUniqueId
# that rank 0 sends over MPI, a file per message, rendezvous sends), under the
# emulator's race (exit 66) and deadlock (exit 67) detectors:
#  - every stdlib schedule and example at the largest valid P of 4, 3, 2 (as
#    e2e_emu.sh chooses it), --check, mlp (gpt for vocabulary-parallel schedules), the
#    seed in rotation 1, 2, 3;
#  - the vocabulary lane: vocab_1f1b P=4 -D async=true, whose lane communicator comes
#    from a second ncclUniqueId round over MPI, --check with lane operations counted by
#    the emulator, and with --blocking-collectives;
#  - the abort path: one rank failing (--die-at 2:5) makes every rank exit non-zero
#    with a message, the others learning it through NCCL (ncclRemoteError from
#    ncclCommGetAsyncError), within the timeout (no hang); a bootstrap that fails on one
#    rank (it looks for the others in another TMPDIR) fails on all four, each saying so;
#  - the emulated NCCL's own checks across processes: an ungrouped send/recv ring of 3
#    processes deadlocks (exit 67, the pending sends listed) and the grouped ring
#    passes (tests/gpu/emu/api_demo nccl-mpi-*).
# Exit 77 without MPI or the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
[ -f "$EMU" ] || { echo "skip: $EMU not built"; exit 77; }
have_mpi || { echo "skip: no MPI in this build"; exit 77; }
grep -q "HAVE_NCCL 1" "$top_builddir/config.h" || { echo "skip: no NCCL in this build"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PPS_EMU_TIMEOUT=30
GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"
t0=$(date +%s)
# mpi NP SEED PROG ARGS...: one emulated run, TMPDIR (the NCCL files) in $WORK
mpi() {
  np=$1 sd=$2; shift 2
  timeout 120 "$MPIRUN" --oversubscribe -np "$np" env TMPDIR="$WORK" LD_PRELOAD="$EMU" PPS_EMU_SEED="$sd" "$@"
}

i=0
for f in $(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null); do
  base=$(basename "$f" .pps)
  P= defs=
  for p in 4 3 2; do
    if "$PPSC" check "$f" -D P=$p -D m=$((2 * p)) -q > /dev/null 2>&1; then P=$p; defs="-D P=$p -D m=$((2 * p))"; break; fi
  done
  if [ -z "$P" ] && "$PPSC" check "$f" -q > /dev/null 2>&1; then
    P=$(sed -n 's/^[[:space:]]*devices[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$f" | head -n 1)
  fi
  [ -n "$P" ] || { echo "skip: $base (not valid at P = 4, 3, 2 with -D, nor as written)"; continue; }
  build "$base" "$f" $defs || { fail "build $base"; continue; }
  model=; grep -q "vocab parallel" "$f" && model=$GPT
  seed=$((i % 3 + 1))
  expect_exit 0 "mpirun -np $P $base, NCCL transport across processes --check, seed $seed${model:+ (gpt)}" \
    mpi $P $seed "$WORK/$base" --backend cuda --transport nccl --check --iterations 2 -q $model
  i=$((i + 1))
done
[ $i -ge 8 ] && pass "$i schedules ran across processes" || fail "only $i schedules ran across processes"

# the collective lane: a second communicator from a second ncclUniqueId round
if build va "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 -D m=8 -D async=true; then
  for bc in "" --blocking-collectives; do
    mpi 4 2 env PPS_EMU_STATS=1 "$WORK/va" --backend cuda --transport nccl --check --iterations 2 --json $bc $GPT \
      > "$WORK/lane.json" 2> "$WORK/lane.err"
    st=$?
    nk=$(sed -n 's/.*operations on lane streams \([1-9][0-9]*\).*/\1/p' "$WORK/lane.err" | wc -l)
    if [ -z "$bc" ] && [ $st -eq 0 ] && [ "$nk" -eq 4 ] && grep -q '"collectives":"async"' "$WORK/lane.json"; then
      pass "mpirun -np 4 vocab_1f1b async: collectives on the lane communicator (second id round) --check, lane operations on all 4 ranks"
    elif [ -n "$bc" ] && [ $st -eq 0 ] && [ "$nk" -eq 0 ] && grep -q '"collectives":"blocking"' "$WORK/lane.json"; then
      pass "mpirun -np 4 vocab_1f1b --blocking-collectives --check, no lane operation"
    else
      fail "mpirun -np 4 vocab_1f1b async $bc: exit $st, lane operations on $nk of 4 ranks"; tail -20 "$WORK/lane.err" >&2
    fi
  done
else fail "build vocab_1f1b async"; fi

left=$(ls "$WORK" | grep -c "pps-emu-nccl")
[ "$left" -eq 0 ] && pass "no NCCL file left in TMPDIR after the clean runs" || fail "$left NCCL file(s) left in TMPDIR after clean runs"

# the abort path: rank 2 fails at its 5th operation
if [ -x "$WORK/1f1b" ]; then
  t1=$(date +%s)
  mpi 4 1 "$WORK/1f1b" --backend cuda --transport nccl --iterations 2 -q --die-at 2:5 --timeout 30 > "$WORK/out" 2>&1
  st=$? dt=$(($(date +%s) - t1))
  nr=$(grep -c "nccl: .*rank [0-9]" "$WORK/out")
  if [ $st -ne 0 ] && [ $st -ne 124 ] && grep -q "injected failure" "$WORK/out" && [ "$nr" -ge 3 ]; then
    pass "mpirun -np 4 1f1b, rank 2 fails: every rank stops with a message (exit $st, $nr NCCL messages, $dt s)"
  else
    fail "mpirun -np 4 abort path: exit $st after $dt s, $nr NCCL messages"; sed 's/^/    /' "$WORK/out" | tail -30 >&2
  fi
  expect_grep "remote process exited or there was a network error" "... the other ranks learn it through NCCL (ncclRemoteError)"
fi

# a bootstrap that fails on one rank (its TMPDIR elsewhere: it never meets the others)
# fails on every rank, each with its own message (the transport's agreed bootstrap)
mkdir -p "$WORK/elsewhere"
timeout 120 "$MPIRUN" --oversubscribe -np 4 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then TMPDIR=$0/elsewhere; else
  TMPDIR=$0; fi; export TMPDIR; exec "$@"' "$WORK" env LD_PRELOAD="$EMU" PPS_EMU_INIT_TIMEOUT=1 "$WORK/1f1b" \
  --backend cuda --transport nccl --iterations 1 -q > "$WORK/out" 2>&1
st=$?
nmsg=$(grep -c "ncclCommInitRank failed on rank" "$WORK/out")
if [ $st -ne 0 ] && [ $st -ne 124 ] && [ "$nmsg" -eq 4 ]; then
  pass "mpirun -np 4: the NCCL bootstrap fails on one rank, and all 4 ranks say so (exit $st)"
else
  fail "mpirun -np 4 NCCL bootstrap failure on one rank: exit $st, $nmsg of 4 ranks reported it"
  sed 's/^/    /' "$WORK/out" | tail -20 >&2
fi
expect_grep "ncclCommInitRank: 1 of 4 ranks joined within 1 s" "... the emulator says how many ranks joined"
left=$(find "$WORK" -name "pps-emu-nccl-*" | wc -l)
[ "$left" -eq 0 ] && pass "... and the ranks that gave up removed the NCCL files" || fail "$left NCCL file(s) left after the failed bootstrap"

# the emulated NCCL's deadlock detector and rendezvous across processes
DEMO=$top_builddir/tests/gpu/emu/api_demo
expect_exit 0 "mpirun -np 3 api_demo: a grouped send/recv ring across processes, then an all-reduce on a second communicator" \
  mpi 3 1 env PPS_EMU_TIMEOUT=3 "$DEMO" nccl-mpi-grouped
expect_exit 67 "mpirun -np 3 api_demo: an ungrouped send-then-recv ring deadlocks across processes (rendezvous)" \
  mpi 3 2 env PPS_EMU_TIMEOUT=3 "$DEMO" nccl-mpi-ungrouped
expect_grep "ncclSend of 256 bytes to rank" "... the pending sends are listed"
echo "mpi_nccl_emu: $(($(date +%s) - t0)) s"
finish
