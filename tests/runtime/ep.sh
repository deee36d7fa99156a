#!/bin/sh
# ep.sh: --expert-parallel X (runtime/ep.c, moe.c; Megatron-LM's expert model parallelism
# with the allgather dispatcher): replica r = q X + j holds experts [j E/X, (j+1) E/X).
#  - the losses at X = 2 (D = 2), X = 2 and X = 4 (D = 4) equal X = 1's at the same D
#    within 1e-6 (CPU, F32), with Adam and --clip-grad (the same gradient norms: every
#    expert counted once), on 1F1B and on a V shape (ZB-V), GPT's and Llama's layer;
#  - --check passes at X = 2 (with T = 2, with --sequence-parallel, on ZB-V at D = 4,
#    PipeOffload (the grown entry offloaded and reloaded), Vocab-1 at P = 4,
#    with --context-parallel 2, under mpirun -np 4), and fails, naming the tensor, when
#    a gradient of an expert that only EP rank 1 holds is scaled (PPSRT_FAULT);
#  - a checkpoint saved at X = 2 holds every expert under the X = 1 names and resumes at
#    X = 1 with the uninterrupted losses, and the reverse; also saved at X = 2 with T = 2;
#  - --json: layout.expert_parallel, and a rank's expert parameters are 1/X of X = 1's
#    (the dense ones unchanged); the saved MoE entry grows by (X - 1) N K (fw + f + h)
#    activation bytes (hpre, hact, eout of X N K rows, docs/models.md);
#  - --distributed-optimizer: the experts' state sharded over the expert-data-parallel
#    group (D = 4, X = 2: 2 ranks; D = 2, X = 2: 1 rank, unsharded): X = 1's losses and
#    norms, --check (with T = 2, and under mpirun -np 8), a checkpoint resumed at X = 1;
#  - the refusals (exit 2, the reason named).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build po "$top_srcdir/stdlib/pipeoffload.pps" -D P=2 -D m=4 || { fail "build pipeoffload"; finish; }
build vo "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 || { fail "build vocab_1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
L="$M --arch llama --ffn-hidden 24"

# the losses and gradient norms of X = 1 at the same D
run d2x1 "$A" $M --data-parallel 2 --iterations 4 --clip-grad 0.5
run d2x2 "$A" $M --data-parallel 2 --iterations 4 --clip-grad 0.5 --expert-parallel 2
close "D = 2: X = 2 = X = 1" "$WORK/d2x2" "$WORK/d2x1"
norms "D = 2: X = 2's gradient norms = X = 1's" "$WORK/d2x2" "$WORK/d2x1" 1e-5
run d4x1 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5
run d4x2 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5 --expert-parallel 2
run d4x4 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5 --expert-parallel 4
close "D = 4 llama: X = 2 (expert-data-parallel groups of 2) = X = 1" "$WORK/d4x2" "$WORK/d4x1"
norms "D = 4 llama: X = 2's gradient norms = X = 1's" "$WORK/d4x2" "$WORK/d4x1" 1e-5
close "D = 4 llama: X = 4 = X = 1" "$WORK/d4x4" "$WORK/d4x1"
norms "D = 4 llama: X = 4's gradient norms = X = 1's" "$WORK/d4x4" "$WORK/d4x1" 1e-5
run v1 "$WORK/z" $M --data-parallel 2 --iterations 3
run v2 "$WORK/z" $M --data-parallel 2 --iterations 3 --expert-parallel 2
close "ZB-V (a V shape) D = 2: X = 2 = X = 1" "$WORK/v2" "$WORK/v1"

# --distributed-optimizer: the experts' shards over the D/X ranks holding them
run o1 "$A" $M --data-parallel 4 --distributed-optimizer --iterations 4 --clip-grad 0.5
run o2 "$A" $M --data-parallel 4 --distributed-optimizer --iterations 4 --clip-grad 0.5 --expert-parallel 2
close "D = 4 --distributed-optimizer: X = 2 = X = 1" "$WORK/o2" "$WORK/o1"
norms "D = 4 --distributed-optimizer: X = 2's gradient norms = X = 1's" "$WORK/o2" "$WORK/o1" 1e-5
run o3 "$A" $M --data-parallel 2 --distributed-optimizer --iterations 4 --clip-grad 0.5
run o4 "$A" $M --data-parallel 2 --distributed-optimizer --iterations 4 --clip-grad 0.5 --expert-parallel 2
close "D = 2 --distributed-optimizer: X = 2 (the experts' state on one rank) = X = 1" "$WORK/o4" "$WORK/o3"
norms "D = 2 --distributed-optimizer: X = 2's gradient norms = X = 1's" "$WORK/o4" "$WORK/o3" 1e-5
expect_exit 0 "D = 4 X = 2 T = 2 --distributed-optimizer --check" "$A" $M --data-parallel 4 --expert-parallel 2 \
  --tensor-parallel 2 --distributed-optimizer --check -q
