#!/bin/sh
# tests/analysis/recompute.sh: the recompute model in ppsc sim (compiler/recompute.c)
# and where it wins against offload (examples/recompute_vs_offload.pps, interleaved
# 1F1B, P = 4, m = 8, v = 2, equal costs):
#  - TOFF = TF: offload is free (makespan 28.5 = no lever) at peak 2; recomputation
#    costs (m + (P-1)/v)(2TF + TB + TW) = 38 at peak 1/v = 0.5: offload wins on time;
#  - TOFF = 4 TF: offload's peak rises to 5.5 and its makespan to 30.5; under
#    `memory limit = 3` offload fails `ppsc check` and recomputation passes;
#  - with input = 0.1 the peak is at most 1/v + input x (the peak without a lever);
#  - the over-time peak (sim's memory timeline) equals the order peak;
#  - --policy recompute=R scales the added time by R (B's duration += R TF);
#  - the SVG timeline hatches the recomputed part of every B (and only with recomputation);
#  - `offload auto` (synthesize) picks recomputation or offload by the makespan under
#    the memory limit.
: "${PPSC:?}" "${top_srcdir:?}"
EX=$top_srcdir/examples/recompute_vs_offload.pps
fails=0
sim() { "$PPSC" sim "$EX" --json "$@"; }
for a in "0 1" "1 1" "2 1" "1 4" "2 4"; do
  set -- $a
  sim -D lever=$1 -D TOFF=$2 > "${TMPDIR:-/tmp}/pps-rc.$$.$1.$2.json" || { echo "FAIL: sim lever=$1 TOFF=$2"; fails=1; }
done
sim -D lever=2 -D input=0.1 > "${TMPDIR:-/tmp}/pps-rc.$$.in.json" || fails=1
sim -D lever=0 -D layers=4 --policy recompute=0.5 > "${TMPDIR:-/tmp}/pps-rc.$$.half.json" || fails=1
sim -D lever=0 --policy recompute=0.5 > "${TMPDIR:-/tmp}/pps-rc.$$.one.json" || fails=1
python3 - "${TMPDIR:-/tmp}/pps-rc.$$" <<'PY' || fails=1
import json, sys
p = sys.argv[1]
j = lambda k: json.load(open("%s.%s.json" % (p, k)))
none, off1, rc1, off4, rc4 = j("0.1"), j("1.1"), j("2.1"), j("1.4"), j("2.4")
bad = []
def want(c, msg):
    if not c: bad.append(msg)
want(off1["makespan"] == none["makespan"] == 28.5, "offload at TOFF = TF is not free: %s vs %s" % (off1["makespan"], none["makespan"]))
want(off1["peak_memory"] == 2, "offload peak %s, expected 2" % off1["peak_memory"])
want(rc1["makespan"] == 38 and rc4["makespan"] == 38, "recompute makespan %s / %s, expected 38" % (rc1["makespan"], rc4["makespan"]))
want(rc1["peak_memory"] == 0.5, "recompute peak %s, expected 1/v = 0.5" % rc1["peak_memory"])
want(all(d["recompute_time"] == 8 for d in rc1["per_device"]), "recompute_time %s, expected m TF = 8 per device" % [d["recompute_time"] for d in rc1["per_device"]])
want(off4["peak_memory"] == 5.5 and off4["makespan"] == 30.5, "slow link offload %s / %s, expected 30.5 / 5.5" % (off4["makespan"], off4["peak_memory"]))
want(all(d["peak_memory_time"] == d["peak_memory_order"] for d in rc1["per_device"]), "recompute: timeline peak differs from the order peak")
inp = j("in")
want(0.5 < inp["peak_memory"] <= 0.5 + 0.1 * none["peak_memory"] + 1e-9, "input 0.1: peak %s" % inp["peak_memory"])
half = j("half")
want(all(abs(d["recompute_time"] - 4) < 1e-12 for d in half["per_device"]), "ratio 0.5: recompute_time %s, expected 4" % [d["recompute_time"] for d in half["per_device"]])
want(none["peak_memory"] > half["peak_memory"] > rc1["peak_memory"], "ratio 0.5: peak %s not between" % half["peak_memory"])
one = j("one")   # one layer per stage: ratio 0.5 recomputes that layer, the whole stage
want([d["recompute_time"] for d in one["per_device"]] == [8] * 4 and one["peak_memory"] == rc1["peak_memory"],
     "ratio 0.5 of one layer: recompute_time %s, peak %s, expected the whole stage's 8, %s" % ([d["recompute_time"] for d in one["per_device"]], one["peak_memory"], rc1["peak_memory"]))
print("\n".join("FAIL: " + b for b in bad) if bad else "ok: offload 28.5/2 at TOFF=TF, 30.5/5.5 at 4TF; recompute 38/0.5; ratio 0.5 peak %g" % half["peak_memory"])
sys.exit(1 if bad else 0)
PY
rm -f "${TMPDIR:-/tmp}"/pps-rc.$$.*.json
# under a memory limit of 3 at TOFF = 4: offload does not fit, recomputation does
if "$PPSC" check "$EX" -D lever=1 -D TOFF=4 --memory limit=3 > /dev/null 2>&1; then echo "FAIL: offload fits limit 3 at TOFF = 4"; fails=1
else echo "ok: offload at TOFF = 4 exceeds memory limit 3"; fi
if "$PPSC" check "$EX" -D lever=2 -D TOFF=4 --memory limit=3 > /dev/null 2>&1; then echo "ok: recomputation fits memory limit 3"
else echo "FAIL: recomputation does not fit limit 3"; fails=1; fi
# the SVG hatches the forward again in each recomputed B (64 = m x S), nothing without
svg=${TMPDIR:-/tmp}/pps-rc.$$.svg
for l in 2 1; do
  "$PPSC" sim "$EX" -D lever=$l --svg "$svg" > /dev/null || { echo "FAIL: sim --svg lever=$l"; fails=1; }
  n=$(grep -o 'url(#recompute)' "$svg" | wc -l)
  want=$([ $l = 2 ] && echo 65 || echo 0)   # 64 passes and the legend's key
  if [ "$n" -eq "$want" ]; then echo "ok: svg lever=$l: $n hatched rects"; else echo "FAIL: svg lever=$l: $n hatched rects, expected $want"; fails=1; fi
