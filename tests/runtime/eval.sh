#!/bin/sh
# eval.sh: validation as forward-only evaluation through the pipeline (validate.c,
# interp.c rt_eval_forward; Megatron-LM's evaluate() with --eval-iters):
#  1. the validation loss on a file V equals an independent computation: the training
#     loss of iteration 1 of a run that trains on V at --lr 0 (the forward loss of the
#     same sequences with the same weights), to the printed digit, while the
#     validation run itself trains on another file; under 1F1B, ZB-V, Vocab-1 V-Half
#     with asynchronous collectives, PipeOffload (offload/reload ops skipped), a
#     recomputed 1F1B (tests/runtime/cases/recompute.pps), T = 2
#     with --sequence-parallel, D = 2 with --distributed-optimizer, tied embeddings,
#     dropout (evaluation runs none: the loss of a run without), and one MPI line
#     (P 2 x D 2 ranks);
#  2. --eval-iters 3 is the mean of three single-batch evaluations of the files that
#     start at batch 1, 2 and 3's first sequence (D = 1 and D = 2: each replica's share
#     of every batch), and the text line counts the sequences;
#  3. evaluation's peaks (--json per_device val_peak_bytes, val_device_peak_bytes) are
#     above 0 on every device and at most training's (peak_bytes, device_peak_bytes);
#  4. usage errors: --eval-iters 0, not a number, without validation data (exit 2).
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build zv "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build vh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true || { fail "build vocab_v_half"; finish; }
build po "$top_srcdir/stdlib/pipeoffload.pps" -D P=2 -D m=4 || { fail "build pipeoffload"; finish; }
build rc "$top_srcdir/tests/runtime/cases/recompute.pps" || { fail "build recompute.pps"; finish; }
G="--model gpt --hidden 16 --heads 2 --query-groups 2 --seq 8 --vocab 256 --layers-per-stage 1"
# V: validation bytes; T: other training bytes (so the validation run's own training
# reads something else: at --lr 0 its weights are the same)
i=0; : > "$WORK/V"; : > "$WORK/T"
while [ $i -lt 40 ]; do
  echo "validation line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1013))" >> "$WORK/V"
  echo "training text $i, something else entirely: $((i * 104729 % 4099)) lorem ipsum" >> "$WORK/T"
  i=$((i + 1))
done

iter1() { sed -n 's/^iter 1\/1  loss \([-0-9.e+]*\) .*/\1/p' "$1"; }
val1() { sed -n 's/^val  1\/1  loss \([-0-9.e+]*\) .*/\1/p' "$1"; }

# same DESC RUNNER PROG FLAGS...: validation on V (training on T) = iteration 1's loss
# training on V, both at --lr 0 (RUNNER: "" or an mpirun line)
same() {
  desc=$1; runner=$2; shift 2
  $runner "$@" --data "$WORK/T" --val-data "$WORK/V" --lr 0 --iterations 1 > "$WORK/ev" 2>&1 || {
    fail "$desc: validation run failed"; tail -5 "$WORK/ev" >&2; return; }
  prog=$1; shift
  # (the reference runs without dropout: evaluation runs none)
  flags=$(echo "$*" | sed 's/--hidden-dropout [0-9.]*//; s/--attention-dropout [0-9.]*//')
  # shellcheck disable=SC2086
  $runner "$prog" $flags --data "$WORK/V" --lr 0 --iterations 1 > "$WORK/tr" 2>&1 || {
    fail "$desc: training run failed"; tail -5 "$WORK/tr" >&2; return; }
  v=$(val1 "$WORK/ev"); t=$(iter1 "$WORK/tr")
  if [ -n "$v" ] && [ "$v" = "$t" ]; then pass "$desc: validation loss $v = training loss on V"
  else fail "$desc: validation loss '$v', training loss on V '$t'"; fi
}
# shellcheck disable=SC2086
{
same "1F1B" "" "$WORK/a" $G
same "ZB-V" "" "$WORK/zv" $G
same "Vocab-1 V-Half, asynchronous collectives" "" "$WORK/vh" $G
same "PipeOffload" "" "$WORK/po" $G
same "1F1B, every stage recomputed" "" "$WORK/rc" $G
same "1F1B T = 2 --sequence-parallel" "" "$WORK/a" $G --tensor-parallel 2 --sequence-parallel
same "ZB-V D = 2 --distributed-optimizer" "" "$WORK/zv" $G --data-parallel 2 --distributed-optimizer --optimizer adam
same "1F1B tied embeddings" "" "$WORK/a" $G --embeddings tied
same "1F1B D = 2, dropout (none in evaluation)" "" "$WORK/a" $G --data-parallel 2 --hidden-dropout 0.2 --attention-dropout 0.1
same "Vocab-1 V-Half, dropout (none in evaluation)" "" "$WORK/vh" $G --hidden-dropout 0.3
if have_mpi; then
  same "mpirun -np 4: 1F1B P 2 x D 2" "mpirun_np 4" "$WORK/a" $G --transport mpi --data-parallel 2
else skip "MPI line (no MPI)"; fi
}

