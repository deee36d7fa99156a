#!/bin/sh
# tests/front/hardening.sh: command-line behaviour fixed by issue 12: options a
# command cannot honour are usage errors, -D reads reals as a file does, ...
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
ex=$top_srcdir/examples/1f1b.pps
# expect CODE PATTERN ARGS...: ppsc ARGS exits CODE and its output matches PATTERN
expect() {
  want=$1 pat=$2; shift 2
  "$PPSC" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL ppsc $*: exit $rc, expected $want"; cat "$tmp/out"; fail=1
  elif ! grep -q -- "$pat" "$tmp/out"; then echo "FAIL ppsc $*: no '$pat' in:"; cat "$tmp/out"; fail=1
  else echo "ok: ppsc $* (exit $rc)"; fi
}
# an underflowing real reads as it does in a file (1e-400 there is 0)
printf 'schedule s(t: real = 1) { devices 2; microbatches 2; cost TF = t;\n  for d in 0..2 { device d { F(0) F(1) BW(0) BW(1) } } }\n' > "$tmp/t.pps"
expect 0 "valid" check "$tmp/t.pps" -D t=1e-320
expect 0 "valid" check "$tmp/t.pps" -D t=1e-400
expect 2 "expected an int, a real" check "$tmp/t.pps" -D t=1e400
exit $fail
