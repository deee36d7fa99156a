#!/bin/sh
# sp.sh: --sequence-parallel with --tensor-parallel T (runtime/model_gpt.c, Megatron-LM's
# sequence parallelism): the gpt's residual stream, layer norms, biases and pipeline
# messages on each rank's N/T token rows, all-gathers before QKV and FC1 and
# reduce-scatters after the projection and FC2 (runtime/replica.c ppsrt_tp_allgather,
# ppsrt_tp_reduce_scatter), the layer norms' gradients summed over the group in W.
# Against independent figures:
#  - the losses equal T = 1's within 1e-6 relative, 1F1B (Adam, --clip-grad, the same
#    gradient norms) at T = 2 and 4, and ZB-V (a V shape with B and W split: W gathers
#    the layer norms' outputs again);
#  - --check (one whole-layer device) passes at T = 2 and 4, ZB-V, with --data-parallel 2
#    and the distributed optimizer, PipeOffload (activations offloaded to the host), and
#    under mpirun -np 8 (P 2 x D 2 x T 2); a planted
#    wrong layer-norm gradient is named;
#  - device 0 (stage 0) keeps exactly the bytes computed here buffer by buffer (every
#    one of a layer on N/T rows or 1/T of the heads and columns; plus the embeddings'
#    gradient slot, N/T rows), the last stage too (its LN_f and output layer on all N
#    rows); device 0's bytes a layer equal `ppsc sim`'s unit_bytes with
#    hardware { tensor_parallel = 2; sequence_parallel = 1; } (and without, at T = 1);
#  - checkpoints saved with it resume without it and the reverse, with the
#    uninterrupted losses; the JSON layout says sequence_parallel;
#  - Vocab-1, Vocab-2 and V-Half async give T = 1's losses with it; --check with 2
#    replicas;
#  - what is not supported is refused (exit 2) with the reason.
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
A=$WORK/a; Z=$WORK/z
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
G4="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
SP="--sequence-parallel"
. "$(dirname "$0")/split_lib.sh"

run a1 "$A" $G --iterations 4 --clip-grad 0.5
run a2 "$A" $G --iterations 4 --clip-grad 0.5 --tensor-parallel 2 $SP
close "1F1B: T = 2 sequence parallel = T = 1 (Adam, --clip-grad)" "$WORK/a2" "$WORK/a1"
norms "the gradient norm = the whole tensors'" "$WORK/a2" "$WORK/a1"
grep -q '"layout":{"devices":2,"data_parallel":1,"context_parallel":1,"tensor_parallel":2,"expert_parallel":1,"ranks":4,"distributed_optimizer":false,"sequence_parallel":true}' "$WORK/a2" \
  && pass "JSON layout: sequence_parallel true" || fail "JSON layout: $(grep -o '"layout":{[^}]*}' "$WORK/a2")"
grep -q '"sequence_parallel":false}' "$WORK/a1" && pass "JSON layout: sequence_parallel false without it" || fail "JSON layout without: $(grep -o '"layout":{[^}]*}' "$WORK/a1")"
run a4 "$A" $G4 --iterations 3
run a44 "$A" $G4 --iterations 3 --tensor-parallel 4 $SP
close "1F1B: T = 4 sequence parallel = T = 1 (one token row a rank)" "$WORK/a44" "$WORK/a4"
run z1 "$Z" $G --iterations 3 --clip-grad 0.5
run z2 "$Z" $G --iterations 3 --clip-grad 0.5 --tensor-parallel 2 $SP
close "ZB-V (B and W split, two stages a device): T = 2 sequence parallel = T = 1" "$WORK/z2" "$WORK/z1"

# --check against one device with whole layers and all rows
expect_exit 0 "1F1B T = 2 --sequence-parallel --check" "$A" $G --tensor-parallel 2 $SP --check -q
expect_grep "^check: passed" "T = 2: check passes"
[ "$(grep -c '^check: device [01] (tensor rank [01]): .*: match' "$WORK/out")" = 4 ] && pass "every tensor rank of every device compared its tensors" \
  || fail "check lines: $(grep -c '^check: device' "$WORK/out")"
