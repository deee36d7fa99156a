#!/bin/sh
# bench/gpu/layer_mfu.sh: model FLOP utilisation of one transformer layer at h=4096,
# seq=4096, 32 heads, 8 query groups (bf16): the PPS CUDA backend (bench/gpu/layer_bench,
# F + B + W) against the GPU's peak and against PyTorch eager (bench/gpu/torch_layer.py)
# in the same run. PEAK_TFLOPS overrides the dense bf16 peak taken from the GPU's name
# (vendor datasheet figures: H100/H200 SXM 989, H100 PCIe 756, A100 312).
. "$(dirname "$0")/common.sh"
require_gpu
ARGS=${ARGS:-"--hidden 4096 --seq 4096 --heads 32 --groups 8 --batch 1 --iters 20 --warmup 3"}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$PEAK_TFLOPS" ]; then
  case "$name" in
    *H200*|*H100*SXM*|*H100\ 80GB\ HBM3*) PEAK_TFLOPS=989 ;;
    *H100*PCIe*|*H100*) PEAK_TFLOPS=756 ;;
    *A100*) PEAK_TFLOPS=312 ;;
    *) PEAK_TFLOPS=0 ;;
  esac
fi
header "layer_mfu: $ARGS, peak $PEAK_TFLOPS TFLOP/s ($name)"
"$top_builddir/bench/gpu/layer_bench" $ARGS --peak-tflops "$PEAK_TFLOPS" --json | tee "$OUT/layer_pps.txt"
pps=$(grep '^{' "$OUT/layer_pps.txt" | tail -1)
if python3 -c "import torch" 2>/dev/null; then
  python3 "$top_srcdir/bench/gpu/torch_layer.py" $ARGS --peak-tflops "$PEAK_TFLOPS" --json | tee "$OUT/layer_torch.txt"
  torch=$(grep '^{' "$OUT/layer_torch.txt" | tail -1)
  python3 - "$pps" "$torch" <<'PY'
import json, sys
p, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("# PPS F+B+W %.3f ms, PyTorch eager fwd+bwd %.3f ms: PPS/PyTorch time ratio %.3f" %
      (p["total_ms"], t["total_ms"], p["total_ms"] / t["total_ms"]))
PY
else
  echo "# PyTorch not installed: no comparison (pip install torch, then rerun)"
fi
# The same layer through the whole runtime (one device, one layer, tiny vocabulary).
if build layer1 "$top_srcdir/examples/1f1b.pps" -D P=1 -D m=4 2>/dev/null; then
  "$OUT/bin/layer1" --backend cuda --model gpt --hidden 4096 --seq 4096 --heads 32 --query-groups 8 --vocab 1024 \
    --micro-batch 1 --layers-per-stage 1 --iterations 5 --json > "$OUT/layer_runtime.json" 2> "$OUT/layer_runtime.err" &&
  json "$OUT/layer_runtime.json" "'# runtime 1-device gpt layer, median iteration (4 microbatches): %.3f s' % sorted(i['time_s'] for i in j['iterations'])[len(j['iterations'])//2]"
else
  echo "# examples/1f1b.pps does not build at P=1: runtime path not measured"
fi
echo "# end layer_mfu"
