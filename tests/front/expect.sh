# tests/front/expect.sh: the expect helper sourced by tests/front/hardening.sh and
# figures.sh (not a test). Needs $PPSC and $tmp (the test's own temporary directory);
# sets fail=1 on a mismatch.
# expect CODE PATTERN ARGS...: ppsc ARGS exits CODE and its output matches PATTERN
expect() {
  want=$1 pat=$2; shift 2
  "$PPSC" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL ppsc $*: exit $rc, expected $want"; cat "$tmp/out"; fail=1
  elif ! grep -q -- "$pat" "$tmp/out"; then echo "FAIL ppsc $*: no '$pat' in:"; cat "$tmp/out"; fail=1
  else echo "ok: ppsc $* (exit $rc)"; fi
}
