#!/bin/sh
# tests/front/hardening.sh: command-line behaviour fixed by issue 12: options a
# command cannot honour are usage errors, -D reads reals as a file does, the sim
# summary's "ideal" is labelled and a real work bound given with per-stage costs, ...
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
ex=$top_srcdir/examples/1f1b.pps
. "$top_srcdir/tests/front/expect.sh"
# an underflowing real reads as it does in a file (1e-400 there is 0)
printf 'schedule s(t: real = 1) { devices 2; microbatches 2; cost TF = t;\n  for d in 0..2 { device d { F(0) F(1) BW(0) BW(1) } } }\n' > "$tmp/t.pps"
expect 0 "valid" check "$tmp/t.pps" -D t=1e-320
expect 0 "valid" check "$tmp/t.pps" -D t=1e-400
expect 2 "expected an int, a real" check "$tmp/t.pps" -D t=1e400
# a -D for another schedule of the file: say which is compiled and which has it
printf 'schedule a(x = 1) { devices 1; microbatches 1; device 0 { F(0) BW(0) } }\nschedule b { devices 1; microbatches 1; device 0 { F(0) BW(0) } }\n' > "$tmp/two.pps"
expect 2 "-D x: the compiled schedule 'b' has no parameter 'x' ('a' has it: use --schedule NAME)" check "$tmp/two.pps" -D x=2
expect 0 "^b: valid" check "$tmp/two.pps"
expect 0 "^a: valid" check "$tmp/two.pps" -D x=2 --schedule a

# with per-stage costs the "ideal" of the sim summary is the busiest device's compute
# (issue 22: the bubble against m(TF+TB+TW) was wrong there), m(TF+TB+TW) beside it;
# without them the line is as before
sed 's|cost TF = 1, TB = 1, TW = 1, TC = 0;|cost TF = 1, TB = 1, TW = 1, TC = 0; cost stage 3: TF = 3, TB = 3, TW = 3;|' "$ex" > "$tmp/ps.pps"
expect 0 "(ideal 72: the compute of device 3, with the costs its passes have; m(TF+TB+TW) = 24)" sim "$tmp/ps.pps"
expect 0 "(ideal 24 = m(TF+TB+TW))$" sim "$ex"

# the stdlib is found from the build tree without $PPS_STDLIB
printf 'import "1f1b.pps";\nschedule x { use one_f_one_b(P = 2, m = 4); }\n' > "$tmp/usestd.pps"
( unset PPS_STDLIB; "$PPSC" check "$tmp/usestd.pps" ) >"$tmp/out" 2>&1 && grep -q "^x: valid" "$tmp/out" &&
  echo "ok: stdlib found without PPS_STDLIB" || { echo "FAIL: stdlib from the build tree"; cat "$tmp/out"; fail=1; }

# --cost / --memory set any file's costs and memory settings
expect 0 "makespan 52" check "$ex" --cost TC=0.5 --cost TF=2
expect 0 "TC = 0.1;" expand "$ex" --cost TC=0.1
expect 1 "over the limit of 2" check "$ex" --memory limit=2
expect 2 "--cost XX: unknown key" check "$ex" --cost XX=1
expect 2 "--memory limit=-1: must not be negative" check "$ex" --memory limit=-1
expect 2 "--cost needs KEY=VALUE" check "$ex" --cost TF

# per-stage costs: the headline bubble is the bottleneck device's (device 0 is busy
# 24 of 24.6), as bubble_rate_bottleneck (it was 0.512, against m(TF+TB+TW))
printf 'schedule bn(P = 2, m = 4) {\n  devices P; microbatches m; placement linear;\n  cost stage 0: TF = 2, TB = 2, TW = 2;\n  cost stage 1: TF = 0.2, TB = 0.2, TW = 0.2;\n  for d in 0..P { device d { for i in 0..m { F(i) } for i in 0..m { BW(i) } } }\n}\n' > "$tmp/bn.pps"
expect 0 "bottleneck  device 0: busy 0.9756 of the makespan, bubble 0.0244" sim "$tmp/bn.pps"
expect 0 '"bubble_rate":0.02439024390244,' sim "$tmp/bn.pps" --json
expect 0 '"bottleneck_device":0,"bubble_rate_bottleneck":0.02439024390244' sim "$tmp/bn.pps" --json

# sim --grid: a column per device, a row per instant a pass starts
"$PPSC" sim "$ex" --grid -D P=3 -D m=4 > "$tmp/grid" 2>&1 || { echo "FAIL: sim --grid"; fail=1; }
if grep -q '^time | dev 0 | dev 1 | dev 2$' "$tmp/grid" && grep -q '^2    | F(2)  | F(1)  | F(0) *$' "$tmp/grid" &&
   grep -q '^16   | BW(3) |       | *$' "$tmp/grid"; then echo "ok: sim --grid"
