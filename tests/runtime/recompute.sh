#!/bin/sh
# tests/runtime/recompute.sh: activation recomputation (`recompute all | ratio R;`,
# runtime/recompute.c, compiler/recompute.c). tests/runtime/cases/recompute.pps, 1F1B
# and ZB-H1 at P = 3 with every stage recomputed:
#  - ppsc sim's peak is lower than the same schedule's without recomputation, and
#    sim --json reports each device's recompute time (m TF: one forward again per B;
#    m TF / 4 for ratio 0.25 of 4 layers);
#  - the compiled program passes --check on the threads transport (gradients equal to
#    the one-device reference, the loss counted once) for the mlp model (BW and B/W
#    passes) and the gpt model, and its measured peak units match sim's (mlp: the
#    input is 1/2 of a stage's activation; gpt: the values the runtime's note gives);
#  - the measured peak is below the run without recomputation;
#  - a partial ratio (layer-level: ratio 0.25, 0.5 and 1 of 4 layers per stage) on mlp
#    and gpt: --check passes with the peak matching sim's, and the peak falls as the
#    ratio rises (gpt: with the `input` and `layer` shares the runtime's notes name);
#  - --trace has one "recompute" span per recomputed B inside it, --json each
#    device's rebuilds and their time, 0 without recomputation;
#  - one MPI run (when MPI is built), CUDA-backend runs under the emulator (when it is
#    built), whole and partial.
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

# partial ratios on mlp, 4 layers per stage: the first 1, 2, 4 layers recomputed
"$PPSC" sim "$CASE" -D lps=4 -D r=0.25 --json > "$WORK/q.json" &&
  python3 -c 'import json,sys; rt = [d["recompute_time"] for d in json.load(open(sys.argv[1]))["per_device"]]; sys.exit(rt != [1.5] * 3)' "$WORK/q.json" &&
  pass "sim: ratio 0.25 of 4 layers reruns one layer's forward per B (m TF / 4 = 1.5)" ||
  fail "sim: ratio 0.25 of 4 layers: recompute_time is not m TF / 4 ($(cat "$WORK/q.json" | head -c 300))"
prev=
for r in off 0.25 0.5 1; do
  if [ $r = off ]; then defs="-D rc=false"; else defs="-D r=$r"; fi
  # shellcheck disable=SC2086
  build mlp4_$r "$CASE" -D lps=4 -D i0=0.125 -D i1=0.125 -D i2=0.125 $defs || { fail "build mlp lps=4 $r"; continue; }
  expect_exit 0 "mlp, 4 layers per stage, recompute $r: --check" "$WORK/mlp4_$r" --check
  expect_grep "check: passed (loss, gradients and peak memory match)" "mlp, recompute $r of 4 layers: gradients, loss and peak memory match"
  on=$(peak_units 0)
  if [ -n "$prev" ]; then
    if [ -n "$on" ] && awk "BEGIN { exit !($on < $prev) }"; then pass "mlp: device 0 peak $prev -> $on units at ratio $r"
    else fail "mlp: device 0 peak '$prev' -> '$on' units at ratio $r (not lower)"; fi
  fi
  prev=$on
done

# --trace and --json: one rebuild per recomputed B/BW, timed, a span inside its B
if [ -x "$WORK/mlp4_0.5" ] && [ -x "$WORK/mlp4_off" ]; then
  "$WORK/mlp4_0.5" --iterations 2 --trace "$WORK/t.json" --json > "$WORK/j.json" 2> "$WORK/err" &&
    "$WORK/mlp4_off" --iterations 2 --json > "$WORK/j0.json" 2>> "$WORK/err" || fail "mlp ratio 0.5: --trace/--json runs"
  if python3 - "$WORK/t.json" "$WORK/j.json" "$WORK/j0.json" <<'PY' > "$WORK/py.out" 2>&1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
