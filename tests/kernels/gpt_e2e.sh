#!/bin/sh
# gpt_e2e.sh: the gpt model end to end through the runtime on the CPU backend, each run
# checked with --check (loss and every gradient vs the single-device reference,
# |a-b| <= 1e-5 + 1e-3*|ref|, plus peak memory where predicted): 1F1B with split B/W,
# Vocab-1 and Vocab-2 (uneven shards: vocab 29 over 3 devices), several microbatches
# in flight, interleaved placement (4 stages on 2 devices). Tiny sizes: a few seconds.
set -u
bin=${top_builddir:-.}/tests/kernels/gpt_tables
fail=0
run() {
  out=$("$bin" "$@" --model gpt --check --iterations 2 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: gpt_tables $* (exit $rc)"
    echo "$out" | grep -v 'match$' | head -20
    fail=1
  else
    echo "ok   gpt_tables $*: $(echo "$out" | grep '^check: loss' | sed 's/ (tolerance.*//')"
  fi
}
run 1f1b 3 3 4 0
run seq 3 3 2 1
run seq 3 3 2 2
run gpipe 3 3 4 1
run gpipe 3 3 4 2
run gpipe 2 4 3 1
run gpipe 2 4 3 2
exit $fail
