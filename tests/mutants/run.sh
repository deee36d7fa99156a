#!/bin/sh
# tests/mutants/run.sh: `make mutants`. Plants curated bugs, one at a time, in a copy of
# the tree and asserts that the tests meant to catch each one fail. Each mutant is a
# patch tests/mutants/NAME.patch (-p1, against the source tree) whose header says
#     # tests: TEST...     the tests (as in TESTS) that must each FAIL with it
#     # env: VAR=VALUE...  (optional) environment for those tests
# The copy (source and this build directory, in a temporary directory: copy.sh) is
# configured again for its new place and built incrementally: each mutant recompiles only what
# its patch touches (and relinks), runs its tests with `make check TESTS=...`, and is
# reverted. First the tests run without any mutant and must pass there (or, with
# MUTANT_BASELINE=checked, passed in top_builddir's make check just before: see below). A mutant that
# does not apply (the code moved under it), a test that passes or is skipped with a
# mutant in place, or a broken copy is an error: exit 1.
# Usage: run.sh [NAME...] (default: every tests/mutants/*.patch). Needs top_srcdir and
# top_builddir (absolute; the Makefile rule passes them). MUTANT_TIMEOUT: seconds per
# mutant (default 600); MUTANT_BASELINE_TIMEOUT: seconds for the baseline's tests together
# (default 3600).
set -u
: "${top_srcdir:?}" "${top_builddir:?}"
jobs=${MAKE_JOBS:-2}
mdir=$top_srcdir/tests/mutants
T=$(mktemp -d "${TMPDIR:-/tmp}/pps-mutants.XXXXXX") || exit 1
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
say() { printf 'mutants: %s\n' "$*"; }
die() { say "error: $*"; exit 1; }
t0=$(date +%s)

# ---- the copy (tests/mutants/copy.sh): the source and this build directory, built ----
B=$(top_srcdir=$top_srcdir top_builddir=$top_builddir MAKE_JOBS=$jobs sh "$mdir/copy.sh" "$T" | tail -1)
[ -n "$B" ] && [ -d "$B" ] || die "making the copy"
say "copy built in $(($(date +%s) - t0)) s ($T)"

