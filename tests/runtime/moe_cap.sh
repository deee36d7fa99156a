#!/bin/sh
# moe_cap.sh: the experts' capacity factor with token dropping (--moe-expert-capacity-factor
# CF, --moe-token-drop-policy probs|position; runtime/moe.c route_host, Megatron-Core's
# semantics: per microbatch and rank, ceil(CF N K / E) slots an expert of the rank's own
# N K, the rest dropped). The backward with dropped slots is checked against finite
# differences in tests/kernels/gpt_grad (CF 0.5, both policies, both layers); here:
#  - CF = E (nothing can be dropped) gives the dropless losses exactly, at X = 1 and
#    at --expert-parallel 2 (D = 2);
#  - CF = 0.5 drops slots: another loss; --check passes on 1F1B, ZB-V, at X = 2 D = 2,
#    at T = 2 --sequence-parallel and at X = 2 with T = 2;
#  - --moe-token-drop-policy position gives another loss than probs (and passes --check);
#  - K = E: CF 1 (cap = N) is dropless, CF 0.875 (cap = N - 1) drops; K = 1 (every
#    weight 1): probs ties to the lower token, the position policy's losses exactly;
#  - the experts' store entry shrinks to min(X N K, E cap) rows: each device's resident
#    peak against the dropless run's, by the bytes computed here, at X = 1 and X = 2
#    (ppsc sim's unit_bytes against the runtime's: tests/analysis/moe.sh);
#  - the default from the schedule's model { moe_capacity_factor }; --json names it;
#  - refusals (exit 2, the flag named): CF 0, a negative or a word; the drop policy
#    without a capacity factor or with a bad value; a capacity factor without experts,
#    or with --context-parallel 2.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
C="--moe-expert-capacity-factor"

# CF = E: every slot kept (cap = N): the dropless losses, exactly
same() {   # same LABEL A B: A's losses are B's, digit for digit
  a=$(losses "$2"); b=$(losses "$3")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$1: $a"; else fail "$1: '$a' vs '$b'"; fi
}
run n1 "$A" $M --iterations 3
run c1 "$A" $M --iterations 3 $C 4
same "CF = E gives the dropless losses" "$WORK/c1" "$WORK/n1"
run n2 "$A" $M --iterations 3 --data-parallel 2 --expert-parallel 2
run c2 "$A" $M --iterations 3 --data-parallel 2 --expert-parallel 2 $C 4
same "X = 2 D = 2: CF = E gives the dropless losses" "$WORK/c2" "$WORK/n2"

# CF = 0.5 drops: another loss; the position policy another again
run h1 "$A" $M --iterations 3 $C 0.5
run p1 "$A" $M --iterations 3 $C 0.5 --moe-token-drop-policy position
python3 - "$(losses "$WORK/n1")" "$(losses "$WORK/h1")" "$(losses "$WORK/p1")" <<'PY' &&
import sys
n, h, p = [[float(x) for x in s.split()] for s in sys.argv[1:4]]
assert len(n) == len(h) == len(p) == 3, (n, h, p)
assert abs(h[0] - n[0]) > 1e-4 and abs(p[0] - h[0]) > 1e-4, (n, h, p)
PY
  pass "CF = 0.5 drops (loss $(losses "$WORK/h1")against $(losses "$WORK/n1")); position: $(losses "$WORK/p1")" ||
  fail "CF = 0.5: dropless '$(losses "$WORK/n1")', probs '$(losses "$WORK/h1")', position '$(losses "$WORK/p1")'"

# the capacity itself: K = E (every token to every expert), N = 8: CF 0.875 gives cap
# ceil(7) = 7 < 8, one slot dropped an expert (another loss); CF 1 gives cap 8: dropless
run ka "$A" $G --num-experts 4 --moe-topk 4 --iterations 1
run kb "$A" $G --num-experts 4 --moe-topk 4 --iterations 1 $C 1
run kc "$A" $G --num-experts 4 --moe-topk 4 --iterations 1 $C 0.875
same "K = E, CF 1 (cap = N): dropless" "$WORK/kb" "$WORK/ka"
python3 - "$(losses "$WORK/ka")" "$(losses "$WORK/kc")" <<'PY' && pass "K = E, CF 0.875 (cap = N - 1) drops: $(losses "$WORK/kc")against $(losses "$WORK/ka")" ||
import sys
a, c = [float(x) for x in sys.argv[1:3]]
assert abs(a - c) > 1e-5, (a, c)
PY
  fail "K = E, CF 0.875 (cap N - 1) dropped nothing: '$(losses "$WORK/kc")' vs '$(losses "$WORK/ka")'"
# K = 1: every routing weight is 1, so probs keeps the lower tokens (its tie rule): position's choice
run q1 "$A" $M --moe-topk 1 --iterations 2 $C 0.5
run q2 "$A" $M --moe-topk 1 --iterations 2 $C 0.5 --moe-token-drop-policy position
run q0 "$A" $M --moe-topk 1 --iterations 2
same "K = 1: probs ties to the lower token, as position" "$WORK/q1" "$WORK/q2"
[ "$(losses "$WORK/q1")" != "$(losses "$WORK/q0")" ] && pass "K = 1, CF 0.5 drops" || fail "K = 1, CF 0.5 dropped nothing"

