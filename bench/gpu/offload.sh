#!/bin/sh
# bench/gpu/offload.sh: iteration time without offload and with full offload (every
# activation to pinned host memory after F, back before B), 1F1B at P = ${P:-4}, the
# ratio showing how much of the copy time hides behind compute, each beside the
# iteration `ppsc sim` predicts for it. Real sizes, not unit costs: the schedule gets a
# model { } block of the gpt shape below (the runtime takes its sizes from it, ppsc its
# activation bytes) and a hardware { } block with the host link's bandwidth, so copy
# times are bytes / bandwidth; the passes' times come from a --profile of the
# no-offload program (threads transport, the same GPU), so the compiler plans the
# reloads and ppsc sim predicts against measured pass times. The runs are --model gpt (the
# sizes come from model { }; without the flag the runtime would run its mlp). Steps:
#   1. off0 (no offload) built with model/hardware, run with --profile (threads);
#   2. off0 and off1 (offload ratio 1) rebuilt with `cost profile` of that run;
#   3. each run with the NCCL transport (--json), and `ppsc sim --json` of each.
# Environment: P, m; H HEADS KV_GROUPS SEQ VOCAB MB LPS (layers per stage) ITERS; HOST_BW
# (bytes/s one way, default 55e9: pinned copies on an H200) and DUPLEX_BW (each way
# while both directions run, default 48.7e9, the H200's); LINK_DEVS ranks share one
# host link (default: the number of GPUs the ranks run on is 1 when one is visible,
# so P; else 1): hardware { devices_per_host_link; duplex_bandwidth }, which ppsc sim
# models as one link shared by those ranks, both directions at once.
. "$(dirname "$0")/common.sh"
require_gpu
P=${P:-4}; m=${m:-$((2 * P))}
H=${H:-2048}; HEADS=${HEADS:-16}; KV_GROUPS=${KV_GROUPS:-4}; SEQ=${SEQ:-2048}; VOCAB=${VOCAB:-8192}; MB=${MB:-1}
LPS=${LPS:-1}; ITERS=${ITERS:-6}; HOST_BW=${HOST_BW:-55e9}; DUPLEX_BW=${DUPLEX_BW:-48.7e9}
if [ -z "${LINK_DEVS:-}" ]; then if [ "$(gpu_count)" -ge "$P" ]; then LINK_DEVS=1; else LINK_DEVS=$P; fi; fi
header "offload: 1f1b P=$P m=$m, ratio 0 vs 1, gpt h=$H heads=$HEADS groups=$KV_GROUPS seq=$SEQ vocab=$VOCAB mb=$MB layers/stage=$LPS, host link $HOST_BW B/s one way, $DUPLEX_BW each way with both, shared by $LINK_DEVS rank(s)"

# gen R [PROFILE]: $OUT/offR.pps, examples/1f1b.pps with model/hardware (and the profile)
gen() {
  blocks="model { layers = $((LPS * P)); hidden = $H; heads = $HEADS; query_groups = $KV_GROUPS; seq = $SEQ; micro_batch = $MB; vocab = $VOCAB; dtype_bytes = 2; } hardware { host_bandwidth = $HOST_BW; duplex_bandwidth = $DUPLEX_BW; devices_per_host_link = $LINK_DEVS; }"
  [ "$1" = 1 ] && blocks="$blocks offload ratio 1;"
  [ -n "$2" ] && blocks="$blocks cost profile \"$2\";"
  sed "s|cost TF = 1, TB = 1, TW = 1, TC = 0;|$blocks|" "$top_srcdir/examples/1f1b.pps" > "$OUT/off$1.pps"
  grep -q "host_bandwidth" "$OUT/off$1.pps" || { echo "offload.sh: examples/1f1b.pps has no cost line to replace" >&2; return 1; }
}
gen 0 && build off0 "$OUT/off0.pps" -D P=$P -D m=$m || exit 1
"$OUT/bin/off0" --model gpt --backend cuda --transport threads --iterations 3 --profile "$OUT/off.profile" -q > "$OUT/profile.log" 2>&1 ||
  { echo "# profile run failed (see $OUT/profile.log)"; exit 1; }
printf "%-8s %13s %13s %13s %10s %13s %16s %9s\n" offload median_iter_s min_iter_s predicted_s pred/meas peak_units_d0 device_peak_B_d0 cancels
for r in 0 1; do
  gen $r "$OUT/off.profile" && build off$r "$OUT/off$r.pps" -D P=$P -D m=$m || continue
  "$PPSC" sim "$OUT/off$r.pps" -D P=$P -D m=$m --json > "$OUT/off$r.sim.json" 2> "$OUT/off$r.sim.err" || true
  "$OUT/bin/off$r" --model gpt --backend cuda --transport nccl --json --iterations $ITERS > "$OUT/off$r.json" 2> "$OUT/off$r.err" || true
  [ -s "$OUT/off$r.json" ] || { echo "ratio $r: no JSON (see $OUT/off$r.err)"; continue; }
  python3 - "$OUT/off$r.json" "$OUT/off$r.sim.json" "$r" <<'PY'
import json, sys, statistics
j = json.load(open(sys.argv[1]))
try: pred = json.load(open(sys.argv[2]))["makespan"]
except Exception: pred = float("nan")
t = [it["time_s"] for it in j["iterations"]][1:] or [it["time_s"] for it in j["iterations"]]
med = statistics.median(t)
d0 = j["per_device"][0]
print("%-8s %13.6f %13.6f %13.6f %10.3f %13.4g %16d %9d" % (sys.argv[3], med, min(t), pred, pred / med if med else float("nan"),
      d0["peak_units"], d0.get("device_peak_bytes", -1), sum(d.get("offloads_cancelled", 0) for d in j["per_device"])))
PY
done
echo "# end offload (the ratio of the two medians is the cost of full offload; predicted_s: ppsc sim's makespan from the profile and model/hardware)"
