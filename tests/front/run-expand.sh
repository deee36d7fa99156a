#!/bin/sh
# tests/front/run-expand.sh: `ppsc expand` golden outputs. For every
# tests/front/good/NAME.pps (ARGS from NAME.args) and every examples/NAME.pps, the
# output must equal good/NAME.out (good/ex_NAME.out for examples), exit 0, and be a
# fixed point: expanding the output again gives the same schedule (from line 2 on;
# line 1 names the input file). UPDATE=1 rewrites the .out files (review them!); such a
# run never passes (exit 1 after rewriting): run again without UPDATE.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=${TMPDIR:-/tmp}/pps-expand.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
check() { # dir file args golden
  ( cd "$1" && "$PPSC" expand "$2" $3 >"$tmp/out" 2>"$tmp/err" ); rc=$?
  n=$((n + 1))
  [ -n "$UPDATE" ] && cp "$tmp/out" "$4"
  if [ $rc != 0 ]; then echo "FAIL $2: exit $rc"; cat "$tmp/err"; fail=1; return; fi
  if ! diff -u "$4" "$tmp/out" >"$tmp/diff"; then echo "FAIL $2: output differs:"; head -30 "$tmp/diff"; fail=1; fi
  cp "$tmp/out" "$tmp/again.pps"
  if ! "$PPSC" expand "$tmp/again.pps" >"$tmp/out2" 2>"$tmp/err"; then
    echo "FAIL $2: expanded output does not expand:"; cat "$tmp/err"; fail=1; return
  fi
  tail -n +2 "$tmp/out" >"$tmp/b1"
  tail -n +2 "$tmp/out2" >"$tmp/b2"
  if ! cmp -s "$tmp/b1" "$tmp/b2"; then echo "FAIL $2: expand is not a fixed point:"; diff -u "$tmp/b1" "$tmp/b2" | head -20; fail=1; fi
}
good="$top_srcdir/tests/front/good"
for f in "$good"/*.pps; do
  name=$(basename "$f" .pps)
  args=
  [ -f "$good/$name.args" ] && args=$(cat "$good/$name.args")
  check "$good" "$name.pps" "$args" "$good/$name.out"
done
for f in "$top_srcdir"/examples/*.pps; do
  name=$(basename "$f" .pps)
  check "$top_srcdir" "examples/$name.pps" "" "$good/ex_$name.out"
done
echo "run-expand: $n cases"
[ -n "$UPDATE" ] && { echo "FAIL: UPDATE=1 rewrote the .out files: a regeneration is not a pass; review them and run again without UPDATE"; exit 1; }
exit $fail
