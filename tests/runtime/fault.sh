#!/bin/sh
# fault.sh: `--check` says no. With the test-only fault hook (PPSRT_FAULT, check.c;
# docs/runtime.md) a pipeline's gradient or loss is made wrong before the comparison,
# and the check must fail (exit 1) naming what differs:
#  - CPU backend, threads transport: every tensor of the mlp and of the gpt
#    (PPSRT_FAULT=list names them), each scaled by 1.001 alone, is caught and named;
#    so is a zeroed one; a loss shifted by 1e-4 of itself is caught; vocabulary shards
#    (Vocab-1, Vocab-2: every shard of the tensor scaled) are caught; clean runs pass;
#  - the MPI transport (one process per device): a scaled tensor and a shifted loss;
#  - the CUDA backend (bf16) on the emulator (tests/gpu/emu/libppsrt_emu.so): every
#    gpt tensor zeroed, and scaled by 1.1, is caught, and a loss shifted by 2%; clean
#    runs pass;
#  - bad PPSRT_FAULT values are usage errors; a tensor name the model lacks is an error;
#  - the tolerances --check --json reports (k, k_loss) are the documented derivation's
#    for the mlp and the gpt (expect_k), so a changed formula does not pass unseen; a
#    clean run prints one loss line (rank 0's) and one line per device, each with the
#    largest relative difference and its tensor.
# Skipped parts (no MPI, no emulator) say so. PPS_FAULT_PARTS (default "cpu mpi emu")
# picks parts; "quick" is the mlp's tensors and loss on the CPU (make mutants runs it).
. "$(dirname "$0")/lib.sh"
PARTS=" ${PPS_FAULT_PARTS:-cpu mpi emu} "
has() { case "$PARTS" in *" $1 "*) return 0 ;; esac; return 1; }
part() { has "$1" && return 0; echo "skip: the $1 part (PPS_FAULT_PARTS=${PPS_FAULT_PARTS:-})"; return 1; }
SIZES="--hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q"
GPT="--model gpt --heads 2 --query-groups 1 --vocab 32 --hidden 16 --seq 4 --iterations 2 -q"

# every_tensor LABEL SCALE PROG FLAGS...: each tensor of the model, scaled alone by
# SCALE, fails the check (exit 1) and is the one named; $n tensors counted.
every_tensor() {
  label=$1 scale=$2; shift 2
  if ! PPSRT_FAULT=list "$@" > "$WORK/names" 2> "$WORK/names.err"; then
    fail "$label: PPSRT_FAULT=list"; cat "$WORK/names.err" >&2; return
  fi
  n=0 missed=""
  names=$(cat "$WORK/names")
  if [ -n "${LIMIT:-}" ]; then
    echo "skip: $label: tensors after the first $LIMIT (a sanitizer build runs several times slower)"
    names=$(echo $names | tr ' ' '\n' | head -n "$LIMIT")
  fi
  for t in $names; do
    n=$((n + 1))
    PPSRT_FAULT="grad=$t*$scale" "$@" > "$WORK/out" 2>&1
    st=$?
    if [ $st -ne 1 ] || ! grep -q "grad $t (.*DIFFERS" "$WORK/out" || ! grep -q "^check: FAILED" "$WORK/out"; then
      missed="$missed $t(exit $st)"
    fi
  done
  if [ $n -lt 2 ]; then fail "$label: only $n tensors"
  elif [ -z "$missed" ]; then pass "$label: each of $n tensors scaled by $scale caught and named"
  else fail "$label: not caught:$missed"; fi
}

