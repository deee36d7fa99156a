#!/bin/sh
# tests/analysis/dp_dist.sh: the distributed optimizer (ZeRO-1) in `ppsc check/sim`:
# hardware { data_parallel = D; distributed_optimizer = 1; } (compiler/costmodel.c
# dp_derive and costmodel_param_bytes, compiler/dp.c). Every figure is computed here
# from the documented formulas and the pipeline times worked out by hand below:
#  - static bytes a parameter d + 4 + ((d < 4 ? 4 : 0) + 8) / D (9 at d = 2, D = 4;
#    10 at d = 4), times the parameters counted from model { } here; peak bytes;
#  - each stage's ring reduce-scatter (D-1)/D G / B + (D-1) a from its last BW, one
#    at a time per device in ready order; once every device is done with its last op
#    and its reduce-scatters (the iteration's statistics, which all devices send,
#    precede the optimizer step) the all-gathers of each device's stages' weights
#    ((D-1)/D Wb / B + (D-1) a, Wb = parameters x d, or dp_stage_bytes / 4 x 2 without
#    a model) in stage order; the iteration (the last all-gather) and the exposed time;
#  - the steady state with the all-gathers overlapping the next iteration, whose passes
#    of a stage wait for that stage's all-gather (the runtime on a GPU), by hand: the
#    next iteration's start, the period and what the all-gathers add to it;
#  - hardware.memory between the sharded and the unsharded totals: `check` passes
#    with distributed_optimizer = 1 and fails with 0, at the memory key, with a note
#    naming distributed_optimizer;
#  - distributed_optimizer = 0 (and = 1 without data_parallel) changes no byte of
#    sim's text, JSON and SVG; text and SVG show the reduce-scatters and all-gathers;
#  - bad values (2, -1, 0.5) are errors at the key's line and column.
. "$(dirname "$0")/lib.sh"

# 1F1B, P = 2, m = 2, TF = TB = TW = 1 (one BW = 2), TC = 0, by hand:
#   device 0: F0 0-1, F1 1-2, BW0 4-6 (after device 1's BW0 2-4), BW1 7-9
#   device 1: F0 1-2, BW0 2-4, F1 4-5, BW1 5-7
# stage 0 (device 0) ready 9, device 0's last op 9; stage 1 ready 7, last op 7.
cat > "$tmp/lin.pps" <<'PPS'
import "1f1b.pps";
schedule lin(D = 4, dist = 1, dt = 2, mem = 1e12) {
  use one_f_one_b(2, 2);
  model { layers = 2; hidden = 64; heads = 4; seq = 16; micro_batch = 1; vocab = 100; dtype_bytes = dt; }
  hardware { memory = mem; data_parallel = D; dp_bandwidth = 1e6; dp_latency = 0.01;
             distributed_optimizer = dist; }
}
PPS
# 1F1B-V, P = 2, m = 2 (stages 0 and 3 on device 0, 1 and 2 on device 1), each op
# half a device share (F 0.5, BW 1), in `ppsc expand`'s order, by hand:
#   device 0: F(0,0) 0-.5, F(1,0) .5-1, F(0,3) 1.5-2, BW(0,3) 2-3, F(1,3) 3-3.5,
#             BW(1,3) 3.5-4.5, BW(0,0) 5-6, BW(1,0) 7-8
#   device 1: F(0,1) .5-1, F(0,2) 1-1.5, F(1,1) 1.5-2, F(1,2) 2-2.5, BW(0,2) 3-4,
#             BW(0,1) 4-5, BW(1,2) 5-6, BW(1,1) 6-7
# ready: stage 0 8, 1 7, 2 6, 3 4.5; last ops: device 0 8, device 1 7.
cat > "$tmp/v.pps" <<'PPS'
import "1f1b_v.pps";
schedule v(D = 4, dist = 1) {
  use one_f_one_b_v(2, 2);
  hardware { data_parallel = D; dp_bandwidth = 1; dp_latency = 0.5; dp_stage_bytes = 8; distributed_optimizer = dist; }
}
PPS

# check.py FILE.json SPEC: the figures of one --json against the model, simulated here
cat > "$tmp/check.py" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); spec = json.loads(sys.argv[2])
D, bw, lat, d = spec["D"], spec["bw"], spec["lat"], spec["d"]
ready, last, dev = spec["ready"], spec["last"], spec["dev"]
S = len(ready); eps = 1e-9
def near(x, y): return abs(x - y) <= eps * max(1, abs(y))
def err(msg): print(msg); sys.exit(1)
if "params" in spec:                 # per-stage parameters: the model's counts
    G = [4 * p for p in spec["params"]]; Wb = [d * p for p in spec["params"]]
else:                                # dp_stage_bytes: 4 a parameter, weights at d = 2
    G = [spec["G"]] * S; Wb = [spec["G"] / 4 * 2] * S
