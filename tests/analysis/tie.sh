#!/bin/sh
# tests/analysis/tie.sh: the tied embeddings' gradient exchange in `ppsc sim`
# (model { tie_embeddings = 1 } with stage 0 and the last stage on different devices:
# costmodel.c's TieModel, simulated by compiler/dp.c), against figures computed here:
#  - 1F1B P = 4: devices 0 and 3 exchange 4 h V bytes each way at peer_bandwidth,
#    from the later of their last ops; the iteration is the later of the makespan and
#    the exchange's end;
#  - tensor_parallel = 2: one GPU's half of the matrix;
#  - data_parallel = 4 with the distributed optimizer: the exchange starts after both
#    devices' reduce-scatters, and every device's all-gathers once all devices are
#    done (the exchange included);
#  - the distributed optimizer with a latency a ring step: stages 0 and 3 reduce-scatter
#    and all-gather the matrix in buffers of their own (the runtime's `tied` tensors),
#    one more ring each after their other parameters', the others one ring; none where
#    one device holds both layers (ZB-V);
#  - no peer_bandwidth: the bytes, no time (bandwidth null);
#  - none where one device holds both layers (ZB-V) or untied, and the text and --svg
#    show it.
. "$(dirname "$0")/lib.sh"
export PPS_STDLIB="$top_srcdir/stdlib"

# mk NAME IMPORT USE TIE HARDWARE
mk() {
  printf 'import "%s.pps";\nschedule t(P = 4, m = 8) {\n  use %s(P = P, m = m);\n' "$2" "$3" > "$tmp/$1.pps"
  printf '  model { layers = 8; hidden = 1024; heads = 16; query_groups = 4; seq = 1024; micro_batch = 1; vocab = 50304; tie_embeddings = %s; }\n' "$4" >> "$tmp/$1.pps"
  printf '  hardware { flops = 4e14; efficiency = 0.5; %s }\n}\n' "$5" >> "$tmp/$1.pps"
  "$PPSC" sim "$tmp/$1.pps" --json > "$tmp/$1.json" 2> "$tmp/$1.err" || bad "ppsc sim $1: $(cat "$tmp/$1.err")"
}
mk l 1f1b one_f_one_b 1 "peer_bandwidth = 5e10;"
mk t2 1f1b one_f_one_b 1 "peer_bandwidth = 5e10; tensor_parallel = 2;"
mk dd 1f1b one_f_one_b 1 "peer_bandwidth = 5e10; data_parallel = 4; distributed_optimizer = 1;"
mk ddl 1f1b one_f_one_b 1 "peer_bandwidth = 5e10; data_parallel = 4; distributed_optimizer = 1; dp_bandwidth = 1e10; dp_latency = 1e-3;"
mk zvd zb_v zb_v 1 "peer_bandwidth = 5e10; data_parallel = 4; distributed_optimizer = 1; dp_bandwidth = 1e10; dp_latency = 1e-3;"
mk nb 1f1b one_f_one_b 1 ""
mk zv zb_v zb_v 1 "peer_bandwidth = 5e10;"
mk un 1f1b one_f_one_b 0 "peer_bandwidth = 5e10;"

python3 - "$tmp" <<'PY' || fail=1
import json, sys
w = sys.argv[1]
J = {k: json.load(open("%s/%s.json" % (w, k))) for k in ("l", "t2", "dd", "ddl", "zvd", "nb", "zv", "un")}
h, V, bw = 1024.0, 50304.0, 5e10
ok = True
def check(what, cond):
    global ok
    print(("ok: " if cond else "FAIL: ") + what)
    ok = ok and cond
def close(a, b): return abs(a - b) <= 1e-9 * max(1.0, abs(b))

