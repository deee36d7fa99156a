#!/bin/sh
# tests/fuzz/run-fuzz.sh SECONDS [BUILDDIR]: builds the libFuzzer targets (`make fuzz` in
# BUILDDIR, default .) and runs each for SECONDS (default 60):
#   fuzz_front   a .pps through the whole compiler, on a copy of tests/fuzz/corpus plus
#                examples/ and tests/front/good/;
#   fuzz_inputs  the other files PPS reads (schedule CSVs, cost profiles, token files,
#                checkpoints; tests/fuzz/fuzz_inputs.c), on a copy of tests/fuzz/corpus-inputs.
# Exit 0 when neither found a crash; a crash leaves crash-* (or oom-*, timeout-*) files in
# the work directory, which is kept and named.
secs=${1:-60}
build=${2:-.}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
make -C "$build" fuzz >/dev/null || { echo "run-fuzz: 'make fuzz' failed (needs clang)"; exit 1; }
build=$(cd "$build" && pwd)   # (the runs below change directory)
work=${TMPDIR:-/tmp}/pps-fuzz-run.$$
mkdir -p "$work/front" "$work/inputs"
cp "$here"/corpus/* "$top"/examples/*.pps "$top"/tests/front/good/*.pps "$work/front/" 2>/dev/null
cp "$here"/corpus-inputs/* "$work/inputs/"
status=0
# fuzz TARGET CORPUS MAXLEN DICT...
fuzz() {
  t=$1 corpus=$2 maxlen=$3; shift 3
  (cd "$work" && TMPDIR="$work" "$build/tests/fuzz/$t" -max_total_time="$secs" -max_len="$maxlen" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$@" "$corpus" >"$t.log" 2>&1)
  rc=$?
  tail -20 "$work/$t.log"
  if [ $rc != 0 ]; then echo "run-fuzz: $t: crash (exit $rc); inputs kept in $work"; status=1
  else echo "run-fuzz: $t: no crash in $secs s"; fi
}
fuzz fuzz_front front 4096 -dict="$here/pps.dict"
fuzz fuzz_inputs inputs 40000
[ $status = 0 ] && rm -rf "$work"
exit $status
