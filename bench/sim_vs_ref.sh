#!/bin/sh
# bench/sim_vs_ref.sh: `ppsc sim` CPU time (user + sys, best of N runs) of this tree
# against a reference commit (default d9f6052, before the rendezvous model), side by
# side on the same machine, for stdlib interleaved_1f1b (v = 2), zb_v and dualpipe_v
# at P = 64, m = 1024. Prints a table and the ratio new / reference (issue 20's goal:
# at most 0.5). Not a test: it asserts nothing.
#
# The reference is built from `git archive REF` in a temp dir (configure, make ppsc
# only) and removed afterwards, unless REF_PPSC names an already built reference ppsc.
#   sh bench/sim_vs_ref.sh [REF]          from the source tree; uses build/ppsc
# Environment: PPSC (the new ppsc; default build/ppsc), REF_PPSC, RUNS (default 5),
# P, M (default 64, 1024), KEEP_REF=1 keeps the reference build and prints its path.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-d9f6052}
PPSC=${PPSC:-$src/build/ppsc}
RUNS=${RUNS:-5}
P=${P:-64}
M=${M:-1024}
[ -x "$PPSC" ] || { echo "sim_vs_ref.sh: no ppsc at $PPSC (build first, or set PPSC)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sim_vs_ref.XXXXXX")
cleanup() { [ "${KEEP_REF:-0}" = 1 ] && echo "# reference build kept in $tmp" >&2 || rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

if [ -z "${REF_PPSC:-}" ]; then
  echo "# building ppsc at $ref in $tmp (configure + make ppsc) ..." >&2
  git -C "$src" archive --format=tar "$ref" | tar -x -C "$tmp" -f - || {
    echo "sim_vs_ref.sh: cannot export commit $ref" >&2; exit 1; }
  ( cd "$tmp" && autoreconf -fi >/dev/null 2>&1 && mkdir -p build && cd build &&
    ../configure >/dev/null 2>&1 && make -j2 ppsc >/dev/null 2>&1 ) || {
    echo "sim_vs_ref.sh: building $ref failed (see $tmp)" >&2; KEEP_REF=1; exit 1; }
  REF_PPSC=$tmp/build/ppsc
fi
# each ppsc runs its own tree's stdlib (the language moved on: d9f6052's dualpipe_v is
# written for d9f6052's compiler); REF_SRC: the reference's source tree
REF_SRC=${REF_SRC:-$(cd "$(dirname "$REF_PPSC")/.." && pwd)}
[ -f "$REF_SRC/stdlib/zb_v.pps" ] || { echo "sim_vs_ref.sh: no stdlib under $REF_SRC (set REF_SRC)" >&2; exit 1; }

# cpu PPSC FILE ARGS...: best (least) user + sys seconds of RUNS runs of `ppsc sim`,
# from the child's rusage (microseconds; /usr/bin/time prints 10 ms steps).
cpu() {
  exe=$1; shift
  python3 - "$RUNS" "$exe" sim "$@" <<'PY' || { echo "sim_vs_ref.sh: $exe sim $* failed" >&2; echo fail; }
import resource, subprocess, sys
best = None
for _ in range(int(sys.argv[1])):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    best = t if best is None or t < best else best
print("%.3f" % best)
PY
}

echo "# ppsc sim CPU time (user + sys, best of $RUNS), P=$P m=$M, on $(uname -m) $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
echo "# reference: $ref ($REF_PPSC); new: $PPSC ($(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD -- compiler || echo '+changes'))"
printf '%-22s %10s %10s %8s\n' schedule "ref s" "new s" ratio
for case in "interleaved_1f1b -D v=2" zb_v dualpipe_v; do
  name=${case%% *}
  extra=
  [ "$name" = "$case" ] || extra=${case#* }
  # shellcheck disable=SC2086
  r=$(cpu "$REF_PPSC" "$REF_SRC/stdlib/$name.pps" -D P=$P -D m=$M $extra)
  # shellcheck disable=SC2086
  n=$(cpu "$PPSC" "$src/stdlib/$name.pps" -D P=$P -D m=$M $extra)
  printf '%-22s %10s %10s %8s\n' "$name" "$r" "$n" "$(awk -v a="$n" -v b="$r" 'BEGIN { if (a + 0 == a && b > 0) printf "%.2f", a / b; else printf "-" }')"
done
