#!/bin/sh
# ep_a2a.sh: --moe-token-dispatcher alltoall under --expert-parallel X (runtime/moe.c,
# ep.c; the transports' alltoallv; Megatron-LM's --moe-token-dispatcher-type alltoall):
# each rank sends its kept slots' rows to their experts' ranks and takes the outputs back.
#  - the losses at X = 2 (D = 2) and X = 2, 4 (D = 4, Llama's layer) equal X = 1's and the
#    allgather dispatcher's within 1e-6 (CPU, F32), with Adam and --clip-grad (the same
#    gradient norms), on 1F1B and ZB-V; with a capacity factor (probs at X = 2, position at
#    X = 4) against X = 1's with the same factor;
#  - --check passes at X = 2 and 4, with T = 2, T = 2 --sequence-parallel, C = 2,
#    PipeOffload (the entry offloaded and reloaded), whole-stage recomputation (the
#    routing and its exchange again), a capacity factor, and under mpirun
#    (X = 2 on 4 ranks, X = 4 with a capacity factor on 8); and fails, naming the tensor,
#    when a gradient of an expert only EP rank 1 holds is scaled (PPSRT_FAULT);
#  - --json: per_device ep_alltoall counts what was sent: bytes = 5 x slots x h x es (a
#    slot that leaves its rank travels in F there and back, in B there and back, in W
#    there), and with --moe-topk = --num-experts every token takes every expert, so the
#    slots that leave a rank are exactly (X - 1)/X of its N K (ppsc sim's balanced
#    assumption holds): group slots = iterations x m x layers x X x N K (X - 1)/X, at
#    X = 2 and 4; the saved entry (peak bytes) is the allgather dispatcher's;
#  - with sigmoid scores, the expert bias, a z-loss and a shared expert: X = 2 = X = 1;
#  - the refusals (exit 2, the flag named).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build po "$top_srcdir/stdlib/pipeoffload.pps" -D P=2 -D m=4 || { fail "build pipeoffload"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
L="$M --arch llama --ffn-hidden 24"
T="--moe-token-dispatcher alltoall"

# the losses and gradient norms: X = 1's and the allgather dispatcher's
run d2x1 "$A" $M --data-parallel 2 --iterations 4 --clip-grad 0.5
run d2ag "$A" $M --data-parallel 2 --iterations 4 --clip-grad 0.5 --expert-parallel 2
run d2x2 "$A" $M --data-parallel 2 --iterations 4 --clip-grad 0.5 --expert-parallel 2 $T
close "D = 2: alltoall X = 2 = X = 1" "$WORK/d2x2" "$WORK/d2x1"
close "D = 2: alltoall X = 2 = allgather X = 2" "$WORK/d2x2" "$WORK/d2ag"
norms "D = 2: alltoall X = 2's gradient norms = X = 1's" "$WORK/d2x2" "$WORK/d2x1" 1e-5
run d4x1 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5
run d4x2 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5 --expert-parallel 2 $T
run d4x4 "$A" $L --data-parallel 4 --iterations 4 --clip-grad 0.5 --expert-parallel 4 --moe-token-dispatcher-type alltoall
close "D = 4 llama: alltoall X = 2 = X = 1" "$WORK/d4x2" "$WORK/d4x1"
norms "D = 4 llama: alltoall X = 2's gradient norms = X = 1's" "$WORK/d4x2" "$WORK/d4x1" 1e-5
close "D = 4 llama: alltoall X = 4 (Megatron's flag spelling) = X = 1" "$WORK/d4x4" "$WORK/d4x1"
norms "D = 4 llama: alltoall X = 4's gradient norms = X = 1's" "$WORK/d4x4" "$WORK/d4x1" 1e-5
run v1 "$WORK/z" $M --data-parallel 2 --iterations 3
run v2 "$WORK/z" $M --data-parallel 2 --iterations 3 --expert-parallel 2 $T
close "ZB-V D = 2: alltoall X = 2 = X = 1" "$WORK/v2" "$WORK/v1"
# with the router's options and a shared expert (every MoE feature at once): sigmoid
# scores, the expert bias (its loads summed over the replicas), a z-loss and a shared
# expert; alltoall X = 2 = X = 1 on D = 2
R="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01 --moe-z-loss-coeff 0.001 --moe-shared-ffn-hidden 8"
run r1 "$A" $M $R --data-parallel 2 --iterations 4
run r2 "$A" $M $R --data-parallel 2 --iterations 4 --expert-parallel 2 $T
close "D = 2 router options + shared expert: alltoall X = 2 = X = 1" "$WORK/r2" "$WORK/r1"
# a capacity factor: each rank drops its own slots before the dispatch, as at X = 1
run k1 "$A" $M --data-parallel 2 --iterations 3 --moe-expert-capacity-factor 0.5
run k2 "$A" $M --data-parallel 2 --iterations 3 --moe-expert-capacity-factor 0.5 --expert-parallel 2 $T
close "CF 0.5 D = 2: alltoall X = 2 = X = 1" "$WORK/k2" "$WORK/k1"
run kp1 "$A" $L --data-parallel 4 --iterations 3 --moe-expert-capacity-factor 0.5 --moe-token-drop-policy position
run kp4 "$A" $L --data-parallel 4 --iterations 3 --moe-expert-capacity-factor 0.5 --moe-token-drop-policy position \
  --expert-parallel 4 $T