done
rm -f "$svg"
# offload auto (synthesize) chooses between offload and recomputation by the real
# makespan under the limit (P = 4, m = 8, linear, TOFF = 0.5): recomputation where the
# limit leaves offload nothing faster (L = 1: 44 against 72 without either), offload at
# L = 3 (29, recomputing costs a forward per B); the written file states the choice
oa=${TMPDIR:-/tmp}/pps-rc-oa.$$
cat > "$oa.pps" <<'PPS'
schedule oa(P = 4, m = 8, L: real = 2) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1, TC = 0, TOFF = 0.5;
  memory limit = L;
  offload auto;
  synthesize;
}
PPS
for L in 1 3; do
  if "$PPSC" synth "$oa.pps" -D L=$L -o "$oa.out.pps" > /dev/null 2>&1; then
    got=$("$PPSC" sim --json "$oa.out.pps" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["valid"], j["makespan"], j["peak_memory"])')
    pol=$(grep -o '^  \(recompute\|offload\) ratio [^;]*' "$oa.out.pps" | head -1)
    case "$L:$got:$pol" in
      "1:True 44 1:  recompute ratio 1 stages 0..4"|"3:True 29 3:  offload ratio "*)
        echo "ok: offload auto L=$L: $got,$pol" ;;
      *) echo "FAIL: offload auto L=$L: '$got' '$pol'"; fails=1 ;;
    esac
  else echo "FAIL: ppsc synth L=$L"; fails=1; fi
done
rm -f "$oa.pps" "$oa.out.pps"
# synthesize with a stated recompute policy (no offload auto) searches with it: F keeps
# 0.05 of a stage's 0.5 (input 0.1), so limits 0.6 and 0.8 fit (0.1 kept + 0.45 rebuilt) where
# without recomputation one microbatch needs 1; the order meets the limit in sim, and
# sim's makespan is the synthesiser's (no warning that the model left the rebuild out)
cat > "$oa.pps" <<'PPS'
schedule sr(P = 2, m = 4, L: real = 1.5, rc: bool = true) {
  devices P; microbatches m; placement interleaved(2);
  cost TF = 1, TB = 1, TW = 1, TC = 0;
  memory limit = L;
  memory input = 0.1;
  if rc { recompute all; }
  synthesize;
}
PPS
for L in 0.6 0.8 1.5; do
  if "$PPSC" synth "$oa.pps" -D L=$L -o "$oa.out.pps" > /dev/null 2> "$oa.err"; then
    got=$("$PPSC" sim --json "$oa.out.pps" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["valid"], j["peak_memory"] <= '$L')')
    if [ "$got" = "True True" ] && grep -q '^  recompute ratio 1 stages 0..4;' "$oa.out.pps" && ! grep -q "differs from the synthesiser" "$oa.err"; then
      echo "ok: synthesize with recompute all under limit $L: valid, peak within, sim's makespan is the model's"
    else echo "FAIL: synthesize with recompute all under limit $L: '$got'"; cat "$oa.err"; fails=1; fi
  else echo "FAIL: ppsc synth with recompute all under limit $L:"; cat "$oa.err"; fails=1; fi
done
if "$PPSC" synth "$oa.pps" -D L=0.8 -D rc=false -o "$oa.out.pps" > /dev/null 2> "$oa.err"; then
  echo "FAIL: limit 0.8 without recomputation synthesised"; fails=1
elif grep -q "memory limit 0.8 is below 1, the least any order can reach" "$oa.err"; then
  echo "ok: limit 0.8 without recomputation: below the least any order needs"
else echo "FAIL: limit 0.8 without recomputation:"; cat "$oa.err"; fails=1; fi
rm -f "$oa.pps" "$oa.out.pps" "$oa.err"
# a limit the rebuild exceeds is reported at the B that rebuilds (the verifier's order model)
"$PPSC" check "$top_srcdir/examples/1f1b.pps" --policy recompute=all --memory input=0.2 --memory limit=1.5 > /dev/null 2> "${TMPDIR:-/tmp}/pps-rc.$$.err"
if grep -q "1f1b.pps:19:47: error: device 0 holds 1.6 activations while BW(0) runs its forward again (recompute), over the limit of 1.5" "${TMPDIR:-/tmp}/pps-rc.$$.err"; then
  echo "ok: the limit error names the recomputing BW"
else echo "FAIL: limit error:"; cat "${TMPDIR:-/tmp}/pps-rc.$$.err"; fails=1; fi
rm -f "${TMPDIR:-/tmp}/pps-rc.$$.err"
# every expect of the example holds where it applies
for l in 0 1 2; do
  "$PPSC" check "$EX" -D lever=$l > /dev/null || { echo "FAIL: ppsc check lever=$l"; fails=1; }
done
exit $fails
