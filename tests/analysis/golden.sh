#!/bin/sh
# tests/analysis/golden.sh: `ppsc check` on every tests/analysis/cases/*.pps.
# A case with a NAME.err file must fail (exit 1) with exactly that stderr (caret
# lines included); a case without one must pass (exit 0: valid, expectations hold).
# REGEN=1 rewrites the .err files of failing cases from the current output; such a run
# never passes (exit 1 after rewriting): review the diff, then run again without REGEN.
set -u
cases="$top_srcdir/tests/analysis/cases"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
cd "$cases" || exit 99
fail=0
n=0 regen=0
for f in *.pps; do
  name=${f%.pps}
  n=$((n + 1))
  "$PPSC" check "$f" --color=never >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ -f "$name.err" ]; then
    if [ "${REGEN:-0}" = 1 ] && ! cmp -s "$tmp/err" "$name.err"; then cp "$tmp/err" "$name.err"; regen=$((regen + 1)); fi
    if [ $rc -ne 1 ]; then echo "FAIL $f: exit $rc, expected 1"; cat "$tmp/err"; fail=1; continue; fi
    if ! diff -u "$name.err" "$tmp/err"; then echo "FAIL $f: diagnostics differ (above: - expected, + actual)"; fail=1; fi
  else
    if [ $rc -ne 0 ]; then echo "FAIL $f: exit $rc, expected 0"; cat "$tmp/err"; fail=1; fi
  fi
done
echo "$n cases"
if [ "${REGEN:-0}" = 1 ]; then
  echo "FAIL: REGEN=1 rewrote $regen .err file(s): a regeneration is not a pass; review them and run again without REGEN"
  exit 1
fi
exit $fail
