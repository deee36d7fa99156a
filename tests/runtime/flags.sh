#!/bin/sh
# flags.sh: the executable's command line: --help, bad flags (exit 2, usage message),
# --json (one object), --trace (Chrome trace with device and copy-engine tracks), and
# ppsc emit-c / build refusing bad input without leaving partial output.
. "$(dirname "$0")/lib.sh"
T=$RT_TABLES
expect_exit 0 "--help" "$T" 1f1b 2 4 --help
expect_grep "usage:" "--help prints usage"
for bad in "--bogus" "--iterations 0" "--iterations" "--model resnet" "--hidden x" "--hidden 0" \
           "--transport pigeon" "--backend tpu" "--timeout -1" "--optimizer rmsprop" "--lr abc" \
           "--check --no-compute" "stray"; do
  expect_exit 2 "bad flags: $bad" "$T" 1f1b 2 4 $bad
  expect_grep "Try '" "usage hint for: $bad"
done
# --check prints each device's comparison in device order, whatever order the
# device threads finish in
expect_exit 0 "--check output" "$T" 1f1b 4 8 --check -q
if grep '^check: device [0-9]*:' "$WORK/out" | sed 's/^check: device \([0-9]*\):.*/\1/' | tr '\n' ' ' | grep -qx '0 1 2 3 '; then
  pass "--check lines in device order"
else fail "--check lines not in device order:"; grep '^check: device' "$WORK/out" >&2; fi
expect_exit 0 "--json" "$T" 1f1b 2 4 --json --iterations 2 --check
if command -v python3 >/dev/null; then
  if python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert o['devices']==2 and len(o['iterations'])==2 and o['check']['match'] and o['memory_match']" "$WORK/out"; then
    pass "--json is one valid object with the documented fields"
  else fail "--json output"; cat "$WORK/out" >&2; fi
else skip "--json fields (no python3)"
fi
expect_exit 0 "--trace" "$T" offload 2 4 --trace "$WORK/trace.json" -q
if command -v python3 >/dev/null; then
  if python3 -c "
import json,sys
o=json.load(open(sys.argv[1]))
ev=o['traceEvents']
x=[e for e in ev if e['ph']=='X']
assert {e['pid'] for e in x}=={0,1}
# every reload is on the host->device track, done or cancelled (a reload asked for
# before its offload's copy ended cancels it: how many do depends on timing)
rel=[e for e in x if e['cat']=='reload']; off=[e for e in x if e['cat']=='offload']
assert rel and all(e['tid']==2 for e in rel) and all(e['tid']==1 for e in off)
assert {e['pid'] for e in rel}=={0,1}
# a reload that was not cancelled copied back what a finished offload wrote
key=lambda e:(e['pid'],e['args']['iteration'],e['args']['mb'],e['args']['stage'])
done={key(e) for e in off if not e['args'].get('cancelled')}
assert all(key(e) in done for e in rel if not e['args'].get('cancelled'))
assert any(e['name'].startswith('send') and e['tid']==3 for e in x)
assert {m['args']['name'] for m in ev if m['name']=='thread_name'}=={'compute','copy device->host','copy host->device','wait (recv, collective)'}
" "$WORK/trace.json"; then pass "trace: tracks per device and per copy engine"; else fail "trace content"; fi
else skip "trace content (no python3)"
fi
# the compiler side: no -o, an invalid schedule, a failing C compiler
ex=$top_srcdir/examples/1f1b.pps
expect_exit 2 "emit-c without -o" "$PPSC" emit-c "$ex"
printf 'schedule bad(P = 2, m = 2) {\n  devices P; microbatches m; placement linear;\n  device 0 { F(0) F(1) BW(0) BW(1) }\n  device 1 { BW(0) F(0) F(1) BW(1) }\n}\n' > "$WORK/bad.pps"
expect_exit 1 "emit-c refuses an invalid schedule" "$PPSC" emit-c "$WORK/bad.pps" -o "$WORK/bad.c"
[ ! -e "$WORK/bad.c" ] && pass "no output for an invalid schedule" || fail "emit-c wrote bad.c"
expect_exit 1 "build with a failing C compiler" env CC=false "$PPSC" build "$ex" -o "$WORK/nope"
[ ! -e "$WORK/nope" ] && pass "no partial program" || fail "build left $WORK/nope"
expect_exit 0 "emit-c compiles with -Wall -Wextra -Werror" "$PPSC" emit-c "$ex" -D P=3 -D m=6 -o "$WORK/ok.c"
expect_exit 0 "cc -Wall -Wextra -Werror" ${CC:-cc} -Wall -Wextra -Werror -I"$top_srcdir/runtime" -c "$WORK/ok.c" -o "$WORK/ok.o"
# ppsc build honours CC, CFLAGS and LDFLAGS
expect_exit 0 "build with CFLAGS=-O0 -Wall -Wextra -Werror" env CFLAGS="-O0 -Wall -Wextra -Werror $SAN_CFLAGS" "$PPSC" build "$ex" -o "$WORK/w"
expect_exit 0 "that program runs" "$WORK/w" -q --check
expect_exit 1 "LDFLAGS reach the link" env LDFLAGS="-Wl,--no-such-linker-flag" "$PPSC" build "$ex" -o "$WORK/l"
[ ! -e "$WORK/l" ] && pass "no program after a failed link" || fail "build left $WORK/l"
expect_exit 1 "CC is honoured" env CC="${CC:-cc} -DPPS_NO_SUCH_HEADER -include pps_no_such_header.h" "$PPSC" build "$ex" -o "$WORK/c"
expect_grep "pps_no_such_header.h" "the C compiler's error is shown"
finish
