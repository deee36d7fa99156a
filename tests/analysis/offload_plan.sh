#!/bin/sh
# tests/analysis/offload_plan.sh: where lowering puts the offloads and reloads of an
# offload policy (compiler/lower.c), read off `ppsc sim --trace`:
#  - exactly the activations whose time from F's end to the start of the last compute
#    pass Q before their B is positive and holds the round trip (TOFF + TRELOAD), in
#    the simulation without offload, are offloaded: 1F1B's last stage (B right after
#    F) never is, and with copies slower than every lifetime nothing is;
#  - every reload's copy ends by Q's start (one pass of margin before its B), with copy
#    times from `cost TOFF`, from model { } bytes and hardware { } bandwidth, or none at
#    all (TOFF = 0).
: "${PPSC:?}" "${top_srcdir:?}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pps-offplan.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail=0
EX=$top_srcdir/examples/1f1b.pps
# plan BASE_TRACE TRACE TRIP: checks the rule and the placement; prints a summary
plan() {
  python3 - "$@" <<'PY'
import json, sys
def load(p): return [e for e in json.load(open(p))["traceEvents"] if e.get("ph") == "X"]
base, t, trip = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
PASS = ("F", "B", "W", "BW", "IF", "IB", "S", "T")
def passes(ev, dev): return sorted((e for e in ev if e["pid"] == dev and e["tid"] == 0 and e["cat"] in PASS), key=lambda e: e["ts"])
def key(e): return (e["pid"], e["args"]["mb"], e["args"]["stage"])
bad, want, got = [], set(), set(e for e in map(key, (e for e in t if e["cat"] == "reload")))
for dev in set(e["pid"] for e in base):
    comp = passes(base, dev)
    for k, b in enumerate(comp):
        if b["cat"] not in ("B", "BW"): continue
        f = [j for j in range(k) if comp[j]["cat"] == "F" and key(comp[j]) == key(b)]
        if not f or f[0] == k - 1: continue
        gap = (comp[k - 1]["ts"] - comp[f[0]]["ts"] - comp[f[0]]["dur"]) / 1000
        if gap > 0 and gap >= trip - 1e-9: want.add(key(b))
for dev in set(e["pid"] for e in t):
    comp = passes(t, dev)
    for r in (e for e in t if e["pid"] == dev and e["cat"] == "reload"):
        b = [k for k, e in enumerate(comp) if e["cat"] in ("B", "BW") and key(e) == key(r)]
        q = comp[b[0] - 1]
        if r["ts"] + r["dur"] > q["ts"] + 1e-6:
            bad.append("device %d: reload %d s%d ends at %g, after %s starts at %g" % (dev, r["args"]["mb"], r["args"]["stage"], r["ts"] + r["dur"], q["name"], q["ts"]))
if want != got:
    bad.append("offloaded %s, the rule says %s" % (sorted(got - want), sorted(want - got)))
st = sorted(set(k[2] for k in got))
print("\n".join(bad) if bad else "%d offloaded, stages %s" % (len(got), st))
sys.exit(1 if bad else 0)
PY
}
check() {   # DESC TRIP FILE ARGS...
  desc=$1 trip=$2; shift 2
  if ! "$PPSC" sim "$@" --policy offload=none --trace "$WORK/b.json" > "$WORK/out" 2>&1 ||
     ! "$PPSC" sim "$@" --policy offload=all --trace "$WORK/t.json" > "$WORK/out" 2>&1; then
    echo "FAIL: $desc: ppsc sim failed"; cat "$WORK/out"; fail=1; return
  fi
  got=$(plan "$WORK/b.json" "$WORK/t.json" "$trip") && echo "ok: $desc: $got" ||
    { echo "FAIL: $desc: $got"; fail=1; }
}
check "1F1B P=4, TOFF = 0" 0 "$EX" -D P=4 -D m=8
case $got in *"stages [0, 1, 2]") ;; *) echo "FAIL: TOFF = 0: the stages offloaded are not 0..2 (the last stage's B follows its F)"; fail=1 ;; esac
check "1F1B P=4, TOFF = 0.25" 0.5 "$EX" -D P=4 -D m=8 --cost TOFF=0.25
check "1F1B P=4, TOFF = 0.5, TRELOAD = 1" 1.5 "$EX" -D P=4 -D m=8 --cost TOFF=0.5 --cost TRELOAD=1
check "1F1B P=4, TOFF = 1.5" 3 "$EX" -D P=4 -D m=8 --cost TOFF=1.5
check "1F1B P=4, TOFF = 20" 40 "$EX" -D P=4 -D m=8 --cost TOFF=20
# copy times from bytes and bandwidth (seconds): a 7B-class shape at 200 GB/s (copies
# that keep up with the compute); the round trip is 2 x unit_bytes / bandwidth
sed 's|cost TF = 1, TB = 1, TW = 1, TC = 0;|model { layers = 32; hidden = 4096; heads = 32; query_groups = 8; seq = 2048; micro_batch = 1; vocab = 32000; dtype_bytes = 2; } hardware { flops = 312e12; efficiency = 0.5; host_bandwidth = 200e9; }|' \
  "$EX" > "$WORK/bytes.pps"
ub=$("$PPSC" sim "$WORK/bytes.pps" -D P=8 -D m=16 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['unit_bytes'])")
check "1F1B P=8, model/hardware copy times" "$(python3 -c "print(2 * $ub / 200e9)")" "$WORK/bytes.pps" -D P=8 -D m=16
exit $fail