close "CF 0.5 position D = 4 llama: alltoall X = 4 = X = 1" "$WORK/kp4" "$WORK/kp1"

# --check
chk() {   # chk DESC PROG FLAGS...
  d=$1; shift
  expect_exit 0 "$d --check" "$@" --check -q
  expect_grep "^check: passed" "$d: check passes"
}
chk "X = 2" "$A" $M --data-parallel 2 --expert-parallel 2 $T
# (a schedule without hardware { ep_alltoall }: nothing to note, moe.sh checks the note)
grep -q "ep_alltoall" "$WORK/out" && fail "a note on ep_alltoall without the key: $(grep ep_alltoall "$WORK/out")" ||
  pass "no ep_alltoall note without the key"
chk "X = 4 llama" "$A" $L --data-parallel 4 --expert-parallel 4 $T
chk "X = 2, T = 2" "$A" $M --data-parallel 2 --expert-parallel 2 --tensor-parallel 2 $T
chk "X = 2, T = 2 --sequence-parallel llama" "$A" $L --data-parallel 2 --expert-parallel 2 --tensor-parallel 2 \
  --sequence-parallel $T
chk "X = 2, C = 2" "$A" $M --data-parallel 2 --expert-parallel 2 --context-parallel 2 $T
chk "PipeOffload X = 2" "$WORK/po" $M --data-parallel 2 --expert-parallel 2 $T
chk "X = 2 CF 0.5" "$A" $M --data-parallel 2 --expert-parallel 2 --moe-expert-capacity-factor 0.5 $T
chk "X = 4 llama CF 0.5 position" "$A" $L --data-parallel 4 --expert-parallel 4 --moe-expert-capacity-factor 0.5 \
  --moe-token-drop-policy position $T
# whole-stage recomputation: a recomputed F routes and exchanges again (the same counts)
if build rc "$top_srcdir/tests/runtime/cases/recompute.pps"; then
  "$WORK/rc" $M --data-parallel 2 --expert-parallel 2 $T --check-memory -q > "$WORK/rc.out" 2>&1
  defs=$(sed -n 's/.*write .memory stage \([0-9]\): input = \([0-9.e-]*\);.*/-D i\1=\2/p' "$WORK/rc.out" | tr '\n' ' ')
  if [ -n "$defs" ] && build rc2 "$top_srcdir/tests/runtime/cases/recompute.pps" $defs; then
    chk "recomputation X = 2" "$WORK/rc2" $M --data-parallel 2 --expert-parallel 2 $T
  else fail "build recompute.pps with the input shares ($defs)"; fi
