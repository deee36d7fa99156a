#!/bin/sh
# vocab_tp.sh: vocabulary-parallel schedules (Vocab-1, Vocab-2, V-Half `vocab async` on
# the collective lanes) under --tensor-parallel T (runtime/model_gpt.c, vtp): tensor
# rank t of device p holds rows [p V/P + t V/(P T), + V/(P T)) of the input embedding
# and of the output layer, and IF, S and T sum or combine over the group what the
# pipeline's vocabulary collectives then combine over the P devices. Against
# independent figures:
#  - the losses of T = 2 and T = 4 equal T = 1's within 1e-6 relative, with Adam and
#    --clip-grad (the same gradient norms); at T = 2 also with tied embeddings,
#    --sequence-parallel, and 2 replicas with the distributed optimizer;
#  - --check (one whole device: the rows are slices of the whole tensors) passes at
#    T = 2 and 4, with tied embeddings, --sequence-parallel, --data-parallel 2 and the
#    distributed optimizer, --context-parallel 2, under mpirun -np 4; every (device,
#    tensor rank) compares its slices; a wrong slice gradient (PPSRT_FAULT) fails it,
#    naming the tensor; --val-data's losses equal T = 1's;
#  - memory per tensor rank, computed here from the sizes: the parameters (the check
#    lines' counts: the layer's split, V/(P T) rows of each vocabulary matrix, the
#    position table whole), equal to what `ppsc sim` counts for hardware
#    tensor_parallel (static bytes, and the vocabulary rows' gradient bytes); the
#    activation peak (one microbatch: S's logits are N V/(P T), its input N h whole);
#  - checkpoints are the T = 1 files (each device's rows, sliced as at T = 1): saved at
#    T = 2 and at T = 1 they hold the same tensors, and either resumes at T = 1, 2, 4
#    with the uninterrupted losses;
#  - T must divide each device's V/P rows: refused (exit 2) with the reason.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
S=$top_srcdir/stdlib
build vb1 "$S/vocab_1f1b.pps" -D P=2 -D m=4 || { fail "build Vocab-1"; finish; }
build vb2 "$S/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2 || { fail "build Vocab-2"; finish; }
build vbh "$S/vocab_v_half.pps" -D P=2 -D m=4 -D async=true || { fail "build V-Half async"; finish; }
build vm1 "$S/vocab_1f1b.pps" -D P=2 -D m=1 || { fail "build Vocab-1 m = 1"; finish; }
# (4 key/value groups: T = 4 takes one each; V = 32: 8 rows a tensor rank at P 2 x T 2)
G="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 --vocab 32 --optimizer adam --lr 0.01"

# losses and gradient norms at T = 1, 2, 4
for v in vb1 vb2 vbh; do
  run ${v}1 "$WORK/$v" $G --iterations 4 --clip-grad 0.5
  for t in 2 4; do
    run ${v}$t "$WORK/$v" $G --iterations 4 --clip-grad 0.5 --tensor-parallel $t
    close "$v: T = $t's losses equal T = 1's (Adam, --clip-grad)" "$WORK/${v}$t" "$WORK/${v}1"
    norms "$v: T = $t's gradient norms equal T = 1's" "$WORK/${v}$t" "$WORK/${v}1"
  done
done
# tied embeddings, --sequence-parallel, 2 replicas with the distributed optimizer: T = 2's losses
for x in "--embeddings tied" "--sequence-parallel" "--data-parallel 2 --distributed-optimizer"; do
  base=$(echo "$x" | sed 's/--sequence-parallel//')
  run x1 "$WORK/vbh" $G --iterations 4 --clip-grad 0.5 $base
  run x2 "$WORK/vbh" $G --iterations 4 --clip-grad 0.5 --tensor-parallel 2 $x
  close "vbh $x: T = 2's losses equal T = 1's" "$WORK/x2" "$WORK/x1"
  norms "vbh $x: T = 2's gradient norms equal T = 1's" "$WORK/x2" "$WORK/x1"
done
grep -q '"collectives":"async"' "$WORK/vbh2" && pass "V-Half async at T = 2: on the collective lanes" || fail "V-Half async at T = 2: not on the lanes"

# --check against one whole device
for v in vb1 vb2 vbh; do
  for x in "--tensor-parallel 2" "--tensor-parallel 4" "--tensor-parallel 2 --embeddings tied" "--tensor-parallel 2 --sequence-parallel" \
           "--tensor-parallel 2 --data-parallel 2 --distributed-optimizer"; do
    expect_exit 0 "$v $x --check" "$WORK/$v" $G $x --check --iterations 2 -q
    expect_grep "^check: passed" "$v $x: check passes"
  done
done
expect_exit 0 "Vocab-2 T = 4 --check" "$WORK/vb2" $G --tensor-parallel 4 --check -q
[ "$(grep -c '^check: device [01] (tensor rank [0-3]): .* gradient values of .*: match' "$WORK/out")" = 8 ] &&
  pass "every tensor rank of every device compared its slices (8)" || fail "check lines: $(grep -c '^check: device' "$WORK/out")"
