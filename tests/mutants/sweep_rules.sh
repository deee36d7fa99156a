#!/bin/sh
# tests/mutants/sweep_rules.sh: the mutation rules of `make mutants-sweep` (sweep.py)
# generate exactly the mutants listed in sweep_rules.expected for the fixture
# sweep_rules.c: every rule fires where it should, and nothing in a comment, a string,
# a preprocessor line, `++`, `->`, `-=`, a unary minus or an array size of a declaration
# is touched. Only lists mutants (sweep.py --list): builds and runs nothing.
set -u
: "${top_srcdir:?}"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
d=$top_srcdir/tests/mutants
if ! python3 "$d/sweep.py" --srcdir "$top_srcdir" tests/mutants/sweep_rules.c --list > "$tmp/out" 2> "$tmp/err"; then
  echo "FAIL: sweep.py --list failed"; cat "$tmp/err"; exit 1
fi
if ! diff -u "$d/sweep_rules.expected" "$tmp/out"; then
  echo "FAIL: the mutants of sweep_rules.c differ (above: - expected, + actual)"; exit 1
fi
# the line range and the sample select from the same numbering
python3 "$d/sweep.py" --srcdir "$top_srcdir" tests/mutants/sweep_rules.c --lines 10-10 --list > "$tmp/r" 2>/dev/null
[ "$(cut -f3 "$tmp/r" | sort -u)" = 10 ] && [ "$(wc -l < "$tmp/r")" = 7 ] ||
  { echo "FAIL: --lines 10-10 listed:"; cat "$tmp/r"; exit 1; }
python3 "$d/sweep.py" --srcdir "$top_srcdir" tests/mutants/sweep_rules.c --sample 5 --seed 3 --list > "$tmp/s1" 2>/dev/null
python3 "$d/sweep.py" --srcdir "$top_srcdir" tests/mutants/sweep_rules.c --sample 5 --seed 3 --list > "$tmp/s2" 2>/dev/null
[ "$(wc -l < "$tmp/s1")" = 5 ] && cmp -s "$tmp/s1" "$tmp/s2" && grep -qxFf "$tmp/s1" "$tmp/out" ||
  { echo "FAIL: --sample 5 --seed 3 is not 5 of the same mutants each time"; exit 1; }
echo "ok: $(wc -l < "$tmp/out") mutants of sweep_rules.c as expected; --lines and --sample select from them"
