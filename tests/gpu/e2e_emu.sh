#!/bin/sh
# tests/gpu/e2e_emu.sh: whole schedules on the CUDA backend with NO GPU: programs built
# with `ppsc build` run with LD_PRELOAD=tests/gpu/emu/libppsrt_emu.so, the asynchronous
# emulator (a worker thread per stream, seeded random delays, events, NCCL rendezvous,
# and a stream race detector that fails the run: exit 66 on an unordered access, 67 on
# an NCCL deadlock), so the runtime's interpreter, models, offload and transports drive
# the real CUDA backend code.
#  - every stdlib/example schedule at P = 4 (-D P=4 -D m=8; each expected valid there:
#    one that ppsc check rejects fails; a literal schedule, valid only as written, runs
#    without -D at its own P), --check,
#    three runs per schedule that together cover both transports, both models and three
#    seeds. Rotation, for the i-th schedule (k = i mod 3, seeds taken mod 3 in 1..3):
#        run A: NCCL transport in NCCL mode (P emulated GPUs: rendezvous point-to-point,
#               collectives), mlp, seed 1 + k
#        run B: threads transport, gpt, seed 1 + (k + 1)
#        run C: i even: threads + mlp; i odd: NCCL mode + gpt; seed 1 + (k + 2)
#    Vocabulary-parallel schedules (the mlp has no vocabulary layers) run the gpt in all
#    three. Sanitizer builds (several times slower) run A and B only;
#    PPS_EMU_E2E_SEEDS="1 2 3 4 5" runs A, B and C under each of the listed seeds;
#  - 1f1b P=4 in NCCL mode, full offload and the copy channel (P ranks on one emulated
#    GPU) under each of the seeds 1, 2, 3 (a NCCL-mode run the rotation above already
#    made, the same program, model and seed, is not made twice); the cudaMalloc count in
#    the steady state;
#  - overlapped F&B pairs (stdlib/dualpipe_v.pps, `overlap { }`): the second pass of each
#    pair runs on the backend's second compute stream; under seeds 1, 2, 3, mlp in NCCL
#    mode and gpt on the threads transport, --check and the race detector pass and the
#    emulator counts operations on the COMPUTE2 streams (none with overlapped = false);
#    a pair whose second half consumes a lane collective (tests/analysis/cases/
#    overlap_vocab.pps) runs race-free;
#  - asynchronous vocabulary collectives (`vocab async`) on the collective lane: the
#    lane thread's kernels on the backend's LANE stream, its NCCL calls on a second
#    communicator's stream (NCCL mode) or its staging copies on the LANE stream (threads
#    transport: a second in-process transport), events in and out; stdlib/vocab_1f1b.pps
#    and vocab_v_half.pps (P=4, -D async=true: their `vocab async` orders; the rotation
#    above runs them as the barriers order them, also on the lanes) and
#    tests/analysis/cases/vocab_async.pps (P=2, runs only with lanes) under seeds 1, 2,
#    3, gpt in NCCL mode and on the threads transport, --check and the race detector
#    pass, the emulator counts operations on the lane streams and --json says
#    "collectives":"async"; with --blocking-collectives the two stdlib schedules still
#    pass on both, with no lane operation (on the threads transport as built with
#    async=true, in NCCL mode as built without it: `ppsc check` proves blocking
#    collectives deadlock-free for a `vocab async` schedule in the buffered model only,
#    and vocab_v_half's async order at P=4 does deadlock with blocking collectives and
#    rendezvous sends); vocab_async.pps also
#    under mpirun -np 2 with the MPI transport (one emulated GPU per process, the lane on
#    a duplicate communicator); and the NCCL transport over MPI at mpirun -np 1 (a
#    one-device vocabulary schedule; tests/gpu/mpi_nccl_emu.sh runs it at -np 4),
#    whose lane communicator comes from a second ncclUniqueId round over MPI, on the
#    lane, and with --blocking-collectives not;
#  - the gpt loss on the CUDA backend (bf16) against the CPU backend (F32);
#  - several processes: mpirun -np 4 with the MPI transport, one emulated GPU per
#    process, --check (the NCCL transport across processes is mpi_nccl_emu.sh's).
# What the emulator does not model is listed in docs/gpu.md.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
GPT=$EMU_GPT
emu() { LD_PRELOAD=$EMU "$@"; }
t0=$(date +%s)

