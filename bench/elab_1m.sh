#!/bin/sh
# bench/elab_1m.sh [PPSC] [RUNS]: front-end speed. Times `ppsc expand` on
#   gen      a 1F1B generator (loops, lets, min) that elaborates to 1,000,000 ops
#   literal  the 1,000,000-op literal file that `expand` printed for it (scanner and
#            parser bound: ~6.5 MB of text)
#   block    a building block repeated to 1,000,000 ops (sorting by slot)
# after one warm-up run, RUNS times each (default 7); prints the median, min and max
# wall time in seconds. Output goes to /dev/null; the target is < 0.5 s per case.
ppsc=${1:-./ppsc}
runs=${2:-7}
tmp=${TMPDIR:-/tmp}/pps-bench.$$
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
sh "$(dirname "$0")/elab_inputs.sh" "$tmp" || exit 1
"$ppsc" expand "$tmp/gen.pps" >"$tmp/literal.pps" || exit 1
now() { date +%s.%N; }
echo "# bench/elab_1m.sh: ppsc expand, front end speed"
echo "# $("$ppsc" --version)  host: $(uname -srm)  cpus: $(nproc 2>/dev/null || echo ?)  runs: $runs (+1 warm-up)"
echo "# ops per case: gen $(grep -o '[A-Z]*(' "$tmp/literal.pps" | wc -l)  literal file: $(wc -c <"$tmp/literal.pps") bytes"
printf '%-8s %10s %10s %10s\n' case median_s min_s max_s
for c in gen literal block; do
  "$ppsc" expand "$tmp/$c.pps" >/dev/null || { echo "$c: ppsc failed"; exit 1; }
  : >"$tmp/times"
  i=0
  while [ $i -lt "$runs" ]; do
    t0=$(now); "$ppsc" expand "$tmp/$c.pps" >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc -l >>"$tmp/times"
    i=$((i + 1))
  done
  sort -n "$tmp/times" | awk -v c="$c" '{ t[NR] = $1 } END { printf "%-8s %10.3f %10.3f %10.3f\n", c, t[int((NR + 1) / 2)], t[1], t[NR] }'
done
echo "# target: < 0.5 s per case on a 2-core machine"