expect_exit 1 "a wrong gradient of one rank's output-layer rows fails --check" env "PPSRT_FAULT=grad=vocab.out*1.001" \
  "$WORK/vb1" $G --tensor-parallel 2 --check -q
expect_grep "grad vocab.out .*DIFFERS" "the output layer named"
if have_mpi; then
  expect_exit 0 "mpirun -np 4: V-Half async P 2 x T 2 --check" mpirun_np 4 "$WORK/vbh" $G --tensor-parallel 2 --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "vocabulary parallel x --tensor-parallel under MPI (libppsrt without MPI, or no mpirun)"; fi
# with --context-parallel 2 too (each rank's tokens; S and IF on them)
expect_exit 0 "Vocab-1 T = 2 x C = 2 --check" "$WORK/vb1" $G --seq 8 --tensor-parallel 2 --context-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "Vocab-1 T = 2 x C = 2: check passes"
# --val-data: evaluated through the split (IF, S and the forward collectives); T = 1's losses
vals() { sed -n 's/^val .* loss \([-0-9.e+]*\) .*/\1/p' "$WORK/$1" | tr '\n' ' '; }
VD="--iterations 3 --data $top_srcdir/README.md --val-data $top_srcdir/docs/ppsc.1 --val-every 2 --vocab 256"
for t in 1 2; do
  "$WORK/vb2" $G $VD --tensor-parallel $t > "$WORK/val$t" 2>"$WORK/err" || fail "--val-data T = $t: exit $?: $(cat "$WORK/err")"
done
a=$(vals val1); b=$(vals val2)
if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
then pass "--val-data: Vocab-2 T = 2's validation losses equal T = 1's: $b"; else fail "--val-data: T = 1 '$a', T = 2 '$b'"; fi

# memory, with a larger vocabulary (V = 256, one layer a stage, N = 4 tokens)
GM="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 --vocab 256"
for t in 1 2 4; do
  "$WORK/vm1" $GM --tensor-parallel $t --iterations 1 --check > "$WORK/mc$t" 2>&1 || fail "Vocab-1 m = 1 T = $t --check: $(tail -3 "$WORK/mc$t")"
  run mj$t "$WORK/vm1" $GM --tensor-parallel $t --iterations 1
done
"$PPSC" sim "$S/vocab_1f1b.pps" -D P=2 -D m=4 --model layers=2 --model hidden=16 --model heads=4 --model query_groups=4 \
  --model seq=4 --model micro_batch=1 --model vocab=256 --model dtype_bytes=4 --hardware tensor_parallel=2 \
  --hardware tp_bandwidth=1e9 --hardware data_parallel=2 --hardware dp_bandwidth=1e9 --json > "$WORK/sim.json" 2>"$WORK/err" ||
  fail "ppsc sim tensor_parallel = 2: $(cat "$WORK/err")"
# tied embeddings: one matrix, V/(P T) rows a rank
"$WORK/vm1" $GM --tensor-parallel 2 --embeddings tied --iterations 1 --check > "$WORK/mct" 2>&1 || fail "tied T = 2 --check: $(tail -3 "$WORK/mct")"
"$PPSC" sim "$S/vocab_1f1b.pps" -D P=2 -D m=4 --model layers=2 --model hidden=16 --model heads=4 --model query_groups=4 \
  --model seq=4 --model micro_batch=1 --model vocab=256 --model dtype_bytes=4 --model tie_embeddings=1 \
  --hardware tensor_parallel=2 --hardware tp_bandwidth=1e9 --json > "$WORK/simt.json" 2>"$WORK/err" || fail "ppsc sim tied: $(cat "$WORK/err")"
python3 - "$WORK" <<'PY' && pass "parameters per tensor rank: the runtime's, these sizes' and ppsc sim's agree (V/(P T) vocabulary rows; tied too)" || fail "parameters per tensor rank"
import json, re, sys
w = sys.argv[1]
h, H, G, s, V, P, F = 16, 4, 4, 4, 256, 2, 64        # hidden, heads, kv groups, seq, vocab, devices, MLP
hd = h // H
def layer(t):   # one layer's elements on a rank: QKV, FC1 (columns) and proj, FC2 (rows) split, the rest whole
    q = (H + 2 * G) * hd
    return (h * q + q + h * F + F + h * h + F * h) // t + h + h + 4 * h
def want(d, t, mats=2):
    vocab = mats * V // (P * t) * h + (s * h if d == 0 else 0)   # tok and out rows (tied: one), the position table on device 0
    return layer(t) + vocab + (2 * h if d == P - 1 else 0)       # the final norm on the last device
for t, f, k in ((1, "mc1", 2), (2, "mc2", 2), (4, "mc4", 2), (2, "mct", 1)):
    got = {}
    for line in open("%s/%s" % (w, f)):
        m = re.match(r"check: device (\d)(?: \(tensor rank (\d)\))?: (\d+) gradient values", line)
        if m: got[(int(m.group(1)), int(m.group(2) or 0))] = int(m.group(3))
    assert len(got) == P * t, got
    for (d, r), n in got.items(): assert n == want(d, t, k), (f, d, r, n, want(d, t, k))
