#!/bin/sh
# tests/front/limits.sh: hostile inputs, generated on the fly. Each must give a
# located diagnostic (FILE:LINE:COL: error:) and exit 1 or 2 within 20 seconds:
# binary garbage, NUL bytes, 200,000 nested braces, deep expressions, a loop of
# 10^12 iterations, nested loops of 10^12 in all, an import cycle, too many ops.
: "${PPSC:?set PPSC to the ppsc binary}"
tmp=${TMPDIR:-/tmp}/pps-limits.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
expect_error() { # name file [args...]
  name=$1; f=$2; shift 2
  n=$((n + 1))
  timeout 20 "$PPSC" expand "$f" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  case $rc in
  1|2) ;;
  124) echo "FAIL $name: no answer within 20 s"; fail=1; return ;;
  *) echo "FAIL $name: exit $rc (want 1 or 2)"; head -5 "$tmp/err"; fail=1; return ;;
  esac
  if ! grep -q "^[^ ]*\.pps:[0-9][0-9]*:[0-9][0-9]*: error: " "$tmp/err"; then
    echo "FAIL $name: no located error:"; head -5 "$tmp/err"; fail=1
  fi
}
gen() { awk -v n="$2" "BEGIN { $1 }" ; }

# binary garbage: the first 64 KiB of the ppsc binary itself (NULs, high bytes)
head -c 65536 "$PPSC" >"$tmp/garbage.pps"
expect_error garbage "$tmp/garbage.pps"
# garbage after a valid prefix
{ printf 'schedule x { devices 1; microbatches 1; device 0 { '; head -c 4096 "$PPSC"; } >"$tmp/garbage2.pps"
expect_error garbage-in-block "$tmp/garbage2.pps"
# NUL bytes
printf 'schedule x {\000\000 devices 1; microbatches 1; }\n' >"$tmp/nul.pps"
expect_error nul "$tmp/nul.pps"
# 200,000 nested braces, at top level, in a schedule, in a device block
gen 'for (i = 0; i < n; i++) printf "{"; for (i = 0; i < n; i++) printf "}"; print ""' 200000 >"$tmp/braces.pps"
expect_error braces-top "$tmp/braces.pps"
{ printf 'schedule x { devices 1; microbatches 1; device 0 { '
  gen 'for (i = 0; i < n; i++) printf "if true { "; for (i = 0; i < n; i++) printf "} "; print "} }"' 200000; } >"$tmp/ifs.pps"
expect_error nested-ifs "$tmp/ifs.pps"
# deep expressions: parentheses, unary minus, a 1,000,000-term sum, else-if chain
{ printf 'schedule x { let a = '; gen 'for (i = 0; i < n; i++) printf "("; printf "1"; for (i = 0; i < n; i++) printf ")"; print "; }"' 200000; } >"$tmp/parens.pps"
expect_error parens "$tmp/parens.pps"
{ printf 'schedule x { let a = '; gen 'for (i = 0; i < n; i++) printf "- "; print "1; }"' 200000; } >"$tmp/unary.pps"
expect_error unary "$tmp/unary.pps"
{ printf 'schedule x { let a = 1'; gen 'for (i = 0; i < n; i++) printf " + 1"; print "; }"' 1000000; } >"$tmp/sum.pps"
expect_error sum "$tmp/sum.pps"
{ printf 'schedule x { devices 1; microbatches 1; if false { }'; gen 'for (i = 0; i < n; i++) printf " else if false { }"; print " }"' 100000; } >"$tmp/elseif.pps"
expect_error else-if-chain "$tmp/elseif.pps"
# conditional expressions: a 200,000-long else-if chain, 200,000 nested conditions
{ printf 'schedule x { let a = '; gen 'for (i = 0; i < n; i++) printf "if false then 1 else "; print "0; }"' 200000; } >"$tmp/condchain.pps"
expect_error cond-chain "$tmp/condchain.pps"
{ printf 'schedule x { let a = '; gen 'for (i = 0; i < n; i++) printf "if "; print "true then 1 else 0; }"' 200000; } >"$tmp/condnest.pps"
expect_error cond-nest "$tmp/condnest.pps"
# loops: 10^12 empty iterations, 10^6 x 10^6, and a huge step count through lets
printf 'schedule x {\n  devices 1;\n  microbatches 1;\n  for i in 0..1000000000000 { }\n}\n' >"$tmp/loop.pps"
expect_error loop "$tmp/loop.pps"
printf 'schedule x {\n  for i in 0..1000000 { for j in 0..1000000 { let k = j; } }\n}\n' >"$tmp/loop2.pps"
expect_error nested-loop "$tmp/loop2.pps"
printf 'schedule x {\n  devices 1;\n  microbatches 1;\n  for i in 0..9223372036854775807 step 1 { }\n}\n' >"$tmp/loop3.pps"
expect_error loop-int64 "$tmp/loop3.pps"
# too many ops (a small --max-ops keeps it quick)
printf 'schedule x {\n  devices 1;\n  microbatches 1000000;\n  device 0 { for i in 0..1000000 { F(i) } }\n}\n' >"$tmp/ops.pps"
expect_error max-ops "$tmp/ops.pps" --max-ops 1000
# an import cycle of three files, and a self-import
printf 'import "b.pps";\nschedule a { devices 1; microbatches 1; }\n' >"$tmp/a.pps"
printf 'import "c.pps";\nschedule b { devices 1; microbatches 1; }\n' >"$tmp/b.pps"
printf 'import "a.pps";\nschedule c { devices 1; microbatches 1; }\n' >"$tmp/c.pps"
expect_error import-cycle "$tmp/a.pps"
grep -q 'import cycle: .*a.pps -> .*b.pps -> .*c.pps -> .*a.pps' "$tmp/err" || { echo "FAIL import-cycle: chain not shown"; cat "$tmp/err"; fail=1; }
printf 'import "self.pps";\nschedule s { devices 1; microbatches 1; }\n' >"$tmp/self.pps"
expect_error self-import "$tmp/self.pps"
# recursive use through three schedules
printf 'schedule a { use b(); }\nschedule b { use c(); }\nschedule c { use a(); }\n' >"$tmp/use.pps"
expect_error recursive-use "$tmp/use.pps" --schedule a
# 20 schedules, each using the next from inside 250 nested ifs (C stack depth)
awk 'BEGIN { for (k = 0; k < 20; k++) { printf "schedule s%d { ", k; for (i = 0; i < 250; i++) printf "if true { ";
  if (k < 19) printf "use s%d();", k + 1; else printf "devices 1; microbatches 1;";
  for (i = 0; i < 250; i++) printf " }"; print " }" } print "schedule main { use s0(); }" }' >"$tmp/deepuse.pps"
expect_error deep-use "$tmp/deepuse.pps"
# a missing file is an I/O error: exit 2, no location
n=$((n + 1))
"$PPSC" expand "$tmp/no-such-file.pps" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] || { echo "FAIL missing-file: exit $rc (want 2)"; fail=1; }
echo "limits: $n cases"
exit $fail
