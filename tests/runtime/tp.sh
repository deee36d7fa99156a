#!/bin/sh
# tp.sh: --tensor-parallel T (runtime/model_gpt.c tp_slice and gemm_tp_sum,
# runtime/replica.c): each device's gpt layers split over T ranks as Megatron-LM splits
# them (heads and key/value groups, MLP columns; two all-reduces in F and two in B a
# layer), the input and output layers by vocabulary rows (the embeddings summed over the
# group, the softmax's statistics combined). Against independent figures:
#  - the losses of T = 2 and T = 4 equal T = 1's within 1e-6 relative (the same model:
#    the slices are initialised from the full tensors' element indices), 1F1B and a V
#    shape (two stages a device), with Adam and --clip-grad (the same gradient norm);
#  - --check (one whole-layer device) passes at T = 2 and 4, with --data-parallel 2 and
#    the distributed optimizer, and under mpirun -np 8 (P 2 x D 2 x T 2);
#  - each device keeps exactly the activation bytes the split saves (computed here from
#    the sizes: Q K V, the attention output, the MLP's two 4h-wide buffers, the softmax
#    statistics of its heads), the last stage 1/T of the logits' gradient;
#  - checkpoints hold whole tensors: one saved at T = 2 has the shapes of T = 1's and
#    values within 1e-5, and resumes at T = 1 or 2 with the uninterrupted losses;
#  - vocabulary-parallel schedules (Vocab-1, Vocab-2, V-Half async on the lanes): the
#    losses equal T = 1's; --check with 2 replicas and the distributed optimizer, and
#    under mpirun -np 4;
#  - --val-data's losses at T = 2 equal T = 1's, alone and with 2 replicas;
#  - one tensor rank failing alone (--die-at D:OP:T) stops the others at once, none
#    waiting in the group's all-reduce for --timeout;
#  - what is not supported is refused (exit 2) with the reason.
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build v "$top_srcdir/stdlib/1f1b_v.pps" -D P=2 -D m=4 || { fail "build 1f1b_v"; finish; }
A=$WORK/a; V=$WORK/v
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
G4="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
. "$(dirname "$0")/split_lib.sh"

run a1 "$A" $G --iterations 4 --clip-grad 0.5
run a2 "$A" $G --iterations 4 --clip-grad 0.5 --tensor-parallel 2
close "1F1B: T = 2 = T = 1 (Adam, --clip-grad)" "$WORK/a2" "$WORK/a1"
norms "the gradient norm of the slices = the whole tensors'" "$WORK/a2" "$WORK/a1"
grep -q '"layout":{"devices":2,"data_parallel":1,"context_parallel":1,"tensor_parallel":2,"expert_parallel":1,"ranks":4,' "$WORK/a2" && pass "JSON layout: 2 x 1 x 2 = 4 ranks" \
  || fail "JSON layout: $(grep -o '"layout":{[^}]*}' "$WORK/a2")"
run a4 "$A" $G4 --iterations 3
run a44 "$A" $G4 --iterations 3 --tensor-parallel 4
close "1F1B: T = 4 = T = 1 (4 key/value groups)" "$WORK/a44" "$WORK/a4"
run v1 "$V" $G --iterations 3
run v2 "$V" $G --iterations 3 --tensor-parallel 2
close "V shape (two stages a device): T = 2 = T = 1" "$WORK/v2" "$WORK/v1"

# --check against one device with whole layers
expect_exit 0 "1F1B T = 2 --check" "$A" $G --tensor-parallel 2 --check -q
expect_grep "^check: passed" "T = 2: check passes"
[ "$(grep -c '^check: device [01] (tensor rank [01]): .*: match' "$WORK/out")" = 4 ] && pass "every tensor rank of every device compared its slices" \
  || fail "check lines: $(grep -c '^check: device' "$WORK/out")"