n=0 i=0 vocab=0
RAN=" "   # "FILE DEFS|TRANSPORT|MODEL|SEED" of each run of the rotation (run_one)
# schedules written for one size only (no P/m parameters): run as written
LITERAL="zb_h1_literal"
# run_one LABEL TRANSPORT MODEL SEED: one --check run of $WORK/$base
run_one() {
  RAN="$RAN$f $defs|$2|$3|$4 "
  if [ "$2" = nccl ]; then
    expect_exit 0 "$base P=$P $3 NCCL mode (P emulated GPUs) --check, seed $4 [$1]" \
      env PPSRT_EMU_GPUS=$P PPS_EMU_SEED=$4 LD_PRELOAD="$EMU" "$WORK/$base" --backend cuda --transport nccl \
      --check --iterations 2 -q $([ "$3" = gpt ] && echo "$GPT")
  else
    expect_exit 0 "$base P=$P $3 threads --check (emulated), seed $4 [$1]" \
      env PPS_EMU_SEED=$4 LD_PRELOAD="$EMU" "$WORK/$base" --backend cuda --transport threads \
      --check --iterations 2 -q $([ "$3" = gpt ] && echo "$GPT")
  fi
}
for f in $(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null); do
  base=$(basename "$f" .pps)
  P= defs=
  # every schedule is expected valid at P = 4, except the literal ones (LITERAL), which
  # run as written, at their own number of devices: one that ppsc check rejects fails
  case " $LITERAL " in
    *" $base "*)
      "$PPSC" check "$f" -q > /dev/null 2>&1 || { fail "$base: ppsc check rejects the literal schedule"; continue; }
      P=$(sed -n 's/^[[:space:]]*devices[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$f" | head -n 1) ;;
    *)
      "$PPSC" check "$f" -D P=4 -D m=8 -q > /dev/null 2>&1 || { fail "$base: ppsc check rejects it at P=4 (expected valid)"; continue; }
      P=4 defs="-D P=4 -D m=8" ;;
  esac
  build "$base" "$f" $defs || { fail "build $base"; continue; }
  m1=mlp m2=mlp
  if grep -q "vocab parallel" "$f"; then m1=gpt m2=gpt vocab=$((vocab + 1)); fi
  [ $((i % 2)) -eq 0 ] && tc=threads mc=$m2 || tc=nccl mc=gpt
  for seeds in ${PPS_EMU_E2E_SEEDS:-x}; do
    if [ "$seeds" = x ]; then sa=$((i % 3 + 1)); sb=$(((i + 1) % 3 + 1)); sc=$(((i + 2) % 3 + 1))
    else sa=$seeds sb=$seeds sc=$seeds; fi
    run_one A nccl "$m1" $sa
    run_one B threads gpt $sb
    [ -z "$SAN_CFLAGS" ] || [ "$seeds" != x ] && run_one C $tc "$mc" $sc
  done
  i=$((i + 1))
  n=$((n + 1))
done
nwant=$(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps | wc -l)
[ $n -eq $nwant ] && pass "$n schedules ran on the emulated GPU, as expected" || fail "$n schedules ran on the emulated GPU, expected $nwant"

sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 1;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
build one "$top_srcdir/examples/1f1b.pps" -D P=4 -D m=8 || fail "build 1f1b P=4"
build off "$WORK/off.pps" -D P=3 -D m=6 || fail "build offload"
[ "$vocab" -ge 1 ] && pass "$vocab vocabulary-parallel schedule(s) among them" || fail "no vocabulary schedule found"
for seed in 1 2 3; do
  case $RAN in
    *" $top_srcdir/examples/1f1b.pps -D P=4 -D m=8|nccl|mlp|$seed "*)
      pass "seed $seed: 1f1b P=4 NCCL mode, 4 emulated GPUs --check: run by the rotation above (its run A)" ;;
    *)
      expect_exit 0 "seed $seed: 1f1b P=4 NCCL mode, 4 emulated GPUs --check" \
        env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --transport nccl --check \
        --iterations 2 -q ;;
  esac
  expect_exit 0 "seed $seed: 1f1b P=4 copy channel (4 ranks on one emulated GPU) --check" \
    env PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --transport nccl --check --iterations 2 -q
  expect_exit 0 "seed $seed: 1f1b full offload, NCCL mode --check" \
    env PPSRT_EMU_GPUS=3 PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/off" --backend cuda --transport nccl --check \
    --iterations 2 -q
done
# steady state: eight more iterations make fewer than one more cudaMalloc call each (the
# pool levels off once it holds what the deepest run of work in flight needs: under
# load a few blocks more, whose events were still pending when asked for); without the
# caching allocator each iteration would make dozens
for tr in nccl threads; do
  for it in 2 10; do
    env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --transport $tr \
      --iterations $it -q > "$WORK/stats$it" 2>&1
  done
  m2=$(sed -n 's/.*stats: cudaMalloc \([0-9]*\),.*/\1/p' "$WORK/stats2")
  m10=$(sed -n 's/.*stats: cudaMalloc \([0-9]*\),.*/\1/p' "$WORK/stats10")
  if [ -n "$m2" ] && [ -n "$m10" ] && [ $((m10 - m2)) -lt 8 ]; then
    pass "1f1b P=4 $tr: cudaMalloc calls after 2 iterations $m2, after 10 $m10 (steady state)"
  else
    fail "1f1b P=4 $tr: cudaMalloc calls after 2 iterations '$m2', after 10 '$m10'"
  fi
done
# overlapped pairs on two compute streams
c2ops() { sed -n 's/.*operations on COMPUTE2 streams \([0-9]*\).*/\1/p' "$WORK/out"; }
if build dpv "$top_srcdir/stdlib/dualpipe_v.pps" -D P=4 -D m=8 &&
   build dps "$top_srcdir/stdlib/dualpipe_v.pps" -D P=4 -D m=8 -D overlapped=false; then
  for seed in 1 2 3; do
    expect_exit 0 "seed $seed: dualpipe_v P=4 mlp NCCL mode, pairs on two compute streams --check" \
      env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/dpv" --backend cuda \
      --transport nccl --check --iterations 2 -q
    k=$(c2ops); [ "${k:-0}" -gt 0 ] && pass "... $k operations on the second compute streams" || fail "... no operation on a COMPUTE2 stream"
    expect_exit 0 "seed $seed: dualpipe_v P=4 gpt threads, pairs on two compute streams --check" \
      env PPS_EMU_STATS=1 PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/dpv" --backend cuda --transport threads --check \
      --iterations 2 -q $GPT
    k=$(c2ops); [ "${k:-0}" -gt 0 ] && pass "... $k operations on the second compute streams" || fail "... no operation on a COMPUTE2 stream"
  done
  expect_exit 0 "dualpipe_v P=4 overlapped=false (no pairs) --check" \
    env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/dps" --backend cuda --transport nccl \
    --check --iterations 1 -q
  k=$(c2ops); [ "$k" = 0 ] && pass "... and nothing on a COMPUTE2 stream" || fail "... '$k' operations on a COMPUTE2 stream without pairs"
else fail "build dualpipe_v"; fi
# a pair whose second half consumes a lane collective (device 1's overlap { F(1) BW(0) }
# reads output_bwd(0)): the pair's start waits for it, so the second compute stream is
# ordered after the lane (a wait at the second half's own turn ordered only the first:
# the race detector's exit 66 on every seed)
if build ovv "$top_srcdir/tests/analysis/cases/overlap_vocab.pps"; then
  for seed in 1 2 3; do
    expect_exit 0 "seed $seed: a pair's second half after its lane collective, gpt threads --check" \
      env PPS_EMU_STATS=1 PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$WORK/ovv" --backend cuda --transport threads --check \
      --iterations 2 -q $GPT
    k=$(c2ops); [ "${k:-0}" -gt 0 ] && pass "... $k operations on the second compute streams" || fail "... no operation on a COMPUTE2 stream"
  done