expect_exit 0 "1F1B T = 4 --sequence-parallel --check" "$A" $G4 --tensor-parallel 4 $SP --check -q
expect_grep "^check: passed" "T = 4: check passes"
expect_exit 0 "ZB-V T = 2 --sequence-parallel --check" "$Z" $G --tensor-parallel 2 $SP --check -q
expect_grep "^check: passed" "ZB-V T = 2: check passes"
expect_exit 0 "T = 2 x --data-parallel 2 --sequence-parallel --check" "$A" $G --tensor-parallel 2 $SP --data-parallel 2 --check -q
expect_grep "^check: passed" "T = 2 x D = 2: check passes"
expect_exit 0 "T = 2 x --data-parallel 3 --distributed-optimizer --sequence-parallel --check" "$A" $G --tensor-parallel 2 $SP --data-parallel 3 --distributed-optimizer --check -q
expect_grep "^check: passed" "T = 2 x D = 3, distributed optimizer: check passes"
if build po "$top_srcdir/stdlib/pipeoffload.pps"; then   # its split activations offloaded and reloaded
  expect_exit 0 "PipeOffload (P = 4, offloaded activations) T = 2 --sequence-parallel --check" "$WORK/po" $G --tensor-parallel 2 $SP --check -q
  expect_grep "^check: passed" "PipeOffload: check passes"
else fail "build pipeoffload"; fi
expect_exit 1 "a wrong layer-norm gradient fails --check" env "PPSRT_FAULT=grad=s0.l0.ln2.g*1.001" "$A" $G --tensor-parallel 2 $SP --check -q
expect_grep "grad s0.l0.ln2.g .*DIFFERS" "the wrong layer norm named"

# activation memory, computed here buffer by buffer (F32: 4 bytes), and ppsc sim's figure
cat > "$WORK/sim.pps" <<'PPS'
schedule lin(P = 2, m = 4, tp = 2, sp = 1) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 2; hidden = 16; heads = 4; query_groups = 2; seq = 4; micro_batch = 1; vocab = 32; dtype_bytes = 4; }
  hardware { tensor_parallel = tp; sequence_parallel = sp; }
  for d in 0..P {
    device d {
      let warm = min(P - d - 1, m);
      for i in 0..warm     { F(i) }
      for i in 0..m - warm { F(i + warm) BW(i) }
      for i in m - warm..m { BW(i) }
    }
  }
}
PPS
"$PPSC" sim "$WORK/sim.pps" --json > "$WORK/sim2.json" 2>"$WORK/err" && "$PPSC" sim "$WORK/sim.pps" -D tp=1 -D sp=0 --json > "$WORK/sim1.json" 2>>"$WORK/err" \
  || fail "ppsc sim: $(cat "$WORK/err")"
