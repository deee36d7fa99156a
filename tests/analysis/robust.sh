#!/bin/sh
# tests/analysis/robust.sh: no input crashes or hangs check, sim, import-csv:
# every case file cut at many byte offsets, and a few garbage CSVs. Each run must
# exit 0, 1 or 2 (never a signal or a sanitizer abort) within 10 s.
set -u
cases="$top_srcdir/tests/analysis/cases"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
to=""
command -v timeout >/dev/null 2>&1 && to="timeout 10"
run() {
  $to "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -gt 2 ]; then echo "FAIL exit $rc: $*"; sed -n 1,10p "$tmp/err"; fail=1; fi
}
n=0
for f in "$cases"/*.pps; do
  size=$(wc -c <"$f")
  step=$((size / 12 + 1))
  off=0
  while [ $off -lt $size ]; do
    head -c $off "$f" >"$tmp/cut.pps"
    run "$PPSC" check "$tmp/cut.pps" --json
    n=$((n + 1))
    off=$((off + step))
  done
  run "$PPSC" sim "$f" --json --trace "$tmp/t.json" --svg "$tmp/t.svg"
done
for csv in '' ',,,\n,,\n' '0F0,\n\n\n1F0' '"0F0","0I0"\n' '99999999999F0\n' '0F0,0F0\n' '0W0\n' 'a,b,c\n' '0F1\n1F0\n'; do
  printf "$csv" >"$tmp/g.csv"
  run "$PPSC" import-csv "$tmp/g.csv" -o "$tmp/g.pps"
  [ -e "$tmp/g.pps" ] && run "$PPSC" check "$tmp/g.pps"
  rm -f "$tmp/g.pps"
  n=$((n + 1))
done
echo "$n runs"
exit $fail
