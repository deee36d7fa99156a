#!/bin/sh
# dp.sh: --data-parallel D (runtime/replica.c): D replicas of a P-device pipeline, each
# on its own part of the global batch, gradients averaged over the replicas. At P=2,
# D=2 with 4 microbatches per replica the losses are those of one pipeline with 8
# (the same global batch), --check (one device at the global batch) passes on threads
# and under mpirun -np 4, with real data and --clip-grad too; a checkpoint saved by the
# replicas continues without them; what is not supported is refused. MPI parts are
# skipped (said so) without MPI.
. "$(dirname "$0")/lib.sh"
build m4 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b m=4"; finish; }
build m8 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=8 || { fail "build 1f1b m=8"; finish; }
M4=$WORK/m4; M8=$WORK/m8
cat "$top_srcdir"/docs/*.md >"$WORK/text.txt"
GPT="--model gpt --vocab 256 --seq 16 --hidden 16 --heads 2 --optimizer adam --lr 0.01 --data $WORK/text.txt"
loss() { sed -n "s/^iter $1\/[0-9]*  loss \([-0-9.]*\).*/\1/p" "$2"; }
# same LABEL FILE-A FILE-B N: iterations 1..N have losses within 1e-6 relative
same() {
  ok=1
  for i in $(seq 1 "$4"); do
    a=$(loss "$i" "$2"); b=$(loss "$i" "$3")
    [ -n "$a" ] && [ -n "$b" ] && awk "BEGIN { d = $a - $b; if (d < 0) d = -d; exit !(d <= 1e-6 * ($b < 0 ? -$b : $b) + 1e-9) }" || ok=0
  done
  [ $ok = 1 ] && pass "$1: $(for i in $(seq 1 "$4"); do loss "$i" "$2"; done | tr '\n' ' ')" \
    || fail "$1: $(grep -o '^iter [0-9/]*  loss [0-9.]*' "$2" | tr '\n' ' ') vs $(grep -o '^iter [0-9/]*  loss [0-9.]*' "$3" | tr '\n' ' ')"
}

"$M8" --iterations 3 >"$WORK/mlp8" 2>&1 || fail "mlp m=8"
expect_exit 0 "mlp P=2 --data-parallel 2 (threads)" "$M4" --data-parallel 2 --iterations 3; cp "$WORK/out" "$WORK/mlp42"
same "mlp: 2 replicas x 4 microbatches = 1 pipeline x 8" "$WORK/mlp42" "$WORK/mlp8" 3
expect_exit 0 "mlp --data-parallel 2 --check (threads)" "$M4" --data-parallel 2 --check -q
expect_grep "^check: passed" "mlp --check passes"
[ "$(grep -c '^check: device [01] (replica [01]): .*: match' "$WORK/out")" = 4 ] && pass "every replica's check lines (2 x 2)" \
  || fail "check lines: $(grep -c '^check: device' "$WORK/out")"
"$M8" $GPT --iterations 3 --clip-grad 0.5 >"$WORK/gpt8" 2>&1 || fail "gpt m=8"
expect_exit 0 "gpt --data --clip-grad --data-parallel 2 (threads)" "$M4" $GPT --data-parallel 2 --iterations 3 --clip-grad 0.5 \
  --save "$WORK/dp"
cp "$WORK/out" "$WORK/gpt42"
same "gpt on real data with clipping: replicas read their own parts of the batch" "$WORK/gpt42" "$WORK/gpt8" 3
expect_grep "^saved $WORK/dp (step 3, 2 shards)" "replica 0 saves 2 shards"
"$M8" $GPT --iterations 4 --clip-grad 0.5 >"$WORK/gpt8b" 2>&1 || fail "gpt m=8, 4 iterations"
expect_exit 0 "one pipeline of 8 microbatches loads it" "$M8" $GPT --iterations 1 --load "$WORK/dp"
expect_grep "^loaded $WORK/dp: step 3, data position 24 sequences" "data position: 3 steps x 2 replicas x 4 microbatches"
[ "$(loss 4 "$WORK/out")" = "$(loss 4 "$WORK/gpt8b")" ] && pass "iteration 4 after loading = uninterrupted $(loss 4 "$WORK/gpt8b")" \
  || fail "iteration 4: $(loss 4 "$WORK/out") vs $(loss 4 "$WORK/gpt8b")"
expect_exit 0 "gpt --data-parallel 2 --check (threads)" "$M4" $GPT --data-parallel 2 --check -q
expect_grep "^check: passed" "gpt --check passes"
if have_mpi; then
  MPI="timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=$MPI_ASAN $MPIRUN --oversubscribe"
  expect_exit 0 "mpirun -np 4: P=2 x --data-parallel 2 --check" $MPI -np 4 "$M4" $GPT --data-parallel 2 --check -q
  expect_grep "^check: passed" "MPI --check passes"
  expect_exit 0 "mpirun -np 4: gpt --data-parallel 2" $MPI -np 4 "$M4" $GPT --data-parallel 2 --iterations 3 --clip-grad 0.5
  same "MPI replicas = one pipeline of 8" "$WORK/out" "$WORK/gpt8" 3
  expect_exit 2 "mpirun -np 2 with --data-parallel 2 at P=2" $MPI -np 2 "$M4" --data-parallel 2
  expect_grep "hint: mpirun -np 4" "the rank count needed named"
  expect_exit 2 "mpirun -np 4 at P=2 without --data-parallel" $MPI -np 4 "$M4"
  expect_grep "or --data-parallel 2 for 2 replicas of the pipeline" "a multiple of P: --data-parallel suggested"
