# tests/synth/lib.sh: shell helpers shared by the synthesis tests (sourced, not run).
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
