#!/bin/sh
# tests/front/run-bad.sh: golden diagnostics. For every tests/front/bad/NAME.pps,
# `ppsc expand NAME.pps [ARGS]` (run inside bad/, ARGS from NAME.args) must print
# exactly NAME.err on stderr and exit with the code in NAME.rc (default 1), within
# 10 seconds. UPDATE=1 rewrites the .err files from the current output (review them!); such a
# run never passes (exit 1 after rewriting): run again without UPDATE.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
dir="$top_srcdir/tests/front/bad"
tmp=${TMPDIR:-/tmp}/pps-bad.$$
trap 'rm -f "$tmp"' EXIT
fail=0 n=0
cd "$dir" || exit 99
for f in *.pps; do
  name=${f%.pps}
  n=$((n + 1))
  args=
  [ -f "$name.args" ] && args=$(cat "$name.args")
  want_rc=1
  [ -f "$name.rc" ] && want_rc=$(cat "$name.rc")
  # shellcheck disable=SC2086
  timeout 10 "$PPSC" expand "$f" $args >/dev/null 2>"$tmp"
  rc=$?
  if [ -n "$UPDATE" ]; then cp "$tmp" "$name.err"; fi
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, expected $want_rc"; fail=1
  fi
  if ! diff -u "$name.err" "$tmp" >/dev/null 2>&1; then
    echo "FAIL $name: diagnostics differ:"; diff -u "$name.err" "$tmp" | head -30; fail=1
  fi
done
echo "run-bad: $n cases"
[ -n "$UPDATE" ] && { echo "FAIL: UPDATE=1 rewrote the .err files: a regeneration is not a pass; review them and run again without UPDATE"; exit 1; }
exit $fail
