#!/bin/sh
# bench/synth_bench.sh: how long `synthesize` searches (bench/README.md, "Synthesis").
# Usage: sh bench/synth_bench.sh PPSC [STDLIB]   (make bench-synth runs it)
# Prints, per case: wall seconds of `ppsc synth` (search, the stdlib seeds, lowering and
# the final simulation included), its CPU seconds (user + system, /usr/bin/time: what
# it costs on an idle core), the search time the header reports, candidates, makespan,
# lower bound and gap.
PPSC=${1:?usage: synth_bench.sh PPSC [STDLIB]}
STD=${2:-$(cd "$(dirname "$0")/.." && pwd)/stdlib}
ANY=$(cd "$(dirname "$0")/.." && pwd)/tests/synth/synth_any.pps
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
run() {
  label=$1; shift
  t0=$(date +%s.%N)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%U %S" -o "$tmp/t" "$PPSC" synth --stdlib "$STD" --json "$ANY" "$@" > "$tmp/j" || { echo "$label: ppsc synth failed"; return; }
  else
    "$PPSC" synth --stdlib "$STD" --json "$ANY" "$@" > "$tmp/j" || { echo "$label: ppsc synth failed"; return; }
    echo "0 0" > "$tmp/t"
  fi
  t1=$(date +%s.%N)
  cpu=$(awk '{ print $1 + $2 }' "$tmp/t")
  awk -v l="$label" -v t0=$t0 -v t1=$t1 -v cpu=$cpu '
    function val(key,   i, s) { i = index($0, "\"" key "\": "); s = substr($0, i + length(key) + 4); sub(/[,}].*/, "", s); return s }
    { printf "%-40s wall %6.2f s  cpu %6.2f s  search %6.2f s  %5d candidates  makespan %-9s bound %-9s gap %.3g%%\n",
        l, t1 - t0, cpu, val("search_seconds"), val("candidates"), val("makespan"), val("lower_bound"), 100 * val("gap") }' "$tmp/j"
}
run "P=8 m=32 linear L=8"               -D P=8 -D m=32 -D pl=0 -D L=8
run "P=8 m=32 vshape L=8"               -D P=8 -D m=32 -D pl=1 -D L=8
run "P=8 m=32 vshape L=5 TB=1.5 TC=0.1" -D P=8 -D m=32 -D pl=1 -D L=5 -D TB=1.5 -D TC=0.1
run "P=8 m=32 vshape L=3 (low memory)"   -D P=8 -D m=32 -D pl=1 -D L=3
run "P=32 m=128 vshape L=32"            -D P=32 -D m=128 -D pl=1 -D L=32
run "P=32 m=128 vshape L=8 (low memory)" -D P=32 -D m=128 -D pl=1 -D L=8
run "P=32 m=128 vshape L=17 TW=0.5 TC=0.1" -D P=32 -D m=128 -D pl=1 -D L=17 -D TW=0.5 -D TC=0.1
run "P=32 m=128 vshape, effort 4"        -D P=32 -D m=128 -D pl=1 -D L=32 -D effort=4