# ---- the mutants ----
if [ $# -gt 0 ]; then names=$*; else names=$(cd "$mdir" && ls *.patch | sed 's/\.patch$//'); fi
[ -n "$names" ] || die "no mutants in $mdir"
# every test a mutant names must pass in the copy without it: a failure must come from
# the mutant, not from the copy
all= allenv=
for name in $names; do
  p=$mdir/$name.patch
  [ -f "$p" ] || die "no mutant $p"
  all="$all $(sed -n 's/^# tests: //p' "$p")"
  allenv="$allenv $(sed -n 's/^# env: //p' "$p")"
done
all=$(echo $all | tr ' ' '\n' | sort -u | tr '\n' ' ')
t1=$(date +%s)
# MUTANT_BASELINE=checked (run-tests, right after a `make check` that passed in top_builddir on
# these sources): that run stands for the baseline. Each named test's result there must be PASS
# (a .trs older than the library or ppsc is stale and does not count), and MUTANT_SMOKE's tests
# (one compiler test, one runtime test) run in the copy to show the copy itself works.
reuse=
if [ "${MUTANT_BASELINE:-}" = checked ]; then
  reuse=1
  for t in $all; do
    trs=$top_builddir/${t%.sh}.trs; [ -f "$trs" ] || trs=$top_builddir/$t.trs
    r=$(sed -n 's/^:test-result: //p' "$trs" 2>/dev/null)
    if [ "$r" != PASS ] || [ "$top_builddir/libppsrt.la" -nt "$trs" ] || [ "$top_builddir/ppsc" -nt "$trs" ]; then
      say "$t: no fresh PASS in $top_builddir (${r:-not run}): running the whole baseline"; reuse=; break
    fi
  done
fi
if [ -n "$reuse" ]; then
  smoke=${MUTANT_SMOKE:-tests/analysis/golden.sh tests/runtime/tied.sh}
  (cd "$B" && timeout "${MUTANT_TIMEOUT:-600}" nice make -j"$jobs" check TESTS="$smoke" > "$T/baseline.log" 2>&1) || {
    grep -E '^(FAIL|ERROR)' "$T/baseline.log"; die "without a mutant these tests do not pass in the copy: $smoke"; }
  say "without a mutant: $all passed in $top_builddir's make check; in the copy $smoke pass ($(($(date +%s) - t1)) s)"
else
  (cd "$B" && env $allenv timeout "${MUTANT_BASELINE_TIMEOUT:-3600}" nice make -j"$jobs" check TESTS="$all" > "$T/baseline.log" 2>&1) || {
    grep -E '^(FAIL|ERROR)' "$T/baseline.log"; tail -3 "$T/baseline.log"
    die "without a mutant these tests do not pass in the copy (or took over MUTANT_BASELINE_TIMEOUT, default 3600 s, together): $all"; }
  say "without a mutant: $all pass ($(($(date +%s) - t1)) s)"
fi
bad=0 n=0
for name in $names; do
  p=$mdir/$name.patch
  [ -f "$p" ] || die "no mutant $p"
  tests=$(sed -n 's/^# tests: //p' "$p")
  envs=$(sed -n 's/^# env: //p' "$p")
  [ -n "$tests" ] || die "$name: no '# tests:' line"
  n=$((n + 1))
  t1=$(date +%s)
  if ! (cd "$T/tree" && patch -p1 -F0 --dry-run < "$p" > "$T/patch.log" 2>&1); then
    cat "$T/patch.log"; say "ERROR $name: the patch no longer applies (update tests/mutants/$name.patch)"; bad=$((bad + 1)); continue
  fi
  (cd "$T/tree" && patch -p1 -F0 --no-backup-if-mismatch < "$p" > /dev/null) || die "$name: patch failed"
  for t in $tests; do rm -f "$B/${t%.sh}.log" "$B/${t%.sh}.trs" "$B/$t.log" "$B/$t.trs"; done
  # the tests with the mutant in place (make check rebuilds what the patch touched)
  # (PPS_FAIL_FAST=1: a test on tests/runtime/lib.sh stops at its first failure, all a mutant needs)
  (cd "$B" && env PPS_FAIL_FAST=1 $envs timeout "${MUTANT_TIMEOUT:-600}" nice make -j"$jobs" check TESTS="$tests" > "$T/$name.log" 2>&1)
  missed=""
  for t in $tests; do
    trs=$B/${t%.sh}.trs
    [ -f "$trs" ] || trs=$B/$t.trs
    r=$(sed -n 's/^:test-result: //p' "$trs" 2>/dev/null)
    [ "$r" = FAIL ] || missed="$missed $t(${r:-did not run})"
  done
  (cd "$T/tree" && patch -p1 -R -F0 --no-backup-if-mismatch < "$p" > /dev/null) || die "$name: reverting failed"
  if [ -n "$missed" ]; then
    say "NOT CAUGHT $name ($(($(date +%s) - t1)) s): these tests did not fail:$missed"
    grep -E '^(make|.*error)' "$T/$name.log" | tail -5
    bad=$((bad + 1))
  else
    say "caught $name: $tests failed ($(($(date +%s) - t1)) s)"
    for t in $tests; do   # the first failure each test saw
      log=$B/${t%.sh}.log; [ -f "$log" ] || log=$B/$t.log
      printf '    %s: %s\n' "$t" "$(grep -m1 -E '^(FAIL|not ok)' "$log" 2>/dev/null | cut -c1-150)"
    done
  fi
done
say "$n mutants, $((n - bad)) caught, $bad not; $(($(date +%s) - t0)) s in all"
[ $bad -eq 0 ]
