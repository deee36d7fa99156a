#!/bin/sh
# tests/analysis/outputs.sh: what `check` and `sim` write: the --json object (always
# printed, even for invalid input or an unreadable file), --trace and --svg (written
# whole when the schedule simulates, not at all otherwise), and CSV interop
# (import-csv -> check -> export-csv gives back the actions; malformed CSV is
# located and writes nothing); the per-device table's figures (a first start under one
# time unit, the memory over time when frees and allocations tie); the trace's lane
# collectives under `vocab async` (each TCOLL long, at one time on every device). JSON is validated
# with python3 when it is installed.
set -u
cases="$top_srcdir/tests/analysis/cases"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL $*"; fail=1; }
have_py=0
command -v python3 >/dev/null 2>&1 && have_py=1
[ $have_py = 1 ] || echo "skip: JSON validity and key-order checks (no python3); the grep checks still run"
json_ok() { [ $have_py = 0 ] || python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" || die "$1 is not valid JSON"; }
has() { grep -q -- "$2" "$1" || { die "$1 lacks $2"; sed -n 1,5p "$1"; }; }

cd "$cases" || exit 99
# valid: JSON figures, closed form 1F1B P=8 m=16: makespan 69, peak 8 on device 0
"$PPSC" sim one_f_one_b.pps -D P=8 -D m=16 --json >"$tmp/a.json" 2>"$tmp/err" || die "sim one_f_one_b exit $?"
json_ok "$tmp/a.json"
has "$tmp/a.json" '"schedule":"one_f_one_b"'
has "$tmp/a.json" '"valid":true'
has "$tmp/a.json" '"makespan":69,'
has "$tmp/a.json" '"peak_memory":8,"peak_memory_device":0'
has "$tmp/a.json" '"per_device":\[{"device":0,"peak_memory":8,"busy":48,"idle":21'
# the documented keys, in the documented order (docs/json.md)
if [ $have_py = 1 ]; then
  python3 - "$tmp/a.json" <<'PY' || die "JSON keys differ from docs/json.md"
import json, sys
top = ["command", "schedule", "file", "devices", "stages", "microbatches", "placement", "valid",
       "errors", "warnings", "ops", "inserted_ops", "makespan", "ideal_time", "bubble_rate",
       "bubble_rate_span", "span", "peak_memory", "peak_memory_device", "host_memory",
       "per_device", "expects", "params", "bottleneck_device", "bubble_rate_bottleneck",
       "time_unit", "unit_bytes", "hardware_memory"]
dev = ["device", "peak_memory", "busy", "idle", "ops", "first_start", "last_end", "comm_wait",
       "peak_memory_order", "peak_memory_time", "host_memory", "copy_busy_d2h", "copy_busy_h2d"]
exp = ["file", "line", "col", "metric", "device", "cmp", "value", "actual", "ok"]
o = json.load(open(sys.argv[1]), object_pairs_hook=lambda kv: kv)
keys = [k for k, _ in o]
d = dict(o)
ok = keys[:len(top)] == top and [k for k, _ in d["per_device"][0]] == dev and [k for k, _ in d["expects"][0]] == exp
if not ok:
    print("keys:", keys)
sys.exit(0 if ok else 1)
PY
fi
# check --json prints the same object, sim figures included
"$PPSC" check one_f_one_b.pps --json >"$tmp/c.json" 2>/dev/null || die "check exit $?"
json_ok "$tmp/c.json"
has "$tmp/c.json" '"command":"check"'
has "$tmp/c.json" '"makespan":33,'
# invalid: valid false, errors located, exit 1
"$PPSC" check deadlock.pps --json >"$tmp/d.json" 2>/dev/null
[ $? -eq 1 ] || die "deadlock: expected exit 1"
json_ok "$tmp/d.json"
has "$tmp/d.json" '"valid":false'
has "$tmp/d.json" '"errors":\[{"file":"deadlock.pps","line":7,"col":5,"message":"deadlock: '
has "$tmp/d.json" '"makespan":null'
# a deadlock through a `vocab async` lane collective: its cycle in --json as on stderr,
# note by note (file, line, col, message), the lane's waits included
"$PPSC" check deadlock_lane3.pps --json >"$tmp/l.json" 2>"$tmp/l.err"
[ $? -eq 1 ] || die "deadlock_lane3: expected exit 1"
json_ok "$tmp/l.json"
has "$tmp/l.json" '"notes":\[{"file":"deadlock_lane3.pps","line":11,"col":63,"message":"device 0 waits at F(1) for coll input_fwd(1) on the collective lane, which device 1 has not issued"}'
has "$tmp/l.json" '{"file":"deadlock_lane3.pps","line":19,"col":82,"message":"device 2 waits at T(0) for coll output_fwd(0) on the collective lane, which devices 0 and 1 have not issued"}'
if [ $have_py = 1 ]; then
  python3 - "$tmp/l.json" "$tmp/l.err" <<'PY' || die "deadlock_lane3: --json notes differ from stderr's"
import json, re, sys
o = json.load(open(sys.argv[1]))
js = [(n["file"], n["line"], n["col"], n["message"]) for e in o["errors"] for n in e["notes"]]
tx = [(m[1], int(m[2]), int(m[3]), m[4]) for m in
      (re.match(r"^(.*?):(\d+):(\d+): note: (.*)$", l) for l in open(sys.argv[2]).read().splitlines()) if m]
ok = len(js) == 6 and js == tx
if not ok:
    print("json:", js, "\nstderr:", tx)
sys.exit(0 if ok else 1)
PY
fi
# a failed expectation: figures and the expectation's outcome
"$PPSC" check expect.pps --json >"$tmp/e.json" 2>/dev/null
[ $? -eq 1 ] || die "expect: expected exit 1"
json_ok "$tmp/e.json"
has "$tmp/e.json" '"metric":"bubble_rate","device":null,"cmp":"<=","value":0.05,"actual":0.272727272727,"ok":false'
# a syntax error: still one JSON object
printf 'schedule broken {\n  devices 2 microbatches 2;\n}\n' >"$tmp/broken.pps"
"$PPSC" check "$tmp/broken.pps" --json >"$tmp/b.json" 2>/dev/null
[ $? -eq 1 ] || die "broken: expected exit 1"
json_ok "$tmp/b.json"
has "$tmp/b.json" '"valid":false'
# an unreadable file: exit 2, JSON with valid false
"$PPSC" check "$tmp/nonexistent.pps" --json >"$tmp/n.json" 2>/dev/null
[ $? -eq 2 ] || die "nonexistent: expected exit 2"
json_ok "$tmp/n.json"
has "$tmp/n.json" '"valid":false'

# trace and svg: written for a valid schedule
"$PPSC" sim offload.pps -q --trace "$tmp/t.json" --svg "$tmp/t.svg" 2>"$tmp/err" || die "sim offload exit $?"
json_ok "$tmp/t.json"
has "$tmp/t.json" '"name":"F 3 s1","cat":"F","ph":"X","pid":1,"tid":0'
has "$tmp/t.json" '"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"copy device->host"}'
has "$tmp/t.json" '"ph":"C"'
# the memory counters: each device's timeline starts at time 0, has one point per time
# (in order), ends empty, and peaks at the table's time_mem (sim.c's timeline)
if [ $have_py = 1 ]; then
  "$PPSC" sim offload.pps > "$tmp/t.txt" 2>/dev/null
  python3 - "$tmp/t.json" "$tmp/t.txt" <<'PY' || die "offload.pps: the trace's memory counters differ from the table"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "C"]