expect_grep "^check: passed" "D = 4, X = 2, T = 2, distributed optimizer: check passes"
expect_exit 0 "D = 2 X = 2 --distributed-optimizer --check" "$A" $M --data-parallel 2 --expert-parallel 2 --distributed-optimizer --check -q
expect_grep "^check: passed" "D = 2, X = 2, distributed optimizer: check passes"
O="$M --data-parallel 4 --distributed-optimizer"
run ofull "$A" $O --iterations 4 --expert-parallel 2
expect_exit 0 "save at X = 2 --distributed-optimizer" "$A" $O --iterations 2 --expert-parallel 2 -q --save "$WORK/ko"
run or1 "$A" $O --iterations 2 --load "$WORK/ko"
python3 - "$WORK/ofull" "$WORK/or1" <<'PY' && pass "--distributed-optimizer: X = 2's checkpoint resumes at X = 1 with the uninterrupted losses" || fail "distopt resume: $(losses "$WORK/ofull") / $(losses "$WORK/or1")"
import json, sys
f, r = [[it["loss"] for it in json.load(open(p))["iterations"]] for p in sys.argv[1:3]]
assert len(r) == 2 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(r, f[2:])), (f, r)
PY

# --check
expect_exit 0 "X = 2 --check" "$A" $M --data-parallel 2 --expert-parallel 2 --check -q
expect_grep "^check: passed" "X = 2: check passes"
expect_exit 0 "X = 2, T = 2 --check" "$A" $M --data-parallel 2 --expert-parallel 2 --tensor-parallel 2 --check -q
expect_grep "^check: passed" "X = 2, T = 2: check passes"
expect_exit 0 "X = 2, T = 2 --sequence-parallel llama --check" "$A" $L --data-parallel 2 --expert-parallel 2 \
  --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "X = 2, T = 2, SP: check passes"
expect_exit 0 "ZB-V D = 4 X = 2 --check" "$WORK/z" $M --data-parallel 4 --expert-parallel 2 --check -q
expect_grep "^check: passed" "ZB-V, D = 4, X = 2: check passes"
for s in po vo; do
  expect_exit 0 "$s X = 2 --check" "$WORK/$s" $M --data-parallel 2 --expert-parallel 2 --check -q
  expect_grep "^check: passed" "$s, X = 2: check passes"
done
# (the load-balancing loss counts the context group's tokens: the whole sequences')
expect_exit 0 "X = 2, C = 2 --check" "$A" $M --data-parallel 2 --expert-parallel 2 --context-parallel 2 --check -q
expect_grep "^check: passed" "X = 2, C = 2: check passes"
run c1 "$A" $M --data-parallel 2 --context-parallel 2 --iterations 3
run c2 "$A" $M --data-parallel 2 --context-parallel 2 --iterations 3 --expert-parallel 2
close "C = 2 D = 2: X = 2 = X = 1" "$WORK/c2" "$WORK/c1"
expect_exit 1 "a wrong gradient of expert 3 (EP rank 1's) fails --check" env "PPSRT_FAULT=grad=s1.l0.moe.e3.fc.w*1.001" \
  "$A" $M --data-parallel 2 --expert-parallel 2 --check -q
expect_grep "grad s1.l0.moe.e3.fc.w .*DIFFERS" "the wrong tensor named"
if have_mpi; then
  expect_exit 0 "mpirun -np 4 X = 2 --check" mpirun_np 4 "$A" $M --data-parallel 2 --expert-parallel 2 --transport mpi --check -q
  expect_grep "^check: passed" "MPI, X = 2: check passes"
  expect_exit 0 "mpirun -np 8 D = 4 X = 2 --distributed-optimizer --check" mpirun_np 8 "$A" $M --data-parallel 4 \
    --expert-parallel 2 --distributed-optimizer --transport mpi --check -q
  expect_grep "^check: passed" "MPI, X = 2, distributed optimizer: check passes"
else skip "--expert-parallel under MPI (libppsrt without MPI, or no mpirun)"; fi

