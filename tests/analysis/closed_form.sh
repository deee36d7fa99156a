#!/bin/sh
# tests/analysis/closed_form.sh: 1F1B written in PPS (cases/one_f_one_b.pps, whose
# `expect` statements state the closed forms makespan == (m+P-1)(TF+TB+TW) and
# peak_memory[0] == min(P, m)) checked by `ppsc check` over a grid of P, m and costs.
# Exact up to the expect tolerance (1e-9 relative).
set -u
cd "$top_srcdir/tests/analysis/cases" || exit 99
fail=0
n=0
for P in 1 2 3 4 8 16 32; do
  for m in 1 2 5 8 32 64; do
    for costs in "1 1 1" "1.5 2 0.5" "2 3 1"; do
      set -- $costs
      n=$((n + 1))
      if ! "$PPSC" check one_f_one_b.pps -q -D P=$P -D m=$m -D TF=$1 -D TB=$2 -D TW=$3 2>"${TMPDIR:-/tmp}/cf.$$"; then
        echo "FAIL P=$P m=$m TF=$1 TB=$2 TW=$3:"
        cat "${TMPDIR:-/tmp}/cf.$$"
        fail=1
      fi
    done
  done
done
rm -f "${TMPDIR:-/tmp}/cf.$$"
echo "$n schedules"
exit $fail