lines = open(sys.argv[2]).read().split("\n")
head = next(i for i, l in enumerate(lines) if l.split()[:1] == ["device"])
col = lines[head].split().index("time_mem")
bad = []
for l in lines[head + 1:]:
    f = l.split()
    if len(f) <= col or not f[0].isdigit():
        break
    pts = [(e["ts"], e["args"]["activations"]) for e in ev if e["pid"] == int(f[0])]
    if not pts or pts[0][0] != 0 or pts[-1][1] != 0 or max(v for _, v in pts) != float(f[col]) or \
            any(a[0] >= b[0] for a, b in zip(pts, pts[1:])):   # one point per time, in order
        bad.append("device %s: first %s, last %s, max %s, time_mem %s" % (f[0], pts[:1], pts[-1:], max(v for _, v in pts) if pts else None, f[col]))
if bad:
    print("\n".join(bad))
sys.exit(1 if bad or head + 1 >= len(lines) else 0)
PY
fi
# `vocab async`: every collective runs on the lane (tid 4) for TCOLL = 0.5 (500 us in the
# trace) at one time on every device, in sequence (exec.c's lane times, the first one too)
if [ $have_py = 1 ]; then
  "$PPSC" sim vocab_async.pps -q --trace "$tmp/va.json" 2>"$tmp/err" || die "sim vocab_async exit $?"
  python3 - "$tmp/va.json" <<'PY' || die "vocab_async.pps: the lane collectives' trace times"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "coll" and e.get("ph") == "X"]
byname = {}
for e in ev:
    byname.setdefault(e["name"], []).append(e)
