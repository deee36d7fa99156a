#!/bin/sh
# tests/runtime/offload.sh: a reload asked for while its offload's device->host copy is
# still in flight cancels that offload (runtime/offload.c): the device copy stays, no
# host->device copy runs and nothing waits for the D2H copy. A schedule that reloads
# right after each offload (tests/runtime/cases/offload_cancel.pps) runs with --check
# on the CPU backend and, when the emulator is built, on the CUDA backend under it
# (tests/gpu/emu/libppsrt_emu.so, its seeded random stream delays and race detector):
# the check passes, --json counts the cancels per device ("offloads_cancelled" > 0),
# and the trace shows them ("reload I sS cancelled" instants on the host->device
# track, "cancelled": true). It also checks that the whole device memory is reported
# (--json "device_peak_bytes": every allocation, above the activations' peak).
# Under the emulator, 1F1B with full offload at P = 3 in NCCL mode (its B runs soon
# after its reload, writing saved tensors in place while a cancelled offload's copy
# may still read them) must pass the race detector (exit 66 when a B writes the
# buffer the device->host copy reads).
. "$(dirname "$0")/lib.sh"
CASE=$top_srcdir/tests/runtime/cases/offload_cancel.pps
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
# the emulator is preloaded before the sanitizer runtime in the ASan build (as e2e_emu.sh)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
GPT="--model gpt --hidden 256 --heads 4 --query-groups 2 --seq 128 --vocab 256"
build cancel "$CASE" || { fail "ppsc build $CASE"; finish; }

# check_run DESC: the JSON in $WORK/j.json and the trace in $WORK/t.json of a run
check_run() {
  python3 - "$WORK/j.json" "$WORK/t.json" <<'PY' > "$WORK/py.out" 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))["traceEvents"]
bad = []
for d in j["per_device"]:
    if not d["offloads_cancelled"] > 0: bad.append("device %d: no offload cancelled" % d["device"])
    if not d["device_peak_bytes"] > max(it["peak_bytes"][d["device"]] for it in j["iterations"]):
        bad.append("device %d: device_peak_bytes %d not above the activations' peak" % (d["device"], d["device_peak_bytes"]))
inst = [e for e in t if e.get("ph") == "X" and e["tid"] == 2 and e["args"].get("cancelled")]
if not inst: bad.append("no cancelled reload on the trace's host->device track")
if any(e["dur"] != 0 or not e["name"].startswith("reload ") or not e["name"].endswith(" cancelled") for e in inst):
    bad.append("a cancelled reload is not an instant named 'reload I sS cancelled'")
ncancel = sum(d["offloads_cancelled"] for d in j["per_device"])
if len(inst) != ncancel: bad.append("%d cancel instants in the trace, %d counted" % (len(inst), ncancel))
print("\n".join(bad) if bad else "ok %d cancels" % ncancel)
sys.exit(1 if bad else 0)
PY
  if [ $? -eq 0 ]; then pass "$1: $(cat "$WORK/py.out")"
  else fail "$1:"; sed 's/^/    /' "$WORK/py.out" >&2; fi
}

expect_exit 0 "cpu: --check with reloads that cancel their offloads" \
  "$WORK/cancel" --check $GPT --trace "$WORK/t.json"
expect_grep "offload(s) cancelled by their reload" "cpu: the memory line says how many offloads were cancelled"
"$WORK/cancel" --check $GPT --json --trace "$WORK/t.json" > "$WORK/j.json" 2> "$WORK/err" ||
  { fail "cpu --json run"; cat "$WORK/err" >&2; }
check_run "cpu"

if [ -f "$EMU" ]; then
  for seed in 1 2; do
    PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$WORK/cancel" --backend cuda --check $GPT --json \
      --trace "$WORK/t.json" > "$WORK/j.json" 2> "$WORK/err"
    st=$?
    if [ $st -ne 0 ]; then fail "cuda (emulator, seed $seed): exit $st"; tail -5 "$WORK/err" >&2
    else check_run "cuda (emulator, seed $seed)"; fi
  done
  sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 1;/' \
    "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
  build off "$WORK/off.pps" -D P=3 -D m=6 || fail "build 1f1b with offload"
  for seed in 1 2; do
    PPSRT_EMU_GPUS=3 PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=30 LD_PRELOAD=$EMU "$WORK/off" --backend cuda --transport nccl \
      --check --iterations 2 --json > "$WORK/j.json" 2> "$WORK/err"
    st=$?
    if [ $st -eq 0 ]; then
      pass "1f1b full offload, NCCL mode (emulator, seed $seed): --check and the race detector pass, $(python3 -c \
        "import json,sys; print(sum(d['offloads_cancelled'] for d in json.load(open(sys.argv[1]))['per_device']))" "$WORK/j.json") cancel(s)"
    else
      fail "1f1b full offload, NCCL mode (emulator, seed $seed): exit $st"; tail -6 "$WORK/err" >&2
    fi
  done
else
  skip "cuda (emulator): $EMU not built"
fi
finish
