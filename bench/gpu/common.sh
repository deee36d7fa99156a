# bench/gpu/common.sh: helpers sourced by the GPU benchmark scripts (not a benchmark).
# Environment (set by `make bench-gpu`, or by hand): top_srcdir, top_builddir, PPSC.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$(pwd)}"
: "${PPSC:=$top_builddir/ppsc}"
: "${OUT:=$top_builddir/bench-gpu-results}"
PPS_BUILD_TREE=$top_builddir
export PPS_BUILD_TREE
mkdir -p "$OUT/bin"

# gpu_count: visible GPUs; a count that fails (a CUDA error other than "no device") is
# an error, never 0
gpu_count() {
  "$top_builddir/tests/gpu/cuda_kernels" --count || { echo "bench: cuda_kernels --count failed" >&2; exit 1; }
}
require_gpu() {
  n=$(gpu_count) || exit 1
  if [ "$n" -eq 0 ]; then echo "# no CUDA device visible: nothing measured"; exit 77; fi
}
header() {
  echo "# $1"
  echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), commit ${PPS_COMMIT:-$(git -C "$top_srcdir" rev-parse --short HEAD 2>/dev/null || echo ?)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# GPU: /'
  "$PPSC" --version 2>/dev/null | sed 's/^/# /' | head -1
}
# build NAME FILE [-D ...] -> $OUT/bin/NAME
build() {
  name=$1; shift
  "$PPSC" build "$@" -o "$OUT/bin/$name" 2> "$OUT/bin/$name.err" || { cat "$OUT/bin/$name.err" >&2; return 1; }
}
# json FILE EXPR: evaluates a Python expression on the JSON object `j` read from FILE.
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
schedules() { ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null; }
# record FILE REC: the last JSON line of FILE, with date, commit and driver added, onto REC
# (the JSON-lines files that go to bench/gpu/results/)
record() {
  _commit=${PPS_COMMIT:-$(git -C "$top_srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)}
  _driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  grep '^{' "$1" | tail -1 | python3 -c "import json,sys,datetime; j=json.loads(sys.stdin.read()); j.update(date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'), commit='$_commit', driver='$_driver'); print(json.dumps(j))" >> "$2"
}
# field FILE KEY: KEY of the last JSON line of FILE
field() { grep '^{' "$1" | tail -1 | python3 -c "import json,sys; print(json.loads(sys.stdin.read()).get('$2', ''))"; }
