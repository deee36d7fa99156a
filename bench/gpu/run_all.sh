#!/bin/sh
# bench/gpu/run_all.sh: every GPU measurement of docs/gpu.md, in order; results (text and
# JSON) under $OUT (default ./bench-gpu-results). `make bench-gpu` runs it.
dir=$(dirname "$0")
status=0
for b in check_schedules memory offload layer_mfu epilogue; do
  sh "$dir/$b.sh"
  st=$?
  [ $st -eq 77 ] && { echo "# skipped: no GPU"; exit 77; }
  [ $st -ne 0 ] && status=$st
done
exit $status
