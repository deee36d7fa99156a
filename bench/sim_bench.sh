#!/bin/sh
# bench/sim_bench.sh: how fast `ppsc check`/`ppsc sim` are on big schedules, and how
# the cost grows with the number of ops (the curve should be a line).
#  1. bench/sim_bench: the analysis phases alone (lower, verify, simulate) on IR
#     built in memory, per phase;
#  2. `ppsc sim` end to end (parse, elaborate, lower, verify, simulate) on
#     bench/sim_interleaved.pps, P = 64, v = 2, for several m: median of 3 runs.
# Not a test: it prints figures and asserts nothing. Run: make bench-sim
# (or sh bench/sim_bench.sh from a build directory, with srcdir= set).
set -eu
top_builddir=${top_builddir:-.}
srcdir=${srcdir:-$(dirname "$0")/..}
PPSC=${PPSC:-$top_builddir/ppsc}
PPS=$srcdir/bench/sim_interleaved.pps
now() { date +%s.%N; }

echo "# sim_bench.sh on $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
"$top_builddir/bench/sim_bench"
echo
echo "# ppsc sim end to end (parse + elaborate + lower + verify + simulate) on $PPS"
echo "# P=64 v=2; median of 3 runs; ms"
printf '%6s %10s %10s %10s %10s\n' m ops ms ns/op makespan
for m in 128 256 512 1024 2048; do
  ts=""
  for r in 1 2 3; do
    t0=$(now)
    out=$("$PPSC" sim "$PPS" -D m=$m --json)
    t1=$(now)
    ts="$ts $(echo "$t0 $t1" | awk '{printf "%.1f", ($2 - $1) * 1000}')"
  done
  med=$(echo $ts | tr ' ' '\n' | sort -n | sed -n 2p)
  ops=$(echo "$out" | grep -o '"ops":[0-9]*' | head -n 1 | cut -d: -f2)
  mk=$(echo "$out" | grep -o '"makespan":[0-9.e+-]*' | head -n 1 | cut -d: -f2)
  printf '%6d %10d %10s %10.1f %10s\n' "$m" "$ops" "$med" "$(echo "$med $ops" | awk '{print $1 * 1e6 / $2}')" "$mk"
done
echo "# end"