half = lambda n: (D - 1) / D * n / bw + (D - 1) * lat
rs0, rs1, ag0, ag1 = [0] * S, [0] * S, [0] * S, [0] * S
it = j["makespan"]
for dv in range(len(last)):
    mine = [st for st in range(S) if dev[st] == dv]
    free = 0
    for st in sorted(mine, key=lambda st: (ready[st], st)):
        rs0[st] = max(ready[st], free); rs1[st] = free = rs0[st] + half(G[st])
    it = max(it, last[dv], free)
nxt = it                             # every device done: the statistics, the optimizer step
for dv in range(len(last)):
    t = nxt
    for st in sorted(st for st in range(S) if dev[st] == dv):
        ag0[st] = t; ag1[st] = t = t + half(Wb[st])
    it = max(it, t)
dp = j["data_parallel"]
if dp.get("distributed_optimizer") is not True: err("no distributed_optimizer: true")
if not near(j["makespan"], spec["makespan"]): err("makespan %g, by hand %g" % (j["makespan"], spec["makespan"]))
for s in dp["stages"]:
    k = s["stage"]
    want = {"device": dev[k], "bytes": G[k], "ready": ready[k], "start": rs0[k], "end": rs1[k], "time": half(G[k]),
            "allgather_bytes": Wb[k], "allgather_start": ag0[k], "allgather_end": ag1[k], "allgather_time": half(Wb[k])}
    for f, w in want.items():
        if f not in s or not near(s[f], w): err("stage %d: %s = %s, want %g" % (k, f, s.get(f), w))
if not near(dp["iteration_time"], it): err("iteration %g, want %g" % (dp["iteration_time"], it))
if not near(dp["exposed_allreduce"], it - j["makespan"]): err("exposed %g, want %g" % (dp["exposed_allreduce"], it - j["makespan"]))
if "iteration" in spec and not near(it, spec["iteration"]): err("the model here gives %g, by hand %g" % (it, spec["iteration"]))
if not near(dp["next_iteration_start"], nxt): err("next_iteration_start %s, want %g" % (dp.get("next_iteration_start"), nxt))
if "steady" in spec:                 # [period, what the all-gathers add, pipeline runs], by hand
    got = [dp.get("steady_iteration_time"), dp.get("steady_allgather_wait"), dp.get("steady_runs")]
    if any(g is None or not near(g, w) for g, w in zip(got, spec["steady"])): err("steady state %s, by hand %s" % (got, spec["steady"]))
if "static" in spec:
    for v in j["per_device"]:
        k = v["device"]
        if not near(v["static_bytes"], spec["static"][k]): err("device %d: static_bytes %g, want %g" % (k, v["static_bytes"], spec["static"][k]))
        if not near(v["peak_bytes"], spec["static"][k] + v["peak_memory"] * spec["unit"]):
            err("device %d: peak_bytes %g, want %g" % (k, v["peak_bytes"], spec["static"][k] + v["peak_memory"] * spec["unit"]))
PY

