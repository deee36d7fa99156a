#!/bin/sh
# bench/synth_loop.sh: the measured-costs loop of docs/synth.md on the CPU backend:
# run -> profile -> synthesize -> build -> run, predicted against measured time.
# Usage: sh bench/synth_loop.sh PPSC [P m LIMIT HIDDEN]   (from the build directory)
PPSC=$(cd "$(dirname "${1:?usage: synth_loop.sh PPSC [P m LIMIT HIDDEN]}")" && pwd)/$(basename "$1")
P=${2:-2} m=${3:-8} L=${4:-2} H=${5:-512}
STD=$(cd "$(dirname "$0")/.." && pwd)/stdlib
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-loop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
SIZES="--hidden $H --seq 64 --micro-batch 4 --iterations 5"
cat > a.pps <<PPS
schedule a {
  devices $P; microbatches $m; placement linear;
  memory limit = $L;
  synthesize;
}
PPS
sed 's/memory limit/cost profile "prof.txt"; memory limit/' a.pps > b.pps
mean() { awk '/^iter / { n++; if (n > 1) { for (i = 1; i <= NF; i++) if ($i == "time") { s += $(i + 1); k++ } } } END { printf "%.1f", s / k }'; }
"$PPSC" build --stdlib "$STD" a.pps -o a || exit 1
pa=$("$PPSC" sim --stdlib "$STD" --json a.pps | sed -n 's/.*"makespan":\([0-9.e+-]*\),.*/\1/p' | head -1)
ma=$(./a $SIZES --profile prof.txt | mean)
echo "1. stated costs (TF = TB = TW = 1): predicted makespan $pa units; measured $ma ms per iteration (iterations 2-5)"
echo "2. profile written by ./a --profile prof.txt:"; sed 's/^/     /' prof.txt
"$PPSC" synth --stdlib "$STD" b.pps -o b_out.pps || exit 1
echo "3. ppsc synth b.pps (cost profile \"prof.txt\"):"; sed -n '1,5s/^/     /p' b_out.pps
"$PPSC" build --stdlib "$STD" b.pps -o b || exit 1
pb=$("$PPSC" sim --stdlib "$STD" --json b.pps | sed -n 's/.*"makespan":\([0-9.e+-]*\),.*/\1/p' | head -1)
mb=$(./b $SIZES | mean)
awk -v p=$pb -v m=$mb 'BEGIN { printf "4. predicted %.1f ms, measured %.1f ms per iteration (iterations 2-5): measured / predicted = %.3f\n", 1000 * p, m, m / (1000 * p) }'
