#!/bin/sh
# check_ranks.sh: --check counts every rank's comparison (interp.c sums the mismatches
# over the world; check.c; docs/runtime.md "--check"), on the CPU backend (F32), each
# case a fault that only one replica's or one context rank's comparison can see:
#  - --data-parallel 2 --num-experts: every replica prints its lines (its own
#    microbatches' routing, its gradients), the loss line once; PPSRT_FAULT=route@replica=1 (a wrong top-K on
#    replica 1's tokens alone) fails --check on replica 1's routing lines alone, also
#    with --distributed-optimizer, at D = 4 X = 2 (replica 3: the second expert-parallel
#    group) and under mpirun -np 4, where every process exits 1 (also on a loss shifted
#    on world rank 0 alone: its verdict is sent with the sum); --json counts replica 1's
#    mismatches;
#  - --data-parallel 2 --distributed-optimizer (no experts): a gradient scaled in
#    replica 1's shard only (vocab.out) fails, named on replica 1's line;
#  - --context-parallel 2: PPSRT_FAULT=route@context=1 fails on context rank 1's
#    routing lines alone (the context group's mismatches count);
#  - PPSRT_FAULT=record-twice at --tensor-parallel 2 (every tensor rank records its
#    routing: each slot gathered twice) fails --check, the routing lines saying a slot
#    was not recorded once;
#  - bad route@ and record-twice values are usage errors (exit 2).
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
OWN="routing of 4 (microbatch, layer) slots replayed from the pipeline; the reference's own choice differed in"
# lines PATTERN: how many lines of the last output match PATTERN
lines() { grep -c -- "$1" "$WORK/out"; }
# routed DESC BAD GOOD: --check failed with BAD routing lines DIFFERS (pattern, as many as
# the second word), GOOD lines differing in 0, and no gradient line DIFFERS
routed() {
  nb=$(lines "$2): $OWN [1-9][0-9]*: DIFFERS (in F32") ng=$(lines "$OWN 0$")
  if [ "$nb" -eq "$3" ] && [ "$ng" -eq "$4" ] && ! grep -q "grad .*DIFFERS" "$WORK/out" && grep -q "^check: FAILED" "$WORK/out"
  then pass "$1: $nb routing lines of '$2' differ, $ng do not"
  else fail "$1: $nb of $3 differing ('$2'), $ng of $4 equal: $(grep -v '^memory' "$WORK/out" | head -12)"; fi
}

# ---- every replica's lines ----
expect_exit 0 "D = 2 --num-experts --check" "$A" $M --data-parallel 2 --check -q
n=$(lines "^check: device [01] (replica [01]): $OWN 0$")
[ "$n" -eq 4 ] && [ "$(lines '^check: loss ')" -eq 1 ] && pass "D = 2: each replica's routing lines (4), one loss line" \
  || fail "D = 2: $n routing lines: $(grep -v '^memory' "$WORK/out" | head -8)"

# ---- a wrong top-K on one replica's tokens ----
expect_exit 1 "PPSRT_FAULT=route@replica=1 D = 2: --check fails" env PPSRT_FAULT=route@replica=1 "$A" $M --data-parallel 2 --check -q
routed "route@replica=1 D = 2" "(replica 1" 2 2
expect_exit 1 "route@replica=1 D = 2 --json: --check fails" env PPSRT_FAULT=route@replica=1 "$A" $M --data-parallel 2 --check --json
expect_grep '"check":{"match":false,"loss_match":true,"mismatches":2,' "route@replica=1 --json: replica 1's 2 routing lines counted"
expect_exit 1 "route@replica=1 D = 2 --distributed-optimizer: --check fails" env PPSRT_FAULT=route@replica=1 \
  "$A" $M --data-parallel 2 --distributed-optimizer --check -q
routed "route@replica=1 D = 2 --distributed-optimizer" "(replica 1" 2 2
expect_exit 1 "route@replica=3 D = 4 X = 2 alltoall: --check fails" env PPSRT_FAULT=route@replica=3 \
  "$A" $M --data-parallel 4 --expert-parallel 2 --moe-token-dispatcher alltoall --check -q
