#!/bin/sh
# moe_replay.sh: --check's reference replays the pipeline's routing with experts
# (check.c gather_routing, model_gpt.c ppsrt_gpt_route_record, moe.c replay_route and
# replay_drops; docs/runtime.md "--check"), on the CPU backend (F32, where the reference's
# own choice must equal the pipeline's: the emulator's bf16 near-ties are
# tests/gpu/moe_check_emu.sh's and moe_emu.sh's). Here:
#  - --check passes with every device line saying the routing of its (microbatch, layer)
#    slots was replayed and the reference's own choice differed in 0 of them: 1F1B, 2
#    layers a stage (a replay of the wrong layer fails), a capacity factor (probs, and
#    position), T = 2 --sequence-parallel, D = 2 (each replica's lines, its own
#    microbatches: a replay of the wrong microbatch fails), D = 2 X = 2 with both
#    dispatchers, with a capacity (a replica's own choice that differs alone:
#    tests/runtime/check_ranks.sh);
#  - with the replay, --check still fails for real bugs: PPSRT_FAULT scaling the router's
#    gradient or an expert's; and a wrong top-K in the pipeline (PPSRT_FAULT=route), which
#    the replay copies into the reference, fails on the own-choice line alone (F32);
#  - PPSRT_CHECK_REPLAY=0 (tests) compares without the replay (the old comparison's line);
#  - --context-parallel C (each context rank's tokens, chunks c and 2C - 1 - c of each
#    sequence, written at their whole-sequence places): C = 2, C = 4, C = 2 x T = 2 SP,
#    C = 2 x D = 2 (with X = 2 alltoall), C = 2 under mpirun pass with every context
#    rank's line replayed (a mapping that does not mirror the second chunk fails: the
#    replayed routing is not the pipeline's), and PPSRT_FAULT=route at C = 2 fails on the
#    own-choice lines alone, context rank 1's among them.
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
C="--moe-expert-capacity-factor 0.5"
# replayed NLINES DESC: --check passed and NLINES device lines say the replay, own choice equal
replayed() {
  n=$(grep -c "routing of [0-9]* (microbatch, layer) slots replayed from the pipeline; the reference's own choice differed in 0$" "$WORK/out")
  if grep -q "^check: passed" "$WORK/out" && [ "$n" -eq "$1" ]; then pass "$2: passes, $n device lines replayed"
  else fail "$2: $n of $1 replayed lines: $(grep -v '^memory' "$WORK/out" | head -6)"; fi
}
expect_exit 0 "1F1B E = 4 --check" "$A" $M --check -q
replayed 2 "1F1B"
expect_exit 0 "1F1B E = 4, 2 layers a stage, K = 1 --check" "$A" $M --layers-per-stage 2 --moe-topk 1 --check -q
replayed 2 "2 layers a stage"
expect_exit 0 "1F1B E = 4 CF 0.5 --check" "$A" $M $C --check -q
replayed 2 "CF 0.5"
expect_exit 0 "1F1B E = 4 CF 0.5 position --check" "$A" $M $C --moe-token-drop-policy position --check -q
replayed 2 "CF 0.5 position"
expect_exit 0 "T = 2 --sequence-parallel CF 0.5 --check" "$A" $M $C --tensor-parallel 2 --sequence-parallel --check -q
replayed 4 "T = 2 SP CF 0.5"
expect_exit 0 "D = 2, 2 layers a stage --check" "$A" $M --data-parallel 2 --layers-per-stage 2 --check -q
replayed 4 "D = 2"
expect_exit 0 "D = 2 X = 2 CF 0.5 --check" "$A" $M $C --data-parallel 2 --expert-parallel 2 --check -q
replayed 4 "D = 2 X = 2 CF 0.5"
expect_exit 0 "D = 2 X = 2 alltoall CF 0.5 --check" "$A" $M $C --data-parallel 2 --expert-parallel 2 \
  --moe-token-dispatcher alltoall --check -q
replayed 4 "D = 2 X = 2 alltoall CF 0.5"
# real bugs still fail
for f in s0.l0.moe.router.w s1.l0.moe.router.w s0.l0.moe.e1.fc.w s1.l0.moe.e3.fc2.w; do
  expect_exit 1 "$f x 1.1 with the replay: --check fails" env PPSRT_FAULT="grad=$f*1.1" "$A" $M $C --check -q
  expect_grep "grad $f .*DIFFERS" "$f x 1.1: named"
