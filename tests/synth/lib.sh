# tests/synth/lib.sh: shell helpers shared by the synthesis tests (sourced, not run):
# fig (figures of a schedule) and sample (the grid sample).
# fig FILE -D...: "valid makespan peak_memory" from `ppsc sim --json`
# (the first occurrence of each key: per-device figures come later in the object)
fig() {
  "$PPSC" sim --json "$@" 2>/dev/null | awk '
    function val(key,   i, s) {
      i = index($0, "\"" key "\":"); if (i == 0) return "?";
      s = substr($0, i + length(key) + 3); sub(/[,}\]].*/, "", s); return s
    }
    { line = line $0 } END { $0 = line; print val("valid"), val("makespan"), val("peak_memory") }'
}
# sample SEED "P ORDER" N [v]: N points "k P m TF TB TW TC [VL]": P cycles through the
# order given (so a small N still reaches both ends of the range), m in P..4P, TF/TB/TW
# in 0.5..2 and TC in 0..0.5 from a linear congruential sequence started at SEED; with
# v, also a V-shape memory limit VL in 1.5..P-0.5 (steps of 0.5)
sample() {
  awk -v x="$1" -v order="$2" -v n="$3" -v withv="${4:-}" 'BEGIN {
    np = split(order, pl, " ")
    split("0.5 1 1.5 2", c, " "); split("0 0.1 0.25 0.5", tc, " ")
    for (k = 0; k < n; k++) {
      P = pl[1 + k % np]
      x = (x * 1103515245 + 12345) % 2147483648; m = P * (1 + int(x / 65536) % 4)
      x = (x * 1103515245 + 12345) % 2147483648; f = c[1 + int(x / 65536) % 4]
      x = (x * 1103515245 + 12345) % 2147483648; b = c[1 + int(x / 65536) % 4]
      x = (x * 1103515245 + 12345) % 2147483648; w = c[1 + int(x / 65536) % 4]
      x = (x * 1103515245 + 12345) % 2147483648; t = tc[1 + int(x / 65536) % 4]
      if (withv == "") { print k, P, m, f, b, w, t; continue }
      x = (x * 1103515245 + 12345) % 2147483648; v = 1.5 + 0.5 * (int(x / 65536) % (2 * P - 2))
      print k, P, m, f, b, w, t, v
    }}'
}