# checkpoints: the same files at any X
S="$M --data-parallel 2"
run full "$A" $S --iterations 4 --expert-parallel 2
expect_exit 0 "save at X = 2" "$A" $S --iterations 2 --expert-parallel 2 -q --save "$WORK/k2"
expect_exit 0 "save at X = 1" "$A" $S --iterations 2 -q --save "$WORK/k1"
# (the files compared after a step at --lr 0: the same weights, the moments of the same gradients)
expect_exit 0 "save at X = 2, --lr 0" "$A" $S --iterations 1 --lr 0 --expert-parallel 2 -q --save "$WORK/s2"
expect_exit 0 "save at X = 1, --lr 0" "$A" $S --iterations 1 --lr 0 -q --save "$WORK/s1"
run r1 "$A" $S --iterations 2 --load "$WORK/k2"
run r2 "$A" $S --iterations 2 --load "$WORK/k1" --expert-parallel 2
python3 - "$WORK" <<'PY' && pass "X = 2's checkpoint: X = 1's tensors, shapes and values" || fail "X = 2's checkpoint differs from X = 1's"
import glob, json, struct, sys
def tensors(base):
    out = {}
    for f in glob.glob(base + ".*.safetensors"):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]; h = json.loads(fh.read(n)); data = fh.read()
        for k, v in h.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = (v["shape"], struct.unpack("<%df" % ((b - a) // 4), data[a:b]))
    return out
t2, t1 = tensors(sys.argv[1] + "/s2"), tensors(sys.argv[1] + "/s1")
assert sorted(t2) == sorted(t1) and any(".moe.e3." in k for k in t2), (sorted(set(t2) ^ set(t1)))
for k in t1:
    assert t2[k][0] == t1[k][0], k
    assert all(abs(x - y) <= 1e-5 * (1 + abs(y)) for x, y in zip(t2[k][1], t1[k][1])), k
PY
python3 - "$WORK/full" "$WORK/r1" "$WORK/r2" <<'PY' && pass "X = 2's checkpoint resumes at X = 1 and X = 1's at X = 2 with the uninterrupted losses" || fail "resumed losses: $(losses "$WORK/full") / $(losses "$WORK/r1") / $(losses "$WORK/r2")"
import json, sys
f, r1, r2 = [[it["loss"] for it in json.load(open(p))["iterations"]] for p in sys.argv[1:4]]
for r in (r1, r2):
    assert len(r) == 2 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(r, f[2:])), (f, r)
PY
run tfull "$A" $S --iterations 4 --expert-parallel 2 --tensor-parallel 2
expect_exit 0 "save at X = 2, T = 2" "$A" $S --iterations 2 --expert-parallel 2 --tensor-parallel 2 -q --save "$WORK/kt"
run tr1 "$A" $S --iterations 2 --load "$WORK/kt"
python3 - "$WORK/tfull" "$WORK/tr1" <<'PY' && pass "X = 2, T = 2's checkpoint (experts gathered over both groups) resumes at X = 1, T = 1" || fail "X = 2 T = 2 resume: $(losses "$WORK/tfull") / $(losses "$WORK/tr1")"
import json, sys
f, r = [[it["loss"] for it in json.load(open(p))["iterations"]] for p in sys.argv[1:3]]
assert len(r) == 2 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(r, f[2:])), (f, r)
PY

# --json: the layout, a rank's expert parameters (1/X), the saved entry's growth
python3 - "$WORK/d4x1" "$WORK/d4x2" "$WORK/d4x4" "$WORK/d2x1" "$WORK/d2x2" <<'PY' && pass "--json: expert_parallel; a rank's expert parameters 1/X, the dense ones the same; the MoE entry grows by (X-1) N K (fw + f + h) bytes" || fail "--json parameters / activation bytes"
import json, sys
j = [json.load(open(p)) for p in sys.argv[1:]]
for d, X in zip(j[:3], (1, 2, 4)):
    assert d["layout"]["expert_parallel"] == X, d["layout"]
    for a, b in zip(j[0]["per_device"], d["per_device"]):
        assert b["expert_parameters"] * X == a["expert_parameters"] > 0, (a, b)
        assert b["parameters"] - b["expert_parameters"] == a["parameters"] - a["expert_parameters"], (a, b)
# GPT's layer: N = 4 tokens (seq 4 x micro-batch 1), K = 2, h = 16, f = fw = 64 (4h), F32;
# each of hpre, hact, eout holds X N K rows (rounded up to 256 B: exact here)
N, K, h, f, fw, es = 4, 2, 16, 64, 64, 4
grow = N * K * (fw + f + h) * es
for a, b in zip(j[3]["iterations"], j[4]["iterations"]):
    for d in range(2):
        kept = a["peak_units"][d]   # microbatches a device keeps at its peak (1 layer a stage)
        assert b["peak_bytes"][d] - a["peak_bytes"][d] == kept * grow, (a["peak_bytes"], b["peak_bytes"], kept, grow)
PY

# refusals
expect_exit 2 "--expert-parallel 0" "$A" $M --data-parallel 2 --expert-parallel 0
expect_grep "expert-parallel needs a group size from 1" "X < 1 refused"
expect_exit 2 "X = 2 without experts" "$A" $G --data-parallel 2 --expert-parallel 2
expect_grep "expert-parallel 2 splits the experts.*add --num-experts" "no experts: refused"
expect_exit 2 "X = 2 at D = 3" "$A" $M --data-parallel 3 --expert-parallel 2
expect_grep "expert-parallel 2 must divide --data-parallel 3" "X not dividing D refused"
expect_exit 2 "X = 2 with E = 3" "$A" $G --num-experts 3 --data-parallel 2 --expert-parallel 2
expect_grep "expert-parallel 2 must divide --num-experts 3" "X not dividing E refused"
finish
