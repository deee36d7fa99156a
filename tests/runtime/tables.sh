#!/bin/sh
# tables.sh: the runtime on hand-written op tables (no compiler involved): 1F1B, split
# B/W and offload tables pass --check (loss, gradients, measured == predicted peak
# units) at P = 2..4; a recv with no matching send times out and names the op; a rank
# that fails makes the others stop (exit 1, never hang). Threads transport.
. "$(dirname "$0")/lib.sh"
for k in 1f1b zb offload; do
  for pm in "2 4" "3 6" "4 8"; do
    set -- $pm
    expect_exit 0 "$k P=$1 m=$2 --check" "$RT_TABLES" $k $1 $2 --check --iterations 2 -q
    expect_grep "check: passed" "$k P=$1 m=$2: check passed"
  done
done
# the same with Adam: loss falls over iterations
expect_exit 0 "1f1b adam 5 iterations" "$RT_TABLES" 1f1b 2 4 --optimizer adam --lr 0.01 --iterations 5
first=$(grep '^iter 1/' "$WORK/out" | sed 's/.*loss \([0-9.e-]*\).*/\1/')
last=$(grep '^iter 5/' "$WORK/out" | sed 's/.*loss \([0-9.e-]*\).*/\1/')
if awk "BEGIN{exit !($last < $first)}"; then pass "loss falls ($first -> $last)"; else fail "loss did not fall ($first -> $last)"; fi

# timeout: device 1 waits for a gradient nobody sends
start=$(date +%s)
expect_exit 1 "hanging recv ends with a timeout" "$RT_TABLES" hang 3 4 --timeout 1
expect_grep "waited 1 s for a message" "timeout message"
# whichever stuck device notices first names its op (device 1 waits at op #0, line 42;
# devices 0 and 2 wait for device 1 at their recvs from it)
if grep -E -q "device [0-2]: op #[0-9]+ recv [FB]\([0-9]+,[0-9]+\)<-[0-9] \(microbatch [0-9]+, stage [0-9]+\) at tests/runtime/rt_tables.c:[0-9]+" "$WORK/out"; then
  pass "timeout names device, op, microbatch, stage, line"
else fail "timeout message lacks the op"; cat "$WORK/out" >&2; fi
end=$(date +%s)
[ $((end - start)) -le 20 ] && pass "timeout took $((end - start)) s" || fail "timeout took $((end - start)) s"

# sends and receives out of order: the receiver sees the wrong message and says so
expect_exit 1 "receives out of order are detected" "$RT_TABLES" swap 2 4 --timeout 10
expect_grep "does not match: got F(0,0) (256 bytes), expected F(1,0)" "mismatched message reported"
expect_grep "device 1: op #0 recv F(1,0)<-0" "the receiving op is named"

# a dying rank: every other rank stops with an error, the process exits 1
expect_exit 1 "dying rank stops the others" "$RT_TABLES" 1f1b 4 8 --die-at 2:3 --timeout 60
expect_grep "injected failure" "dying rank's message"
expect_grep "3 other device(s) stopped" "the others stopped"
finish
