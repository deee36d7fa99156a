#!/bin/sh
# bench/gpu/epilogue.sh: the fused GEMM epilogues (PPSRT_CUDA_EPILOGUE, through cuBLASLt)
# against the unfused kernels, on one GPT layer F + B + W with the model's biases
# (bench/gpu/layer_bench --epilogue) at the four sizes of docs/gpu.md. Per size: `none`
# (every GEMM then its bias / bias+GeLU / GeLU-gradient / bias-gradient kernel), `lt` (all
# four fused) and each epilogue alone (bias, bias_gelu, dgelu, bgrad), so that each is
# kept only where it measures faster (issue 19: turn the default on, or part of it, from
# these figures; docs/gpu.md says how). Prints ms per pass and each run's total over the
# unfused run's; every run is appended as one JSON record to $OUT/epilogue_records.jsonl
# (date, commit, driver added) for bench/gpu/results/. A run that asked for fusion and
# fused nothing, or fell back for some GEMMs (no cuBLASLt algorithm), is marked: its
# figures then measure less than the epilogue named.
# SIZES ("h,s,heads,groups" ...), ITERS (default 20), EPILOGUES (default "none lt bias
# bias_gelu dgelu bgrad") and ATTN (the attention path, default auto) override.
. "$(dirname "$0")/common.sh"
require_gpu
SIZES=${SIZES:-"2048,2048,16,4 4096,4096,32,8 4096,8192,32,8 8192,4096,64,8"}
ITERS=${ITERS:-20}
EPILOGUES=${EPILOGUES:-"none lt bias bias_gelu dgelu bgrad"}
ATTN=${ATTN:-auto}
header "epilogue: fused GEMM epilogues against the unfused kernels; sizes $SIZES, epilogues $EPILOGUES, $ITERS iterations, attention $ATTN"
rec="$OUT/epilogue_records.jsonl"
status=0
printf '%-18s %-10s %9s %9s %9s %9s %8s %s\n' "h/s/heads/groups" "epilogue" "F_ms" "B_ms" "W_ms" "total_ms" "/none" "fused/fell back"
for sz in $SIZES; do
  IFS=, read h s H G <<EOT
$sz
EOT
  tag="$h-$s-$H-$G"
  base=
  for e in $EPILOGUES; do
    o="$OUT/epilogue_${e}_$tag.txt"
    if ! "$top_builddir/bench/gpu/layer_bench" --hidden "$h" --seq "$s" --heads "$H" --groups "$G" --batch 1 \
         --iters "$ITERS" --warmup 3 --attn "$ATTN" --epilogue "$e" --json > "$o" 2>&1; then
      echo "# layer_bench --epilogue $e at $tag failed:"; tail -3 "$o"; status=1; continue
    fi
    record "$o" "$rec"
    [ "$e" = none ] && base=$(field "$o" total_ms)
    python3 - "$h/$s/$H/$G" "$e" "$base" "$(grep '^{' "$o" | tail -1)" <<'PY'
import json, sys
n, e, base, j = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
r = "%8.3f" % (j["total_ms"] / float(base)) if base else "%8s" % "-"
f, u = j.get("ep_fused", 0), j.get("ep_unfused", 0)
note = "" if e == "none" or (f and not u) else ("  <- NOTHING FUSED" if not f else "  <- some fell back")
print("%-18s %-10s %9.3f %9.3f %9.3f %9.3f %s %d/%d%s" % (n, e, j["f_ms"], j["b_ms"], j["w_ms"], j["total_ms"], r, f, u, note))
PY
  done
done
echo "# ms per pass, median of $ITERS; /none = total over the unfused run's at that size (< 1: the fused run is faster)"
echo "# records: $rec"
echo "# end epilogue"
exit $status
