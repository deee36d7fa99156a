#!/bin/sh
# mpi.sh: the MPI transport: one process per device under mpirun. Every standard
# schedule passes --check at P = 3; a hanging recv times out and stops every rank; a rank
# that dies (SIGKILL) makes mpirun exit non-zero. Skipped (77) without MPI.
. "$(dirname "$0")/lib.sh"
have_mpi || { echo "skip: no MPI (libppsrt built without it, or no mpirun)"; exit 77; }
# every mpirun below runs without leak detection under ASan (see MPI_ASAN in lib.sh)
export ASAN_OPTIONS="$MPI_ASAN"
SIZES="--hidden 8 --seq 4 --iterations 2 -q"
GPT="--model gpt --heads 2 --query-groups 1 --vocab 32 --hidden 16 --seq 4 --iterations 2 -q"
# every standard schedule, one process per device (P = 3, m = 6): the mlp, and the gpt
# for the vocabulary-parallel ones (the mlp has no vocabulary layers)
for src in "$top_srcdir"/stdlib/*.pps; do
  f=$(basename "$src" .pps)
  flags=$SIZES
  grep -q "vocab parallel" "$src" && flags=$GPT
  if build "mpi_$f" "$src" -D P=3 -D m=6; then
    expect_exit 0 "mpirun -np 3 $f --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      ASAN_OPTIONS="$MPI_ASAN" "$MPIRUN" --oversubscribe -np 3 "$WORK/mpi_$f" --check $flags
    expect_grep "check: passed" "$f under MPI: check passed"
  else fail "build $f"; fi
done
expect_exit 0 "mpirun -np 3 rt_tables offload --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 3 "$RT_TABLES" offload 3 6 --check -q
expect_grep "check: passed" "offload under MPI"
# --trace under MPI: rank 0 writes one file with every device's tracks
expect_exit 0 "mpirun -np 3 --trace" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 3 "$RT_TABLES" offload 3 6 -q --trace "$WORK/mpi-trace.json"
if command -v python3 >/dev/null; then
  if python3 -c "
import json,sys
x=[e for e in json.load(open(sys.argv[1]))['traceEvents'] if e['ph']=='X']
assert {e['pid'] for e in x}=={0,1,2}, {e['pid'] for e in x}
assert {e['tid'] for e in x}=={0,1,2,3}
" "$WORK/mpi-trace.json"; then pass "MPI trace has every device and track"; else fail "MPI trace content"; fi
else skip "MPI trace content (no python3)"
fi
# the gpt model with Vocab-2 collectives over MPI
sed "s/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; vocab parallel 2;/" \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/v2.pps"
if build v2 "$WORK/v2.pps" -D P=2 -D m=4; then
  expect_exit 0 "mpirun -np 2 gpt Vocab-2 --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 2 "$WORK/v2" --model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 -q
else fail "build v2"; fi
# `vocab async` on the collective lanes (a second thread per rank on a duplicate
# communicator): Vocab-1/2 on 1F1B and V-Half at P = 4, and a schedule that runs only so
for f in vocab_1f1b vocab_v_half; do
  for v in 1 2; do
    if build "mpi_a$v$f" "$top_srcdir/stdlib/$f.pps" -D P=4 -D m=8 -D mode=$v -D async=true; then
      expect_exit 0 "mpirun -np 4 $f Vocab-$v async --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 4 "$WORK/mpi_a$v$f" --model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 --json
      expect_grep '"collectives":"async"' "$f Vocab-$v under MPI: on the lanes"
      expect_grep '"memory_match":true' "$f Vocab-$v under MPI: memory as predicted"
      expect_grep '"match":true' "$f Vocab-$v under MPI: check passed"
    else fail "build $f async $v"; fi
  done
done
if build mpi_vasync "$top_srcdir/tests/analysis/cases/vocab_async.pps"; then
  expect_exit 0 "mpirun -np 2 async-only schedule --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 2 "$WORK/mpi_vasync" --model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 -q
  expect_grep "check: passed" "async-only under MPI: check passed"
else fail "build vocab_async"; fi
# a hang: every rank stops within the timeout
out=$(timeout 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 3 "$RT_TABLES" hang 3 4 --timeout 1 2>&1)
st=$?
echo "$out" > "$WORK/out"
[ $st -ne 0 ] && [ $st -ne 124 ] && pass "MPI hang ends non-zero ($st)" || fail "MPI hang: exit $st"
expect_grep "waited 1 s" "MPI timeout message"
# a rank that dies
out=$(timeout 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe -np 3 "$RT_TABLES" 1f1b 3 4 --die-at 1:2 --die-hard 2>&1)
st=$?
[ $st -ne 0 ] && [ $st -ne 124 ] && pass "MPI dying rank: exit $st" || fail "MPI dying rank: exit $st"
finish