python3 - "$WORK/a1" "$WORK/a2" "$WORK/sim1.json" "$WORK/sim2.json" > "$WORK/py.out" 2>&1 <<'PY' && pass "activation bytes: $(cat "$WORK/py.out")" || fail "activation bytes under --sequence-parallel: $(cat "$WORK/py.out")"
import json, sys
d1, d2, s1, s2 = [json.load(open(f)) for f in sys.argv[1:5]]
N, h, H, G, s, es, V, T = 4, 16, 4, 2, 4, 4, 32, 2       # tokens, hidden, heads, kv groups, seq, F32, vocab, T
hd = h // H
def layer(t, rows):
    # rows: the residual stream's (N, or N/T with sequence parallelism): ln1, x1, ln2,
    # y, the two gradient slots B leaves for W, the layer norms' 4 F32 statistics;
    # split by heads and columns over t: Q K V, att, hpre, hact, the softmax statistics
    q = (H // t + 2 * G // t) * hd
    return rows * (6 * h * es + 16) + N * q * es + (H // t) * s * 4 + N * (H // t) * hd * es + 2 * N * (4 * h // t) * es
n = N // T
stage0 = {1: layer(1, N) + N * h * es, T: layer(T, n) + n * h * es}   # + the embeddings' gradient slot dx0
# last stage: the layer keeps its output y too (rows); LN_f's statistics and output on
# all N rows, the logits' gradient of all N rows and the rank's V/t vocabulary rows (the
# output layer split by vocabulary over the group)
last = {t: layer(t, r) + r * h * es + 2 * N * 4 + N * h * es + N * (V // t) * es for t, r in ((1, N), (T, n))}
for d, t in ((d1, 1), (d2, T)):
    p0, p1 = d["per_device"][0], d["per_device"][1]
    assert p0["peak_units"] == 2 and p1["peak_units"] == 1, (p0["peak_units"], p1["peak_units"])
    assert p0["resident_peak_bytes"] == 2 * stage0[t], ("device 0", t, p0["resident_peak_bytes"], 2 * stage0[t])
    assert p1["resident_peak_bytes"] == last[t], ("device 1", t, p1["resident_peak_bytes"], last[t])
# ppsc sim: a layer of one GPU (unit_bytes, one layer a stage) = device 0's unit less its dx0 slot
for d, sim, rows in ((d1, s1, N), (d2, s2, n)):
    u = d["per_device"][0]["resident_peak_bytes"] / d["per_device"][0]["peak_units"] - rows * h * es
    assert u == sim["unit_bytes"], (u, sim["unit_bytes"])
assert s2["tensor_parallel"]["sequence_parallel"] is True and s2["tensor_parallel"]["layer_bytes_whole"] == 0
print("device 0 %d B (T = 1: %d B), a layer %d B = ppsc sim's unit_bytes %d B (T = 1: %d B)" % (
    d2["per_device"][0]["resident_peak_bytes"], d1["per_device"][0]["resident_peak_bytes"],
    s2["unit_bytes"], s2["unit_bytes"], s1["unit_bytes"]))
PY

# checkpoints: the same tensors with and without it
run c2 "$A" $G --iterations 2 --tensor-parallel 2 $SP --save "$WORK/ck2"
run c1 "$A" $G --iterations 2 --tensor-parallel 2 --save "$WORK/ck1"
run f4 "$A" $G --iterations 4
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/f4" | sed -n 3,4p)" > "$WORK/f4b"
run r1 "$A" $G --iterations 2 --load "$WORK/ck2"
close "saved with --sequence-parallel, resumed at T = 1: the uninterrupted iterations 3-4" "$WORK/r1" "$WORK/f4b"
run r2 "$A" $G --iterations 2 --load "$WORK/ck2" --tensor-parallel 2
close "saved with --sequence-parallel, resumed at T = 2 without it" "$WORK/r2" "$WORK/f4b"
run r3 "$A" $G --iterations 2 --load "$WORK/ck1" --tensor-parallel 2 $SP
close "saved at T = 2 without it, resumed with --sequence-parallel" "$WORK/r3" "$WORK/f4b"

if have_mpi; then
  expect_exit 0 "mpirun -np 8: P 2 x D 2 x T 2 --sequence-parallel --check" mpirun_np 8 "$A" $G --tensor-parallel 2 --data-parallel 2 $SP --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "--sequence-parallel under MPI (libppsrt without MPI, or no mpirun)"; fi

# refused, with the reason
expect_exit 2 "--sequence-parallel without --tensor-parallel" "$A" $G $SP
expect_grep "add --tensor-parallel T" "the missing flag named"
expect_exit 2 "--sequence-parallel with --tensor-parallel 1" "$A" $G --tensor-parallel 1 $SP
expect_grep "add --tensor-parallel T" "T = 1 refused"
expect_exit 2 "--sequence-parallel with 2 ranks over 3 tokens" "$A" $G --tensor-parallel 2 $SP --seq 3
expect_grep "2 must divide them" "the tokens named"
# a schedule planning sequence parallelism, run without it: the run says so (and not
# when it matches)
if build plan "$WORK/sim.pps"; then
  expect_exit 0 "a schedule planning sequence_parallel = 1, run at T = 2 without it" "$WORK/plan" --model gpt --tensor-parallel 2 --iterations 1 -q
  expect_grep "note: the schedule's hardware { sequence_parallel = 1 } plans with sequence parallelism; this run has none" "the difference named"
  expect_exit 0 "the same with --sequence-parallel" "$WORK/plan" --model gpt --tensor-parallel 2 --sequence-parallel --iterations 1 -q
  if grep -q "sequence_parallel" "$WORK/out"; then fail "a note although the run matches the plan"; else pass "no note when the run matches"; fi
else fail "build sim.pps"; fi

# vocabulary-parallel schedules: stage 0 takes its rows of the reduced embedding, its B
# gathers the input gradient for coll input_bwd and IB (all N rows), the last stage's
# LN_f output for S is of all-gathered rows. The losses equal T = 1's; --check passes.
if build vb1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 && build vb2 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2 &&
   build vbh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true; then
  for v in vb1 vb2 vbh; do
    run ${v}t1 "$WORK/$v" $G --iterations 3
    run ${v}sp "$WORK/$v" $G --iterations 3 --tensor-parallel 2 $SP
    close "$v: T = 2 sequence parallel = T = 1" "$WORK/${v}sp" "$WORK/${v}t1"
  done
  expect_exit 0 "V-Half async T = 2 --sequence-parallel x D = 2 --check" "$WORK/vbh" $G --tensor-parallel 2 $SP --data-parallel 2 --check -q
  expect_grep "^check: passed" "vocabulary + sequence parallel: check passes"
else fail "build the vocabulary schedules"; fi
finish
