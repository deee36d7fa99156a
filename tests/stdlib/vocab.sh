#!/bin/sh
# tests/stdlib/vocab.sh: Vocabulary Parallelism. On 1F1B, Vocab-1 keeps P + 2 and
# Vocab-2 P + 1 microbatches of activations; on V-Half every device holds the same
# activation and does the same work (balanced memory and compute).
. "${top_srcdir:?}/tests/stdlib/lib.sh"
costs="-D TS=0.3 -D TT=0.3 -D TIF=0.05 -D TIB=0.05 -D TCOLL=0.05"
for P in 2 3 4 8 16; do
  m=$((3 * P))
  for mode in 1 2; do
    set -- $(figures "$STD/vocab_1f1b.pps" -D P=$P -D m=$m -D mode=$mode $costs)
    [ "$1" = true ] && [ "$5" = true ] && [ "$3" = $((P + 3 - mode)) ] \
      || bad "vocab_1f1b P=$P mode=$mode: valid=$1 expects=$5 peak=$3, want $((P + 3 - mode))"
    json=$("$PPSC" sim --json "$STD/vocab_v_half.pps" -D P=$P -D m=$m -D mode=$mode $costs 2>/dev/null)
    echo "$json" | awk -v P=$P -v mode=$mode '
      { s = $0; n = 0
        while ((i = index(s, "{\"device\":")) > 0) {
          s = substr(s, i + 1); split(s, a, /[,}]/); pk = ""; bz = ""
          for (k in a) { if (a[k] ~ /^"peak_memory":/) { sub(/.*:/, "", a[k]); pk = a[k] }
                         if (a[k] ~ /^"busy":/) { sub(/.*:/, "", a[k]); bz = a[k] } }
          n++; if (n == 1) { p0 = pk; b0 = bz } else if (pk != p0 || bz != b0) bad = 1
        }
        if (n != P || bad || $0 !~ /"valid":true/) { print "FAIL: vocab_v_half P=" P " mode=" mode " not balanced or not valid"; exit 1 } }' \
      || fail=1
  done
done
exit $fail