else skip "--data-parallel under MPI (libppsrt without MPI, or no mpirun)"; fi
# a hardware block that plans replicas and tensor parallelism: the run says where it differs
cat >"$WORK/plan.pps" <<'PPS'
schedule plan(P = 2, m = 4) {
  devices P; microbatches m; placement linear;
  model { layers = 2; hidden = 16; heads = 2; seq = 16; micro_batch = 1; vocab = 256; }
  hardware { flops = 1e12; peer_bandwidth = 1e10; tensor_parallel = 2; data_parallel = 2; }
  for d in 0..P { device d { for i in 0..m { F(i) } for i in 0..m { BW(i) } } }
}
PPS
if build plan "$WORK/plan.pps"; then
  expect_exit 0 "a schedule planning D = 2, T = 2, run plain" "$WORK/plan" --iterations 1 -q
  expect_grep "note: the schedule's hardware { tensor_parallel = 2 } plans 2 tensor ranks a device; this run has 1" \
    "tensor_parallel in the plan: the run says it has none"
  expect_grep "note: the schedule's hardware { data_parallel = 2 } plans 2 replicas; this run has 1" "data_parallel: the difference named"
  expect_exit 0 "the same with --data-parallel 2" "$WORK/plan" --iterations 1 -q --data-parallel 2
  if grep -q "data_parallel = 2" "$WORK/out"; then fail "a note although the run has the planned replicas"; else pass "no data_parallel note when the run matches"; fi
else fail "build plan.pps"; fi
# vocabulary-parallel schedules: each replica's vocabulary collectives over its own
# devices (its view, and its view of the collective lane), each device's rows of the
# input and output layers averaged over its replicas at the end of the iteration
VG="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 --optimizer adam"
if build v2 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2 && build v8 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=8 -D mode=2 \
   && build va "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true; then
  "$WORK/v8" $VG --iterations 3 >"$WORK/voc8" 2>&1 || fail "Vocab-2 m=8"
  expect_exit 0 "Vocab-2 P=2 --data-parallel 2 (threads, collective lane)" "$WORK/v2" $VG --data-parallel 2 --iterations 3 --json
  grep -q '"collectives":"async"' "$WORK/out" && pass "on the collective lanes" || fail "collectives not on the lanes: $(grep -o '"collectives":[^,]*' "$WORK/out")"
  expect_exit 0 "the same, text" "$WORK/v2" $VG --data-parallel 2 --iterations 3; cp "$WORK/out" "$WORK/voc42"
  same "Vocab-2: 2 replicas x 4 microbatches = 1 pipeline x 8" "$WORK/voc42" "$WORK/voc8" 3
  for fl in "" "--blocking-collectives"; do
    expect_exit 0 "Vocab-2 --data-parallel 2 --check $fl" "$WORK/v2" $VG --data-parallel 2 --check -q $fl
    expect_grep "^check: passed" "Vocab-2 --check passes $fl"
  done
  expect_exit 0 "V-Half async --data-parallel 3 --distributed-optimizer --check" "$WORK/va" $VG --data-parallel 3 --distributed-optimizer --check -q
  expect_grep "^check: passed" "V-Half + distributed optimizer: --check passes"
  expect_exit 0 "Vocab-2 --data-parallel 2 --distributed-optimizer --save" "$WORK/v2" $VG --data-parallel 2 --distributed-optimizer --iterations 2 \
    --save "$WORK/vck"
  "$WORK/v8" $VG --iterations 2 --load "$WORK/vck" >"$WORK/vres" 2>&1 || fail "one pipeline of 8 loads the replicas' checkpoint"
  [ "$(loss 3 "$WORK/vres")" = "$(loss 3 "$WORK/voc8")" ] && pass "resumed without replicas: iteration 3 = uninterrupted $(loss 3 "$WORK/voc8")" \
    || fail "iteration 3 after loading: $(loss 3 "$WORK/vres") vs $(loss 3 "$WORK/voc8")"
  if have_mpi; then
    expect_exit 0 "mpirun -np 4: Vocab-2 P=2 x --data-parallel 2 --check" $MPI -np 4 "$WORK/v2" $VG --data-parallel 2 --check -q
    expect_grep "^check: passed" "MPI Vocab-2 --check passes"
  fi
else fail "build the vocabulary schedules"; fi
# a failing device stops every replica (no rank left waiting in a replica all-reduce)
expect_exit 1 "a device failing under --data-parallel 2 stops the run" timeout 60 "$M4" --data-parallel 2 --die-at 1:3 --timeout 30
expect_grep "injected failure" "the failure named"
expect_exit 2 "--data-parallel 0" "$M4" --data-parallel 0
finish
