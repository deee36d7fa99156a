#!/bin/sh
# tests/analysis/dp.sh: data parallelism in `ppsc sim` (compiler/dp.c): hardware {
# data_parallel; dp_bandwidth; dp_latency; dp_stage_bytes } and model { } gradient bytes:
#  - the ring time 2(D-1)/D x bytes / bandwidth + 2(D-1) x latency, against the
#    formula computed here (D = 4, so a wrong ring factor shows);
#  - each stage's all-reduce starts at the end of its last W (BW) in the simulation;
#    in 1F1B the cool-down hides every stage's all-reduce but stage 0's on a fast
#    link (exposed = stage 0's time), not on a slow one;
#  - a V shape (two stages a device): one all-reduce per stage, one at a time per
#    device (stage 0's waits for stage 7's on a slow link);
#  - model { } gives the bytes (4 per parameter, the per-stage counts of costmodel.c);
#  - text, --json and --svg show it; data_parallel = 1 changes no byte of either;
#  - bad keys are errors at their line and column.
. "$(dirname "$0")/lib.sh"
export PPS_STDLIB="$top_srcdir/stdlib"

cat > "$tmp/lin.pps" <<'PPS'
import "1f1b.pps";
schedule lin(P = 4, m = 8, D = 4, bw = 4.0, lat = 0.1, G = 1.0) {
  use one_f_one_b(P, m);
  hardware { data_parallel = D; dp_bandwidth = bw; dp_latency = lat; dp_stage_bytes = G; }
}
PPS
cat > "$tmp/v.pps" <<'PPS'
import "1f1b_v.pps";
schedule v(P = 4, m = 8, D = 2, bw = 1.0, G = 1.0) {
  use one_f_one_b_v(P, m);
  hardware { data_parallel = D; dp_bandwidth = bw; dp_stage_bytes = G; }
}
PPS

# check.py FILE.json MODE ARGS: the figures of one --json against the model
cat > "$tmp/check.py" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); mode = sys.argv[2]; a = [float(x) for x in sys.argv[3:]]
dp = j["data_parallel"]; st = dp["stages"]; mk = j["makespan"]; eps = 1e-9
def near(x, y): return abs(x - y) <= eps * max(1, abs(y))
def err(msg): print(msg); sys.exit(1)
D, G, bw, lat = a[0], a[1], a[2], a[3]
T = 2 * (D - 1) / D * G / bw + 2 * (D - 1) * lat
for s in st:
    if not near(s["time"], T): err("stage %d: time %g, the ring formula gives %g" % (s["stage"], s["time"], T))
    if not near(s["end"] - s["start"], T): err("stage %d: end - start %g != %g" % (s["stage"], s["end"] - s["start"], T))
last = max(s["end"] for s in st)
if not near(dp["iteration_time"], max(mk, last)): err("iteration %g != max(makespan, last end) %g" % (dp["iteration_time"], max(mk, last)))
if not near(dp["exposed_allreduce"], dp["iteration_time"] - mk): err("exposed %g" % dp["exposed_allreduce"])
if mode == "linear":   # one stage a device: each starts at its device's last W
    for s in st:
        if not near(s["start"], s["ready"]): err("stage %d starts at %g, its last W ends at %g" % (s["stage"], s["start"], s["ready"]))
        if not near(s["ready"], j["per_device"][s["device"]]["last_end"]): err("stage %d ready %g" % (s["stage"], s["ready"]))
    hidden = [s["end"] <= mk * (1 + eps) for s in st if s["stage"] > 0]
    if a[4] == 1 and not all(hidden): err("fast link: a later stage's all-reduce is not hidden by the cool-down: %s" % st)
    if a[4] == 1 and not near(dp["exposed_allreduce"], T): err("fast link: exposed %g, stage 0's time %g" % (dp["exposed_allreduce"], T))
    if a[4] == 0 and any(hidden): err("slow link: an all-reduce hidden")
    if a[4] == 0 and not dp["exposed_allreduce"] > 0: err("slow link: nothing exposed")
if mode == "v":        # two stages a device, one at a time
    by = {}
    for s in st: by.setdefault(s["device"], []).append(s)
    for d, ss in by.items():
        ss.sort(key=lambda s: s["ready"])
        if not near(ss[0]["start"], ss[0]["ready"]): err("device %d: first all-reduce waits" % d)
        if not near(ss[1]["start"], max(ss[1]["ready"], ss[0]["end"])): err("device %d: stage %d starts at %g, not max(ready %g, end of stage %d's %g)" % (d, ss[1]["stage"], ss[1]["start"], ss[1]["ready"], ss[0]["stage"], ss[0]["end"]))
    if a[4] == 0 and not any(s["start"] > s["ready"] + eps for s in st): err("slow link: no all-reduce waited for its device's previous one")
PY