# the model's parameters and bytes (docs/language.md, "Bytes"): h 64, a = g 4, f 4h,
# s 16, b 1, V 100, L 2 over S = 2 stages (one layer each)
spec_lin() { # D d: the JSON spec of lin.pps
  awk -v D="$1" -v d="$2" 'BEGIN {
    h = 64; a = 4; g = 4; f = 4 * h; s = 16; b = 1; V = 100
    layer = 2*h*h + 2*h*h*g/a + 2*h*f + (3*h + 2*h*g/a + f) + 4*h
    p0 = layer + h*V + s*h; p1 = layer + h*V + 2*h
    pp = d + 4 + ((d < 4 ? 4 : 0) + 8) / D
    unit = s*b*(h*d*(16 + 2*g/a) + 16 + 4*a)
    printf "{\"D\": %d, \"bw\": 1e6, \"lat\": 0.01, \"d\": %d, \"makespan\": 9, \"ready\": [9, 7], \"last\": [9, 7], \"dev\": [0, 1],", D, d
    printf " \"params\": [%.17g, %.17g], \"static\": [%.17g, %.17g], \"unit\": %.17g}\n", p0, p1, p0*pp, p1*pp, unit
  }'
}
"$PPSC" sim --json "$tmp/lin.pps" > "$tmp/lin.json" || bad "sim lin"
python3 "$tmp/check.py" "$tmp/lin.json" "$(spec_lin 4 2)" || bad "1F1B P=2 D=4 d=2 (static 9 bytes a parameter)"
"$PPSC" sim --json "$tmp/lin.pps" -D dt=4 > "$tmp/lin4.json" || bad "sim lin dt=4"
python3 "$tmp/check.py" "$tmp/lin4.json" "$(spec_lin 4 4)" || bad "1F1B P=2 D=4 d=4 (static 10 bytes a parameter)"
"$PPSC" sim --json "$tmp/lin.pps" -D D=3 > "$tmp/lin3.json" || bad "sim lin D=3"
python3 "$tmp/check.py" "$tmp/lin3.json" "$(spec_lin 3 2)" || bad "1F1B P=2 D=3 d=2"
# D that do not divide the optimizer's bytes: 12 / 8 = 1.5, 8 / 3 (no integer division)
"$PPSC" sim --json "$tmp/lin.pps" -D D=8 > "$tmp/lin8.json" || bad "sim lin D=8"
python3 "$tmp/check.py" "$tmp/lin8.json" "$(spec_lin 8 2)" || bad "1F1B P=2 D=8 d=2 (static 7.5 bytes a parameter)"
"$PPSC" sim --json "$tmp/lin.pps" -D D=3 -D dt=4 > "$tmp/lin34.json" || bad "sim lin D=3 dt=4"
python3 "$tmp/check.py" "$tmp/lin34.json" "$(spec_lin 3 4)" || bad "1F1B P=2 D=3 d=4 (static 8 + 8/3 bytes a parameter)"
# the same figures, by hand: stage 0 has 49984 + 6400 + 1024 = 57408 parameters, 9
# bytes each = 516672 static bytes on device 0; G = 229632, T_rs = .75 x .229632 +
# .03 = .202224 from 9; Wb = 114816, T_ag = .116112: iteration 9.318336 (device 1:
# 56512 parameters, RS 7 to 7.199536, AG from 9.202224, when device 0's RS ends, to
# 9.316992). Steady state: the next iteration starts at 9.202224, its F(0) of stage 0
# waits for AG0 (.116112) and every later pass follows it by as much (F(0) of stage 1
# needs F(0) of stage 0): the period is 9.318336, the all-gathers add .116112, and
# the release times repeat after one more run
python3 - "$tmp/lin.json" <<'PY' || bad "1F1B P=2 D=4: the hand figures"
import json, sys
j = json.load(open(sys.argv[1])); dp = j["data_parallel"]; s0 = dp["stages"][0]
got = [j["per_device"][0]["static_bytes"], s0["end"], s0["allgather_end"], dp["iteration_time"], dp["stages"][1]["allgather_end"],
       dp["next_iteration_start"], dp["steady_iteration_time"], dp["steady_allgather_wait"], dp["steady_runs"]]
want = [516672, 9.202224, 9.318336, 9.318336, 9.316992, 9.202224, 9.318336, 0.116112, 1]
if any(abs(g - w) > 1e-9 * w for g, w in zip(got, want)): print("got", got, "want", want); sys.exit(1)
PY

# V shape, dp_stage_bytes 8 (weights 4 bytes: d = 2 without a model): T_rs = .75 x 8
# + 1.5 = 7.5, T_ag = .75 x 4 + 1.5 = 4.5; device 0: RS3 4.5-12, RS0 12-19.5; device
# 1: RS2 6-13.5, RS1 13.5-21; from 21: AG0 21-25.5, AG3 25.5-30 and AG1 21-25.5, AG2
# 25.5-30. Steady state, the next iteration from 0 with stages 0 and 1 released at
# 4.5, 2 and 3 at 9 (the op orders above): device 0 F(0,0) 4.5-5, F(1,0) 5-5.5,
# F(0,3) 9.5-10 (after F(0,2)), BW(0,3) 10-11, F(1,3) 11-11.5, BW(1,3) 11.5-12.5,
# BW(0,0) 13-14, BW(1,0) 15-16; device 1 F(0,1) 5-5.5, F(0,2) 9-9.5, F(1,1) 9.5-10,
# F(1,2) 10-10.5, BW(0,2) 11-12, BW(0,1) 12-13, BW(1,2) 13-14, BW(1,1) 14-15; then RS3
# 12.5-20, RS0 20-27.5, RS2 14-21.5, RS1 21.5-29: the next starts at 29, the
# all-gathers end 4.5 and 9 after it again (the same release times): the period 29
# (the cold iteration's 30 less the 1 that AG3 and AG2 hide), 8 more than 21, one run
"$PPSC" sim --json "$tmp/v.pps" > "$tmp/v.json" || bad "sim v"
python3 "$tmp/check.py" "$tmp/v.json" '{"D": 4, "bw": 1, "lat": 0.5, "d": 2, "G": 8, "makespan": 8, "ready": [8, 7, 6, 4.5],
  "last": [8, 7], "dev": [0, 1, 1, 0], "iteration": 30, "steady": [29, 8, 1]}' || bad "1F1B-V P=2 D=4 dp_stage_bytes"

