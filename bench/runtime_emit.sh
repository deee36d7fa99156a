#!/bin/sh
# runtime_emit.sh: how long `ppsc emit-c` and the C compiler take on generated tables of
# about 25,000 to 200,000 ops (1F1B, P = 8), with -Wall -Wextra -Werror at -O0 and -O2.
# Run from a build directory (make bench-emit). Prints a header, one line per size.
# What it does not: no running of the programs (bench/runtime_overhead does that).
set -e
PPSC=${PPSC:-./ppsc}
SRC=${top_srcdir:-$(dirname "$0")/..}
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pps-emit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
echo "# ppsc emit-c + $CC -Wall -Wextra -Werror -c, 1F1B P=8 ($($CC --version | head -1))"
printf '%-8s %10s %12s %12s %12s\n' m ops emit_s cc_O0_s cc_O2_s
for m in 550 1100 2200 4400; do
  t0=$(now); "$PPSC" emit-c "$SRC/examples/1f1b.pps" -D P=8 -D m=$m -o "$tmp/g.c"; t1=$(now)
  "$CC" -O0 -Wall -Wextra -Werror -I"$SRC/runtime" -c "$tmp/g.c" -o "$tmp/g.o"; t2=$(now)
  "$CC" -O2 -Wall -Wextra -Werror -I"$SRC/runtime" -c "$tmp/g.c" -o "$tmp/g.o"; t3=$(now)
  ops=$(sed -n 's/.* microbatches, \([0-9]*\) ops after lowering.*/\1/p' "$tmp/g.c")
  printf '%-8s %10s %12.3f %12.3f %12.3f\n' $m $ops $(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc) $(echo "$t3 - $t2" | bc)
done
