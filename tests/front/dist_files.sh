#!/bin/sh
# tests/front/dist_files.sh: every file git tracks under tests/ is named by a Makefile
# fragment (EXTRA_DIST, TESTS, a SOURCES list or a directory named whole), so that the
# release tarball's `make check` has it (a new analysis case left out of analysis.mk's
# list failed only in `make distcheck`). Skipped (77) where the source tree is not the
# top of a git checkout.
: "${top_srcdir:?}"
cd "$top_srcdir" || exit 99
# (the source tree must be a checkout's top: a release tarball unpacked inside another
# checkout, as `make distcheck` does in a build directory, is not one)
top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$top" = "$(pwd -P)" ] || { echo "skip: not a git checkout's top"; exit 77; }
frags=$(git ls-files 'Makefile.am' '*.mk')
[ -n "$frags" ] || { echo "FAIL: no Makefile fragments found"; exit 1; }
fail=0
for f in $(git ls-files tests); do
  d=$f
  named=0
  while [ "$d" != "." ] && [ "$d" != "tests" ]; do   # the file, or a directory above it named whole
    if grep -qE "(^|[[:space:]=])$d([[:space:]\\\\]|\$)" $frags; then named=1; break; fi
    d=$(dirname "$d")
  done
  [ $named = 1 ] || { echo "FAIL: $f is tracked but no Makefile fragment names it (add it to EXTRA_DIST)"; fail=1; }
done
[ $fail = 0 ] && echo "ok: every tracked file under tests/ is in the distribution lists"
exit $fail