j = J["l"]; t = j.get("tied_embeddings")
check("1F1B P=4: the exchange is reported", t is not None)
if t:
    last = [d["last_end"] for d in j["per_device"]]
    check("devices 0 and 3", t["devices"] == [0, 3])
    check("4 h V bytes each way (%g)" % t["bytes"], close(t["bytes"], 4 * h * V))
    check("time = bytes / peer_bandwidth", close(t["time"], 4 * h * V / bw) and close(t["bandwidth"], bw))
    check("starts at the later of the two devices' last ops", close(t["start"], max(last[0], last[3])))
    check("ends after its time", close(t["end"], t["start"] + t["time"]))
    check("iteration = max(makespan, end); exposed = iteration - makespan",
          close(t["iteration_time"], max(j["makespan"], t["end"])) and close(t["exposed"], t["iteration_time"] - j["makespan"]))
t = J["t2"].get("tied_embeddings")
check("tensor_parallel = 2: one GPU's half of the matrix", t is not None and close(t["bytes"], 2 * h * V))
j = J["dd"]; t = j.get("tied_embeddings"); dp = j.get("data_parallel")
if t and dp:
    st = dp["stages"]
    rs_end = {0: max(s["end"] for s in st if s["device"] == 0), 3: max(s["end"] for s in st if s["device"] == 3)}
    last = [d["last_end"] for d in j["per_device"]]
    check("data_parallel: the exchange starts after both devices' last ops and reduce-scatters",
          close(t["start"], max(last[0], last[3], rs_end[0], rs_end[3])))
    nxt = max(t["end"], max(last), max(s["end"] for s in st))
    check("data_parallel: the next iteration starts when every device is done, the exchange included (%g)" % nxt,
          close(dp["next_iteration_start"], nxt))
    check("data_parallel: every device all-gathers from then (the statistics of all devices precede the optimizer step)",
          all(close(s["allgather_start"], nxt) for s in st) and nxt >= t["end"])
    check("data_parallel: the iteration covers the all-gathers",
          close(dp["iteration_time"], max(s["allgather_end"] for s in st)) and close(t["iteration_time"], dp["iteration_time"]))
else:
    check("data_parallel: both sections reported", False)
# the tied matrix's own buffers: a ring (D-1)/D x bytes / B + (D-1) x a for each buffer,
# D = 4, B = 1e10, a = 1e-3; the weights dtype_bytes 2 of the F32 gradients' 4
def ring(x): return 3 / 4 * x / 1e10 + 3 * 1e-3
for name, tied in (("ddl", (0, 3)), ("zvd", ())):
    st = J[name]["data_parallel"]["stages"]
    for s in st:
        g = 4 * h * V if s["stage"] in tied else 0
        rs = ring(s["bytes"] - g) + (ring(g) if g else 0)
        ag = ring((s["bytes"] - g) / 2) + (ring(g / 2) if g else 0)
        check("%s stage %d: %s reduce-scatter (%g s) and all-gather (%g s)" % (name, s["stage"], "two rings a" if g else "one", rs, ag),
              close(s["time"], rs) and close(s["allgather_time"], ag) and close(s.get("tied_bytes", 0), g))
t = J["nb"].get("tied_embeddings")
check("no peer_bandwidth: bytes, no time", t is not None and t["bandwidth"] is None and t["time"] == 0 and close(t["bytes"], 4 * h * V))
check("ZB-V (one device holds both layers): no exchange", "tied_embeddings" not in J["zv"])
check("untied: no exchange", "tied_embeddings" not in J["un"])
sys.exit(0 if ok else 1)
PY

"$PPSC" sim "$tmp/l.pps" > "$tmp/l.txt" 2>&1 || bad "ppsc sim text"
grep -q "^tied embeddings: devices 0 and 3 exchange" "$tmp/l.txt" && echo "ok: the text shows the exchange" || bad "the text does not show the exchange"
"$PPSC" sim "$tmp/l.pps" --svg "$tmp/l.svg" > /dev/null 2>&1 || bad "ppsc sim --svg"
[ "$(grep -c "the tied embeddings' gradient exchanged with device" "$tmp/l.svg")" = 2 ] && echo "ok: the SVG draws it on both devices" ||
  bad "the SVG does not draw the exchange on devices 0 and 3"
exit $fail