else echo "FAIL: sim --grid output"; cat "$tmp/grid"; fail=1; fi
expect 2 "--grid does not apply to 'check'" check "$ex" --grid
# compare: figures side by side and where the orders first differ
expect 0 "makespan  *33  *27   -6 (-18.2%)" compare "$top_srcdir/stdlib/1f1b.pps" "$top_srcdir/stdlib/zb_h1.pps" -D P=4 -D m=8
grep -q "device 3: first differ at pass 1: A BW(0) (line [0-9]*), B B(0) (line [0-9]*)" "$tmp/out" &&
  echo "ok: compare names the first difference" || { echo "FAIL: compare orders"; cat "$tmp/out"; fail=1; }
expect 0 "the same passes in the same order on every device" compare "$ex" "$ex"
expect 1 "deadlock" compare "$ex" "$top_srcdir/tests/analysis/cases/deadlock.pps"
expect 2 "compare needs two input files" compare "$ex"

# a computed placement scales with P
printf 'schedule v(P = 4, m = 2) {\n  devices P; microbatches m;\n  placement [if s < P then s else 2 * P - 1 - s for s in 0..2 * P];\n  for d in 0..P { device d { for i in 0..m { F(i, d) } for i in 0..m { F(i, 2 * P - 1 - d) } for i in 0..m { BW(i, 2 * P - 1 - d) } for i in 0..m { BW(i, d) } } }\n}\n' > "$tmp/v.pps"
expect 0 "placement \[0, 1, 2, 2, 1, 0\];" expand "$tmp/v.pps" -D P=3
expect 0 "v: valid (5 devices, 10 stages" check "$tmp/v.pps" -D P=5

# options a command would ignore are usage errors
expect 2 "--trace does not apply to 'check'" check "$ex" --trace "$tmp/t.json"
expect 2 "-o does not apply to 'check'" check "$ex" -o "$tmp/o"
expect 2 "-o does not apply to 'sim'" sim "$ex" -o "$tmp/o"
expect 2 "--svg does not apply to 'expand'" expand "$ex" --svg "$tmp/x.svg"
expect 2 "--json does not apply to 'expand'" expand "$ex" --json
[ -e "$tmp/t.json" ] || [ -e "$tmp/o" ] || [ -e "$tmp/x.svg" ] && { echo "FAIL: a rejected command wrote a file"; fail=1; }

# many schedules in one file: appending them is O(1), so 4x the schedules take about
# 4x the time (quadratic appends made it 16x: 200,000 schedules took 30 s)
gen() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "schedule s%d { devices 1; microbatches 1; device 0 { F(0) BW(0) } }\n", i }'; }
gen 25000 > "$tmp/s1.pps"; gen 100000 > "$tmp/s4.pps"
ms() { a=$(date +%s%N); "$PPSC" check "$1" -q --max-ops 1000 || echo "FAIL check $1"; b=$(date +%s%N); echo $(( (b - a) / 1000000 )); }
t1=$(ms "$tmp/s1.pps"); t4=$(ms "$tmp/s4.pps")
if [ "$t4" -le $((10 * t1 + 200)) ]; then echo "ok: 25,000 schedules ${t1} ms, 100,000 ${t4} ms"
else echo "FAIL: 25,000 schedules ${t1} ms, 100,000 ${t4} ms: not linear"; fail=1; fi

# out of memory: exit 2 naming --max-ops, not an abort (skipped where a 400 MB
# address-space limit cannot start ppsc at all, as under ASan or valgrind)
printf 'schedule many(P = 8, m = 200000) {\n  devices P; microbatches m; placement linear;\n  for d in 0..P { device d { for i in 0..m { F(i) BW(i) } } }\n}\n' > "$tmp/many.pps"
if (ulimit -v 400000 && "$PPSC" --version) >/dev/null 2>&1; then
  (ulimit -v 400000; "$PPSC" check "$tmp/many.pps" --max-ops 100000000) >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "ppsc: out of memory (asked for .*lower --max-ops (now 100000000)" "$tmp/out"; then
    echo "ok: out of memory is exit 2 naming --max-ops"
  else echo "FAIL out of memory: exit $rc"; cat "$tmp/out"; fail=1; fi
  # the default --max-ops follows the memory ppsc may use: an error, not out of memory
  expect_limited() { (ulimit -v 400000; "$PPSC" check "$tmp/many.pps") >"$tmp/out" 2>&1; }
  expect_limited; rc=$?
  if [ $rc = 1 ] && grep -q "generates more than [0-9]* ops (limit: --max-ops)" "$tmp/out"; then
    echo "ok: the default --max-ops is sized to the memory limit"
  else echo "FAIL default --max-ops under 400 MB: exit $rc"; cat "$tmp/out"; fail=1; fi
else
  echo "skip: out-of-memory checks (ppsc does not start under ulimit -v)"
fi
exit $fail
