#!/bin/sh
# bench/synth_vs_zbv.sh: `ppsc synth` at the four points where bench/README.md
# ("Synthesis") compares it with the published ZB-V generator (zbv.py of the Zero
# Bubble repository, not in this tree): P = 16, vshape, limit 16, m = 32 and 64, unit
# costs at TC = 0.1 and TF/TB/TW = 1/2/1.5 at TC = 0.25 (synth_any.pps, the file
# docs/synth.md's comparison runs), where no seed reaches the lower bound.
# Usage: sh bench/synth_vs_zbv.sh PPSC [EFFORT ...]   (default: 2, the default effort)
# Prints, per point and effort: the least CPU seconds (user + system, /usr/bin/time) of
# three runs, the makespan, the lower bound and the candidates the search tried.
PPSC=${1:?usage: synth_vs_zbv.sh PPSC [EFFORT ...]}
shift
[ $# -gt 0 ] || set -- 2
ANY=$(cd "$(dirname "$0")/.." && pwd)/tests/synth/synth_any.pps
[ -x /usr/bin/time ] || { echo "synth_vs_zbv.sh: needs /usr/bin/time" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-zbv.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
for e in "$@"; do
  for pt in "32 1 1 1 0.1" "64 1 1 1 0.1" "32 1 2 1.5 0.25" "64 1 2 1.5 0.25"; do
    set -- $pt
    best=
    for i in 1 2 3; do
      /usr/bin/time -f "%U %S" -o "$tmp/t" "$PPSC" synth --json "$ANY" -D P=16 -D pl=1 -D L=16 \
        -D m=$1 -D TF=$2 -D TB=$3 -D TW=$4 -D TC=$5 -D effort=$e > "$tmp/j" || { echo "ppsc synth failed" >&2; exit 1; }
      c=$(awk '{ print $1 + $2 }' "$tmp/t")
      best=$(awk -v a="$best" -v b="$c" 'BEGIN { print (a == "" || b < a) ? b : a }')
    done
    awk -v l="m=$1 TF/TB/TW=$2/$3/$4 TC=$5" -v e=$e -v cpu=$best '
      function val(key,   i, s) { i = index($0, "\"" key "\": "); s = substr($0, i + length(key) + 4); sub(/[,}].*/, "", s); return s }
      { printf "P=16 vshape L=16 %-28s effort %d  cpu %5.2f s  makespan %-8s bound %-8s %6d candidates\n",
          l, e, cpu, val("makespan"), val("lower_bound"), val("candidates") }' "$tmp/j"
  done
done