per_param = 4 + 4 + 8                      # dtype_bytes 4: weights (the master), F32 gradients, Adam moments
for f, k in (("sim.json", 2), ("simt.json", 1)):
    for x in json.load(open(w + "/" + f))["per_device"]:
        assert x["static_bytes"] == want(x["device"], 2, k) * per_param, (f, x, want(x["device"], 2, k))
sim = json.load(open(w + "/sim.json"))
for x in sim["data_parallel"]["vocab"]:    # the vocabulary rows' F32 gradient bytes of a GPU
    d = x["device"]
    assert x["bytes"] == 4 * (2 * V // (P * 2) * h + (s * h if d == 0 else 0)), x
PY
python3 - "$WORK" <<'PY' && pass "activation peak per tensor rank: S keeps N V/(P T) logits and its N h input (one microbatch)" || fail "activation bytes per tensor rank"
import json, sys
w = sys.argv[1]
N, h, H, G, s, V, P, es = 4, 16, 4, 4, 4, 256, 2, 4
hd = h // H
def layer(t):   # what a layer's F keeps split over the group: Q K V, the softmax statistics, the attention output, the MLP's two buffers
    return N * (H + 2 * G) // t * hd * es + H // t * s * 4 + N * H // t * hd * es + 2 * N * 4 * h // t * es
d1 = json.load(open(w + "/mj1"))
for t in (2, 4):
    dt = json.load(open("%s/mj%d" % (w, t)))
    for a, b in zip(d1["per_device"], dt["per_device"]):
        # one microbatch: the peak is S's, over the stage's F (one layer): the layer's split and the logits shrink
        want = a["resident_peak_bytes"] - (layer(1) - layer(t)) - N * (V // P - V // (P * t)) * es
        assert b["resident_peak_bytes"] == want and a["peak_units"] == b["peak_units"] == 1, (t, a, b, want)
PY

# checkpoints: the files of T = 1 (SGD: see tp.sh), and resumable at any T
GS=$(echo "$G" | sed 's/--optimizer adam/--optimizer sgd/')
run s2 "$WORK/vb2" $GS --iterations 2 --tensor-parallel 2 --save "$WORK/cs2"
run s1 "$WORK/vb2" $GS --iterations 2 --save "$WORK/cs1"
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK" <<'PY' && pass "saved at T = 2: T = 1's shards (each device's rows, the same slices), values within 1e-5" || fail "checkpoint at T = 2"
import glob, json, struct, sys
w = sys.argv[1]
def shards(p):
    out = {}
    for f in sorted(glob.glob(p + ".*-of-2.safetensors")):
        b = open(f, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        hd = json.loads(b[8:8 + n])
        meta = {k: v for k, v in hd.pop("__metadata__").items() if k.startswith("slice.")}
        t = {k: (v["shape"], struct.unpack("<%df" % (len(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) // 4),
                                         b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])) for k, v in hd.items()}
        out[f.rsplit(".", 2)[1]] = (meta, t)
    return out
a, b = shards(w + "/cs2"), shards(w + "/cs1")
assert sorted(a) == sorted(b) == ["0-of-2", "1-of-2"], (sorted(a), sorted(b))
for k in a:
    (ma, ta), (mb, tb) = a[k], b[k]
    assert ma == mb and ma["slice.vocab.out"] in ("0/512", "256/512"), (ma, mb)
    assert sorted(ta) == sorted(tb), k
    for n in ta:
        assert ta[n][0] == tb[n][0], (k, n, ta[n][0], tb[n][0])
        assert max(abs(x - y) for x, y in zip(ta[n][1], tb[n][1])) <= 1e-5, (k, n)
PY
run f4 "$WORK/vb2" $G --iterations 4
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/f4" | sed -n 3,4p)" > "$WORK/f4b"
for st in 1 2; do
  run c$st "$WORK/vb2" $G --iterations 2 --tensor-parallel $st --save "$WORK/ck$st"
  for t in 1 2 4; do
    run r$st$t "$WORK/vb2" $G --iterations 2 --load "$WORK/ck$st" --tensor-parallel $t
    close "saved at T = $st, resumed at T = $t: the uninterrupted iterations 3-4" "$WORK/r$st$t" "$WORK/f4b"
  done
done

# refused: T must divide each device's V/P rows
expect_exit 2 "--tensor-parallel 4 with --vocab 36 over 2 devices" "$WORK/vb1" $G --tensor-parallel 4 --vocab 36
expect_grep "2 x 4 = 8 must divide --vocab 36" "the rows named"
expect_exit 0 "--tensor-parallel 2 with --vocab 36 over 2 devices (18 rows each, 9 a rank)" "$WORK/vb1" $G --tensor-parallel 2 --vocab 36 -q
finish