bad = [e["name"] for e in ev if e["tid"] != 4 or e["dur"] != 500]
bad += [n for n, es in byname.items() if len({(e["ts"], e["dur"]) for e in es}) != 1 or len(es) != 2]
starts = sorted({es[0]["ts"] for es in byname.values()})
bad += ["overlap %s" % (b - a) for a, b in zip(starts, starts[1:]) if b - a < 500]
print("%d collectives, %d devices: %s" % (len(byname), 2, bad or "ok"))
sys.exit(1 if bad or not ev else 0)
PY
fi
has "$tmp/t.svg" '<svg xmlns='
has "$tmp/t.svg" '</svg>'
# a dense schedule (about 100k ops): the SVG bins per pixel column and stays small
"$PPSC" sim "$top_srcdir/bench/sim_interleaved.pps" -D P=16 -D m=256 -q --svg "$tmp/dense.svg" 2>"$tmp/err" || die "dense sim exit $?"
has "$tmp/dense.svg" '</svg>'
[ "$(wc -c <"$tmp/dense.svg")" -lt 5000000 ] || die "dense SVG over 5 MB"
# not written (no partial file) when the schedule does not simulate
"$PPSC" sim deadlock.pps -q --trace "$tmp/dt.json" --svg "$tmp/dt.svg" 2>/dev/null
[ $? -eq 1 ] || die "sim deadlock: expected exit 1"
[ ! -e "$tmp/dt.json" ] && [ ! -e "$tmp/dt.svg" ] || die "trace/svg written for a deadlocked schedule"
# an unwritable output: exit 2, nothing left behind
"$PPSC" sim one_f_one_b.pps -q --trace "$tmp/no/such/dir/t.json" 2>/dev/null
[ $? -eq 2 ] || die "unwritable trace: expected exit 2"
ls "$tmp" | grep -q '\.tmp\.' && die "temporary file left behind"

# CSV: import, check, export
printf '0F0,0F1,,0I0,0W0,0I1,0W1\n,1F0,1I0,1W0,1F1,1I1,1W1\n' >"$tmp/s.csv"
"$PPSC" import-csv "$tmp/s.csv" -o "$tmp/s.pps" 2>"$tmp/err" || { die "import-csv exit $?"; cat "$tmp/err"; }
has "$tmp/s.pps" 'placement \[0, 1\];'
has "$tmp/s.pps" 'device 1 { F(0,1) B(0,1) W(0,1) F(1,1) B(1,1) W(1,1) }'
"$PPSC" check "$tmp/s.pps" >/dev/null 2>"$tmp/err" || { die "imported schedule does not check"; cat "$tmp/err"; }
"$PPSC" export-csv "$tmp/s.pps" -o "$tmp/s2.csv" 2>"$tmp/err" || die "export-csv exit $?"
printf '0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n' >"$tmp/want.csv"
cmp -s "$tmp/want.csv" "$tmp/s2.csv" || { die "export-csv differs"; diff "$tmp/want.csv" "$tmp/s2.csv"; }
# fused backward round trip: B -> BW -> B
printf '0F0,0B0\n,1F0,1B0\n' >"$tmp/f.csv"
"$PPSC" import-csv "$tmp/f.csv" -o "$tmp/f.pps" 2>/dev/null || die "import fused"
has "$tmp/f.pps" 'BW(0,1)'
# malformed: located errors, exit 1, no output
printf '0F0,0X1\n1F0,,1F\n' >"$tmp/bad.csv"
"$PPSC" import-csv "$tmp/bad.csv" -o "$tmp/bad.pps" --color=never 2>"$tmp/err"
[ $? -eq 1 ] || die "bad csv: expected exit 1"
[ ! -e "$tmp/bad.pps" ] || die "output written for a malformed CSV"
has "$tmp/err" 'bad.csv:1:5: error: unsupported action'
has "$tmp/err" 'bad.csv:2:6: error: action .1F. needs a microbatch number'
# a stage on two ranks
printf '0F0,0B0\n0F1,0B1\n' >"$tmp/two.csv"
"$PPSC" import-csv "$tmp/two.csv" -o "$tmp/two.pps" --color=never 2>"$tmp/err"
[ $? -eq 1 ] || die "stage on two ranks: expected exit 1"
has "$tmp/err" 'two.csv:2:1: error: stage 0 runs on rank 1 here, but on rank 0 before'
# the peak device when every device peaks at 0 (zero-size activations): the first
"$PPSC" sim zero_memory.pps --json > "$tmp/z.json" 2>/dev/null || die "sim zero_memory exit $?"
has "$tmp/z.json" '"peak_memory":0,"peak_memory_device":0,'
# the per-device table: column NAME of device D in `ppsc sim FILE`'s table is VALUE
table_is() {
  "$PPSC" sim "$1" > "$tmp/tab.txt" 2>&1 || { die "sim $1 exit $?"; return; }
  awk -v d="$2" -v name="$3" -v want="$4" '
    $1 == "device" { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
    c && $1 == d { got = $c } END { exit !(got == want) }' "$tmp/tab.txt" ||
    { die "$1: device $2's $3 is not $4"; grep -A3 '^device' "$tmp/tab.txt"; }
}
# a first start under one time unit is shown as it is (device 1 of short_run.pps
# starts at TF = 0.1); at equal times frees count before allocations (offload_ties.pps)
table_is short_run.pps 1 first 0.1
table_is offload_ties.pps 0 time_mem 2
exit $fail
