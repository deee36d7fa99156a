#!/bin/sh
# e2e.sh: compile schedules with `ppsc build` and run them on the CPU backend with the
# threads transport and --check (loss, every weight gradient, measured == predicted
# peak memory): every stdlib/*.pps (once present) and examples/*.pps at a few (P, m),
# an offload policy, and the gpt model when it is built in.
. "$(dirname "$0")/lib.sh"
SIZES="--hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q"
files=$(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null)
n=0
for f in $files; do
  base=$(basename "$f" .pps)
  for pm in "2 4" "4 8"; do
    set -- $pm
    name=${base}_P$1_m$2
    if ! "$PPSC" check "$f" -D P=$1 -D m=$2 -q > /dev/null 2>&1; then
      echo "skip: $name (not valid at these parameters)"; continue
    fi
    if ! build "$name" "$f" -D P=$1 -D m=$2; then fail "build $name"; continue; fi
    expect_exit 0 "$name --check" "$WORK/$name" --check $SIZES
    n=$((n + 1))
  done
done
[ $n -ge 4 ] && pass "$n schedule runs" || fail "only $n schedules ran"

# an offload policy: half of every activation (two saved tensors per layer: exact)
sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 0.5;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
if build off "$WORK/off.pps" -D P=3 -D m=6; then
  expect_exit 0 "1f1b with offload ratio 0.5 --check" "$WORK/off" --check $SIZES
  expect_grep "host peak [1-9]" "offload: activations went to the host"
  expect_grep "check: passed" "offload: loss, gradients, memory match"
else fail "build offload"; fi

# the gpt model, where it is built in and implemented
if build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4 && "$WORK/g" --model gpt --iterations 1 -q > /dev/null 2>&1; then
  expect_exit 0 "gpt 1f1b --check" "$WORK/g" --model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 -q
else
  echo "skip: gpt model not available yet"
fi
finish
