#!/bin/sh
# bench/rendezvous_cost.sh: what proving rendezvous sends costs in simulated makespan.
# For every stdlib/*.pps and examples/*.pps schedule with sizes P and m, at P = 2..8,
# m = P, 2P, 4P and TC = 0.3 and 1, it times the schedule as lowered for rendezvous
# sends (`ppsc sim`, the default `--p2p both`: the lowering's rendezvous repair moves
# recvs up and posts them) and as lowered for buffered sends (`--p2p buffered`: no
# repair), and prints per TC the points compared, how many the repair made slower, the
# mean cost over all points and over the slower ones, and the largest cost with its point.
#   sh bench/rendezvous_cost.sh [PPSC [BASE_PPSC]]
# PPSC: the build timed with rendezvous (default build/ppsc); BASE_PPSC: the build timed
# with $BASE_ARGS (default: PPSC with --p2p buffered). Environment: SIZES="P:m ..." and
# TCS="..." replace the sweep, FILES="..." the schedules; RDV_ARGS / BASE_ARGS the options
# of each side; POINTS=FILE keeps the points (TC file P m rendezvous base). A point
# where either side fails (no makespan) is counted as failed and left out.
# bench/README.md and docs/runtime.md ("The communication model") quote its figures;
# tests/analysis/rendezvous.sh runs it on 84 points. The whole sweep: about 1,600 runs,
# 7 s on the development machine.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
PPSC=${1:-$src/build/ppsc}
BASE=${2:-$PPSC}
RDV_ARGS=${RDV_ARGS-}
BASE_ARGS=${BASE_ARGS---p2p buffered}
TCS=${TCS:-"0.3 1"}
FILES=${FILES:-"$src/stdlib/*.pps $src/examples/*.pps"}
if [ -z "${SIZES:-}" ]; then
  SIZES=
  for P in 2 3 4 5 6 7 8; do SIZES="$SIZES $P:$P $P:$((2 * P)) $P:$((4 * P))"; done
fi
for x in "$PPSC" "$BASE"; do [ -x "$x" ] || { echo "rendezvous_cost.sh: no ppsc at $x" >&2; exit 2; }; done

# makespan PPSC ARGS...: the makespan `sim --json` prints, or nothing
makespan() {
  exe=$1; shift
  "$exe" sim --json "$@" 2>/dev/null | grep -o '"makespan":[^,}]*' | head -n 1 | cut -d: -f2 || true
}

# One line per point: TC file P m rendezvous base
for f in $FILES; do
  [ -f "$f" ] || continue
  # the header of the file's last schedule (the one ppsc runs), up to its '{'
  hdr=$(awk '/^schedule/ { h = ""; on = 1 } on { h = h " " $0; if (index($0, "{")) on = 0 } END { print h }' "$f")
  has() { echo "$hdr" | grep -q "[(, ]$1[ :=]"; }
  has P && has m || continue
  for tc in $TCS; do
    if has TC; then c="-D TC=$tc"; else c="--cost TC=$tc"; fi
    for pm in $SIZES; do
      P=${pm%%:*} m=${pm#*:}
      # shellcheck disable=SC2086
      a=$(makespan "$PPSC" -D P=$P -D m=$m $c $RDV_ARGS "$f")
      # shellcheck disable=SC2086
      b=$(makespan "$BASE" -D P=$P -D m=$m $c $BASE_ARGS "$f")
      echo "$tc $(basename "$(dirname "$f")")/$(basename "$f" .pps) $P $m ${a:-fail} ${b:-fail}"
    done
  done
done | tee "${POINTS:-/dev/null}" | awk '
  # a side that printed no numeric makespan (an error, "null") failed
  $5 !~ /^[0-9.e+-]+$/ || $6 !~ /^[0-9.e+-]+$/ || $6 + 0 <= 0 { failed[$1]++; tcs[$1] = 1; next }
  {
    tc = $1; tcs[tc] = 1; n[tc]++
    cost = ($5 - $6) / $6 * 100
    sum[tc] += cost
    if (cost > 1e-9) { slower[tc]++; ssum[tc] += cost }
    if (cost < -1e-9) faster[tc]++
    if (!(tc in max) || cost > max[tc]) { max[tc] = cost; at[tc] = $2 " P=" $3 " m=" $4 " (" $5 " vs " $6 ")" }
  }
  END {
    for (tc in tcs) {
      printf "TC=%s: %d points (%d failed), %d slower, %d faster; mean %+.2f%%, mean of the slower %+.2f%%, max %+.2f%% at %s\n",
        tc, n[tc], failed[tc], slower[tc], faster[tc], n[tc] ? sum[tc] / n[tc] : 0,
        slower[tc] ? ssum[tc] / slower[tc] : 0, max[tc], at[tc]
    }
  }' | sort
