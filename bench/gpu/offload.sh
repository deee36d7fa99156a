#!/bin/sh
# bench/gpu/offload.sh: iteration time and peak activation without offload and with full
# offload (every activation to pinned host memory after F, back before B), 1F1B at
# P = ${P:-4}; the ratio shows how much of the copy time hides behind compute. Sizes are
# chosen so a microbatch's activation copy is comparable to its compute (PipeOffload's
# regime); change SIZES to move along that axis.
. "$(dirname "$0")/common.sh"
require_gpu
P=${P:-4}; m=${m:-$((2 * P))}
SIZES=${SIZES:-"--model gpt --hidden 2048 --heads 16 --query-groups 4 --seq 2048 --vocab 8192 --micro-batch 1 --iterations 6"}
header "offload: 1f1b P=$P m=$m, ratio 0 vs 1, $SIZES"
printf "%-10s %14s %14s %16s\n" offload median_iter_s min_iter_s peak_units_dev0
for r in 0 1; do
  if [ $r = 0 ]; then   # no offload clause at all (a ratio must be positive)
    cp "$top_srcdir/examples/1f1b.pps" "$OUT/off$r.pps"
  else
    sed "s/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio $r;/" \
      "$top_srcdir/examples/1f1b.pps" > "$OUT/off$r.pps"
  fi
  build off$r "$OUT/off$r.pps" -D P=$P -D m=$m || continue
  "$OUT/bin/off$r" --backend cuda --transport nccl --json $SIZES > "$OUT/off$r.json" 2> "$OUT/off$r.err" || true
  [ -s "$OUT/off$r.json" ] || { echo "ratio $r: no JSON (see $OUT/off$r.err)"; continue; }
  python3 - "$OUT/off$r.json" "$r" <<'PY'
import json, sys, statistics
j = json.load(open(sys.argv[1]))
t = [it["time_s"] for it in j["iterations"]][1:] or [it["time_s"] for it in j["iterations"]]
print("%-10s %14.6f %14.6f %16.4g" % (sys.argv[2], statistics.median(t), min(t), j["per_device"][0]["peak_units"]))
PY
done
echo "# end offload (the ratio of the two medians is the cost of full offload)"