else fail "build recompute.pps"; fi
expect_exit 1 "a wrong gradient of expert 3 (EP rank 1's) fails --check" env "PPSRT_FAULT=grad=s1.l0.moe.e3.fc.w*1.001" \
  "$A" $M --data-parallel 2 --expert-parallel 2 $T --check -q
expect_grep "grad s1.l0.moe.e3.fc.w .*DIFFERS" "the wrong tensor named"
if have_mpi; then
  chk "mpirun -np 4 X = 2" mpirun_np 4 "$A" $M --data-parallel 2 --expert-parallel 2 --transport mpi $T
  chk "mpirun -np 8 D = 4 X = 4 CF 0.5" mpirun_np 8 "$A" $L --data-parallel 4 --expert-parallel 4 \
    --moe-expert-capacity-factor 0.5 --transport mpi $T
  mpirun_np 4 "$A" $M --data-parallel 2 --expert-parallel 2 --transport mpi $T --iterations 4 --clip-grad 0.5 --json \
    > "$WORK/mpi" 2> "$WORK/err" || fail "mpirun X = 2 --json: $(cat "$WORK/err")"
  close "MPI: alltoall X = 2 = X = 1" "$WORK/mpi" "$WORK/d2x1"
else skip "--moe-token-dispatcher alltoall under MPI (libppsrt without MPI, or no mpirun)"; fi

# --json: the traffic measured, against the slots it reports and a routing whose counts are known
for X in 2 4; do
  run t$X "$A" $M --moe-topk 4 --data-parallel $X --expert-parallel $X $T --iterations 2
  run g$X "$A" $M --moe-topk 4 --data-parallel $X --expert-parallel $X --iterations 2
done
python3 - "$WORK/t2" "$WORK/t4" "$WORK/g2" "$WORK/g4" "$WORK/d2x2" <<'PY' && pass "--json ep_alltoall: bytes = 5 slots h es; top-K = E: the slots (X-1)/X of the group's N K a layer and microbatch (X = 2, 4); the entry's peak bytes the allgather dispatcher's" || fail "--json ep_alltoall"
import json, sys
t2, t4, g2, g4, d = [json.load(open(p)) for p in sys.argv[1:]]
h, es, N, K, m, layers, its = 16, 4, 4, 4, 4, 1, 2   # 1F1B P = 2 m = 4, one layer a stage
for j, X in ((t2, 2), (t4, 4)):
    for p in j["per_device"]:
        a = p["ep_alltoall"]
        assert a["bytes"] == 5 * a["slots"] * h * es, a
        assert a["slots"] == its * m * layers * X * N * K * (X - 1) // X, (X, a)
for j, g in ((t2, g2), (t4, g4)):
    assert [it["peak_bytes"] for it in j["iterations"]] == [it["peak_bytes"] for it in g["iterations"]]
    assert all("ep_alltoall" not in p for p in g["per_device"])
for p in d["per_device"]:   # top-2 routing: some slots stay, and bytes still follow the slots
    a = p["ep_alltoall"]
    assert 0 < a["slots"] <= 4 * m * 2 * N * 2 and a["bytes"] == 5 * a["slots"] * h * es, a
PY

# refusals
expect_exit 2 "--moe-token-dispatcher bogus" "$A" $M --moe-token-dispatcher bogus
expect_grep "moe-token-dispatcher needs allgather or alltoall, got 'bogus'" "a bad dispatcher refused"
expect_exit 2 "--moe-token-dispatcher without experts" "$A" $G --moe-token-dispatcher alltoall
expect_grep "moe-token-dispatcher sends the tokens of a mixture-of-experts model.*add --num-experts" "no experts: refused"
finish