# expect_k LABEL N T D PROG FLAGS...: --check --json reports the tolerances k and k_loss
# of the derivation (check.c check_k; docs/runtime.md, "--check") for a model whose
# longest F32 sum is N terms, with T tokens per iteration and D stored roundings per
# pass (F32: us = ua = 2^-24): e1 = us + ua sqrt(N), k = 2 sqrt(2 D) e1,
# k_loss = 2 sqrt(D + 1) e1 / sqrt(T). --json prints them to 9 digits: within 1e-6.
expect_k() {
  label=$1 kn=$2 kt=$3 kd=$4; shift 4
  "$@" --json > "$WORK/kj" 2>&1
  kk=$(grep -o '"k":[-0-9.e+]*,"k_loss":[-0-9.e+]*' "$WORK/kj")
  if awk -v s="$kk" -v n="$kn" -v T="$kt" -v D="$kd" 'BEGIN {
       split(s, f, /[:,]/); u = 2^-24; e1 = u + u * sqrt(n)
       k = 2 * sqrt(2 * D) * e1; kl = 2 * sqrt(D + 1) * e1 / sqrt(T)
       d1 = f[2] - k; d2 = f[4] - kl; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2
       exit !(s != "" && d1 <= 1e-6 * k && d2 <= 1e-6 * kl) }'
  then pass "$label: k and k_loss as derived (n = $kn, T = $kt, D = $kd): $kk"
  else fail "$label: --check's tolerances ($kk) are not the derivation's for n = $kn, T = $kt, D = $kd"; fi
}

# ---- CPU backend, threads transport ----
# (the quick part, which make mutants runs: the mlp's tensors and loss only)
if ! { has quick || part cpu; }; then :
elif build p "$top_srcdir/examples/1f1b.pps" -D P=4 -D m=8; then
  expect_exit 0 "clean mlp run --check" "$WORK/p" --check $SIZES
  # one loss line, first (rank 0 compares the loss), then one line per device (P = 4),
  # each counting its 72 values (w 8 x 8 and b 8 of its stage)
  if [ "$(grep -c '^check: loss ' "$WORK/out")" = 1 ] && grep -m1 '^check: ' "$WORK/out" | grep -q '^check: loss ' &&
     [ "$(grep -c '^check: device [0-3]: 72 gradient values of 2 tensors compared' "$WORK/out")" = 4 ]; then
    pass "the loss line first, four device lines of 72 values"
  else fail "check lines:"; grep '^check: ' "$WORK/out" >&2; fi
  every_tensor "cpu mlp" 1.001 "$WORK/p" --check $SIZES
  [ "$n" = 8 ] && pass "mlp P=4: 8 tensors (w, b per stage)" || fail "mlp P=4: $n tensors listed, expected 8"
  # the largest relative difference and its tensor: 0.001 on device 1 (s1.l0.w scaled),
  # "0 (all equal)" on the others (the mlp on the CPU sums in the reference's order:
  # its gradients are equal to the bit, so a tie at 0 must keep "all equal")
  PPSRT_FAULT="grad=s1.l0.w*1.001" "$WORK/p" --check $SIZES > "$WORK/out" 2>&1
  if grep -q '^check: device 1: .*max relative difference 0.001 (s1.l0.w),' "$WORK/out" &&
     [ "$(grep -c '^check: device [023]: .*max relative difference 0 (all equal),' "$WORK/out")" = 3 ]; then
    pass "max relative difference: 0.001 (s1.l0.w) on device 1, all equal elsewhere"
  else fail "max relative difference lines:"; grep '^check: device' "$WORK/out" >&2; fi
  # the loss: shifted by 1e-4 of itself (F32 keeps ~7 digits)
  "$WORK/p" --check $SIZES > "$WORK/out" 2>&1
  loss=$(sed -n 's/^check: loss \([^,]*\),.*/\1/p' "$WORK/out")
  d=$(awk -v l="$loss" 'BEGIN { printf "%.9g", l * 1e-4 }')
  expect_exit 1 "mlp loss+=$d (1e-4 relative) --check" env PPSRT_FAULT="loss+=$d" "$WORK/p" --check $SIZES
  expect_grep "^check: loss .*: DIFFERS" "shifted loss named"
  expect_grep "^check: FAILED" "shifted loss: check FAILED"
  # the mlp at P = 4, m = 8, micro-batch 1, seq 4, hidden 8: T = 32 tokens, the longest
  # sum n = max(T, hidden) = 32, D = 2 per layer x 4 layers
  expect_k "mlp P=4" 32 32 8 "$WORK/p" --check $SIZES