# hardware.memory between the sharded and the unsharded totals (device 0: static
# 57408 x 9 or x 18 bytes + 2 units of activations)
mem=$(awk 'BEGIN { p0 = 57408; unit = 16*(64*2*18 + 32); print (p0*9 + 2*unit + p0*18 + 2*unit) / 2 }')
"$PPSC" check "$tmp/lin.pps" -D mem="$mem" > "$tmp/m1.out" 2>&1 || bad "memory $mem with the sharding: $(cat "$tmp/m1.out")"
"$PPSC" check "$tmp/lin.pps" -D mem="$mem" -D dist=0 > "$tmp/m0.out" 2>&1
rc=$?
[ $rc = 1 ] || bad "memory $mem without the sharding: exit $rc, expected 1"
grep -q "lin.pps:5:14: error: device 0 needs .*over hardware.memory" "$tmp/m0.out" || bad "no memory error at the key: $(cat "$tmp/m0.out")"
grep -q "lin.pps:5:14: note: hardware distributed_optimizer = 1 would shard the optimizer state over the 4 replicas" "$tmp/m0.out" ||
  bad "the memory error does not name distributed_optimizer: $(cat "$tmp/m0.out")"

# text and SVG show it
"$PPSC" sim "$tmp/lin.pps" --svg "$tmp/lin.svg" > "$tmp/lin.txt" || bad "sim text"
grep -q "^data parallel 4 replicas, distributed optimizer" "$tmp/lin.txt" && grep -q "^iteration   9.318336 with the reduce-scatters and all-gathers" "$tmp/lin.txt" &&
  grep -q "optimizer state sharded over 4 replicas" "$tmp/lin.txt" || bad "text lacks the distributed optimizer: $(cat "$tmp/lin.txt")"
grep -q "reduce-scatter of stage 0's gradients over 4 replicas: 9 to 9.20222" "$tmp/lin.svg" &&
  grep -q "all-gather of stage 1's weights over 4 replicas: 9.20222 to 9.31699" "$tmp/lin.svg" || bad "svg lacks the reduce-scatters and all-gathers"
grep -q "^steady      9.318336 an iteration with the all-gathers overlapping the next one" "$tmp/lin.txt" || bad "text lacks the steady state: $(cat "$tmp/lin.txt")"

# distributed_optimizer = 0 is the key absent; = 1 without data_parallel > 1 changes
# nothing: the same file name in three folders, without the key, with 0, with 1
mkdir "$tmp/a" "$tmp/b" "$tmp/c" || exit 99
sed 's/distributed_optimizer = dist; //' "$tmp/lin.pps" > "$tmp/a/lin.pps"
sed 's/distributed_optimizer = dist;/distributed_optimizer = 0;/' "$tmp/lin.pps" > "$tmp/b/lin.pps"
sed 's/distributed_optimizer = dist;/distributed_optimizer = 1;/' "$tmp/lin.pps" > "$tmp/c/lin.pps"
outs() { # DIR TAG ARGS: sim's JSON, text and SVG of DIR/lin.pps
  (dir=$1 tag=$2; shift 2; cd "$tmp/$dir" && "$PPSC" sim --json lin.pps "$@" > "$tag.json" && "$PPSC" sim lin.pps "$@" --svg "$tag.svg" > "$tag.txt") ||
    bad "sim $*"
}
outs a x; outs b x; outs c x; outs a one -D D=1; outs c one -D D=1
for x in json txt svg; do
  cmp -s "$tmp/a/x.$x" "$tmp/b/x.$x" || bad "distributed_optimizer = 0 changed the $x output"
  cmp -s "$tmp/a/one.$x" "$tmp/c/one.$x" || bad "distributed_optimizer = 1 with data_parallel = 1 changed the $x output"
  cmp -s "$tmp/a/x.$x" "$tmp/c/x.$x" && bad "distributed_optimizer = 1 changed nothing in the $x output"
done

# bad values: errors at the key
errcase() { # NAME VALUE
  printf 'import "1f1b.pps";\nschedule e(P = 2, m = 4) {\n  use one_f_one_b(P, m);\n  hardware { data_parallel = 2; dp_bandwidth = 1; dp_stage_bytes = 1; distributed_optimizer = %s; }\n}\n' "$2" > "$tmp/$1.pps"
  "$PPSC" check "$tmp/$1.pps" > "$tmp/$1.out" 2>&1
  rc=$?
  [ $rc = 1 ] || bad "$1: exit $rc, expected 1"
  grep -q "$1.pps:4:71: error: hardware distributed_optimizer must be 0 or 1 .*got $2\$" "$tmp/$1.out" || bad "$1: no error at 4:71: $(cat "$tmp/$1.out")"
}
errcase two 2
errcase neg -1
errcase half 0.5
exit $fail
