#!/bin/sh
# bench/gpu/memory.sh: measured peak activation memory per device on the GPU against
# `ppsc sim`'s prediction, for every stdlib/example schedule at P = 4 (one GPU shared
# by the ranks, or one GPU per rank when 4 are visible). Units: one device share of one
# microbatch's activations, as ppsc reports them; bytes from the CUDA allocator's count.
. "$(dirname "$0")/common.sh"
require_gpu
P=${P:-4}; m=${m:-$((2 * P))}
SIZES=${SIZES:-"--model gpt --hidden 1024 --heads 16 --query-groups 4 --seq 1024 --vocab 8192 --micro-batch 1 --iterations 2"}
header "memory: measured vs predicted peak activation, P=$P m=$m, $SIZES"
printf "%-28s %6s %14s %14s %16s\n" schedule device measured_u predicted_u resident_peak_B
for f in $(schedules); do
  base=$(basename "$f" .pps); name=${base}_mem
  "$PPSC" check "$f" -D P=$P -D m=$m -q > /dev/null 2>&1 || continue
  build "$name" "$f" -D P=$P -D m=$m || continue
  "$OUT/bin/$name" --backend cuda --transport nccl --json $SIZES > "$OUT/$name.json" 2> "$OUT/$name.err" || true
  [ -s "$OUT/$name.json" ] || { echo "$base: no JSON (see $OUT/$name.err)"; continue; }
  python3 - "$OUT/$name.json" "$base" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for d in j.get("per_device", []):
    print("%-28s %6d %14.4g %14s %16s" % (sys.argv[2], d["device"], d["peak_units"],
          d.get("predicted_peak_units"), d.get("resident_peak_bytes")))
PY
done
echo "# end memory"