fi
if ! has cpu; then :
elif [ -x "$WORK/p" ]; then
  expect_exit 0 "clean gpt run --check" "$WORK/p" --check $GPT
  every_tensor "cpu gpt" 1.001 "$WORK/p" --check $GPT
  # the gpt: T = 32 tokens, n = max(4 hidden, vocab, seq) = 64, D = 12 x 4 layers + 3
  expect_k "gpt P=4" 64 32 51 "$WORK/p" --check $GPT
  every_tensor "cpu mlp" 0 "$WORK/p" --check $SIZES
  "$WORK/p" --check $GPT > "$WORK/out" 2>&1
  loss=$(sed -n 's/^check: loss \([^,]*\),.*/\1/p' "$WORK/out")
  d=$(awk -v l="$loss" 'BEGIN { printf "%.9g", -l * 1e-4 }')
  expect_exit 1 "gpt loss+=$d (1e-4 relative) --check" env PPSRT_FAULT="loss+=$d" "$WORK/p" --check $GPT
  expect_grep "^check: loss .*: DIFFERS" "gpt shifted loss named"
  # --json says so too
  expect_exit 1 "--json under a fault" env PPSRT_FAULT="grad=s1.l0.w*1.001" "$WORK/p" --check $SIZES --json
  expect_grep '"check":{"match":false,"loss_match":true,"mismatches":1,' "--json: one tensor mismatched"
  # bad values
  expect_exit 2 "PPSRT_FAULT=bogus is a usage error" env PPSRT_FAULT=bogus "$WORK/p" --check $SIZES
  expect_grep "PPSRT_FAULT='bogus': expected grad=NAME\*SCALE, loss+=X, route, route@replica=R or route@context=C (with --num-experts), record-twice" "bad fault named"
  expect_exit 2 "PPSRT_FAULT=grad=x*y is a usage error" env PPSRT_FAULT='grad=s0.l0.w*y' "$WORK/p" --check $SIZES
  expect_exit 2 "PPSRT_FAULT without --check is a usage error" env PPSRT_FAULT='grad=s0.l0.w*2' "$WORK/p" $SIZES
  expect_grep "add --check" "fault without --check: hint"
  expect_exit 2 "PPSRT_CHECK_K=abc is a usage error" env PPSRT_CHECK_K=abc "$WORK/p" --check $SIZES
  expect_exit 1 "a fault on a tensor the model lacks" env PPSRT_FAULT='grad=nosuch*2' "$WORK/p" --check $SIZES
  expect_grep "the model has no tensor 'nosuch'" "unknown tensor named"
  # the bound is ||a-b|| <= k ||ref||: with k = 0 the mlp's gradients, equal to the bit,
  # still pass (the loss keeps its own k_loss)
  expect_exit 0 "PPSRT_CHECK_K=0: gradients equal to the bit pass" env PPSRT_CHECK_K=0 "$WORK/p" --check $SIZES
  # PPSRT_CHECK_K overrides k: a huge one lets the 1.001 fault through (the knob works)
  expect_exit 0 "PPSRT_CHECK_K=0.01 admits a 1.001 scale" env PPSRT_CHECK_K=0.01 PPSRT_FAULT='grad=s0.l0.w*1.001' \
    "$WORK/p" --check $SIZES
else fail "build 1f1b"; fi