else fail "build overlap_vocab"; fi

# asynchronous vocabulary collectives on the collective lane
laneops() { sed -n 's/.*operations on lane streams \([0-9]*\).*/\1/p' "$WORK/lane.err"; }
# lane_run SCHEDULE P TRANSPORT SEED [--blocking-collectives]: a --check run with the
# emulator's counts in $WORK/lane.err and --json in $WORK/lane.json; sets st and k
# (NCCL mode: P emulated GPUs; threads: the ranks share one, as run B above)
lane_run() {
  gpus=1; [ $3 = nccl ] && gpus=$2
  env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=$gpus PPS_EMU_SEED=$4 LD_PRELOAD="$EMU" "$WORK/$1" --backend cuda \
    --transport $3 --check --iterations 2 --json $5 $GPT > "$WORK/lane.json" 2> "$WORK/lane.err"
  st=$? k=$(laneops)
}
if build va1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 -D m=8 -D async=true &&
   build va2 "$top_srcdir/stdlib/vocab_v_half.pps" -D P=4 -D m=8 -D async=true &&
   build va3 "$top_srcdir/tests/analysis/cases/vocab_async.pps" &&
   build vb1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 -D m=8 &&
   build vb2 "$top_srcdir/stdlib/vocab_v_half.pps" -D P=4 -D m=8; then
  for x in va1:4 va2:4 va3:2; do
    b=${x%:*} P=${x#*:}
    for tr in nccl threads; do
      [ $tr = nccl ] && mode="NCCL mode" || mode="threads"
      for seed in 1 2 3; do
        lane_run $b $P $tr $seed
        if [ $st -eq 0 ] && [ "${k:-0}" -gt 0 ] && grep -q '"collectives":"async"' "$WORK/lane.json"; then
          pass "seed $seed: $b P=$P gpt $mode, collectives on the lane --check ($k lane operations)"
        else
          fail "seed $seed: $b P=$P gpt $mode on the lane: exit $st, '$k' lane operations"; cat "$WORK/lane.err" >&2
        fi
      done
      [ $b = va3 ] && continue   # deadlocks with blocking collectives (its own test says so)
      bb=$b; [ $tr = nccl ] && bb=vb${b#va}   # (the barriers' order: see the header)
      lane_run $bb $P $tr 1 --blocking-collectives
      if [ $st -eq 0 ] && [ "$k" = 0 ] && grep -q '"collectives":"blocking"' "$WORK/lane.json"; then
        pass "$bb P=$P gpt $mode --blocking-collectives --check, no lane operation"
      else
        fail "$bb P=$P $mode --blocking-collectives: exit $st, '$k' lane operations"; cat "$WORK/lane.err" >&2
      fi
    done
  done
else fail "build the vocabulary schedules"; fi

if build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
  "$WORK/g" --backend cpu --iterations 1 --json $GPT > "$WORK/cpu.json" 2> "$WORK/cpu.err"
  emu "$WORK/g" --backend cuda --iterations 1 --json $GPT > "$WORK/cuda.json" 2> "$WORK/cuda.err"
  if python3 - "$WORK/cpu.json" "$WORK/cuda.json" > "$WORK/out" 2>&1 <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["iterations"][0]["loss"]
b = json.load(open(sys.argv[2]))["iterations"][0]["loss"]
d = abs(a - b) / abs(a)
print("gpt loss cpu %.7g, cuda %.7g, relative difference %.2e (tolerance 1e-2)" % (a, b, d))
sys.exit(0 if d <= 1e-2 else 1)
PY
  then pass "$(cat "$WORK/out")"; else fail "CPU and CUDA losses differ: $(cat "$WORK/out") $(cat "$WORK/cuda.err")"; fi
else fail "build gpt 1f1b"; fi

expect_exit 1 "a driver older than the toolkit fails at backend creation" \
  env PPS_EMU_DRIVER_VERSION=11080 LD_PRELOAD="$EMU" "$WORK/one" --backend cuda --iterations 1 -q
expect_grep "driver on host .* supports CUDA 11.8, but this libppsrt was built with the CUDA" "... and says which versions"
expect_grep "with-cuda=" "... and how to build with another toolkit"

if have_mpi; then
  expect_exit 0 "mpirun -np 4: 1f1b on the emulated CUDA backend, MPI transport, one process per GPU --check" \
    timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
    "$MPIRUN" --oversubscribe -np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/one" --backend cuda --transport mpi \
    --check --iterations 2 -q
  # vocab_async.pps runs only with collective lanes: on the MPI transport each process's
  # lane thread uses a duplicate communicator and its backend's LANE stream
  if [ -x "$WORK/va3" ]; then
    timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
      "$MPIRUN" --oversubscribe -np 2 env LD_PRELOAD="$EMU" PPS_EMU_STATS=1 PPS_EMU_SEED=3 "$WORK/va3" --backend cuda \
      --transport mpi --check --iterations 2 --json $GPT > "$WORK/lane.json" 2> "$WORK/lane.err"
    st=$? nk=$(sed -n 's/.*operations on lane streams \([1-9][0-9]*\).*/\1/p' "$WORK/lane.err" | wc -l)
    if [ $st -eq 0 ] && [ "$nk" -eq 2 ] && grep -q '"collectives":"async"' "$WORK/lane.json"; then
      pass "mpirun -np 2: vocab_async.pps on the emulated CUDA backend, MPI transport, collectives on the lanes --check"
    else
      fail "mpirun -np 2 vocab_async.pps CUDA + MPI transport: exit $st, $nk of 2 ranks ran lane operations"
      tail -20 "$WORK/lane.err" >&2
    fi
  fi
  # the NCCL transport over MPI: its lane's communicator from a second ncclUniqueId round
  # (rank 0, MPI_Bcast, ncclCommInitRank) at one rank (mpi_nccl_emu.sh runs it at four)
  cat > "$WORK/v1.pps" <<'EOF'
schedule v1 {
  devices 1; microbatches 2; placement linear;
  vocab parallel 2;
  vocab async true;
  device 0 { IF(0) coll input_fwd(0) IF(1) coll input_fwd(1) F(0) F(1) S(0) coll output_fwd(0) T(0) S(1) coll output_fwd(1) T(1) BW(0) coll input_bwd(0) IB(0) BW(1) coll input_bwd(1) IB(1) }
}
EOF
  if build v1 "$WORK/v1.pps"; then
    for bc in "" --blocking-collectives; do
      timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
        "$MPIRUN" --oversubscribe -np 1 env LD_PRELOAD="$EMU" PPS_EMU_STATS=1 PPS_EMU_SEED=2 "$WORK/v1" --backend cuda \
        --transport nccl --check --iterations 2 --json $bc $GPT > "$WORK/lane.json" 2> "$WORK/lane.err"
      st=$? k=$(laneops)
      if [ -z "$bc" ] && [ $st -eq 0 ] && [ "${k:-0}" -gt 0 ] && grep -q '"collectives":"async"' "$WORK/lane.json"; then
        pass "mpirun -np 1: NCCL transport over MPI, collectives on the lane (its communicator from a second ncclUniqueId round) --check ($k lane operations)"
      elif [ -n "$bc" ] && [ $st -eq 0 ] && [ "$k" = 0 ] && grep -q '"collectives":"blocking"' "$WORK/lane.json"; then
        pass "mpirun -np 1: NCCL transport over MPI --blocking-collectives --check, no lane operation"
      else
        fail "mpirun -np 1 NCCL over MPI $bc: exit $st, '$k' lane operations"; tail -20 "$WORK/lane.err" >&2
      fi
    done
  else fail "build a one-device vocabulary schedule"; fi
else
  skip "multi-process runs: no MPI in this build"
fi
echo "e2e_emu: $(($(date +%s) - t0)) s"
finish
