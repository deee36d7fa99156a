#!/bin/sh
# tests/front/squeeze_eval.sh: `squeeze;`'s fast evaluator (block.c: sq_run, sq_fixed)
# against the executor (exec.c), the reference, on random points. For pseudo-random
# points (the squeezable stdlib schedules v_half, v_min, 1f1b_v; P 2..6, m P..3P,
# TF/TB/TW 0.5..2, TC 0..1; a fixed seed), the makespan squeeze gives its chosen order
# (PPS_SQUEEZE_DEBUG=1 prints it) must be the makespan `ppsc sim` gives that order
# (lowered, rendezvous-repaired, verified, simulated), to 1e-9 relative.
#   SQUEEZE_EVAL_N=K   points (default 18); SQUEEZE_EVAL_SEED=S (default 11).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
N=${SQUEEZE_EVAL_N:-18}
SEED=${SQUEEZE_EVAL_SEED:-11}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/squeeze-eval.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail=0
awk -v x="$SEED" -v n="$N" 'function r(k) { x = (x * 1103515245 + 12345) % 2147483648; return int(x / 65536) % k }
  BEGIN {
    split("v_half v_min 1f1b_v", f, " "); split("0.5 1 1.5 2", c, " "); split("0 0.1 0.3 0.5 1", tc, " ")
    for (i = 0; i < n; i++) {
      P = 2 + r(5); m = P * (1 + r(3))
      printf "%s %d %d %s %s %s %s\n", f[1 + i % 3], P, m, c[1 + r(4)], c[1 + r(4)], c[1 + r(4)], tc[1 + r(5)]
    }
  }' > "$tmp/points"
k=0 n=0
while read -r f P m TF TB TW TC; do
  k=$((k + 1))
  args="-D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC -D checks=false -D squeezed=true"
  # shellcheck disable=SC2086
  PPS_SQUEEZE_DEBUG=1 "$PPSC" sim --json $args "$top_srcdir/stdlib/$f.pps" > "$tmp/o$k.json" 2> "$tmp/e$k"
  sq=$(sed -n 's/^squeeze: makespan //p' "$tmp/e$k" | tail -n 1)
  sim=$(awk '{ s = s $0 } END { i = index(s, "\"makespan\":"); v = substr(s, i + 11); sub(/[,}].*/, "", v);
                                 j = index(s, "\"valid\":"); w = substr(s, j + 8); sub(/[,}].*/, "", w); if (i && j) print w, v }' "$tmp/o$k.json")
  set -- $sim
  if [ -z "$sq" ] || [ $# -ne 2 ] || [ "$1" != true ]; then
    echo "FAIL $k: $f $args: no squeeze figure ('$sq') or no valid simulation ('$sim')"; fail=1; continue
  fi
  if awk -v a="$sq" -v b="$2" 'BEGIN { d = a - b; e = 1e-9 * (1 + (a > b ? a : b)); exit !(d * d <= e * e) }'; then
    echo "ok $k: $f P=$P m=$m TC=$TC: makespan $2 (squeeze's evaluator = the executor's)"; n=$((n + 1))
  else
    echo "FAIL $k: $f $args: squeeze's evaluator says $sq, the executor (ppsc sim) $2"; fail=1
  fi
done < "$tmp/points"
[ "$n" -gt 0 ] || { echo "FAIL: no point compared"; fail=1; }
exit $fail
