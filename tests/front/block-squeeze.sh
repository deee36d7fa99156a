#!/bin/sh
# tests/front/block-squeeze.sh: `squeeze;` reaches the reference figures at P = 4,
# m = 8, TF = TB = TW = 1, TC = 0 (/work/shared/design/reference-figures.md) on inline
# copies of the building blocks (tests/front/good/blocks_squeeze*.pps, not stdlib):
#   V-Half  26.5 / 3  (the block alone: 30 / 3)
#   1F1B-V  31.5 / 3  (the block alone: 33 / 3)
# and stays valid, never slower than the block alone and within its peak memory for
# P = 2..8, m = P, 2P, 3P. The JSON is read with sed/awk (no python in CI).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
good="$top_srcdir/tests/front/good"
fail=0
# figures FILE ARGS...: prints "valid makespan peak"
figures() {
  f=$1; shift
  "$PPSC" sim "$f" --json "$@" 2>/dev/null | sed 's/"per_device".*//' | awk '
    { if (match($0, /"valid":[a-z]+/)) v = substr($0, RSTART + 8, RLENGTH - 8)
      if (match($0, /"makespan":[-0-9.eE+]+/)) mk = substr($0, RSTART + 11, RLENGTH - 11)
      if (match($0, /"peak_memory":[-0-9.eE+]+/)) pk = substr($0, RSTART + 14, RLENGTH - 14) }
    END { print (v == "" ? "none" : v), (mk == "" ? -1 : mk), (pk == "" ? -1 : pk) }'
}
# expect NAME FILE MAKESPAN PEAK ARGS...: valid, makespan <= MAKESPAN, peak <= PEAK
expect() {
  name=$1 f=$2 mk=$3 pk=$4; shift 4
  set -- $(figures "$f" "$@")
  if [ "$1" != true ] || ! awk -v a="$2" -v b="$3" -v mk="$mk" -v pk="$pk" \
       'BEGIN { exit !(a <= mk + 1e-9 && b <= pk + 1e-9) }'; then
    echo "FAIL $name: valid $1, makespan $2, peak $3 (want <= $mk / $pk)"; fail=1
  else
    echo "ok $name: $2 / $3"
  fi
}
vh="$good/blocks_squeeze.pps"
bw="$good/blocks_squeeze_bw.pps"
expect "V-Half squeezed" "$vh" 26.5 3 -D P=4 -D m=8
expect "1F1B-V squeezed" "$bw" 31.5 3 -D P=4 -D m=8
# without the statement the block is unchanged (30 / 3 and 33 / 3)
set -- $(figures "$vh" -D P=4 -D m=8 -D sq=false)
[ "$1 $2 $3" = "true 30 3" ] || { echo "FAIL V-Half without squeeze: $*"; fail=1; }
set -- $(figures "$bw" -D P=4 -D m=8 -D sq=false)
[ "$1 $2 $3" = "true 33 3" ] || { echo "FAIL 1F1B-V without squeeze: $*"; fail=1; }
# a sweep: valid, not slower than the block alone, peak within the block's
# (V-Half: (P + 2) div 2, the paper's figure)
n=0
for f in "$vh" "$bw"; do
  for P in 2 3 4 5 6 7 8; do
    for k in 1 2 3; do
      m=$((P * k))
      set -- $(figures "$f" -D P=$P -D m=$m -D sq=false)
      plain_mk=$2 plain_pk=$3
      [ "$f" = "$vh" ] && plain_pk=$(((P + 2) / 2))
      set -- $(figures "$f" -D P=$P -D m=$m)
      n=$((n + 1))
      if [ "$1" != true ] || ! awk -v a="$2" -v b="$3" -v mk="$plain_mk" -v pk="$plain_pk" \
           'BEGIN { exit !(a <= mk + 1e-9 && b <= pk + 1e-9) }'; then
        echo "FAIL $(basename "$f") P=$P m=$m: valid $1, makespan $2, peak $3 (block alone: $plain_mk, peak <= $plain_pk)"
        fail=1
      fi
    done
  done
done
echo "block-squeeze: 4 figures, $n sweep cases"
exit $fail
