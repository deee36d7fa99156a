#!/bin/sh
# dropout.sh: the gpt model's dropout (--hidden-dropout, --attention-dropout;
# runtime/dropout.h, runtime/model_gpt.c; docs/models.md "Dropout"). The masks come from
# a hash of (seed, step, microbatch, layer, site, element), so every check is exact
# where the computation is:
#  - rate 0 is the run without the flags, bit for bit (1F1B, --tensor-parallel 2
#    --sequence-parallel);
#  - each rate alone changes the losses; with both at 0.1 the loss falls over the run;
#  - --check (the one-device reference regenerates the masks) passes: 1F1B, T = 2 with
#    sequence parallelism, --data-parallel 2 (each replica's microbatches are global
#    ones), Vocab-1 (the embedding's dropout after the vocabulary all-reduce), ZB-V
#    (two stages a device), PipeOffload (offloaded and reloaded activations), and under
#    mpirun when MPI is built;
#    Vocab-1's losses are 1F1B's;
#  - recomputation (whole stages, and 2 of 4 layers) gives the losses of the run
#    without it, bit for bit (the rebuilt F draws the same masks), ZB-H1 (B and W
#    apart) those of 1F1B, and T = 2 and T = 2 with sequence parallelism T = 1's
#    within 1e-6 (the masks follow the global token and head);
#  - a checkpoint resumes with the uninterrupted losses (the masks' counter is the
#    global step); another rate on --load is refused naming the flag; the index
#    records the rates; --json's layer shows them;
#  - --val-data evaluates without dropout: at --lr 0 its losses with dropout on are
#    those of the run without;
#  - nothing is stored for the masks: --json's peak activation bytes are the run's
#    without dropout;
#  - bad rates, and the flags on the mlp model, are refused (exit 2) naming the flag;
#    --no-compute runs with them;
#  - the CUDA backend under the emulator (when built): --check passes with dropout, its
#    losses are the CPU's within BF16's 2%; PPSRT_CUDA_ATTN=cudnn with
#    --attention-dropout is refused (exit 2) naming both.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_h1.pps" -D P=2 -D m=4 || { fail "build zb_h1"; finish; }
build v "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 || { fail "build vocab_1f1b"; finish; }
A=$WORK/a; Z=$WORK/z
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01 --iterations 3"
D="--hidden-dropout 0.1 --attention-dropout 0.1"
# same LABEL A B: A's losses are B's, bit for bit (the printed 9 digits and the count)
same() {
  a=$(losses "$2"); b=$(losses "$3")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$1: $a"; else fail "$1: '$a' vs '$b'"; fi
}
differ() {
  a=$(losses "$2"); b=$(losses "$3")
  if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then pass "$1: $a vs $b"; else fail "$1: '$a' vs '$b'"; fi
}

# rate 0 = no flag
run n0 "$A" $G
run d0 "$A" $G --hidden-dropout 0 --attention-dropout 0
same "rate 0 = no dropout flags (1F1B)" "$WORK/d0" "$WORK/n0"
run tn0 "$A" $G --tensor-parallel 2 --sequence-parallel
run td0 "$A" $G --tensor-parallel 2 --sequence-parallel --hidden-dropout 0 --attention-dropout 0
same "rate 0 = no dropout flags (T = 2, sequence parallel)" "$WORK/td0" "$WORK/tn0"

# each rate changes the losses; both, the loss falls
run h1 "$A" $G --hidden-dropout 0.1
differ "--hidden-dropout 0.1 changes the losses" "$WORK/h1" "$WORK/n0"
run at1 "$A" $G --attention-dropout 0.1
differ "--attention-dropout 0.1 changes the losses" "$WORK/at1" "$WORK/n0"
run b1 "$A" $G $D --iterations 8
l=$(losses "$WORK/b1")
python3 -c "import sys; l = [float(x) for x in sys.argv[1].split()]; assert len(l) == 8 and l[-1] < l[0] - 0.5, l" "$l" 2>/dev/null \
  && pass "the loss falls with dropout 0.1: $l" || fail "the loss with dropout: $l"
grep -q '"hidden_dropout":0.1,"attention_dropout":0.1,"rope":null}' "$WORK/b1" \
  && pass "--json's layer shows the rates" || fail "--json layer: $(grep -o '"layer":{[^}]*}' "$WORK/b1")"

