#!/bin/sh
# tests/runtime/hardening.sh: the executable's answers at the edges (issue 12): a
# loss that is not finite is an error (null in --json) unless --allow-nonfinite-loss;
# sizes whose product overflows an int are refused; a huge --timeout is not "already
# past".
. "$(dirname "$0")/lib.sh"
T=$RT_TABLES
# a learning rate of 1e30 makes the loss NaN from the second iteration
expect_exit 1 "a NaN loss is exit 1" "$T" 1f1b 2 4 --lr 1e30 --iterations 3 -q
expect_grep "the loss of iteration 2 is .*not a finite number" "NaN loss message"
expect_exit 0 "--allow-nonfinite-loss" "$T" 1f1b 2 4 --lr 1e30 --iterations 3 -q --allow-nonfinite-loss
"$T" 1f1b 2 4 --lr 1e30 --iterations 3 --json > "$WORK/j" 2>/dev/null
if grep -q '"loss":null' "$WORK/j" && ! grep -qi 'nan' "$WORK/j"; then pass "--json writes null for a NaN loss"
else fail "--json NaN loss"; cat "$WORK/j" >&2; fi
if command -v python3 >/dev/null; then
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$WORK/j" && pass "--json with a NaN loss is valid JSON" || fail "invalid JSON"
fi
expect_exit 1 "--seq 65536 --micro-batch 65536 refused" "$T" 1f1b 2 4 --seq 65536 --micro-batch 65536 -q
expect_grep "elements per tensor" "overflowing sizes named"
expect_exit 0 "--timeout 1e19 is a long timeout" "$T" 1f1b 2 4 --timeout 1e19 -q
finish
