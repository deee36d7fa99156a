# tests/stdlib/lib.sh: helpers shared by the stdlib tests (sourced, POSIX sh).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
STD=${PPS_STDLIB:-$top_srcdir/stdlib}
fail=0

# figures FILE [-D ...]: prints "valid makespan peak_memory bubble_rate expects_ok"
# from `ppsc sim --json` (top-level keys; per-device keys come later in the object).
figures() {
  "$PPSC" sim --json "$@" 2>/dev/null | awk '
    function val(key,   i, s) {
      i = index($0, "\"" key "\":"); if (i == 0) return "?";
      s = substr($0, i + length(key) + 3); sub(/[,}\]].*/, "", s); return s
    }
    { line = line $0 }
    END {
      $0 = line
      bad = gsub(/"ok":false/, "&")
      printf "%s %s %s %s %s\n", val("valid"), val("makespan"), val("peak_memory"), val("bubble_rate"), (bad ? "false" : "true")
    }'
}


bad() { echo "FAIL: $*"; fail=1; }
