#!/bin/sh
# slowest.sh: lists the tests of a build tree by wall time, slowest first, with their
# results, from the `:elapsed:` fields that tests/timed-driver writes into each .trs
# file (every .trs in the tree: after `make check TESTS=...`, older runs' too). run-tests
# prints the ten slowest of each make check with it.
# Usage: tests/slowest.sh BUILDDIR [N]   (N: how many to list, default 10; 0: all)
dir=${1:?usage: tests/slowest.sh BUILDDIR [N]}
n=${2:-10}
[ -d "$dir/tests" ] || { echo "slowest.sh: $dir/tests: no such directory (expected a build tree after make check)" >&2; exit 2; }
case $n in ''|*[!0-9]*) echo "slowest.sh: N must be a whole number, not '$n'" >&2; exit 2 ;; esac
cd "$dir" && find tests -name '*.trs' -exec awk '
  function out() { if (t != "") { f = name; sub(/\.trs$/, "", f); printf "%8.1f s  %-5s %s\n", t, r, f } t = ""; r = "" }
  FNR == 1 { out(); name = FILENAME } /^:elapsed:/ { t = $2 } /^:test-result:/ { r = $2 }
  END { out() }' {} + |
  sort -rn | { if [ "$n" -gt 0 ]; then head -n "$n"; else cat; fi; }
