#!/bin/sh
# e2e.sh: compile schedules with `ppsc build` and run them on the CPU backend with the
# threads transport and --check (loss, every weight gradient, measured == predicted
# peak memory): every stdlib/*.pps and examples/*.pps at (P, m) = (2, 4), (3, 6), (4, 8)
# (each expected valid there: one that ppsc check rejects fails; a literal one runs once)
# with both models (mlp and gpt; vocabulary-parallel schedules with the gpt only), an
# offload policy, and more gpt cases.
# PPS_E2E_PARTS (default all) picks parts: schedules, offload (the offload policies,
# mlp and gpt), memory, gpt (make mutants runs offload). A gpt --check of the gpt part
# that the schedules part has already run (the same file, P, m and flags) is not run
# twice: the gpt part names it as checked there.
. "$(dirname "$0")/lib.sh"
PARTS=" ${PPS_E2E_PARTS:-schedules offload memory gpt} "
has() { case "$PARTS" in *" $1 "*) return 0 ;; esac; echo "skip: the $1 part (PPS_E2E_PARTS=$PPS_E2E_PARTS)"; return 1; }
SIZES="--hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q"
files=$(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null)
# schedules written for one size only (no P/m parameters): run once, as written
LITERAL="zb_h1_literal"
n=0 nwant=0
GPT_RAN=" "   # "FILE@P@m" of each gpt --check the schedules part ran
has schedules && for f in $files; do
  base=$(basename "$f" .pps)
  for pm in "2 4" "3 6" "4 8"; do
    set -- $pm
    name=${base}_P$1_m$2
    defs="-D P=$1 -D m=$2"
    # every schedule is expected valid at every size, except the literal ones (LITERAL),
    # which run once, as written: one that `ppsc check` rejects is a failure
    case " $LITERAL " in
      *" $base "*)
        [ "$1" = 2 ] || continue
        defs=""; name=$base
        "$PPSC" check "$f" -q > /dev/null 2>&1 || { fail "$name: ppsc check rejects the literal schedule"; continue; } ;;
      *)
        "$PPSC" check "$f" $defs -q > /dev/null 2>&1 || { fail "$name: ppsc check rejects it (expected valid)"; continue; } ;;
    esac
    if ! build "$name" "$f" $defs; then fail "build $name"; continue; fi
    gpt="--model gpt --heads 2 --query-groups 1 --vocab 32 --hidden 16 --seq 4 -q"
    # both models; vocabulary-parallel schedules only with the gpt (the mlp has no
    # vocabulary layers)
    if ! grep -q "vocab parallel" "$f"; then
      expect_exit 0 "$name --check (mlp)" "$WORK/$name" --check $SIZES
      n=$((n + 1))
    fi
    expect_exit 0 "$name --check (gpt)" "$WORK/$name" --check $gpt
    GPT_RAN="$GPT_RAN$f@$1@$2 "
    n=$((n + 1))
  done
done
# each file: mlp and gpt at 3 sizes (a literal one once), a vocabulary one gpt only
if has schedules > /dev/null; then
  for f in $files; do
    k=3; case " $LITERAL " in *" $(basename "$f" .pps) "*) k=1 ;; esac
    grep -q "vocab parallel" "$f" && nwant=$((nwant + k)) || nwant=$((nwant + 2 * k))
  done
  [ $n -eq $nwant ] && pass "$n schedule runs, as expected" || fail "$n schedule runs, expected $nwant"
fi

# an offload policy: half of every activation (two saved tensors per layer: exact)
sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 0.5;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
if ! has offload; then :
elif build off "$WORK/off.pps" -D P=3 -D m=6; then
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
if ! has memory; then :
elif build bfree "$WORK/bfree.pps"; then
  expect_exit 1 "--check-memory fails when the model frees other than b_free" "$WORK/bfree" --check-memory
  expect_grep "device 1: measured peak 2 units ([0-9]* B), predicted 1.5 units: DIFFERS" "memory mismatch named"
  expect_grep "device 0: measured peak 2 units ([0-9]* B), predicted 2 units: match" "other device matches"
else fail "build bfree"; fi

# the gpt model: stdlib schedules and both vocabulary-parallel variants
GPT="--model gpt --check --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 -q"
# ran_gpt FILE P m: the schedules part ran FILE's gpt --check at (P, m) with these flags
ran_gpt() { case "$GPT_RAN" in *" $1@$2@$3 "*) return 0 ;; esac; return 1; }
# offload of half of every activation: the gpt's saved tensors differ in size, so the
# store splits the entry where the half falls; memory must still match exactly
sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 0.5;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/goff.pps"
if ! has offload; then :
elif build goff "$WORK/goff.pps" -D P=3 -D m=6; then
  expect_exit 0 "gpt 1f1b offload ratio 0.5 --check" "$WORK/goff" $GPT
  # device 0 keeps half of split entries (2.5 units); device 1 peaks at 2 under the
  # planner's placement of its offloads and reloads (lower.c); both exactly as predicted
  expect_grep "device 0: measured peak 2.5 units ([0-9]* B), predicted 2.5 units: match" "gpt offload: 2.5 units exactly"
  expect_grep "device 1: measured peak 2 units ([0-9]* B), predicted 2 units: match" "gpt offload: device 1 matches"
else fail "build goff"; fi
if ! has gpt; then :
elif build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
  expect_exit 0 "gpt 1f1b runs" "$WORK/g" --model gpt --iterations 1 -q
  if ran_gpt "$top_srcdir/examples/1f1b.pps" 2 4; then pass "gpt 1f1b --check: run by the schedules part (1f1b_P2_m4)"
  else expect_exit 0 "gpt 1f1b --check" "$WORK/g" $GPT; fi
  for f in zb_h1 zb_v interleaved_1f1b; do
    src=$top_srcdir/stdlib/$f.pps
    [ -f "$src" ] || continue
    if ran_gpt "$src" 2 4; then pass "gpt $f --check: run by the schedules part (${f}_P2_m4)"
    elif build g_$f "$src" -D P=2 -D m=4; then expect_exit 0 "gpt $f --check" "$WORK/g_$f" $GPT; else fail "build $f"; fi
  done
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
else fail "build gpt 1f1b"; fi
finish
