#!/bin/sh
# tests/front/figures.sh: no false figure (issue 22). Each check below failed before
# the fix it guards: synthesis's lower bound with overlapped pairs, a placement that
# leaves devices without a stage, the ideal and bubble with per-stage and vocabulary
# costs, hardware.memory as synthesis's byte budget, synthesis stopping at its bound,
# reals >= 2^63 printed without undefined behaviour.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$top_srcdir/tests/front/expect.sh"
# num FILE KEY: the number after "KEY " in FILE's first line with it
num() { sed -n "s/.*$2 \([0-9.e+-]*\).*/\1/p" "$1" | head -n 1; }

# 1. overlapped pairs (TFB): DualPipeV runs P=4 m=8 in 21.5 at peak 4.5, so no bound
# may exceed 21.5 (it said 25.5, "optimal"); synthesis finds that order
cat > "$tmp/tfb.pps" <<'PPS'
schedule s(P = 4, m = 8, L: real = 4.5) {
  devices P; microbatches m; placement vshape;
  cost TF = 1, TB = 1, TW = 1, TC = 0, TFB = 2;
  memory limit = L;
  synthesize;
}
PPS
expect 0 "makespan    21.5 " sim "$top_srcdir/stdlib/dualpipe_v.pps" -D TFB=2
expect 0 "makespan 21.5, peak memory 4.5" synth "$tmp/tfb.pps"
cp "$tmp/out" "$tmp/tfb_out.pps"
lb=$(num "$tmp/out" "lower bound")
if [ -n "$lb" ] && awk -v b="$lb" 'BEGIN { exit !(b <= 21.5) }'; then echo "ok: bound $lb <= 21.5"
else echo "FAIL: lower bound '$lb' above DualPipeV's 21.5"; fail=1; fi
expect 0 "makespan    21.5" sim "$tmp/tfb_out.pps"
expect 0 "overlap {" expand "$tmp/tfb_out.pps"

# check on a file that synthesises says how to freeze the order (the search ran on
# every check, silently)
expect 0 "the order was synthesised (.*) and is searched again on every check; to freeze it: ppsc synth .*tfb.pps -o FROZEN.pps" check "$tmp/tfb.pps"
expect 0 "^s: valid" check "$tmp/tfb_out.pps"
if grep -q "synthesised" "$tmp/out"; then echo "FAIL: a frozen order is not synthesised"; fail=1; fi

# 2. a placement that leaves devices without a stage: an error at the placement
for pl in "0, 1, 0, 1" "0, 0, 0, 0"; do
  printf 'schedule s(P = 4, m = 8) {\n  devices P; microbatches m;\n  placement [%s];\n  cost TF = 1, TB = 1, TW = 1;\n  synthesize;\n}\n' "$pl" > "$tmp/pl.pps"
  expect 1 "pl.pps:3:3: error: synthesize: the placement leaves [23] of the 4 devices without a stage" synth "$tmp/pl.pps"
  if grep -q "internal error\|1e+300" "$tmp/out"; then echo "FAIL: placement [$pl]: internal error or 1e+300"; fail=1; fi
done

# 3. the ideal and the bubble from the costs the passes have: every stage costs a tenth
# of the schedule-wide TF, TB, TW (as a profile in seconds does); bubble_rate was -6
# against m(TF+TB+TW), so this expectation passed
cat > "$tmp/ps.pps" <<'PPS'
schedule ps(P = 2, m = 4) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1;
  cost stage 0: TF = 0.1, TB = 0.1, TW = 0.1;
  cost stage 1: TF = 0.1, TB = 0.1, TW = 0.1;
  expect bubble_rate <= 0.1;
  for d in 0..P { device d { for i in 0..m { F(i) } for i in 0..m { B(i) W(i) } } }
}
PPS
expect 1 "expectation failed: bubble_rate is 0.142857, expected <= 0.1" check "$tmp/ps.pps"
expect 1 '"ideal_time":1.2,"bubble_rate":0.1428571428571,' sim --json "$tmp/ps.pps"
# the vocabulary passes' cost is in the ideal: headline and bottleneck agree
expect 0 "bubble      0.1456 " sim "$top_srcdir/stdlib/vocab_1f1b.pps" --cost TS=0.5 --cost TT=0.5 --cost TIF=0.2 --cost TIB=0.2 -D checks=false
expect 0 "bottleneck  device 0: busy 0.8544 of the makespan, bubble 0.1456" sim "$top_srcdir/stdlib/vocab_1f1b.pps" --cost TS=0.5 --cost TT=0.5 --cost TIF=0.2 --cost TIB=0.2 -D checks=false
# overlapped pairs: DualPipeV's devices are busy all the time, its bubble is 0 (was -0.116)
expect 0 "bubble      0.0000 " sim "$top_srcdir/stdlib/dualpipe_v.pps" -D TFB=2

