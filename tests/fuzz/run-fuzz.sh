#!/bin/sh
# tests/fuzz/run-fuzz.sh SECONDS [BUILDDIR]: builds the libFuzzer target for the compiler
# (`make fuzz` in BUILDDIR, default .) and runs it for SECONDS (default 60) on a
# copy of the seed corpus (tests/fuzz/corpus plus examples/ and tests/front/good/).
# Exit 0 when no crash was found; a crash leaves crash-* files in the work directory.
secs=${1:-60}
build=${2:-.}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
make -C "$build" fuzz >/dev/null || { echo "run-fuzz: 'make fuzz' failed (needs clang)"; exit 1; }
build=$(cd "$build" && pwd)   # (the run below changes directory)
bin="$build/tests/fuzz/fuzz_front"
work=${TMPDIR:-/tmp}/pps-fuzz-run.$$
mkdir -p "$work/corpus"
cp "$here"/corpus/* "$top"/examples/*.pps "$top"/tests/front/good/*.pps "$work/corpus/" 2>/dev/null
cd "$work" || exit 1
"$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$here/pps.dict" corpus >fuzz.log 2>&1
rc=$?
tail -20 fuzz.log
if [ $rc != 0 ]; then
  echo "run-fuzz: crash; inputs kept in $work"; exit 1
fi
rm -rf "$work"
echo "run-fuzz: no crash in $secs s"
