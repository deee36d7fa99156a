#!/bin/sh
# tests/gpu/moe_check_emu.sh: --check's replay of the routing with experts (check.c
# gather_routing, moe.c replay_route; docs/runtime.md "--check"), on the CUDA backend
# (bf16) under the emulator. Llama's layer with 4 experts, top 1, at --tensor-parallel 2:
# the router's input is rounded otherwise than in the one-device reference, so a near-tie
# of two experts' logits can route a token elsewhere there (at --seed 4 one (microbatch,
# layer) slot flips). The reference replays the pipeline's routing, so:
#  - over model seeds 1-6 (the weights, so the ties) every --check passes, each device
#    line saying the routing was replayed, and at least one seed shows the reference's
#    own choice differing (the replay was needed: else pick other sizes);
#  - at --seed 4 without the replay (PPSRT_CHECK_REPLAY=0) --check fails, explained by the
#    routing comparison: the failure the replay removes;
#  - with the replay --check still fails for real bugs: PPSRT_FAULT scaling the router's
#    gradient (with the load-balancing loss: at top 1 without it the router has none) or
#    an expert's, on the device whose slot flipped;
#  - with a capacity factor (CF 0.5, top 2, seed 1) the reference's own choice flips and
#    its own drops would differ: with the choices and drops replayed --check passes (and
#    fails without the replay);
#  - on the CPU (F32) the same seeds pass with the reference's own choice equal everywhere;
#  - --context-parallel 2 (seed 4): every context rank's tokens replayed at their places in
#    the whole sequences (8 lines: 2 devices x 2 tensor ranks x 2 context ranks), one of
#    them with the reference's own choice differing, and --check passes; without the
#    replay it fails, explained by the routing comparison.
# Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
L="--model gpt --arch llama --hidden 64 --heads 4 --query-groups 2 --seq 16 --vocab 256 --num-experts 4 --moe-topk 1"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
emu() { env LD_PRELOAD="$EMU" PPS_EMU_SEED="${PPS_EMU_SEED:-1}" "$@" --backend cuda --tensor-parallel 2 --check -q --iterations 1; }
nown=0
for s in 1 2 3 4 5 6; do
  emu "$WORK/a" $L --seed $s > "$WORK/out" 2>&1
  st=$?
  nrep=$(grep -c "routing of 4 (microbatch, layer) slots replayed from the pipeline; the reference's own choice differed in" "$WORK/out")
  n=$(sed -n "s/.*replayed from the pipeline; the reference's own choice differed in \([0-9]*\).*/\1/p" "$WORK/out" | awk '{t += $1} END {print t + 0}')
  if [ "$nrep" -ne 4 ]; then fail "seed $s: $nrep replayed routing lines, 4 expected (2 devices x 2 tensor ranks)"
  elif [ $st -eq 0 ] && grep -q "^check: passed" "$WORK/out"; then pass "seed $s: --check passes with the routing replayed (own choice differed: $n)"
  else fail "seed $s: exit $st: $(grep -v '^memory' "$WORK/out" | head -5)"; fi
  nown=$((nown + n))
  "$WORK/a" $L --tensor-parallel 2 --check -q --iterations 1 --seed $s > "$WORK/cpu" 2>&1 &&
    [ "$(grep -c "replayed from the pipeline; the reference's own choice differed in 0$" "$WORK/cpu")" -eq 4 ] &&
    pass "seed $s: CPU (F32): passes, the reference's own choice equal" ||
    fail "seed $s on the CPU: $(grep -v '^memory' "$WORK/cpu" | head -5)"
done
[ $nown -gt 0 ] && pass "the reference's own choice differed ($nown device lines): the replay was needed" ||
  fail "no seed's reference chose differently: the replay went untested"
# the failure the replay removes
emu env PPSRT_CHECK_REPLAY=0 "$WORK/a" $L --seed 4 > "$WORK/out" 2>&1
st=$?
[ $st -eq 1 ] && grep -q "the gradients above compare two routings" "$WORK/out" &&
  pass "seed 4 without the replay: --check fails, explained by the routing comparison" ||
  fail "seed 4 without the replay: exit $st: $(grep -v '^memory' "$WORK/out" | head -5)"
# a capacity (CF 0.5, top 2, seed 1): the reference's own choice flips in two slots, and
# its own drops would differ too; with the pipeline's choices and drops replayed it passes
emu "$WORK/a" $L --moe-topk 2 --moe-expert-capacity-factor 0.5 --seed 1 > "$WORK/out" 2>&1
st=$?
[ $st -eq 0 ] && grep -q "^check: passed" "$WORK/out" && grep -q "slots replayed from the pipeline; the reference's own choice differed in [1-9]" "$WORK/out" &&
  pass "CF 0.5 top 2 seed 1: --check passes with the routing and the drops replayed (own choice differed)" ||
  fail "CF 0.5 top 2 seed 1: exit $st: $(grep -v '^memory' "$WORK/out" | head -5)"
emu env PPSRT_CHECK_REPLAY=0 "$WORK/a" $L --moe-topk 2 --moe-expert-capacity-factor 0.5 --seed 1 > "$WORK/out" 2>&1
[ $? -eq 1 ] && pass "CF 0.5 top 2 seed 1 without the replay: --check fails" || fail "CF 0.5 top 2 seed 1 without the replay: passes"
# --context-parallel 2: each context rank's tokens (chunks c and 3 - c) replayed
emu "$WORK/a" $L --context-parallel 2 --seed 4 > "$WORK/out" 2>&1
st=$?
nrep=$(grep -c "context rank [01]): routing of 4 (microbatch, layer) slots replayed from the pipeline; the reference's own choice differed in" "$WORK/out")
[ $st -eq 0 ] && grep -q "^check: passed" "$WORK/out" && [ "$nrep" -eq 8 ] &&
  grep -q "slots replayed from the pipeline; the reference's own choice differed in [1-9]" "$WORK/out" &&
  pass "C = 2 seed 4: --check passes with every context rank's routing replayed (own choice differed)" ||
  fail "C = 2 seed 4: exit $st, $nrep replayed lines: $(grep -v '^memory' "$WORK/out" | head -5)"
emu env PPSRT_CHECK_REPLAY=0 "$WORK/a" $L --context-parallel 2 --seed 4 > "$WORK/out" 2>&1
st=$?
[ $st -eq 1 ] && grep -q "the gradients above compare two routings" "$WORK/out" &&
  pass "C = 2 seed 4 without the replay: --check fails, explained by the routing comparison" ||
  fail "C = 2 seed 4 without the replay: exit $st: $(grep -v '^memory' "$WORK/out" | head -5)"
# real bugs still fail with the replay
for f in s1.l0.moe.router.w s1.l0.moe.e1.fc.w s0.l0.moe.e2.fc2.w; do
  emu env PPSRT_FAULT="grad=$f*1.2" "$WORK/a" $L --moe-aux-loss-coeff 0.01 --seed 4 > "$WORK/out" 2>&1
  st=$?
  [ $st -eq 1 ] && grep -q "grad $f .*DIFFERS" "$WORK/out" && grep -q "slots replayed from the pipeline" "$WORK/out" &&
    pass "seed 4, replayed: $f's gradient x 1.2 fails --check" ||
    fail "seed 4, replayed: $f x 1.2: exit $st: $(grep -v '^memory' "$WORK/out" | head -5)"
done
finish