"$PPSC" sim --json "$tmp/lin.pps" > "$tmp/fast.json" || bad "sim lin (fast link)"
python3 "$tmp/check.py" "$tmp/fast.json" linear 4 1 4 0.1 1 || bad "1F1B D=4 on a fast link"
"$PPSC" sim --json "$tmp/lin.pps" -D bw=0.1 -D lat=0 > "$tmp/slow.json" || bad "sim lin (slow link)"
python3 "$tmp/check.py" "$tmp/slow.json" linear 4 1 0.1 0 0 || bad "1F1B D=4 on a slow link"
"$PPSC" sim --json "$tmp/v.pps" > "$tmp/v.json" || bad "sim v"
python3 "$tmp/check.py" "$tmp/v.json" v 2 1 1 0 1 || bad "V shape D=2"
"$PPSC" sim --json "$tmp/v.pps" -D bw=0.05 > "$tmp/vs.json" || bad "sim v slow"
python3 "$tmp/check.py" "$tmp/vs.json" v 2 1 0.05 0 0 || bad "V shape D=2 on a slow link"

# text and svg show it; D = 1 changes nothing (the same file without the keys)
"$PPSC" sim "$tmp/lin.pps" > "$tmp/t2.txt" || bad "sim text"
grep -q "^data parallel 4 replicas" "$tmp/t2.txt" && grep -q "^iteration .*exposed all-reduce" "$tmp/t2.txt" || bad "text lacks the all-reduces: $(cat "$tmp/t2.txt")"
"$PPSC" sim "$tmp/lin.pps" --svg "$tmp/d.svg" -q && grep -q "all-reduce of stage 0's gradients over 4 replicas" "$tmp/d.svg" || bad "svg lacks the all-reduces"
"$PPSC" sim --json "$tmp/lin.pps" -D D=1 > "$tmp/one.json" && "$PPSC" sim "$tmp/lin.pps" -D D=1 > "$tmp/one.txt" && "$PPSC" sim "$tmp/lin.pps" -D D=1 --svg "$tmp/one.svg" -q || bad "sim D=1"
sed 's/  hardware {.*//' "$tmp/lin.pps" > "$tmp/lin0.pps"
cp "$tmp/lin.pps" "$tmp/keep.pps" && cp "$tmp/lin0.pps" "$tmp/lin.pps"
"$PPSC" sim --json "$tmp/lin.pps" -D D=1 > "$tmp/zero.json" && "$PPSC" sim "$tmp/lin.pps" -D D=1 > "$tmp/zero.txt" && "$PPSC" sim "$tmp/lin.pps" -D D=1 --svg "$tmp/zero.svg" -q || bad "sim without keys"
cmp -s "$tmp/one.json" "$tmp/zero.json" && cmp -s "$tmp/one.txt" "$tmp/zero.txt" && cmp -s "$tmp/one.svg" "$tmp/zero.svg" || bad "data_parallel = 1 changed the output"
grep -q data_parallel "$tmp/one.json" && bad "D=1 JSON has a data_parallel key"
cp "$tmp/keep.pps" "$tmp/lin.pps"

# model { } gives the bytes: 4 per parameter of each stage (the costmodel's counts)
cat > "$tmp/m.pps" <<'PPS'
import "1f1b.pps";
schedule m(P = 2, m = 4) {
  use one_f_one_b(P, m);
  model { layers = 4; hidden = 64; heads = 4; seq = 16; micro_batch = 1; vocab = 100; }
  hardware { flops = 1e12; data_parallel = 2; peer_bandwidth = 1e9; }
}
PPS
"$PPSC" sim --json "$tmp/m.pps" > "$tmp/m.json" || bad "sim with model"
python3 - "$tmp/m.json" <<'PY' || bad "gradient bytes from model { }"
import json, sys
j = json.load(open(sys.argv[1])); st = j["data_parallel"]["stages"]
h, f, L, V, s = 64, 256, 4, 100, 16
layer = 2*h*h + 2*h*h + 2*h*f + (3*h + 2*h + f) + 4*h
want = [4 * (L/2*layer + h*V + s*h), 4 * (L/2*layer + h*V + 2*h)]
for k in range(2):
    if abs(st[k]["bytes"] - want[k]) > 1e-6 * want[k]: print("stage", k, st[k]["bytes"], "want", want[k]); sys.exit(1)
if j["data_parallel"]["bandwidth"] != 1e9: print("bandwidth does not default to peer_bandwidth"); sys.exit(1)
PY

