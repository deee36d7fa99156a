#!/bin/sh
# tests/gpu/conformance_emu.sh: the conformance program (tests/gpu/conformance.c) on the
# emulator (LD_PRELOAD=tests/gpu/emu/libppsrt_emu.so) under seeds 1, 2, 3: every answer
# (error codes, blocking, stream semantics, argument validation, device properties,
# cuBLAS and NCCL statuses) must equal the GPU's, recorded in
# tests/gpu/conformance.expected. Each disagreement is printed. The gates are 1 s here
# (200 ms on a GPU): whether a stream waits is judged by polling while a gate holds, and
# on a loaded 2-core machine a stream worker can be kept off the CPU for a few hundred
# ms (at a load of 30, a 200 ms gate made seed 2 answer "waits" once). Exit 77 where the
# emulator is not built.
. "$(dirname "$0")/../runtime/lib.sh"
. "$top_srcdir/tests/gpu/conformance_lib.sh"
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
CONF=$top_builddir/tests/gpu/conformance
[ -f "$EMU" ] && [ -x "$CONF" ] || { echo "skip: $EMU or $CONF not built"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
for seed in 1 2 3; do
  env LD_PRELOAD="$EMU" PPS_EMU_SEED=$seed PPS_EMU_TIMEOUT=20 "$CONF" --gate-ms 1000 > "$WORK/emu$seed.out" \
    2> "$WORK/emu$seed.err"
  st=$?
  if [ $st -ne 0 ]; then
    fail "seed $seed: conformance on the emulator exited $st"
    tail -5 "$WORK/emu$seed.out" "$WORK/emu$seed.err" | sed 's/^/    /' >&2
    continue
  fi
  if conf_compare "$top_srcdir/tests/gpu/conformance.expected" "$WORK/emu$seed.out" "seed $seed" > "$WORK/diff"; then
    pass "seed $seed: the emulator answers as the GPU did ($(grep -c ': ' "$WORK/emu$seed.out") lines)"
  else
    cat "$WORK/diff" >&2
    fail "seed $seed: $(wc -l < "$WORK/diff") answer(s) of the emulator differ from the GPU's"
  fi
done
finish
