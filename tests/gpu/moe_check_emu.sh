#!/bin/sh
# tests/gpu/moe_check_emu.sh: --check's routing comparison with experts (check.c,
# ppsrt_gpt_route_compare), on the CUDA backend (bf16) under the emulator. Llama's layer
# with 4 experts, top 1, at --tensor-parallel 2: the router's input is rounded otherwise
# than in the one-device reference, so a near-tie of two experts' logits can route a
# token elsewhere, and the gradients then compare two computations. Over model seeds
# 1-6 (the weights, so the ties) each run's --check either passes with every device's
# routing equal to the reference's, or fails and some device reports the routing of
# some (microbatch, layer) slot differing: a failure is never left unexplained. At
# least one seed must show a differing routing (else the comparison's "differs" path
# went unseen: the test fails, pick other sizes). On the CPU (F32) the same seeds all
# pass with the routing equal. Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
L="--model gpt --arch llama --hidden 64 --heads 4 --query-groups 2 --seq 16 --vocab 256 --num-experts 4 --moe-topk 1"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
ndiff=0
for s in 1 2 3 4 5 6; do
  env LD_PRELOAD="$EMU" PPS_EMU_SEED="${PPS_EMU_SEED:-1}" "$WORK/a" $L --backend cuda --tensor-parallel 2 --check -q --iterations 1 --seed $s \
    > "$WORK/out" 2>&1
  st=$?
  nsame=$(grep -c "routing of [0-9]* (microbatch, layer) slots: the reference's" "$WORK/out")
  nd=$(grep -c "routing of [0-9]* of [0-9]* (microbatch, layer) slots differs from the reference's" "$WORK/out")
  if [ $((nsame + nd)) -ne 4 ]; then fail "seed $s: $((nsame + nd)) routing lines, 4 expected (2 devices x 2 tensor ranks)"
  elif [ $st -eq 0 ] && grep -q "^check: passed" "$WORK/out"; then pass "seed $s: --check passes ($nsame routing lines equal, $nd differing)"
  elif [ $st -eq 1 ] && [ "$nd" -gt 0 ] && grep -q "the gradients above compare two routings" "$WORK/out"; then
    pass "seed $s: --check fails, explained: the routing of $nd device(s) differs"
  else fail "seed $s: exit $st, unexplained: $(grep -v '^memory' "$WORK/out" | head -5)"; fi
  ndiff=$((ndiff + nd))
  "$WORK/a" $L --tensor-parallel 2 --check -q --iterations 1 --seed $s > "$WORK/cpu" 2>&1 &&
    [ "$(grep -c "slots: the reference's" "$WORK/cpu")" -eq 4 ] && pass "seed $s: CPU (F32): passes, routing equal" ||
    fail "seed $s on the CPU: $(grep -v '^memory' "$WORK/cpu" | head -5)"
done
[ $ndiff -gt 0 ] && pass "a differing routing was seen ($ndiff device lines)" ||
  fail "no seed routed differently from the reference: the comparison's 'differs' path went unseen"
finish