# a vocabulary-parallel schedule: each device's rows of the input and output layers
# (2hV/P, plus the position table sh on device 0) are all-reduced once the device's last
# op has ended, behind its stage's all-reduce on the same link; under the distributed
# optimizer reduce-scattered there and all-gathered after the stage's all-gather
cat > "$tmp/voc.pps" <<'PPS'
import "vocab_1f1b.pps";
schedule voc(P = 4, m = 8, dist = 0) {
  use vocab_1f1b(P = P, m = m);
  model { layers = 4; hidden = 64; heads = 4; seq = 16; micro_batch = 1; vocab = 1000; }
  hardware { flops = 1e12; data_parallel = 3; dp_bandwidth = 1e4; dp_latency = 0.5; distributed_optimizer = dist; }
}
PPS
for dist in 0 1; do
  "$PPSC" sim --json "$tmp/voc.pps" -D dist=$dist > "$tmp/voc$dist.json" 2>"$tmp/err" || { bad "vocab DP (dist=$dist): $(cat "$tmp/err")"; continue; }
  python3 - "$tmp/voc$dist.json" $dist <<'PY' || bad "vocabulary rows' collectives (dist=$1)"
import json, sys
j = json.load(open(sys.argv[1])); dist = int(sys.argv[2])
dp = j["data_parallel"]; D, B, a, P = 3, 1e4, 0.5, 4
h, V, s = 64, 1000, 16
ring = lambda x: 2*(D-1)/D*x/B + 2*(D-1)*a
half = lambda x: (D-1)/D*x/B + (D-1)*a
last = {d["device"]: d["last_end"] for d in j["per_device"]}
it = j["makespan"]
for d in range(P):
    v = dp["vocab"][d]
    params = 2*h*V/P + (s*h if d == 0 else 0)
    assert abs(v["bytes"] - 4*params) < 1e-9*v["bytes"], (d, v["bytes"], 4*params)
    t = half(4*params) if dist else ring(4*params)
    assert abs(v["time"] - t) < 1e-9*t, (d, v["time"], t)
    st = [x for x in dp["stages"] if x["device"] == d]
    assert len(st) == 1
    want0 = max(last[d], st[0]["end"])
    assert abs(v["start"] - want0) < 1e-9*want0 and abs(v["end"] - (want0 + t)) < 1e-9*(want0 + t), (d, v, want0)
    it = max(it, v["end"])
    if dist:
        w = params*2
        assert abs(v["allgather_bytes"] - w) < 1e-9*w
        # the rows first (the runtime's first buffer), from the next iteration's start
        nxt = dp["next_iteration_start"]
        assert abs(v["allgather_start"] - nxt) < 1e-9*nxt and abs(st[0]["allgather_start"] - v["allgather_end"]) < 1e-9*nxt, (d, v, st[0])
        assert abs(v["allgather_time"] - half(w)) < 1e-9*half(w)
        it = max(it, v["allgather_end"], st[0]["allgather_end"])
    else:
        it = max(it, st[0]["end"])
assert abs(dp["iteration_time"] - it) < 1e-9*it, (dp["iteration_time"], it)
PY
done
"$PPSC" sim "$tmp/voc.pps" > "$tmp/voc.txt" 2>&1 && grep -q '^ vocab      0 ' "$tmp/voc.txt" || bad "the text report's vocab rows: $(tail -8 "$tmp/voc.txt")"
grep -q '"vocab"' "$tmp/m.json" && bad "a data_parallel object without vocab parallel has a vocab key"
printf 'import "vocab_1f1b.pps";
schedule e(P = 2, m = 4) {
  use vocab_1f1b(P = P, m = m);
  hardware { data_parallel = 2; dp_bandwidth = 1; dp_stage_bytes = 1; }
}
' > "$tmp/vnob.pps"
"$PPSC" check "$tmp/vnob.pps" > "$tmp/vnob.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "vnob.pps:4:14: error: hardware data_parallel 2 with .vocab parallel. needs the vocabulary layers' gradient bytes" "$tmp/vnob.out" \
  || bad "vocab parallel, dp_stage_bytes, no model: exit $rc, $(cat "$tmp/vnob.out")"

# errors at their key
errcase() { # NAME EXPECTED-TEXT HARDWARE-BODY
  printf 'import "1f1b.pps";\nschedule e(P = 2, m = 4) {\n  use one_f_one_b(P, m);\n  hardware { %s }\n}\n' "$3" > "$tmp/$1.pps"
  "$PPSC" check "$tmp/$1.pps" > "$tmp/$1.out" 2>&1
  rc=$?
  [ $rc = 1 ] || bad "$1: exit $rc, expected 1"
  grep -q "$1.pps:4:[0-9]*: error: .*$2" "$tmp/$1.out" || bad "$1: no error '$2' at line 4: $(cat "$tmp/$1.out")"
}
errcase frac "data_parallel must be a whole number" "data_parallel = 1.5; dp_bandwidth = 1; dp_stage_bytes = 1;"
errcase nobw "needs dp_bandwidth" "data_parallel = 2; dp_stage_bytes = 1;"
errcase nobytes "gradient bytes" "data_parallel = 2; dp_bandwidth = 1;"
errcase neglat "dp_latency must not be negative" "data_parallel = 2; dp_bandwidth = 1; dp_stage_bytes = 1; dp_latency = -1;"
errcase zerobw "dp_bandwidth must be positive" "data_parallel = 2; dp_bandwidth = 0; dp_stage_bytes = 1;"
exit $fail
