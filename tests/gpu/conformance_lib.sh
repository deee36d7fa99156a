# tests/gpu/conformance_lib.sh: sourced by conformance_emu.sh and conformance_gpu.sh.
# conf_compare RECORD OUTPUT LABEL: compares the "name: value" lines of a conformance
# run (tests/gpu/conformance) with the record, ignoring '#' lines; prints one line per
# disagreement ("LABEL: NAME: record 'V1', got 'V2'", or a line only one side has) and
# returns 1 if there is any.
conf_compare() {
  awk -v label="$3" '
    FNR == 1 { f++ }
    /^#/ || !/: / { next }
    { i = index($0, ": "); k = substr($0, 1, i - 1); v = substr($0, i + 2) }
    f == 1 { want[k] = v; order[++n] = k; next }
    { got[k] = v; if (!(k in want)) { printf "%s: %s: not in the record, got '\''%s'\''\n", label, k, v; bad++ } }
    END {
      for (j = 1; j <= n; j++) {
        k = order[j]
        if (!(k in got)) { printf "%s: %s: record '\''%s'\'', missing from the output\n", label, k, want[k]; bad++ }
        else if (got[k] != want[k]) { printf "%s: %s: record '\''%s'\'', got '\''%s'\''\n", label, k, want[k], got[k]; bad++ }
      }
      exit bad ? 1 : 0
    }' "$1" "$2"
}
