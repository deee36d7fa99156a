#!/bin/sh
# e2e.sh: compile schedules with `ppsc build` and run them on the CPU backend with the
# threads transport and --check (loss, every weight gradient, measured == predicted
# peak memory): every stdlib/*.pps and examples/*.pps at (P, m) = (2, 4), (3, 6), (4, 8)
# with both models (mlp and gpt; vocabulary-parallel schedules with the gpt only), an
# offload policy, and more gpt cases.
. "$(dirname "$0")/lib.sh"
SIZES="--hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q"
files=$(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null)
n=0
for f in $files; do
  base=$(basename "$f" .pps)
  for pm in "2 4" "3 6" "4 8"; do
    set -- $pm
    name=${base}_P$1_m$2
    defs="-D P=$1 -D m=$2"
    if ! "$PPSC" check "$f" $defs -q > /dev/null 2>&1; then
      # a literal schedule without parameters: once, as written
      [ "$1" = 2 ] && "$PPSC" check "$f" -q > /dev/null 2>&1 || { echo "skip: $name (not valid at these parameters)"; continue; }
      defs=""; name=$base
    fi
    if ! build "$name" "$f" $defs; then fail "build $name"; continue; fi
    gpt="--model gpt --heads 2 --query-groups 1 --vocab 32 --hidden 16 --seq 4 -q"
    # both models; vocabulary-parallel schedules only with the gpt (the mlp has no
    # vocabulary layers)
    if ! grep -q "vocab parallel" "$f"; then
      expect_exit 0 "$name --check (mlp)" "$WORK/$name" --check $SIZES
      n=$((n + 1))
    fi
    expect_exit 0 "$name --check (gpt)" "$WORK/$name" --check $gpt
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

# the memory comparison can fail: the schedule says B frees half of each activation,
# the mlp's B frees nothing (W needs x and dh), so device 1 peaks at 2 units, not 1.5
cat > "$WORK/bfree.pps" <<'PPS'
schedule bfree(P = 2, m = 2) {
  devices P; microbatches m; placement linear;
  memory b_free = 0.5;
  device 0 { F(0) F(1) B(0) B(1) W(0) W(1) }
  device 1 { F(0) B(0) F(1) B(1) W(0) W(1) }
}
PPS
if build bfree "$WORK/bfree.pps"; then
  expect_exit 1 "--check-memory fails when the model frees other than b_free" "$WORK/bfree" --check-memory
  expect_grep "device 1: measured peak 2 units ([0-9]* B), predicted 1.5 units: DIFFERS" "memory mismatch named"
  expect_grep "device 0: measured peak 2 units ([0-9]* B), predicted 2 units: match" "other device matches"
else fail "build bfree"; fi

# the gpt model: stdlib schedules and both vocabulary-parallel variants
GPT="--model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 -q"
if build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4 && "$WORK/g" --model gpt --iterations 1 -q > /dev/null 2>&1; then
  expect_exit 0 "gpt 1f1b --check" "$WORK/g" $GPT
  for f in zb_h1 zb_v interleaved_1f1b; do
    src=$top_srcdir/stdlib/$f.pps
    [ -f "$src" ] || continue
    if build g_$f "$src" -D P=2 -D m=4; then expect_exit 0 "gpt $f --check" "$WORK/g_$f" $GPT; else fail "build $f"; fi
  done
  # offload of half of every activation: the gpt's saved tensors differ in size, so the
  # store splits the entry where the half falls; memory must still match exactly
  sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 0.5;/' \
    "$top_srcdir/examples/1f1b.pps" > "$WORK/goff.pps"
  if build goff "$WORK/goff.pps" -D P=3 -D m=6; then
    expect_exit 0 "gpt 1f1b offload ratio 0.5 --check" "$WORK/goff" $GPT
    # (device 0's order-based peak, the reloads one pass before their B: 2.5, a fraction
    # only split entries give)
    expect_grep "device 0: measured peak 2.5 units ([0-9]* B), predicted 2.5 units: match" "gpt offload: 2.5 units exactly"
  else fail "build goff"; fi
  for v in 1 2; do
    sed "s/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; vocab parallel $v;/" \
      "$top_srcdir/examples/1f1b.pps" > "$WORK/v$v.pps"
    if build v$v "$WORK/v$v.pps" -D P=3 -D m=6; then
      expect_exit 0 "gpt Vocab-$v 1f1b P=3 --check" "$WORK/v$v" $GPT
      expect_exit 2 "Vocab-$v with the mlp model is a usage error" "$WORK/v$v"
      # a rank failing at a collective (op #3 of device 1 is coll input_fwd(1)) stops the others
      expect_exit 1 "Vocab-$v: a rank dying at a collective stops every rank" timeout 60 "$WORK/v$v" $GPT --die-at 1:3
      expect_grep "2 other device(s) stopped" "Vocab-$v: the others stopped"
    else fail "build vocab $v"; fi
    # `vocab async`: the order lowering gives the collective lane runs on the runtime's
    # lanes (coll_lane.c) and on blocking collectives with the same results; memory
    # matches ppsc sim's (P + 2 / P + 1 on device 0 at P = 4)
    for f in vocab_1f1b vocab_v_half; do
      if build va$v$f "$top_srcdir/stdlib/$f.pps" -D P=4 -D m=8 -D mode=$v -D async=true -D TCOLL=0.3 -D TS=0.2 -D TT=0.2; then
        expect_exit 0 "gpt Vocab-$v $f async P=4 --check" "$WORK/va$v$f" $GPT --json
        if command -v python3 >/dev/null; then
          if python3 -c "
import json,sys
j=json.load(open(sys.argv[1]))
assert j['collectives']=='async', j['collectives']
assert j['check']['match'] and j['memory_match'], j['check']
d=j['per_device']
assert [x['peak_units'] for x in d]==[x['predicted_peak_units'] for x in d], d
if sys.argv[2]=='vocab_1f1b': assert d[0]['peak_units']==4+3-int(sys.argv[3]), d[0]
" "$WORK/out" $f $v; then pass "Vocab-$v $f async: on the lanes, memory as ppsc sim's"; else fail "Vocab-$v $f async JSON"; fi
        else skip "Vocab-$v $f async JSON (no python3)"; fi
        expect_exit 0 "gpt Vocab-$v $f async --blocking-collectives --check" "$WORK/va$v$f" $GPT --blocking-collectives
      else fail "build $f async $v"; fi
    done
  done
  # a schedule that runs only with asynchronous collectives (device 0 issues
  # input_fwd(1) before sending F(0), device 1 after receiving it): ppsc warns, the
  # lanes run it, blocking collectives stop at the timeout
  expect_exit 0 "ppsc check: async-only schedule valid" "$PPSC" check "$top_srcdir/tests/analysis/cases/vocab_async.pps"
  expect_grep "warning: with blocking collectives this schedule deadlocks (device 0 stops at coll input_fwd(1))" "async-only: warning"
  if build vasync "$top_srcdir/tests/analysis/cases/vocab_async.pps"; then
    expect_exit 0 "async-only schedule on the collective lanes --check" "$WORK/vasync" $GPT
    expect_grep "check: passed" "async-only: check passed"
    expect_exit 1 "async-only schedule with --blocking-collectives stops" timeout 60 "$WORK/vasync" $GPT --blocking-collectives --timeout 1
    # (device 1 at its recv of F(0) or device 0 at input_fwd(1): whichever times out first)
    expect_grep "waited 1 s \(for a message from rank 0\|at a collective\)" "async-only blocking: the wait named"
  else fail "build vocab_async"; fi
else
  echo "skip: gpt model not available"
fi
finish