# --check: the reference regenerates the masks
expect_exit 0 "1F1B with dropout: --check" "$A" $G $D --check -q
expect_grep "^check: passed" "dropout: check passes"
expect_exit 0 "1F1B with dropout, T = 2 sequence parallel: --check" "$A" $G $D --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "dropout, T = 2 sequence parallel: check passes"
expect_exit 0 "1F1B with dropout, --data-parallel 2: --check" "$A" $G $D --data-parallel 2 --check -q
expect_grep "^check: passed" "dropout, 2 replicas: check passes"
expect_exit 0 "Vocab-1 1F1B with dropout: --check" "$WORK/v" $G $D --check -q
expect_grep "^check: passed" "dropout, Vocab-1: check passes"
if build zv "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4; then   # two stages a device, B and W apart
  expect_exit 0 "ZB-V with dropout: --check" "$WORK/zv" $G $D --check -q
  expect_grep "^check: passed" "dropout, ZB-V: check passes"
else fail "build zb_v"; fi
if build po "$top_srcdir/stdlib/pipeoffload.pps"; then
  expect_exit 0 "PipeOffload (offloaded activations) with dropout: --check" "$WORK/po" $G $D --check -q
  expect_grep "^check: passed" "dropout, PipeOffload: check passes"
else fail "build pipeoffload"; fi

if have_mpi; then
  expect_exit 0 "1F1B with dropout under mpirun -np 2: --check" mpirun_np 2 "$A" $G $D --check -q
  expect_grep "^check: passed" "dropout, MPI: check passes"
else skip "MPI: not built or no mpirun"; fi

# the same masks wherever the same element is computed
run t1 "$A" $G $D
run t2 "$A" $G $D --tensor-parallel 2
close "dropout: T = 2 = T = 1" "$WORK/t2" "$WORK/t1"
run t2s "$A" $G $D --tensor-parallel 2 --sequence-parallel
close "dropout: T = 2 sequence parallel = T = 1" "$WORK/t2s" "$WORK/t1"
run zb "$Z" $G $D
close "dropout: ZB-H1 (B and W apart) = 1F1B" "$WORK/zb" "$WORK/t1"
run vo "$WORK/v" $G $D
close "dropout: Vocab-1 = 1F1B" "$WORK/vo" "$WORK/t1"
CASE=$top_srcdir/tests/runtime/cases/recompute.pps
GR="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01 --iterations 2 $D"
if build rc_on "$CASE" -D lps=4 && build rc_half "$CASE" -D lps=4 -D r=0.5 && build rc_off "$CASE" -D lps=4 -D rc=false; then
  run r0 "$WORK/rc_off" $GR; run r1 "$WORK/rc_on" $GR; run rh "$WORK/rc_half" $GR
  same "dropout: whole stages recomputed = not recomputed" "$WORK/r1" "$WORK/r0"
  same "dropout: 2 of 4 layers recomputed = not recomputed" "$WORK/rh" "$WORK/r0"
else fail "build the recompute cases"; fi

# nothing stored: the peak activation bytes of the run without dropout
pk() { grep -o '"peak_bytes":\[[0-9,]*\]' "$1" | tr '\n' ' '; }
[ -n "$(pk "$WORK/n0")" ] && [ "$(pk "$WORK/t1")" = "$(pk "$WORK/n0")" ] && pass "peak activation bytes unchanged: $(pk "$WORK/t1")" \
  || fail "peak bytes with dropout '$(pk "$WORK/t1")', without '$(pk "$WORK/n0")'"

