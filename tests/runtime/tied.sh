#!/bin/sh
# tied.sh: --embeddings tied (runtime/model_gpt.c tie_sync): the gpt's output layer is
# its input embedding's matrix. On one device (V shapes, vocabulary-parallel schedules,
# the --check reference) one parameter; on two (stage 0's device and the last stage's)
# an original and a copy whose gradients are summed after every iteration. Against
# independent figures:
#  - interleaved 1F1B at P = 2 (stage 0 on device 0, stage 3 on device 1: a copy) and
#    ZB-V at P = 2 (both on device 0: one matrix) are the same 4-stage model: their
#    losses, gradient norms (--clip-grad: the copy counted once) and validation losses
#    are equal within 1e-6;
#  - --check passes on 1F1B at P = 4 (two devices in between join the sum with zeros),
#    Vocab-1 (each shard's rows one matrix), with T = 2 x D = 2 and the distributed
#    optimizer, Llama's layer, and under mpirun; a planted fault in the matrix's
#    gradient fails it, naming vocab.tok (and without the sum, tried by hand, device 0's
#    vocab.tok differs from the reference by 74%);
#  - a checkpoint holds the matrix once ("embeddings":"tied", no vocab.out), resumes
#    under the other placement with the uninterrupted losses, and an untied run
#    refuses it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build il "$top_srcdir/stdlib/interleaved_1f1b.pps" -D P=2 -D m=4 || { fail "build interleaved_1f1b"; finish; }
build zv "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build a "$top_srcdir/stdlib/1f1b.pps" -D P=4 -D m=8 || { fail "build 1f1b"; finish; }
IL=$WORK/il; ZV=$WORK/zv; A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --embeddings tied"

# two placements of one model: the same figures
run i1 "$IL" $G --optimizer adam --clip-grad 0.5 --iterations 4
run z1 "$ZV" $G --optimizer adam --clip-grad 0.5 --iterations 4
close "interleaved (a copy on device 1) = ZB-V (one matrix): losses" "$WORK/i1" "$WORK/z1"
norms "interleaved = ZB-V: gradient norms (the copy counted once)" "$WORK/i1" "$WORK/z1"
run u1 "$IL" $(echo "$G" | sed 's/tied/untied/') --optimizer adam --clip-grad 0.5 --iterations 4
[ "$(losses "$WORK/u1")" != "$(losses "$WORK/i1")" ] && pass "untied embeddings train another model: $(losses "$WORK/u1")" ||
  fail "--embeddings tied changed nothing"
vals() { sed -n 's/^val .* loss \([-0-9.e+]*\) .*/\1/p' "$WORK/$1" | tr '\n' ' '; }
VD="--iterations 3 --data $top_srcdir/README.md --val-data $top_srcdir/docs/ppsc.1 --val-every 2"
"$IL" $G $VD --vocab 256 > "$WORK/vi" 2>"$WORK/err" || fail "--val-data interleaved: $(cat "$WORK/err")"
"$ZV" $G $VD --vocab 256 > "$WORK/vz" 2>"$WORK/err" || fail "--val-data ZB-V: $(cat "$WORK/err")"
a=$(vals vi); b=$(vals vz)
if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
then pass "--val-data: interleaved's validation losses equal ZB-V's: $a"; else fail "--val-data: '$a' vs '$b'"; fi

# --check
expect_exit 0 "1F1B P = 4 --check" "$A" $G --iterations 2 --check -q
expect_grep "^check: passed" "1F1B P = 4: check passes"
expect_exit 1 "a wrong gradient of the tied matrix fails --check" env "PPSRT_FAULT=grad=vocab.tok*1.001" "$A" $G --check -q
expect_grep "grad vocab.tok .*DIFFERS" "the tied matrix named"
if build v1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4; then
  expect_exit 0 "Vocab-1 --check" "$WORK/v1" $G --check -q
  expect_grep "^check: passed" "Vocab-1: check passes"
else fail "build vocab_1f1b"; fi
expect_exit 0 "T = 2 x D = 2 --distributed-optimizer --check" "$IL" $G --tensor-parallel 2 --data-parallel 2 \
  --distributed-optimizer --optimizer adam --check -q
expect_grep "^check: passed" "T = 2 x D = 2: check passes"
expect_exit 0 "--arch llama --check" "$A" $G --arch llama --check -q
expect_grep "^check: passed" "Llama's layer: check passes"
if have_mpi; then
  MPI="timeout 180 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=$MPI_ASAN $MPIRUN --oversubscribe"
  expect_exit 0 "mpirun -np 4 1F1B --check" $MPI -np 4 "$A" $G --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "tied embeddings under MPI (libppsrt without MPI, or no mpirun)"; fi

# checkpoints: the matrix once; resumed under the other placement
run c2 "$IL" $G --iterations 2 --save "$WORK/ck"
run c4 "$IL" $G --iterations 4
grep -q '"embeddings":"tied"' "$WORK/ck" && pass "the index records the tied embeddings" || fail "no embeddings field"
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck" <<'PY' && pass "vocab.tok saved once, no vocab.out" || fail "the tied matrix in the shards"
import sys
from ckpt_tensors import load
t = load(sys.argv[1])
assert "vocab.tok" in t and "vocab.out" not in t, sorted(t)
PY
run r2 "$ZV" $G --iterations 2 --load "$WORK/ck"
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/c4" | sed -n 3,4p)" > "$WORK/c4b"
close "saved under interleaved, resumed under ZB-V: the uninterrupted iterations 3-4" "$WORK/r2" "$WORK/c4b"
expect_exit 1 "an untied run refuses the checkpoint" "$ZV" $(echo "$G" | sed 's/tied/untied/') --load "$WORK/ck"
expect_grep "holds a gpt with --embeddings tied, this run's has --embeddings untied" "the flag named"
expect_exit 2 "--embeddings shared" "$IL" $G --embeddings shared
expect_grep "--embeddings needs untied or tied" "the values named"
finish