# vocabulary shards: every shard of the named tensor scaled (each device compares its
# slice); clean runs pass
part cpu && for v in 1 2; do
  sed "s/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; vocab parallel $v;/" \
    "$top_srcdir/examples/1f1b.pps" > "$WORK/v$v.pps"
  if build v$v "$WORK/v$v.pps" -D P=3 -D m=6; then
    expect_exit 0 "clean gpt Vocab-$v --check" "$WORK/v$v" --check $GPT
    for t in vocab.tok vocab.out; do
      expect_exit 1 "gpt Vocab-$v: $t*1.001 caught" env PPSRT_FAULT="grad=$t*1.001" "$WORK/v$v" --check $GPT
      expect_grep "grad $t (.*DIFFERS" "Vocab-$v: $t named"
    done
  else fail "build vocab $v"; fi
done

# ---- MPI transport ----
if ! part mpi; then :
elif have_mpi; then
  if build m "$top_srcdir/stdlib/zb_h1.pps" -D P=3 -D m=6; then
    MPI="timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=$MPI_ASAN $MPIRUN --oversubscribe -np 3"
    expect_exit 0 "mpirun -np 3 clean --check" $MPI "$WORK/m" --transport mpi --check $SIZES
    expect_exit 1 "mpirun -np 3 grad=s2.l0.b*1.001 --check" $MPI -x PPSRT_FAULT='grad=s2.l0.b*1.001' \
      "$WORK/m" --transport mpi --check $SIZES
    expect_grep "check: device 2: grad s2.l0.b (.*DIFFERS" "MPI: tensor and device named"
    expect_grep "^check: FAILED" "MPI: check FAILED"
    expect_exit 1 "mpirun -np 3 gpt grad=vocab.tok*0 --check" $MPI -x PPSRT_FAULT='grad=vocab.tok*0' \
      "$WORK/m" --transport mpi --check $GPT
    expect_grep "grad vocab.tok (.*DIFFERS" "MPI gpt: vocab.tok named"
    expect_exit 1 "mpirun -np 3 loss+=1e-3 --check" $MPI -x PPSRT_FAULT='loss+=1e-3' \
      "$WORK/m" --transport mpi --check $SIZES
    expect_grep "^check: loss .*: DIFFERS" "MPI: loss named"
  else fail "build zb_h1"; fi
else skip "MPI part (no MPI in this libppsrt, or no mpirun)"; fi

# ---- CUDA backend (bf16) on the emulator ----
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
if ! part emu; then :
elif [ -f "$EMU" ] && grep -q "HAVE_CUDA 1" "$top_builddir/config.h" 2>/dev/null; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" PPS_EMU_TIMEOUT=30
  [ -n "$SAN_CFLAGS" ] && LIMIT=6
  if build e "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
    for tr in threads nccl; do
      expect_exit 0 "emulated cuda gpt $tr clean --check" env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" "$WORK/e" \
        --backend cuda --transport $tr --check $GPT
    done
    every_tensor "emulated cuda gpt" 0 env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" "$WORK/e" --backend cuda --transport nccl --check $GPT
    every_tensor "emulated cuda gpt" 1.1 env LD_PRELOAD="$EMU" "$WORK/e" --backend cuda --transport threads --check $GPT
    every_tensor "emulated cuda mlp" 1.1 env LD_PRELOAD="$EMU" "$WORK/e" --backend cuda --transport threads --check $SIZES
    # the loss shifted by 2% of itself (k_loss is 0.010 here)
    env LD_PRELOAD="$EMU" "$WORK/e" --backend cuda --check $GPT > "$WORK/out" 2>&1
    loss=$(sed -n 's/^check: loss \([^,]*\),.*/\1/p' "$WORK/out")
    d=$(awk -v l="$loss" 'BEGIN { printf "%.9g", l * 0.02 }')
    expect_exit 1 "emulated cuda gpt loss+=$d (2% relative) --check" env PPSRT_FAULT="loss+=$d" LD_PRELOAD="$EMU" \
      "$WORK/e" --backend cuda --check $GPT
    expect_grep "^check: loss .*: DIFFERS" "emulated cuda: shifted loss named"
  else fail "build 1f1b P=2"; fi
else skip "CUDA emulator part ($EMU not built)"; fi
finish
