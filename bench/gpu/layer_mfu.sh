#!/bin/sh
# bench/gpu/layer_mfu.sh: one transformer layer (F + B + W, bf16) on the PPS CUDA backend
# (bench/gpu/layer_bench) against PyTorch eager with SDPA (bench/gpu/torch_layer.py) in the
# same run, at the four sizes of docs/gpu.md (hidden/seq/heads/groups 2048/2048/16/4,
# 4096/4096/32/8, 4096/8192/32/8, 8192/4096/64/8), each with both PPS attention paths
# (cudnn: fused; cublas: the GEMM path). Then the per-kernel-class breakdown of both
# sides at 4096/4096 (--breakdown), and the same layer through the whole runtime.
# Every measurement is also appended as one JSON record to $OUT/layer_records.jsonl,
# with the date, the commit, the GPU, the driver and the CUDA runtime.
# PEAK_TFLOPS overrides the dense bf16 peak taken from the GPU's name (vendor datasheet
# figures: H100/H200 SXM 989, H100 PCIe 756, A100 312). SIZES overrides the size list
# ("h,s,heads,groups" separated by spaces), BREAKDOWN the breakdown's size, ITERS the
# timed iterations (default 20); SKIP_RUNTIME=1 leaves out the whole-runtime run.
# EPILOGUE=none|lt|LIST runs the PPS layer with its biases and those GEMM epilogues fused
# (layer_bench --epilogue; bench/gpu/epilogue.sh compares them); unset, the layer has no
# biases, as torch_layer.py's. ARCHS (default "gpt llama") the layers timed at each size:
# GPT-2's and Llama's (RMS norms, RoPE, SwiGLU of Megatron's default width, no biases;
# layer_bench --arch llama, torch_layer.py --arch llama); EPILOGUE applies to gpt only.
. "$(dirname "$0")/common.sh"
require_gpu
SIZES=${SIZES:-"2048,2048,16,4 4096,4096,32,8 4096,8192,32,8 8192,4096,64,8"}
ARCHS=${ARCHS:-"gpt llama"}
ITERS=${ITERS:-20}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$PEAK_TFLOPS" ]; then
  case "$name" in
    *H200*|*H100*SXM*|*H100\ 80GB\ HBM3*) PEAK_TFLOPS=989 ;;
    *H100*PCIe*|*H100*) PEAK_TFLOPS=756 ;;
    *A100*) PEAK_TFLOPS=312 ;;
    *) PEAK_TFLOPS=0 ;;
  esac
fi
header "layer_mfu: sizes $SIZES, $ITERS iterations, peak $PEAK_TFLOPS TFLOP/s ($name)"
rec="$OUT/layer_records.jsonl"
have_torch=0; python3 -c "import torch" 2>/dev/null && have_torch=1
printf '%-24s %11s %11s %11s %9s %9s\n' "arch h/s/heads/groups" "pps_cudnn" "pps_cublas" "torch_sdpa" "cudnn/pt" "cublas/pt"
for arch in $ARCHS; do
for sz in $SIZES; do
  IFS=, read h s H G <<EOT
$sz
EOT
  args="--arch $arch --hidden $h --seq $s --heads $H --groups $G --batch 1 --iters $ITERS --warmup 3 --peak-tflops $PEAK_TFLOPS --json"
  pps_args="$args"
  [ "$arch" = gpt ] && pps_args="$args${EPILOGUE:+ --epilogue $EPILOGUE}"
  tag="$arch-$h-$s-$H-$G"
  for path in cudnn cublas; do
    if "$top_builddir/bench/gpu/layer_bench" $pps_args --attn $path > "$OUT/layer_pps_${path}_$tag.txt" 2>&1; then
      record "$OUT/layer_pps_${path}_$tag.txt" "$rec"
    else
      echo "# layer_bench --attn $path at $tag failed:"; tail -3 "$OUT/layer_pps_${path}_$tag.txt"
    fi
  done
  pt=
  if [ $have_torch = 1 ] && python3 "$top_srcdir/bench/gpu/torch_layer.py" $args > "$OUT/layer_torch_$tag.txt" 2>&1; then
    record "$OUT/layer_torch_$tag.txt" "$rec"; pt=$(field "$OUT/layer_torch_$tag.txt" total_ms)
  fi
  c=$(field "$OUT/layer_pps_cudnn_$tag.txt" total_ms 2>/dev/null); b=$(field "$OUT/layer_pps_cublas_$tag.txt" total_ms 2>/dev/null)
  python3 - "$arch $h/$s/$H/$G" "$c" "$b" "$pt" <<'PY'
import sys
n, c, b, t = sys.argv[1], *[float(x) if x else None for x in sys.argv[2:]]
f = lambda v: "%11.3f" % v if v else "%11s" % "-"
r = lambda v: "%9.3f" % (v / t) if v and t else "%9s" % "-"
print("%-24s %s %s %s %s %s" % (n, f(c), f(b), f(t), r(c), r(b)))
PY
done
done
echo "# ms for F+B+W (PPS) and fwd+bwd (PyTorch), median of $ITERS; ratio = PPS time / PyTorch time"
IFS=, read h s H G <<EOT
${BREAKDOWN:-4096,4096,32,8}
EOT
echo "# breakdown at $h/$s/$H/$G:"
bargs="--hidden $h --seq $s --heads $H --groups $G --batch 1 --iters 10 --warmup 3 --json --breakdown"
for path in cudnn cublas; do
  echo "## PPS, attention $path"
  if "$top_builddir/bench/gpu/layer_bench" $bargs${EPILOGUE:+ --epilogue $EPILOGUE} --attn $path > "$OUT/layer_breakdown_$path.txt" 2>&1; then
    sed -n '/^# breakdown/,/^total/p' "$OUT/layer_breakdown_$path.txt"
    record "$OUT/layer_breakdown_$path.txt" "$rec"
  else
    echo "# failed:"; tail -3 "$OUT/layer_breakdown_$path.txt"
  fi
done
if [ $have_torch = 1 ]; then
  echo "## PyTorch eager"
  python3 "$top_srcdir/bench/gpu/torch_layer.py" $bargs > "$OUT/layer_breakdown_torch.txt" 2>&1
  sed -n '/^# breakdown/,$p' "$OUT/layer_breakdown_torch.txt" | grep -v '^{'
  record "$OUT/layer_breakdown_torch.txt" "$rec"
else
  echo "# PyTorch not installed: no comparison (pip install torch, then rerun)"
fi
# The same layer through the whole runtime (one device, one layer, tiny vocabulary).
if [ "${SKIP_RUNTIME:-0}" = 1 ]; then
  echo "# runtime path: skipped (SKIP_RUNTIME=1)"
elif build layer1 "$top_srcdir/examples/1f1b.pps" -D P=1 -D m=4 2>/dev/null; then
  for path in cudnn cublas; do
    PPSRT_CUDA_ATTN=$path "$OUT/bin/layer1" --backend cuda --model gpt --hidden 4096 --seq 4096 --heads 32 --query-groups 8 \
      --vocab 1024 --micro-batch 1 --layers-per-stage 1 --iterations 5 --json > "$OUT/layer_runtime_$path.json" \
      2> "$OUT/layer_runtime_$path.err" &&
    json "$OUT/layer_runtime_$path.json" "'# runtime 1-device gpt layer ($path), median iteration (4 microbatches): %.4f s' % sorted(i['time_s'] for i in j['iterations'])[len(j['iterations'])//2]"
  done
else
  echo "# examples/1f1b.pps does not build at P=1: runtime path not measured"
fi
echo "# records: $rec"
echo "# end layer_mfu"