done
# a wrong top-K in the pipeline (PPSRT_FAULT=route: each slot's first token's first choice
# moved to an expert it did not choose, consistently, and recorded so): the replay copies
# it into the reference, so every gradient agrees, and in F32 only the reference's own
# choice tells it: the check fails on that line alone (also at T = 2, X = 2 alltoall)
for x in "" "--tensor-parallel 2 --sequence-parallel" "--data-parallel 2 --expert-parallel 2 --moe-token-dispatcher alltoall"; do
  expect_exit 1 "PPSRT_FAULT=route $x: --check fails" env PPSRT_FAULT=route "$A" $M $x --check -q
  if grep -q "own choice differed in [1-9][0-9]*: DIFFERS (in F32" "$WORK/out" && ! grep -q "grad .*DIFFERS" "$WORK/out"; then
    pass "PPSRT_FAULT=route $x: the own-choice line alone"
  else fail "PPSRT_FAULT=route $x: $(grep -v '^memory' "$WORK/out" | head -8)"; fi
done
# without the replay
expect_exit 0 "PPSRT_CHECK_REPLAY=0 --check" env PPSRT_CHECK_REPLAY=0 "$A" $M $C --check -q
expect_grep "slots: the reference's; PPSRT_CHECK_REPLAY=0: not replayed" "PPSRT_CHECK_REPLAY=0: the comparison's line"
# --context-parallel: every context rank's tokens replayed at their places (a line each)
expect_exit 0 "--context-parallel 2 --check" "$A" $M --context-parallel 2 --check -q
replayed 4 "C = 2"
expect_grep "device 1 (context rank 1): routing of 4 (microbatch, layer) slots replayed" "C = 2: context rank 1's line"
expect_exit 0 "--context-parallel 4 --seq 16, 2 layers a stage, K = 1 --check" "$A" $M --seq 16 --context-parallel 4 \
  --layers-per-stage 2 --moe-topk 1 --check -q
replayed 8 "C = 4"
expect_exit 0 "C = 2 x T = 2 --sequence-parallel --check" "$A" $M --context-parallel 2 --tensor-parallel 2 --sequence-parallel --check -q
replayed 8 "C = 2 x T = 2 SP"
expect_exit 0 "C = 2 x D = 2 --check" "$A" $M --context-parallel 2 --data-parallel 2 --check -q
replayed 8 "C = 2 x D = 2"
expect_exit 0 "C = 2 x D = 2 X = 2 alltoall --check" "$A" $M --context-parallel 2 --data-parallel 2 --expert-parallel 2 \
  --moe-token-dispatcher alltoall --check -q
replayed 8 "C = 2 x D = 2 X = 2 alltoall"
expect_exit 0 "C = 2 PPSRT_CHECK_REPLAY=0 --check" env PPSRT_CHECK_REPLAY=0 "$A" $M --context-parallel 2 --check -q
n=$(grep -c "slots: the reference's; PPSRT_CHECK_REPLAY=0: not replayed" "$WORK/out")
[ "$n" -eq 4 ] && pass "C = 2 without the replay: every context rank's comparison line" || fail "C = 2 without the replay: $n lines"
expect_exit 1 "PPSRT_FAULT=route C = 2: --check fails" env PPSRT_FAULT=route "$A" $M --context-parallel 2 --check -q
n=$(grep -c "own choice differed in [1-9][0-9]*: DIFFERS (in F32" "$WORK/out")
if [ "$n" -eq 4 ] && ! grep -q "grad .*DIFFERS" "$WORK/out" && grep -q "context rank 1): routing.*: DIFFERS" "$WORK/out"; then
  pass "PPSRT_FAULT=route C = 2: the own-choice lines alone (context rank 1's too)"
else fail "PPSRT_FAULT=route C = 2: $n own-choice lines: $(grep -v '^memory' "$WORK/out" | head -8)"; fi
if have_mpi; then   # a process a rank: the table all-reduced over MPI, each rank's line its process's
  expect_exit 0 "mpirun -np 4: P 2 x C 2 --check" mpirun_np 4 "$A" $M --context-parallel 2 --check -q
  replayed 4 "MPI C = 2"
else skip "no MPI: the mpirun line"; fi
finish
