#!/bin/sh
# bench/gpu/check_schedules.sh: every stdlib/example schedule at P = 2, 3, 4 ranks on ONE
# GPU (NCCL transport in process: ranks share the GPU through the device-copy channel),
# gpt model, --check against the single-device run. Prints one row per run.
. "$(dirname "$0")/common.sh"
require_gpu
SIZES=${SIZES:-"--model gpt --hidden 256 --heads 8 --query-groups 2 --seq 128 --vocab 2048 --micro-batch 2 --iterations 3"}
header "check_schedules: --backend cuda --transport nccl --check, $SIZES"
printf "%-28s %3s %3s %-6s %-8s %-8s %s\n" schedule P m exit check memory max_diff
for f in $(schedules); do
  base=$(basename "$f" .pps)
  for P in 2 3 4; do
    m=$((2 * P)); name=${base}_P$P
    "$PPSC" check "$f" -D P=$P -D m=$m -q > /dev/null 2>&1 || continue
    build "$name" "$f" -D P=$P -D m=$m || { printf "%-28s %3d %3d build-failed\n" "$base" $P $m; continue; }
    "$OUT/bin/$name" --backend cuda --transport nccl --check --json $SIZES > "$OUT/$name.check.json" 2> "$OUT/$name.check.err"
    st=$?
    if [ -s "$OUT/$name.check.json" ]; then
      printf "%-28s %3d %3d %-6d %-8s %-8s %s\n" "$base" $P $m $st \
        "$(json "$OUT/$name.check.json" "j.get('check',{}).get('match')")" \
        "$(json "$OUT/$name.check.json" "j.get('memory_match')")" \
        "$(json "$OUT/$name.check.json" "j.get('check',{}).get('max_diff')")"
    else
      printf "%-28s %3d %3d %-6d (no JSON: see %s)\n" "$base" $P $m $st "$OUT/$name.check.err"
    fi
  done
done
echo "# end check_schedules"
