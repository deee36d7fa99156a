#!/bin/sh
# tests/front/cli.sh: the ppsc command line itself (compiler/main.c): --help and
# --version exit 0; every usage error exits 2 with a message and the --help hint;
# a missing input file exits 2; --max-errors limits what is printed, not the count.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=${TMPDIR:-/tmp}/pps-cli.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
fail=0
ex=$top_srcdir/examples/1f1b.pps
# expect CODE PATTERN ARGS...: ppsc ARGS exits CODE and its output matches PATTERN
expect() {
  want=$1 pat=$2; shift 2
  "$PPSC" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL ppsc $*: exit $rc, expected $want"; fail=1
  elif ! grep -q -- "$pat" "$tmp/out"; then echo "FAIL ppsc $*: no '$pat' in:"; cat "$tmp/out"; fail=1
  else echo "ok: ppsc $* (exit $rc)"; fi
}
expect 0 "usage: ppsc COMMAND" --help
expect 0 "usage: ppsc COMMAND" check --help
expect 0 "^ppsc (PPS) " --version
expect 2 "no command given"
expect 2 "unknown command 'chek'" chek "$ex"
expect 2 "Try 'ppsc --help'" chek "$ex"
expect 2 "unknown option '--bogus'" check "$ex" --bogus
expect 2 "check needs an input file" check
expect 2 "more than one input file" check "$ex" "$ex"
expect 2 "-D needs NAME=VALUE, got 'P'" check "$ex" -D P
expect 2 "-D needs NAME=VALUE" check "$ex" -D
expect 2 "-o needs a file name" emit-c "$ex" -o
expect 2 "--max-errors needs a count" check "$ex" --max-errors x
expect 2 "--max-ops needs a positive count" check "$ex" --max-ops 0
expect 2 "--trace needs a file name" sim "$ex" --trace
expect 2 "cannot\|No such file" check "$tmp/absent.pps"
# --max-errors 2: two errors printed, the rest counted
{ echo 'schedule s(P = 2, m = 2) { devices P; microbatches m; placement linear;'
  echo '  device 0 { F(9) F(9, 1) B(7) W(8) BW(6) } }'; } > "$tmp/many.pps"
expect 1 "more errors not shown" check "$tmp/many.pps" --max-errors 2
n=$(grep -c ': error: ' "$tmp/out")
[ "$n" = 2 ] && echo "ok: --max-errors 2 prints 2 errors" || { echo "FAIL --max-errors 2 printed $n errors"; fail=1; }
exit $fail