# --check with dropping: schedules, expert, tensor and sequence parallelism
chk() {   # chk LABEL ARGS...
  label=$1; shift
  expect_exit 0 "$label --check" "$@" --check -q
  expect_grep "^check: passed" "$label: check passes"
}
chk "1F1B CF 0.5" "$A" $M $C 0.5
chk "1F1B CF 0.5 position" "$A" $M $C 0.5 --moe-token-drop-policy position
chk "ZB-V CF 0.5" "$WORK/z" $M $C 0.5
chk "X = 2 D = 2 CF 0.5" "$A" $M $C 0.5 --data-parallel 2 --expert-parallel 2
chk "T = 2 --sequence-parallel CF 0.5 (llama)" "$A" $M --arch llama --ffn-hidden 24 $C 0.5 --tensor-parallel 2 \
  --sequence-parallel
chk "X = 2 D = 2 T = 2 CF 0.75 position" "$A" $M $C 0.75 --moe-token-drop-policy position --data-parallel 2 \
  --expert-parallel 2 --tensor-parallel 2

# the experts' entry: min(X N K, E cap) rows of hpre, hact and eout instead of X N K
# (1F1B P = 2 keeps 2 microbatches on device 0, 1 on device 1: peak_units of them)
for X in 1 2; do
  fl="--iterations 1"; [ $X = 2 ] && fl="$fl --data-parallel 2 --expert-parallel 2"
  run bn$X "$A" $M $fl
  run bc$X "$A" $M $fl $C 0.6
  python3 - "$WORK/bn$X" "$WORK/bc$X" $X <<'PY' > "$WORK/py.out" 2>&1 && pass "X = $X: $(cat "$WORK/py.out")" ||
import json, math, sys
n, c = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
X = int(sys.argv[3])
up = lambda b: (b + 255) // 256 * 256
N, h, E, K, F, es, cf = 8, 16, 4, 2, 64, 4, 0.6
cap = min(N, math.ceil(cf * N * K / E))      # slots an expert keeps of a rank's N K
rows = min(X * N * K, E * cap)                # at most X cap for each of the E / X local experts
part = lambda r: up(r * F * es) * 2 + up(r * h * es)   # hpre, hact (GeLU: F wide), eout
assert rows < X * N * K, rows
for a, b in zip(n, c):
    assert a["peak_units"] == b["peak_units"], (a, b)
    d = a["resident_peak_bytes"] - b["resident_peak_bytes"]
    assert d == a["peak_units"] * (part(X * N * K) - part(rows)), (d, a, b, rows)
print("cap %d, %d rows of %d: %d B less a microbatch" % (cap, rows, X * N * K, part(X * N * K) - part(rows)))
PY
    fail "X = $X: the entry's bytes: $(cat "$WORK/py.out")"
done

# model { moe_capacity_factor } is the default; --json names the capacity
sed 's/^\( *microbatches m;\)/\1\n  model { experts = 4; moe_capacity_factor = 0.5; }/' "$top_srcdir/stdlib/1f1b.pps" > "$WORK/mc.pps"
if build mc "$WORK/mc.pps" -D P=2 -D m=4; then
  run md "$WORK/mc" $M --iterations 3
  same "model { moe_capacity_factor = 0.5 } is the flag's default" "$WORK/md" "$WORK/h1"
else fail "build 1f1b with model { moe_capacity_factor }"; fi
grep -q '"expert_capacity":{"factor":0.5,"drop_policy":"position"}' "$WORK/p1" && pass "--json names the capacity" ||
  fail "--json capacity: $(grep -o '"experts":.*' "$WORK/p1" | head -c 300)"

# refusals
for v in 0 -1 abc; do
  expect_exit 2 "$C $v" "$A" $M $C $v
  expect_grep "moe-expert-capacity-factor needs a number above 0, got '$v'" "$C $v refused"
done
expect_exit 2 "--moe-token-drop-policy without a capacity factor" "$A" $M --moe-token-drop-policy position
expect_grep "moe-token-drop-policy .*it needs --moe-expert-capacity-factor" "the drop policy alone refused"
expect_exit 2 "--moe-token-drop-policy first" "$A" $M $C 1 --moe-token-drop-policy first
expect_grep "moe-token-drop-policy needs probs or position, got 'first'" "a bad drop policy refused"
expect_exit 2 "$C without --num-experts" "$A" $G $C 1
expect_grep "moe-expert-capacity-factor set up the experts of --num-experts" "a capacity without experts refused"
expect_exit 2 "$C with --context-parallel 2" "$A" $M $C 1 --context-parallel 2
expect_grep "moe-expert-capacity-factor 1 does not run with --context-parallel 2" "a capacity under context parallelism refused"
finish
