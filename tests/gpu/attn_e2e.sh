#!/bin/sh
# tests/gpu/attn_e2e.sh: the fused attention path (cuDNN, PPSRT_CUDA_ATTN=cudnn) through the
# whole runtime on a GPU: a gpt model whose heads cuDNN takes (head dim 64 and 128) under
# 1F1B at P = 2 passes --check (loss and every gradient against a one-device run), twice
# with the same losses bit for bit (the deterministic backward), and its losses agree with
# the cuBLAS path's within bf16 accuracy. Skipped (77) without a GPU; a build without the
# cuDNN frontend says so (skip), as does a GPU machine where libcudnn.so.9 does not load,
# unless PPS_REQUIRE_CUDNN=1 (then it fails).
. "$(dirname "$0")/../runtime/lib.sh"
ngpu=$("$top_builddir/tests/gpu/cuda_kernels" --count) || { fail "cuda_kernels --count failed"; finish; }
if [ "${ngpu:-0}" -eq 0 ]; then echo "skip: no CUDA device visible"; exit 77; fi
if ! grep -q "HAVE_CUDNN_FE 1" "$top_builddir/config.h"; then
  echo "skip: built without the cuDNN frontend headers (./setup fetches them; see docs/gpu.md)"; exit 77
fi
build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
for shape in "--hidden 256 --heads 4 --query-groups 2" "--hidden 512 --heads 4 --query-groups 1"; do
  args="--backend cuda --model gpt $shape --seq 128 --vocab 512 --micro-batch 2 --iterations 3 --json"
  tag=$(echo "$shape" | tr -dc '0-9')
  for run in 1 2; do
    if PPSRT_CUDA_ATTN=cudnn "$WORK/g" $args --check > "$WORK/dnn$tag.$run.json" 2> "$WORK/dnn$tag.$run.err"; then
      pass "cudnn $shape --check (run $run)"
    elif grep -q "cannot load cuDNN\|too old" "$WORK/dnn$tag.$run.err" && [ "${PPS_REQUIRE_CUDNN:-0}" != 1 ]; then
      echo "skip: cuDNN not usable here: $(head -1 "$WORK/dnn$tag.$run.err")"; exit 77
    else
      fail "cudnn $shape --check (run $run)"; cat "$WORK/dnn$tag.$run.err" >&2
    fi
  done
  PPSRT_CUDA_ATTN=cublas "$WORK/g" $args > "$WORK/blas$tag.json" 2> "$WORK/blas$tag.err" || fail "cublas $shape"
  python3 - "$WORK/dnn$tag.1.json" "$WORK/dnn$tag.2.json" "$WORK/blas$tag.json" <<'PY' && pass "cudnn $shape: losses repeat bit for bit and match cuBLAS's" || fail "cudnn $shape losses"
import json, sys
l = [[it["loss"] for it in json.load(open(f))["iterations"]] for f in sys.argv[1:]]
print("cudnn", l[0], "cudnn again", l[1], "cublas", l[2])
assert l[0] == l[1], "the two cuDNN runs differ"
assert all(abs(a - b) <= 2e-3 * abs(b) for a, b in zip(l[0], l[2])), "cuDNN and cuBLAS losses differ by more than 0.2%"
PY
done
finish