expect_exit 0 "1F1B T = 4 --check" "$A" $G4 --tensor-parallel 4 --check -q
expect_grep "^check: passed" "T = 4: check passes"
expect_exit 0 "V shape T = 2 --check" "$V" $G --tensor-parallel 2 --check -q
expect_grep "^check: passed" "V shape T = 2: check passes"
expect_exit 0 "T = 2 x --data-parallel 3 --distributed-optimizer --check" "$A" $G --tensor-parallel 2 --data-parallel 3 --distributed-optimizer --check -q
expect_grep "^check: passed" "T = 2 x D = 3, distributed optimizer: check passes"
# a planted fault in one slice's gradient is seen (PPSRT_FAULT scales a tensor's gradient)
expect_exit 1 "a wrong slice gradient fails --check" env "PPSRT_FAULT=grad=s1.l0.fc.w*1.001" "$A" $G --tensor-parallel 2 --check -q
expect_grep "grad s1.l0.fc.w .*DIFFERS" "the wrong slice named"

# activation memory: F of a layer keeps Q K V, the attention output and the MLP's two
# buffers, and the softmax statistics, only for this rank's heads and columns
python3 - "$WORK/a1" "$WORK/a2" <<'PY' && pass "device 0 keeps exactly the bytes the split saves" || fail "activation bytes under T = 2"
import json, sys
d1, d2 = [json.load(open(f)) for f in sys.argv[1:3]]
N, h, H, G, s, es, T = 4, 16, 4, 2, 4, 4, 2          # tokens, hidden, heads, kv groups, seq, F32, T
hd = h // H
def layer(t):
    q = (H // t + 2 * G // t) * hd
    return N * q * es + 1 * (H // t) * s * 4 + N * (H // t) * hd * es + 2 * N * (4 * h // t) * es
a, b = d1["per_device"][0], d2["per_device"][0]
units = a["peak_units"]
want = a["resident_peak_bytes"] - units * (layer(1) - layer(T))   # one layer a stage
got = b["resident_peak_bytes"]
assert units == b["peak_units"] == 2 and got == want, (got, want, units)
PY
# the last stage (device 1, one unit) also keeps the logits' gradient of its V/T
# vocabulary rows only (the output layer split by vocabulary over the group)
python3 - "$WORK/a1" "$WORK/a2" <<'PY' && pass "device 1 keeps its layer's split and 1/T of the logits' gradient" || fail "last stage's activation bytes under T = 2"
import json, sys
d1, d2 = [json.load(open(f)) for f in sys.argv[1:3]]
N, h, H, G, s, es, T, V = 4, 16, 4, 2, 4, 4, 2, 32
hd = h // H
def layer(t):
    q = (H // t + 2 * G // t) * hd
    return N * q * es + 1 * (H // t) * s * 4 + N * (H // t) * hd * es + 2 * N * (4 * h // t) * es
a, b = d1["per_device"][1], d2["per_device"][1]
want = a["resident_peak_bytes"] - (layer(1) - layer(T)) - N * (V - V // T) * es
assert a["peak_units"] == b["peak_units"] == 1 and b["resident_peak_bytes"] == want, (b["resident_peak_bytes"], want)
PY

# checkpoints: whole tensors, loadable at any T
# (with SGD: Adam turns the rounding noise of a gradient that is zero in exact
# arithmetic, the key bias's, into steps of the learning rate)
GS=$(echo "$G" | sed 's/--optimizer adam/--optimizer sgd/')
run s2 "$A" $GS --iterations 2 --tensor-parallel 2 --save "$WORK/cs2"
run s1 "$A" $GS --iterations 2 --save "$WORK/cs1"
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK" <<'PY' && pass "a checkpoint saved at T = 2 holds T = 1's tensors (shapes equal, values within 1e-5)" || fail "checkpoint tensors at T = 2"
import sys
from ckpt_tensors import load
a, b = load(sys.argv[1] + "/cs2"), load(sys.argv[1] + "/cs1")
assert sorted(a) == sorted(b) and len(a) > 20, (len(a), len(b))
for k in a:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    assert max(abs(x - y) for x, y in zip(a[k][1], b[k][1])) <= 1e-5, k
PY
run c2 "$A" $G --iterations 2 --tensor-parallel 2 --save "$WORK/ck2"
run f4 "$A" $G --iterations 4
for t in 1 2; do
  run r$t "$A" $G --iterations 2 --load "$WORK/ck2" --tensor-parallel $t
  [ "$(losses "$WORK/f4" | cut -d' ' -f3-4)" != "" ] || fail "4 iterations"
  printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/f4" | sed -n 3,4p)" > "$WORK/f4b"
  close "saved at T = 2, resumed at T = $t: the uninterrupted iterations 3-4" "$WORK/r$t" "$WORK/f4b"
done

if have_mpi; then
  expect_exit 0 "mpirun -np 8: P 2 x D 2 x T 2 --check" mpirun_np 8 "$A" $G --tensor-parallel 2 --data-parallel 2 --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "--tensor-parallel under MPI (libppsrt without MPI, or no mpirun)"; fi

# refused, with the reason
expect_exit 2 "--tensor-parallel 3 with 2 key/value groups" "$A" $G --tensor-parallel 3
expect_grep "must divide --query-groups 2" "the groups named"
expect_exit 2 "--tensor-parallel with the mlp" "$A" --tensor-parallel 2
expect_grep "does not run with --model mlp" "the mlp named"

# --val-data: the validation model takes the whole tensors the group's slices make up;
# the validation losses equal T = 1's, alone and with 2 replicas
vals() { sed -n 's/^val .* loss \([-0-9.e+]*\) .*/\1/p' "$WORK/$1" | tr '\n' ' '; }
VD="--iterations 3 --data $top_srcdir/README.md --val-data $top_srcdir/docs/ppsc.1 --val-every 2 --vocab 256"
for rep in 1 2; do
  for t in 1 2; do
    "$A" $G $VD --data-parallel $rep --tensor-parallel $t > "$WORK/val$rep$t" 2>"$WORK/err" || fail "--val-data D = $rep T = $t: exit $?: $(cat "$WORK/err")"
  done
  a=$(vals val${rep}1); b=$(vals val${rep}2)
  if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
  then pass "--val-data, D = $rep: T = 2's validation losses equal T = 1's: $b"; else fail "--val-data, D = $rep: T = 1 '$a', T = 2 '$b'"; fi
done
expect_exit 2 "--tensor-parallel 0" "$A" $G --tensor-parallel 0
expect_exit 2 "--tensor-parallel 2 with --vocab 33" "$A" $G --tensor-parallel 2 --vocab 33
expect_grep "2 must divide them" "the vocabulary rows named"

# --trace and --profile with P 2 x D 2 x T 2: a process per world rank in the trace,
# named by device, replica and tensor rank, each with its device's events (as many as
# the device's at D = T = 1); the profile counts every rank's passes (D T times T = 1's)
trace_ranks() {   # FILE: "pid:name:events" per process, in pid order
  python3 -c "
import json, sys, collections
d = json.load(open(sys.argv[1]))
names = {e['pid']: e['args']['name'] for e in d['traceEvents'] if e['name'] == 'process_name'}
n = collections.Counter(e['pid'] for e in d['traceEvents'] if e['ph'] == 'X')
print(' '.join('%d:%s:%d' % (p, names[p].replace(' ', '_'), n[p]) for p in sorted(names)))" "$1"
}
"$A" $G --iterations 2 -q --trace "$WORK/t1.json" --profile "$WORK/p1.txt" || fail "--trace at T = 1"
"$A" $G --iterations 2 -q --trace "$WORK/t8.json" --profile "$WORK/p8.txt" --tensor-parallel 2 --data-parallel 2 || fail "--trace at D = 2 x T = 2"
want=$(trace_ranks "$WORK/t1.json" | python3 -c "
import sys
n = {int(x.split(':')[0]): int(x.split(':')[2]) for x in sys.stdin.read().split()}
print(' '.join('%d:device_%d_(replica_%d,_tensor_rank_%d):%d' % (w, w // 2 % 2, w // 4, w % 2, n[w // 2 % 2]) for w in range(8)))")
got=$(trace_ranks "$WORK/t8.json")
[ -n "$got" ] && [ "$got" = "$want" ] && pass "--trace D = 2 x T = 2: 8 processes, each its device's events: $got" || fail "--trace D = 2 x T = 2: '$got', expected '$want'"
cnt() { awk '!/^#/ { printf "%s/%s/%s ", $1, $2, $5 }' "$1"; }
want=$(awk '!/^#/ { printf "%s/%s/%s ", $1, $2, $5 * 4 }' "$WORK/p1.txt")
[ -n "$want" ] && [ "$(cnt "$WORK/p8.txt")" = "$want" ] && pass "--profile D = 2 x T = 2 counts every rank's passes: $want" || fail "--profile counts '$(cnt "$WORK/p8.txt")', expected '$want'"
if have_mpi; then
  expect_exit 0 "--trace under mpirun -np 8 (P 2 x D 2 x T 2)" mpirun_np 8 "$A" $G --iterations 2 -q --trace "$WORK/tm.json" --tensor-parallel 2 --data-parallel 2
  got=$(trace_ranks "$WORK/tm.json")
  [ -n "$got" ] && [ "$got" = "$(trace_ranks "$WORK/t8.json")" ] && pass "MPI: world rank 0 wrote every rank's events" || fail "MPI --trace: '$got'"
fi
expect_exit 0 "--no-compute with D = 2 x T = 2" "$A" $G --iterations 2 -q --no-compute --tensor-parallel 2 --data-parallel 2

# one tensor rank failing alone stops its group at once (the group's transport is
# aborted with the pipeline's), not after --timeout in the group's next all-reduce
expect_exit 1 "tensor rank 1 of device 1 failing alone" timeout 60 "$A" $G --tensor-parallel 2 --iterations 2 -q --die-at 1:2:1 --timeout 30
expect_grep "device 1 (tensor rank 1): op #2 .*injected failure (--die-at 1:2:1)" "the failing rank is named with its tensor rank"
expect_exit 2 "--die-at with a tensor rank that is not a number" "$A" $G --tensor-parallel 2 --die-at 1:2:x
expect_grep "needs RANK:OP or RANK:OP:TENSOR_RANK (whole numbers from 0), got '1:2:x'" "the value named"
expect_exit 2 "--die-at a tensor rank past the group" "$A" $G --tensor-parallel 2 --die-at 1:2:2
expect_grep "tensor rank 2 does not exist (tensor ranks 0..1, --tensor-parallel 2)" "the ranks named"
expect_exit 2 "--die-at a device past the schedule's" "$A" $G --die-at 2:0
expect_grep "device 2 does not exist (the schedule's devices are 0..1)" "the devices named"
grep -q "waited" "$WORK/out" && fail "a rank of the group waited for the failed one: $(grep waited "$WORK/out" | head -1)" || pass "no rank waited for --timeout"

# vocabulary-parallel schedules: each (replica, tensor rank) pipeline runs its own
# vocabulary collectives (its view of the world's and of the lane's transports); the
# layers split as above. The losses equal T = 1's; --check passes with 2 replicas.
if build vb1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 && build vb2 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2 &&
   build vbh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true; then
  for v in vb1 vb2 vbh; do
    run ${v}t1 "$WORK/$v" $G --iterations 3
    run ${v}t2 "$WORK/$v" $G --iterations 3 --tensor-parallel 2
    close "$v: T = 2's losses equal T = 1's" "$WORK/${v}t2" "$WORK/${v}t1"
  done
  grep -q '"collectives":"async"' "$WORK/vbht2" && pass "V-Half async at T = 2: on the collective lanes" || fail "V-Half async at T = 2: not on the lanes"
  expect_exit 0 "V-Half async T = 2 x D = 2 --distributed-optimizer --check" "$WORK/vbh" $G --tensor-parallel 2 --data-parallel 2 --distributed-optimizer --check -q
  expect_grep "^check: passed" "vocabulary + tensor + data parallel: check passes"
  if have_mpi; then
    expect_exit 0 "mpirun -np 4: Vocab-2 P 2 x T 2 --check" mpirun_np 4 "$WORK/vb2" $G --tensor-parallel 2 --check -q
    expect_grep "^check: passed" "MPI Vocab-2 T = 2: check passes"
  fi
else fail "build the vocabulary schedules"; fi
finish