# checkpoints: resumed = uninterrupted; another rate refused
run c4 "$A" $G $D --iterations 4
run c2 "$A" $G $D --iterations 2 --save "$WORK/ck"
run cr "$A" $G $D --iterations 2 --load "$WORK/ck"
a=$(losses "$WORK/c2")$(losses "$WORK/cr"); b=$(losses "$WORK/c4")
[ -n "$b" ] && [ "$a" = "$b" ] && pass "resumed = uninterrupted with dropout: $b" || fail "resumed '$a' vs uninterrupted '$b'"
grep -q '"hidden_dropout":"0.10000000000000001"' "$WORK/ck" && grep -q '"attention_dropout":"0.10000000000000001"' "$WORK/ck" \
  && pass "the checkpoint's index records the rates" || fail "rates in the index: $(grep -o '"[a-z_]*dropout":"[^"]*"' "$WORK/ck")"
expect_exit 1 "resumed with another --hidden-dropout" "$A" $G --hidden-dropout 0.2 --attention-dropout 0.1 --load "$WORK/ck"
expect_grep "was trained with --hidden-dropout 0.10000000000000001, this run's is 0.20000000000000001" "another --hidden-dropout: named"
expect_exit 1 "resumed without --attention-dropout" "$A" $G --hidden-dropout 0.1 --load "$WORK/ck"
expect_grep "hint: run with --attention-dropout 0.10000000000000001" "without --attention-dropout: the flag named"

# --val-data: evaluation without dropout (at --lr 0 the weights stay; the validation
# losses with dropout on are those without)
python3 -c "
import random; random.seed(5)
open('$WORK/text.txt', 'w').write(''.join(random.choice('abcdefgh ') for _ in range(4000)))"
GV="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --lr 0 --iterations 2 --val-every 1 --data $WORK/text.txt --val-data $WORK/text.txt"
"$A" $GV > "$WORK/v0" 2>&1; "$A" $GV $D > "$WORK/v1" 2>&1
v0=$(grep '^val ' "$WORK/v0" | tr '\n' ' '); v1=$(grep '^val ' "$WORK/v1" | tr '\n' ' ')
t0=$(grep '^iter ' "$WORK/v0" | sed 's/ time.*//' | tr '\n' ' '); t1=$(grep '^iter ' "$WORK/v1" | sed 's/ time.*//' | tr '\n' ' ')
[ -n "$v0" ] && [ "$v0" = "$v1" ] && pass "--val-data without dropout: $v1" || fail "validation with dropout '$v1' vs without '$v0'"
[ -n "$t0" ] && [ "$t0" != "$t1" ] && pass "(while the training losses differ: $t1 vs $t0)" || fail "training losses '$t1' vs '$t0'"

# bad rates
for bad in 1 -0.1 1.5 abc nan; do
  expect_exit 2 "--hidden-dropout $bad refused" "$A" $G --hidden-dropout "$bad"
  expect_grep "hidden-dropout needs a rate from 0 to below 1" "--hidden-dropout $bad: the flag named"
done
expect_exit 2 "--attention-dropout 1 refused" "$A" $G --attention-dropout 1
expect_grep "attention-dropout needs a rate from 0 to below 1" "--attention-dropout 1: the flag named"
expect_exit 2 "dropout on the mlp model refused" "$A" --model mlp --hidden-dropout 0.1
expect_grep "hint: add --model gpt" "mlp: the gpt model named"
expect_exit 0 "--no-compute with dropout" "$A" $G $D --no-compute -q

# the CUDA backend on the emulator: the same masks (dropout.h) in its kernels
if [ -f "$EMU" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  PPS_EMU_SEED=1 PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$A" $G $D --backend cuda --check -q > "$WORK/out" 2>&1
  st=$?
  if [ $st -eq 0 ]; then expect_grep "^check: passed" "CUDA emulator with dropout: --check passes"
  else fail "CUDA emulator with dropout: exit $st"; tail -5 "$WORK/out" >&2; fi
  PPS_EMU_SEED=2 PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$A" $G $D --backend cuda --json > "$WORK/cu" 2>"$WORK/err"
  a=$(losses "$WORK/cu"); b=$(losses "$WORK/t1")
  python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 3 and all(abs(x - y) <= 2e-2 * y for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null \
    && pass "CUDA emulator (BF16) losses with dropout = the CPU's within 2%: $a vs $b" || fail "CUDA emulator '$a' vs CPU '$b'"
  PPSRT_CUDA_ATTN=cudnn LD_PRELOAD=$EMU "$A" $G $D --backend cuda > "$WORK/out" 2>&1
  st=$?
  [ $st -eq 2 ] && grep -q "attention-dropout 0.1: the fused cuDNN attention (PPSRT_CUDA_ATTN=cudnn) has no dropout" "$WORK/out" \
    && pass "PPSRT_CUDA_ATTN=cudnn with --attention-dropout refused (exit 2), both named" \
    || { fail "PPSRT_CUDA_ATTN=cudnn with --attention-dropout: exit $st"; tail -3 "$WORK/out" >&2; }
else skip "the CUDA emulator is not built"; fi
finish
