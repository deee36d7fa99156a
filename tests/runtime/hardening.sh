#!/bin/sh
# tests/runtime/hardening.sh: the executable's answers at the edges (issue 12): a
# loss that is not finite is an error (null in --json) and stops the run there unless
# --allow-nonfinite-loss; integer flags name their range (too large a value too);
# sizes whose product overflows an int are refused; a huge --timeout is not "already
# past"; output files (--trace, --profile, --save) are written like ppsc's (one
# implementation, runtime/safeio.h): whole or not at all, an existing file's mode
# kept, a symlink kept, a FIFO or device written in place and never replaced, a FIFO
# nobody reads an error and not a hang; inputs (--data, --load) that are not regular
# files (a FIFO, /dev/zero) are refused at once. FIFOs, symlinks and device nodes are
# made only inside this test's own temporary directory.
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
# the run stops at the first loss that is not finite (6 iterations asked, 2 run)
"$T" 1f1b 2 4 --lr 1e30 --iterations 6 >"$WORK/out" 2>&1
n=$(grep -c '^iter ' "$WORK/out")
if [ "$n" = 2 ] && grep -q "stopped there, 2 of 6 iterations run" "$WORK/out"; then pass "a NaN loss stops the run (2 of 6 iterations)"
else fail "NaN loss: $n iterations run"; tail -3 "$WORK/out" >&2; fi
"$T" 1f1b 2 4 --lr 1e30 --iterations 6 --allow-nonfinite-loss >"$WORK/out" 2>&1
n=$(grep -c '^iter ' "$WORK/out")
[ "$n" = 6 ] && pass "--allow-nonfinite-loss runs all 6 iterations" || fail "--allow-nonfinite-loss ran $n iterations"
# integer flags name their range, also for a value too large
expect_exit 2 "--hidden 5000000000" "$T" 1f1b 2 4 --hidden 5000000000
expect_grep "--hidden needs an integer from 1 to 1000000000, got '5000000000'" "too large a value: the range named"
expect_exit 2 "--vocab 0" "$T" 1f1b 2 4 --vocab 0
expect_grep "--vocab needs an integer from 1 to 1000000000, got '0'" "too small a value: the range named"
expect_exit 2 "--seq 65536 --micro-batch 65536 refused (a bad flag, before any rank starts)" "$T" 1f1b 2 4 --seq 65536 --micro-batch 65536 -q
expect_grep "elements per tensor" "overflowing sizes named"
# sizes whose product overflows int64 itself, and weights or parameter tables too
# large: usage errors before any rank starts (issue 22: the first passed the guard and
# failed later as "cannot allocate")
expect_exit 2 "mlp: --seq 2^29 --micro-batch 2^29 refused" "$T" 1f1b 2 4 --seq 536870912 --micro-batch 536870912 --hidden 64 -q
expect_grep "mlp: --seq 536870912 x --micro-batch 536870912 tokens x --hidden 64 is over" "mlp: int64-overflowing sizes named"
expect_exit 2 "--seq 2^29 --micro-batch 2^29 refused" "$T" 1f1b 2 4 --model gpt --seq 536870912 --micro-batch 536870912 --hidden 16 -q
expect_grep "tokens x width 64 is over 2147483647 elements per tensor" "int64-overflowing sizes named"
expect_exit 2 "--hidden 65536 --heads 1 refused" "$T" 1f1b 2 4 --model gpt --hidden 65536 --heads 1 -q
expect_grep "makes a weight over 2147483647 elements" "a weight too large named"
expect_exit 2 "--layers-per-stage 1e9 refused" "$T" 1f1b 2 4 --model gpt --layers-per-stage 1000000000 -q
expect_grep "is over [0-9][0-9]* parameter tensors" "a parameter table too large named"
expect_exit 0 "--timeout 1e19 is a long timeout" "$T" 1f1b 2 4 --timeout 1e19 -q

