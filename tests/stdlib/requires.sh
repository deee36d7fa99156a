#!/bin/sh
# tests/stdlib/requires.sh: outside what a schedule supports, `ppsc check` fails
# (exit 1) with the file's own message.
. "${top_srcdir:?}/tests/stdlib/lib.sh"
expect_err() { # FILE MESSAGE -D ...
  f=$1 msg=$2; shift 2
  "$PPSC" check "$STD/$f.pps" "$@" >/dev/null 2>"${TMPDIR:-/tmp}/pps-req.$$"; rc=$?
  if [ $rc != 1 ] || ! grep -q "error: .*$msg" "${TMPDIR:-/tmp}/pps-req.$$"; then
    bad "$f $*: exit $rc, wanted 1 and '$msg'"; cat "${TMPDIR:-/tmp}/pps-req.$$"
  fi
  rm -f "${TMPDIR:-/tmp}/pps-req.$$"
}
expect_err interleaved_1f1b "multiple of P" -D P=4 -D m=6
expect_err interleaved_1f1b "multiple of P" -D P=4 -D m=2
expect_err 1f1b "needs P >= 2" -D P=1
expect_err zb_v "needs P >= 2" -D P=1
expect_err vocab_1f1b "mode = 1" -D mode=3
expect_err vocab_v_half "mode = 1" -D mode=3
expect_err zb_v "cooldown_w = 0, 1 or 2" -D cooldown_w=3
expect_err pipeoffload "cooldown_w = 0, 1 or 2" -D vee=true -D cooldown_w=-1
expect_err pipeoffload "ratio" -D ratio=0
expect_err dualpipe_v "m >= 2P" -D P=4 -D m=7
expect_err pipeoffload_selective "chunks" -D chunks=3
for s in gpipe 1f1b interleaved_1f1b zb_h1 zb_h2 zb_v v_min v_half 1f1b_v pipeoffload pipeoffload_selective vocab_1f1b vocab_v_half dualpipe_v; do
  "$PPSC" check "$STD/$s.pps" >/dev/null 2>&1 || bad "$s: defaults do not check"
done
exit $fail