routed "route@replica=3 D = 4 X = 2" "(replica 3, expert rank 1" 2 6
if have_mpi; then   # a process a rank: each process's status is the world's sum
  expect_exit 1 "mpirun -np 4: route@replica=1 D = 2: --check fails" mpirun_np 4 env PPSRT_FAULT=route@replica=1 \
    "$A" $M --data-parallel 2 --check -q
  routed "MPI route@replica=1 D = 2" "(replica 1" 2 2
  # each process's own exit status (world rank r's in st.r): all 1, the mismatches and
  # the loss's verdict (world rank 0's) summed over the world; a clean run's all 0
  for f in route@replica=1 loss+=0.01 ""; do
    rm -f "$WORK"/st.*
    mpirun_np 4 env PPSRT_FAULT="$f" ST="$WORK" sh -c '"$0" "$@" > /dev/null 2>&1; echo $? > "$ST/st.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"' \
      "$A" $M --data-parallel 2 --check -q > "$WORK/out" 2>&1
    want=1; [ -n "$f" ] || want=0
    st=$(cat "$WORK"/st.[0-3] 2>/dev/null | tr '\n' ' ')
    [ "$st" = "$want $want $want $want " ] && pass "MPI D = 2 PPSRT_FAULT='$f': every process exits $want" \
      || fail "MPI D = 2 PPSRT_FAULT='$f': the processes' exit statuses '$st' ($(ls "$WORK" | grep '^st\.' | tr '\n' ' '))"
  done
else skip "no MPI: the mpirun lines"; fi

# ---- --distributed-optimizer: a gradient in replica 1's shard only ----
expect_exit 0 "D = 2 --distributed-optimizer --check" "$A" $G --data-parallel 2 --distributed-optimizer --check -q
expect_exit 1 "vocab.out x 1.1 (replica 1's shard) D = 2 --distributed-optimizer: --check fails" \
  env PPSRT_FAULT="grad=vocab.out*1.1" "$A" $G --data-parallel 2 --distributed-optimizer --check -q
if grep -q "^check: device 1 (replica 1): grad vocab.out .*DIFFERS" "$WORK/out" && ! grep -q "(replica 0): grad .*DIFFERS" "$WORK/out"
then pass "vocab.out: named on replica 1's line alone"
else fail "vocab.out: $(grep '^check: ' "$WORK/out" | head -8)"; fi

# ---- --context-parallel: a wrong top-K on context rank 1's tokens ----
expect_exit 1 "route@context=1 C = 2: --check fails" env PPSRT_FAULT=route@context=1 "$A" $M --context-parallel 2 --check -q
routed "route@context=1 C = 2" "(context rank 1" 2 2

# ---- the gather of the routing: a slot recorded twice ----
expect_exit 0 "T = 2 --num-experts --check" "$A" $M --tensor-parallel 2 --check -q
expect_exit 1 "PPSRT_FAULT=record-twice T = 2: --check fails" env PPSRT_FAULT=record-twice "$A" $M --tensor-parallel 2 --check -q
n=$(lines "routing of 4 (microbatch, layer) slots: the reference's; a slot not recorded once: not replayed: FAILED$")
if [ "$n" -eq 4 ] && ! grep -q "grad .*DIFFERS" "$WORK/out" && grep -q "^check: FAILED" "$WORK/out"; then
  pass "record-twice: every rank's routing line says a slot not recorded once (4)"
else fail "record-twice: $n lines: $(grep -v '^memory' "$WORK/out" | head -8)"; fi

# ---- usage ----
expect_exit 2 "route@replica=2 at D = 2" env PPSRT_FAULT=route@replica=2 "$A" $M --data-parallel 2 --check -q
expect_grep "PPSRT_FAULT='route@replica=2': replica 2 does not exist (--data-parallel 2: replicas 0..1)" "replica 2: named"
expect_exit 2 "route@context=1 without --context-parallel" env PPSRT_FAULT=route@context=1 "$A" $M --check -q
expect_grep "context rank 1 does not exist (--context-parallel 1: context ranks 0..0)" "context rank 1: named"
for v in route@replica= route@replica=1x route@rank=1 route@replica=-1; do
  expect_exit 2 "PPSRT_FAULT=$v" env PPSRT_FAULT=$v "$A" $M --data-parallel 2 --check -q
  expect_grep "PPSRT_FAULT='$v': expected grad=NAME" "$v: the values named"
done
expect_exit 2 "record-twice without --tensor-parallel" env PPSRT_FAULT=record-twice "$A" $M --check -q
expect_exit 2 "route@replica=1 without --num-experts" env PPSRT_FAULT=route@replica=1 "$A" $G --data-parallel 2 --check -q
finish