# ---- output files ----
GPT="--model gpt --vocab 256 --seq 16 --hidden 16 --heads 2 --layers-per-stage 1"
D=$WORK/files
mkdir "$D"
cat "$top_srcdir"/docs/*.md >"$D/text.txt"
# an existing checkpoint keeps its mode 600 (it was reset to 644 by a plain rename)
"$T" 1f1b 2 4 $GPT --data "$D/text.txt" --iterations 1 --save "$D/ck.st" -q 2>"$WORK/out" || fail "--save"
chmod 600 "$D/ck.st"
"$T" 1f1b 2 4 $GPT --data "$D/text.txt" --iterations 1 --save "$D/ck.st" -q 2>"$WORK/out" || fail "--save over ck.st"
m=$(stat -c %a "$D/ck.st")
[ "$m" = 600 ] && pass "--save keeps an existing file's mode 600" || fail "--save changed the mode to $m"
# a symlink stays a symlink; its target is what gets written
for out in trace profile save; do
  echo old >"$D/target.$out"
  ln -s "target.$out" "$D/link.$out"
  "$T" 1f1b 2 4 $GPT --data "$D/text.txt" --iterations 2 --$out "$D/link.$out" -q >"$WORK/out" 2>&1 || fail "--$out link"
  if [ -L "$D/link.$out" ] && ! echo old | cmp -s - "$D/target.$out"; then pass "--$out through a symlink: link kept, target written"
  else fail "--$out replaced the symlink or left the target"; fi
done
# a FIFO is written through, never replaced
mkfifo "$D/fifo"
for out in trace profile save; do
  timeout 20 cat "$D/fifo" >"$D/from-fifo" &
  reader=$!
  timeout 20 "$T" 1f1b 2 4 $GPT --data "$D/text.txt" --iterations 2 --$out "$D/fifo" -q >"$WORK/out" 2>&1 || fail "--$out fifo"
  wait $reader
  if [ -p "$D/fifo" ] && [ -s "$D/from-fifo" ]; then pass "--$out to a FIFO: written through, still a FIFO"
  else fail "--$out to a FIFO: replaced or nothing read"; fi
done
# a FIFO that nobody reads is an error (after a short wait for a reader), not a hang
timeout 60 "$T" 1f1b 2 4 --trace "$D/fifo" -q >"$WORK/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "nothing is reading it" "$WORK/out"; then pass "--trace to a FIFO with no reader: exit $rc"
else fail "--trace to a FIFO with no reader: exit $rc"; cat "$WORK/out" >&2; fi
[ -p "$D/fifo" ] || fail "the FIFO was replaced"
# a character device (a /dev/full made here) is written in place, never replaced: the
# write fails (ENOSPC), the run says so, and the node is still a device
if mknod "$D/full" c 1 7 2>/dev/null; then
  for out in trace save; do
    "$T" 1f1b 2 4 $GPT --data "$D/text.txt" --iterations 1 --$out "$D/full" -q >"$WORK/out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ -c "$D/full" ] && grep -q "No space left" "$WORK/out"; then pass "--$out to a full device: error, node kept"
    else fail "--$out to /dev/full: exit $rc, node $(stat -c %F "$D/full")"; cat "$WORK/out" >&2; fi
  done
else
  skip "device node checks (mknod is not permitted here)"
fi
# a write that fails half-way (the file size limit: EFBIG) leaves the old file as it was
echo old >"$D/keep.json"
(trap '' XFSZ; ulimit -f 2; "$T" 1f1b 2 4 -q --trace "$D/keep.json") >"$WORK/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && echo old | cmp -s - "$D/keep.json" && grep -q "File too large" "$WORK/out"; then
  pass "--trace failing half-way: error, the old file untouched"
else fail "--trace under ulimit -f: exit $rc, file $(head -c 40 "$D/keep.json")"; fi
# a failed write leaves nothing behind: no temporary files in the directory
if ls -A "$D" | grep -q 'pps-out\|\.tmp'; then fail "temporary files left: $(ls -A "$D" | tr '\n' ' ')"
else pass "no temporary files left"; fi
"$T" 1f1b 2 4 --trace "$D/absent/t.json" -q >"$WORK/out" 2>&1 && fail "--trace into a missing directory succeeded"
[ -e "$D/absent" ] && fail "--trace created something"

# ---- input files that are not regular files are refused at once ----
for flag in --data --load; do
  extra=; [ $flag = --load ] && extra="--data $D/text.txt"
  for src in "$D/fifo" /dev/zero; do
    [ -e "$src" ] || continue
    timeout 20 "$T" 1f1b 2 4 $GPT $extra $flag "$src" --iterations 1 -q >"$WORK/out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "not a regular file" "$WORK/out"; then pass "$flag $(basename "$src") refused (exit $rc)"
    else fail "$flag $src: exit $rc"; cat "$WORK/out" >&2; fi
  done
done
finish