# 4. hardware.memory is synthesis's byte budget when model { } gives the bytes: the
# order found fits (it needed 127 GB of 80 before)
cat > "$tmp/hw.pps" <<'PPS'
schedule s(P = 4, m = 16) {
  devices P; microbatches m; placement linear;
  model { layers = 32; hidden = 4096; heads = 32; query_groups = 8; seq = 4096;
          micro_batch = 1; vocab = 128000; dtype_bytes = 2; }
  hardware { memory = 80e9; flops = 312e12; peer_bandwidth = 100e9; }
  synthesize;
}
PPS
expect 0 "valid" check "$tmp/hw.pps"
expect 0 "hardware.memory holds 10.12356073..12.32008432 activation units per device" synth "$tmp/hw.pps"
# too little memory for one activation: an error that says so, with the memory's line
# (units of the fused-attention activation model, costmodel.c: 4.434 GB a unit here)
sed 's/memory = 80e9/memory = 36e9/' "$tmp/hw.pps" > "$tmp/hw36.pps"
expect 1 "synthesize: device 0 has room for 0.2 activation units (hardware.memory 36 GB less 35.11 GB" check "$tmp/hw36.pps"
expect 1 "hw36.pps:5:14: note: hardware.memory is set here" check "$tmp/hw36.pps"

# 5. reaching the lower bound ends the search (the seeds ran on: 264 candidates, 8 s)
printf 'schedule s(P = 256, m = 128) {\n  devices P; microbatches m; placement linear;\n  cost TF = 1, TB = 1, TW = 1;\n  synthesize;\n}\n' > "$tmp/big.pps"
expect 0 "search: 1 candidate orders" synth "$tmp/big.pps"
expect 0 "lower bound 767 (.*), gap 0% (optimal)" synth "$tmp/big.pps"

# --max-ops counts the sends and receives lowering inserts, before allocating them
# (zb_v P=1024 m=4096 built 58.7M ops past the 50M default)
expect 1 "more than 100 ops after lowering: 64 written and 96 sends and receives to insert (limit: --max-ops)" sim "$top_srcdir/examples/1f1b.pps" --max-ops 100
expect 0 "ops         160 (96 inserted by lowering)" sim "$top_srcdir/examples/1f1b.pps" --max-ops 160
expect 1 "more than 10000000 ops after lowering: 6291456 written and 8355840 sends" check "$top_srcdir/stdlib/zb_v.pps" -D P=256 -D m=4096 --max-ops 10000000

# compare: -D applies to each file whose schedule has the parameter (it failed when one
# had no P), -D A:/B: to one file; the costs that differ are shown (TC 0.05 against 0
# was "the same on every device")
printf 'schedule x(m = 8) {\n devices 4; microbatches m; placement linear; cost TC = 0.05;\n for d in 0..4 { device d { for i in 0..m { F(i) } for i in 0..m { BW(i) } } } }\n' > "$tmp/x.pps"
printf 'schedule y(P = 4, m = 8) {\n devices P; microbatches m; placement linear;\n for d in 0..P { device d { for i in 0..m { F(i) } for i in 0..m { BW(i) } } } }\n' > "$tmp/y.pps"
expect 0 "^TC  *0.05  *0   -0.05 (-100.0%)" compare "$tmp/x.pps" "$tmp/y.pps" -D P=4
expect 0 "the same passes in the same order on every device" compare "$tmp/x.pps" "$tmp/y.pps" -D P=4
expect 0 "^makespan  *33.3  *21 " compare "$tmp/x.pps" "$tmp/y.pps" -D B:m=4
expect 2 "-D Q: neither schedule has a parameter 'Q'" compare "$tmp/x.pps" "$tmp/y.pps" -D Q=4
expect 2 "-D A:P: the schedule of A (.*x.pps) has no parameter 'P'" compare "$tmp/x.pps" "$tmp/y.pps" -D A:P=4
expect 0 "costs and memory settings:" compare "$tmp/y.pps" "$tmp/y.pps"
if grep -q "^  the same$" "$tmp/out"; then echo "ok: the same costs"; else echo "FAIL: compare costs of one file"; cat "$tmp/out"; fail=1; fi

# an error at a pass a used stdlib schedule wrote notes the user's `use` line and the
# line that set the limit (it pointed only into zb_v.pps, once per device)
printf 'import "zb_v.pps";\nschedule mine(P = 4, m = 8) {\n  memory limit = 1;\n  use zb_v(P = P, m = m);\n}\n' > "$tmp/u.pps"
expect 1 "u.pps:4:7: note: in schedule 'zb_v', used here" check "$tmp/u.pps"
expect 1 "u.pps:3:10: note: the limit of 1 is set here" check "$tmp/u.pps"
if [ "$(grep -c "used here" "$tmp/out")" = 4 ]; then echo "ok: a note under each of the 4 errors"; else echo "FAIL: use notes"; cat "$tmp/out"; fail=1; fi

# reals >= 2^63 are printed as reals (the cast to int64 was undefined: UBSan aborted)
expect 0 "cost TF = 1e+100," expand "$top_srcdir/examples/1f1b.pps" --cost TF=1e100
printf 'schedule s(P = 2, m = 2) {\n  devices P; microbatches m; placement linear;\n  cost TF = 1e30, TB = 1e30, TW = 1e30;\n  synthesize;\n}\n' > "$tmp/huge.pps"
expect 0 "makespan 7e+30, peak memory 2" synth "$tmp/huge.pps"
exit $fail
