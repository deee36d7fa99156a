#!/bin/sh
# tests/runtime/recompute.sh: activation recomputation (`recompute all;`,
# runtime/recompute.c, compiler/recompute.c). tests/runtime/cases/recompute.pps, 1F1B
# and ZB-H1 at P = 3 with every stage recomputed:
#  - ppsc sim's peak is lower than the same schedule's without recomputation, and
#    sim --json reports each device's recompute time (m TF: one forward again per B);
#  - the compiled program passes --check on the threads transport (gradients equal to
#    the one-device reference, the loss counted once) for the mlp model (BW and B/W
#    passes) and the gpt model, and its measured peak units match sim's (mlp: the
#    input is 1/2 of a stage's activation; gpt: the values the runtime's note gives);
#  - the measured peak is below the run without recomputation;
#  - one MPI run of the same (when MPI is built), one CUDA-backend run under the
#    emulator (when it is built);
#  - a partial ratio is refused by the runtime, clearly.
. "$(dirname "$0")/lib.sh"
CASE=$top_srcdir/tests/runtime/cases/recompute.pps

# sim: peak with and without, recompute time in --json
"$PPSC" sim "$CASE" --json > "$WORK/on.json" && "$PPSC" sim "$CASE" -D rc=false --json > "$WORK/off.json" ||
  { fail "ppsc sim $CASE"; finish; }
if python3 - "$WORK/on.json" "$WORK/off.json" <<'PY' > "$WORK/py.out" 2>&1
import json, sys
on, off = (json.load(open(f)) for f in sys.argv[1:3])
assert on["peak_memory"] < off["peak_memory"], (on["peak_memory"], off["peak_memory"])
assert on["makespan"] > off["makespan"], (on["makespan"], off["makespan"])
rt = [d["recompute_time"] for d in on["per_device"]]
assert rt == [6, 6, 6], rt          # m = 6 forwards again, TF = 1
assert all("recompute_time" not in d for d in off["per_device"])
print("peak %g -> %g, makespan %g -> %g" % (off["peak_memory"], on["peak_memory"], off["makespan"], on["makespan"]))
PY
then pass "sim: $(cat "$WORK/py.out")"; else fail "sim:"; cat "$WORK/py.out" >&2; fi

# peak_units D: device D's measured peak units in $WORK/out (the memory line)
peak_units() { sed -n "s/^memory: device $1: measured peak \([0-9.e+-]*\) units.*/\1/p" "$WORK/out"; }

for zb in false true; do
  build rc_$zb "$CASE" -D zb=$zb || { fail "build zb=$zb"; continue; }
  build plain_$zb "$CASE" -D zb=$zb -D rc=false || { fail "build zb=$zb rc=false"; continue; }
  expect_exit 0 "mlp, zb=$zb: --check with recomputation" "$WORK/rc_$zb" --check --iterations 2
  expect_grep "check: passed (loss, gradients and peak memory match)" "mlp, zb=$zb: gradients, loss and peak memory match"
  on=$(peak_units 0)
  "$WORK/plain_$zb" --check > "$WORK/out" 2>&1 || fail "mlp, zb=$zb: --check without recomputation"
  off=$(peak_units 0)
  if [ -n "$on" ] && [ -n "$off" ] && awk "BEGIN { exit !($on < $off) }"; then
    pass "mlp, zb=$zb: device 0 measured peak $off -> $on units"
  else fail "mlp, zb=$zb: device 0 measured peak '$off' -> '$on' units (not lower)"; fi
done

# gpt: the runtime's note names each stage's input share; with them the units match
GPT="--model gpt --hidden 64 --heads 4 --query-groups 2 --seq 16 --vocab 64"
"$WORK/rc_false" --check $GPT > "$WORK/out" 2>&1
expect_grep "hint: for this model and size write .memory stage 2: input = " "gpt: a wrong input share is named, with the value to write"
defs=$(sed -n 's/^hint: for this model and size write `memory stage \([0-9]\): input = \([0-9.e-]*\);`/-D i\1=\2/p' "$WORK/out" | sort -u)
# shellcheck disable=SC2086
if build gpt "$CASE" $defs; then
  expect_exit 0 "gpt: --check with recomputation ($(echo $defs))" "$WORK/gpt" --check $GPT
  expect_grep "check: passed (loss, gradients and peak memory match)" "gpt: gradients, loss and peak memory match"
  if grep -q "ppsrt: .*note: the recomputed" "$WORK/out"; then fail "gpt: a note with the runtime's own input shares"; fi
  if have_mpi; then
    expect_exit 0 "gpt under mpirun -np 3: --check with recomputation" mpirun_np 3 "$WORK/gpt" --check $GPT
    expect_grep "check: passed (loss, gradients and peak memory match)" "MPI: gradients, loss and peak memory match"
  else skip "MPI: not built or no mpirun"; fi
else fail "build gpt with the input shares ($defs)"; fi

# the CUDA backend through the same generic path, under the emulator when it is built
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
if [ -f "$EMU" ] && [ -x "$WORK/rc_false" ]; then
  PPS_EMU_SEED=1 PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$WORK/rc_false" --backend cuda --check > "$WORK/out" 2>&1
  st=$?
  if [ $st -eq 0 ] && grep -q "check: passed (loss, gradients and peak memory match)" "$WORK/out"; then
    pass "cuda (emulator): mlp --check with recomputation, peak memory matches"
  else fail "cuda (emulator): exit $st"; tail -5 "$WORK/out" >&2; fi
else skip "cuda (emulator): $EMU not built"; fi

# a partial ratio: sim only
build half "$CASE" --policy recompute=0.5 || fail "build with recompute=0.5"
expect_exit 1 "a partial recompute ratio is refused by the runtime" "$WORK/half" --check
expect_grep "stage 0 is recomputed with ratio 0.5: the runtime recomputes whole stages" "the refusal says why"
finish
