#!/bin/sh
# bench/peers_sim.sh: `ppsc sim --json` end to end (parse, elaborate, lower, verify,
# simulate) on the three schedules the PyTorch comparison names (bench/README.md,
# "The peer schedules"): ZB-V (stdlib/zb_v.pps, PyTorch's ZBVZeroBubble), DualPipeV
# (stdlib/dualpipe_v.pps) and interleaved 1F1B (bench/sim_interleaved.pps,
# Interleaved1F1B), at P = 64, m = 1024. Several builds are run in turn, run by run,
# so that each sees the same machine load; prints the median, smallest and largest
# wall time of N runs per schedule and build, and with perf(1) the CPU time (task-clock;
# the figure bench/README.md's PyTorch comparison uses). Not a test: it asserts nothing.
#   sh bench/peers_sim.sh [N] [PPSC ...]      (N: default 21; PPSC: default build/ppsc)
# Environment: INSTR=1 also counts each build's instructions once per schedule
# (valgrind's cachegrind, when installed: the figure the machine's load leaves alone).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-21}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- "$src/build/ppsc"
for b in "$@"; do [ -x "$b" ] || { echo "peers_sim.sh: no ppsc at $b" >&2; exit 2; }; done
out=$(mktemp -d "${TMPDIR:-/tmp}/peers_sim.XXXXXX")
trap 'rm -rf "$out"' EXIT INT TERM
now() { date +%s%N; }
# perf stat's task-clock and duration_time, where perf runs here (else wall by date)
perf=0
perf stat -x, -e task-clock,duration_time -o "$out/p" true > /dev/null 2>&1 && grep -q duration_time "$out/p" && perf=1
echo "# peers_sim.sh on $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(nproc 2>/dev/null || echo '?') cores, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "# ppsc sim --json -D P=64 -D m=1024; ms over $N runs: median [min - max]"
for f in stdlib/zb_v.pps stdlib/dualpipe_v.pps bench/sim_interleaved.pps; do
  j=0
  for b in "$@"; do j=$((j + 1)); : > "$out/t$j"; : > "$out/c$j"; done
  i=0
  while [ $i -lt "$N" ]; do
    j=0
    for b in "$@"; do
      j=$((j + 1))
      if [ $perf = 1 ]; then
        perf stat -x, -e task-clock,duration_time -o "$out/p" "$b" sim "$src/$f" -D P=64 -D m=1024 --json > /dev/null
        awk -F, '$3 == "task-clock" {print $1 * 1000}' "$out/p" >> "$out/c$j"
        awk -F, '$3 == "duration_time" {print $1 / 1000}' "$out/p" >> "$out/t$j"
      else
        t0=$(now)
        "$b" sim "$src/$f" -D P=64 -D m=1024 --json > /dev/null
        t1=$(now)
        echo $(((t1 - t0) / 1000)) >> "$out/t$j"
      fi
    done
    i=$((i + 1))
  done
  j=0
  for b in "$@"; do
    j=$((j + 1))
    w=$(sort -n "$out/t$j" | awk '{a[NR] = $1 / 1000} END {printf "wall %.1f [%.1f - %.1f]", a[int((NR + 1) / 2)], a[1], a[NR]}')
    [ $perf = 1 ] && w="$w  cpu $(sort -n "$out/c$j" | awk '{a[NR] = $1 / 1000} END {printf "%.1f [%.1f - %.1f]", a[int((NR + 1) / 2)], a[1], a[NR]}')"
    ins=""
    if [ "${INSTR:-0}" = 1 ] && command -v valgrind > /dev/null 2>&1; then
      ins=$(valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$b" sim "$src/$f" -D P=64 -D m=1024 --json 2>&1 > /dev/null |
            awk '/I *refs/ {print "  instructions " $NF}')
    fi
    printf '%-22s %s  %s%s\n' "$(basename "$f")" "$b" "$w" "$ins"
  done
done
