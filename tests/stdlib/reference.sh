#!/bin/sh
# tests/stdlib/reference.sh: at P = 4, m = 8, TF = TB = TW = 1, TC = 0 every schedule
# of the reference table is at least as good on makespan and peak memory at once
# (docs: /work/shared/design/reference-figures.md):
#   1F1B 33/4, interleaved v=2 28.5/5.5, ZB-H1 27/4, ZB-H2 27/8, ZB-V 25.5/4,
#   V-Half 26.5/3, V-Min 29.5/2, 1F1B-V 31.5/3.
# V-Half, V-Min and 1F1B-V are building blocks compacted by `squeeze` (docs/language.md).
. "${top_srcdir:?}/tests/stdlib/lib.sh"
while read -r s mk pk; do
  set -- $(figures "$STD/$s.pps" -D P=4 -D m=8)
  if [ "$1" != true ] || [ "$5" != true ]; then bad "$s: not valid ($*)"; continue; fi
  awk -v a="$2" -v b="$3" -v mk="$mk" -v pk="$pk" 'BEGIN { exit !(a <= mk + 1e-9 && b <= pk + 1e-9) }' \
    || bad "$s: makespan $2 / peak $3, reference $mk / $pk"
  echo "$s: $2 / $3 (reference $mk / $pk)"
done <<EOT
1f1b 33 4
interleaved_1f1b 28.5 5.5
zb_h1 27 4
zb_h2 27 8
zb_v 25.5 4
v_half 26.5 3
v_min 29.5 2
1f1b_v 31.5 3
EOT
exit $fail