rc = [e for e in ev if e.get("cat") == "recompute"]
assert len(rc) == 2 * 3 * 6, len(rc)            # iterations x devices x m
bs = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("B", "BW")]
for e in rc:
    assert e["tid"] == 0 and e["name"].startswith("recompute ") and e["dur"] > 0, e
    host = [b for b in bs if b["pid"] == e["pid"] and b["args"]["op"] == e["args"]["op"] and b["args"]["iteration"] == e["args"]["iteration"]]
    assert len(host) == 1 and host[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= host[0]["ts"] + host[0]["dur"] + 1e-3, (e, host)
for it in json.load(open(sys.argv[2]))["iterations"]:
    assert it["recomputes"] == [6, 6, 6] and all(t > 0 for t in it["recompute_time_s"]), it
for it in json.load(open(sys.argv[3]))["iterations"]:
    assert it["recomputes"] == [0, 0, 0] and it["recompute_time_s"] == [0, 0, 0], it
print("%d recompute spans, each inside its B" % len(rc))
PY
  then pass "trace and json: $(cat "$WORK/py.out")"; else fail "trace and json:"; cat "$WORK/py.out" >&2; fi
fi

# gpt: the runtime's notes name each stage's input share (whole) and layer share
# (partial); with them the units match
GPT="--model gpt --hidden 64 --heads 4 --query-groups 2 --seq 16 --vocab 64"
hints() { sed -n "s/^hint: for this model and size write \`memory stage \([0-9]\): $1 = \([0-9.e-]*\);\`/-D $2\1=\2/p" "$WORK/out" | sort -u; }
build g4_whole "$CASE" -D lps=4 && build g4_half "$CASE" -D lps=4 -D r=0.5 || fail "build gpt lps=4"
"$WORK/g4_whole" --check $GPT > "$WORK/out" 2>&1
expect_grep "hint: for this model and size write .memory stage 2: input = " "gpt: a wrong input share is named, with the value to write"
idefs=$(hints input i)
"$WORK/g4_half" --check $GPT > "$WORK/out" 2>&1
expect_grep "hint: for this model and size write .memory stage 2: layer = " "gpt: a wrong layer share is named, with the value to write"
ldefs=$(hints layer l)
for r in 0.25 0.5 1; do
  # shellcheck disable=SC2086
  if build gpt_$r "$CASE" -D lps=4 -D r=$r $idefs $ldefs; then
    expect_exit 0 "gpt, recompute $r of 4 layers: --check" "$WORK/gpt_$r" --check $GPT
    expect_grep "check: passed (loss, gradients and peak memory match)" "gpt, recompute $r of 4 layers: gradients, loss and peak memory match"
    if grep -q "ppsrt: .*note: the recomputed" "$WORK/out"; then fail "gpt $r: a note with the runtime's own shares"; fi
  else fail "build gpt $r with the shares ($idefs $ldefs)"; fi
done
if have_mpi && [ -x "$WORK/gpt_0.5" ]; then
  expect_exit 0 "gpt, recompute 0.5 of 4 layers, under mpirun -np 3: --check" mpirun_np 3 "$WORK/gpt_0.5" --check $GPT
  expect_grep "check: passed (loss, gradients and peak memory match)" "MPI: gradients, loss and peak memory match"
else skip "MPI: not built or no mpirun"; fi

# the CUDA backend through the same generic path, under the emulator when it is built
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
if [ -f "$EMU" ] && [ -x "$WORK/rc_false" ] && [ -x "$WORK/mlp4_0.5" ]; then
  for b in rc_false mlp4_0.5; do
    PPS_EMU_SEED=1 PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$WORK/$b" --backend cuda --check --json > "$WORK/out" 2>&1
    st=$?
    if [ $st -eq 0 ] && python3 -c '
import json, sys
j = json.loads(open(sys.argv[1]).read().split("\n")[-2])
assert j["memory_match"] is True and j["iterations"][0]["recomputes"] == [6, 6, 6], j
assert all(t > 0 for t in j["iterations"][0]["recompute_time_s"]), j' "$WORK/out" 2> "$WORK/py.out"; then
      pass "cuda (emulator): mlp $b --check with recomputation, peak memory matches, rebuilds timed by events"
    else fail "cuda (emulator): $b exit $st"; tail -5 "$WORK/out" "$WORK/py.out" >&2; fi
  done
else skip "cuda (emulator): $EMU not built"; fi
finish