# 2. --eval-iters 3 = the mean of batches 1, 2, 3 evaluated alone (files V1, V2, V3
# that start at their first sequence: batch = D x 4 microbatches x 1 sequence x 8 bytes)
mean3() {   # DESC D FLAGS...
  desc=$1; D=$2; shift 2
  # shellcheck disable=SC2086
  "$WORK/a" $G "$@" --data "$WORK/T" --val-data "$WORK/V" --lr 0 --iterations 1 --eval-iters 3 > "$WORK/k3" 2>&1 || {
    fail "$desc: --eval-iters 3 run failed"; tail -5 "$WORK/k3" >&2; return; }
  k3=$(val1 "$WORK/k3"); s=""
  for k in 0 1 2; do
    tail -c +$((k * D * 4 * 8 + 1)) "$WORK/V" > "$WORK/V$k"
    # shellcheck disable=SC2086
    "$WORK/a" $G "$@" --data "$WORK/T" --val-data "$WORK/V$k" --lr 0 --iterations 1 > "$WORK/k1" 2>&1 || {
      fail "$desc: batch $k alone failed"; return; }
    s="$s $(val1 "$WORK/k1")"
  done
  set -- $s
  if [ $# = 3 ] && [ -n "$k3" ] && awk -v a="$1" -v b="$2" -v c="$3" -v k="$k3" \
       'BEGIN { m = (a + b + c) / 3; d = m - k; if (d < 0) d = -d; exit !(d <= 2e-7 * m + 1e-7 && a != b && b != c) }'; then
    pass "$desc: --eval-iters 3 loss $k3 = mean of $1 $2 $3"
  else fail "$desc: --eval-iters 3 loss '$k3', batches alone:$s"; fi
  n=$((3 * D * 4))
  grep -q "^val  1/1  loss .* (.*)  $n sequences$" "$WORK/k3" && pass "$desc: the line says $n sequences" ||
    fail "$desc: no '$n sequences' in: $(grep '^val' "$WORK/k3")"
}
mean3 "D = 1" 1
mean3 "D = 2" 2 --data-parallel 2

# 3. evaluation's peaks at most training's, on every device
if command -v python3 > /dev/null 2>&1; then
  for p in a zv vh po; do
    # shellcheck disable=SC2086
    "$WORK/$p" $G --data "$WORK/T" --val-data "$WORK/V" --iterations 2 --val-every 1 --eval-iters 2 --json > "$WORK/j.json" 2> "$WORK/j.err" ||
      { fail "$p: --json run failed"; continue; }
    if python3 - "$WORK/j.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
its = d["iterations"]
assert d["eval_iters"] == 2 and d["val_sequences"] == 8, (d["eval_iters"], d["val_sequences"])
assert all("val_loss" in it and it["val_time_s"] >= 0 for it in its), "val_loss or val_time_s missing"
for k, dev in enumerate(d["per_device"]):
    tp = max(it["peak_bytes"][k] for it in its)
    assert 0 < dev["val_peak_bytes"] <= tp, ("device", k, "counted", dev["val_peak_bytes"], tp)
    assert 0 < dev["val_device_peak_bytes"] <= dev["device_peak_bytes"], ("device", k, "memory", dev["val_device_peak_bytes"], dev["device_peak_bytes"])
PY
    then pass "$p: evaluation's peaks at most training's on every device"
    else fail "$p: evaluation's peaks (above)"; fi
  done
else skip "peaks (no python3)"; fi

# 4. usage errors
# shellcheck disable=SC2086
{
expect_exit 2 "--eval-iters 0" "$WORK/a" $G --data "$WORK/T" --val-data "$WORK/V" --eval-iters 0
expect_grep "eval-iters needs a number of batches from 1" "--eval-iters 0: message"
expect_exit 2 "--eval-iters x" "$WORK/a" $G --data "$WORK/T" --val-data "$WORK/V" --eval-iters x
expect_grep "eval-iters needs a number of batches from 1 to .*, got 'x'" "--eval-iters x: message"
expect_exit 2 "--eval-iters without validation data" "$WORK/a" $G --data "$WORK/T" --eval-iters 2
expect_grep "eval-iters needs validation data" "--eval-iters without validation data: message"
}
finish
