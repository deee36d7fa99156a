#!/bin/sh
# tests/mutants/apply.sh: every curated mutant (tests/mutants/*.patch) still applies to
# the source tree exactly as `make mutants` applies it (patch -p1 -F0, no fuzz), and the
# Makefile lists each one (MUTANT_PATCHES, so it ships and runs). A change that moves
# code under a mutant fails here, in plain `make check`, not only in the long
# `make mutants` run. The check itself is first shown a patch whose context is stale and
# must reject it.
set -u
: "${top_srcdir:?}"
command -v patch >/dev/null 2>&1 || { echo "SKIP: no patch(1)"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
applies() { (cd "$1" && patch -p1 -F0 --dry-run -s < "$2") > "$tmp/log" 2>&1; }

# 1. the check says no: a one-line change whose context line moved by one word
mkdir -p "$tmp/t/d"
printf 'one\ntwo\nthree\nfour\nfive\n' > "$tmp/t/d/f"
printf -- '--- a/d/f\n+++ b/d/f\n@@ -1,5 +1,4 @@\n one\n two\n-three\n four\n FIVE\n' > "$tmp/stale.patch"
if applies "$tmp/t" "$tmp/stale.patch"; then
  echo "FAIL: a patch with a stale context line applied without fuzz"; fail=1
fi
sed 's/^ FIVE$/ five/' "$tmp/stale.patch" > "$tmp/good.patch"
applies "$tmp/t" "$tmp/good.patch" || { echo "FAIL: a patch that fits did not apply"; cat "$tmp/log"; fail=1; }

# 2. every mutant applies, and the Makefile lists it
n=0
for p in "$top_srcdir"/tests/mutants/*.patch; do
  [ -f "$p" ] || continue
  name=$(basename "$p")
  n=$((n + 1))
  grep -q "tests/mutants/$name" "$top_srcdir/Makefile.am" ||
    { echo "FAIL: $name is not in Makefile.am's MUTANT_PATCHES"; fail=1; }
  grep -q '^# tests: ' "$p" || { echo "FAIL: $name has no '# tests:' line"; fail=1; }
  if ! applies "$top_srcdir" "$p"; then
    echo "FAIL: $name no longer applies with patch -p1 -F0 (update tests/mutants/$name):"
    sed 's/^/    /' "$tmp/log"; fail=1
  fi
done
[ "$n" -gt 0 ] || { echo "FAIL: no mutants found under $top_srcdir/tests/mutants"; fail=1; }
[ "$fail" = 0 ] && echo "ok: $n mutants apply without fuzz"
exit $fail
