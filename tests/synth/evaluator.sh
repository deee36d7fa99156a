#!/bin/sh
# tests/synth/evaluator.sh: the synthesizer's fast evaluators (synth.c: run_policy and
# eval_order) against the executor (exec.c), the reference, on random schedules. For
# pseudo-random points (placement linear, V-shape or interleaved; P 2..6, m P..3P,
# TF/TB/TW 0.5..2, TC 0..1, a memory limit from tight to none; a fixed seed, so a
# failure reproduces), `ppsc synth` times its chosen order with the executor (the
# analysis pipeline: lowered, rendezvous-repaired, verified, simulated) and warns
# "the simulator's makespan X differs from the synthesiser's model Y" when its own
# evaluator disagrees (cmd_synth.c; relative 1e-6): no point may get that warning.
# And `ppsc sim` of the literal order it writes must give the figures it reports. The
# list scheduler (run_policy) keeps the look of a device that waits until an input or
# the clock can change it: with PPS_SYNTH_RELOOK=1 it redoes every look, and the search
# must write the same order after the same number of candidates.
#   SYNTH_EVAL_N=K   points (default 16); SYNTH_EVAL_SEED=S (default 7).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
ANY=$top_srcdir/tests/synth/synth_any.pps
N=${SYNTH_EVAL_N:-16}
SEED=${SYNTH_EVAL_SEED:-7}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-eval.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail=0
# points: "P m pl v TF TB TW TC L" from a linear congruential sequence
awk -v x="$SEED" -v n="$N" 'function r(k) { x = (x * 1103515245 + 12345) % 2147483648; return int(x / 65536) % k }
  BEGIN {
    split("0.5 1 1.5 2", c, " "); split("0 0.1 0.3 0.5 1", tc, " ")
    for (i = 0; i < n; i++) {
      P = 2 + r(5); pl = r(3); v = 2; m = P * (1 + r(3))
      if (pl == 2) m = P * (1 + r(2))        # interleaved: a multiple of P
      S = pl == 0 ? P : 2 * P                  # stages; the limit in activations of one stage
      L = r(4) == 0 ? 1000 : (pl == 0 ? P - r(P) + 0.5 * r(2) : 1 + 0.5 * r(2 * P))
      if (L < 1) L = 1
      printf "%d %d %d %d %s %s %s %s %s\n", P, m, pl, v, c[1 + r(4)], c[1 + r(4)], c[1 + r(4)], tc[1 + r(5)], L
    }
  }' > "$tmp/points"
# jval KEY...: the first value of each key of the JSON object on stdin ("?" if none)
jval() {
  awk -v keys="$*" '{ line = line $0 } END {
    n = split(keys, ks, " ")
    for (j = 1; j <= n; j++) {
      i = index(line, "\"" ks[j] "\":"); s = "?"
      if (i) { s = substr(line, i + length(ks[j]) + 3); sub(/^ */, "", s); sub(/[,}\]].*/, "", s) }
      printf "%s%s", s, (j < n ? " " : "\n")
    }
  }'
}
k=0
while read -r P m pl v TF TB TW TC L; do
  k=$((k + 1))
  args="-D P=$P -D m=$m -D pl=$pl -D v=$v -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC -D L=$L -D effort=0"
  # shellcheck disable=SC2086
  if ! "$PPSC" synth --json $args -o "$tmp/o$k.pps" "$ANY" > "$tmp/s$k.json" 2> "$tmp/s$k.err"; then
    # a limit no order meets is refused with a clear error: not an evaluator case
    if grep -q "error" "$tmp/s$k.err" && ! grep -q "internal\|assert" "$tmp/s$k.err"; then
      echo "skip $k: $args (refused: $(head -n 1 "$tmp/s$k.err"))"; continue
    fi
    echo "FAIL $k: ppsc synth $args"; cat "$tmp/s$k.err"; fail=1; continue
  fi
  if grep -q "differs from the synthesiser's model" "$tmp/s$k.err"; then
    echo "FAIL $k: $args: $(grep "differs from" "$tmp/s$k.err" | head -n 1)"; fail=1; continue
  fi
  # shellcheck disable=SC2086
  PPS_SYNTH_RELOOK=1 "$PPSC" synth --json $args -o "$tmp/r$k.pps" "$ANY" > "$tmp/r$k.json" 2>/dev/null
  if [ "$(jval candidates < "$tmp/s$k.json")" != "$(jval candidates < "$tmp/r$k.json")" ] ||
     [ "$(grep -v '^// search:' "$tmp/o$k.pps")" != "$(grep -v '^// search:' "$tmp/r$k.pps")" ]; then
    echo "FAIL $k: $args: another order or candidate count when every look is redone (PPS_SYNTH_RELOOK)"; fail=1; continue
  fi
  syn=$(jval makespan peak_memory < "$tmp/s$k.json")
  sim=$("$PPSC" sim --json "$tmp/o$k.pps" 2>/dev/null | jval valid makespan peak_memory)
  # shellcheck disable=SC2086
  set -- $syn $sim
  if [ $# -eq 5 ] && [ "$3" = true ] && awk -v a="$1" -v b="$4" -v p="$2" -v q="$5" 'BEGIN {
       e = 1e-9 * (1 + (a > b ? a : b)); d = a - b; f = p - q; exit !(d * d <= e * e && f * f <= 1e-18 * (1 + p * p)) }'; then
    echo "ok $k: P=$P m=$m pl=$pl TC=$TC L=$L: makespan $1, peak $2 (synth's model = the executor's)"
  else
    echo "FAIL $k: $args: ppsc synth reports '$syn', ppsc sim of its order '$sim'"; fail=1
  fi
done < "$tmp/points"
[ $k -gt 0 ] || { echo "FAIL: no points"; fail=1; }
exit $fail
