#!/bin/sh
# tests/synth/bound.sh: the terms of synth's lower bound (compiler/synth.c) pinned at
# known values, one case per term being the largest (`ppsc synth --json`, fields
# lower_bound, lower_bound_term and every entry of lower_bound_terms compared exactly
# as printed): the memory limit, warm-up, warm-up and cool-down, cool-down, the work of
# one device and the critical path. A term removed or changed moves a figure here (at
# P=8 m=32 L=1.5 linear, removing the memory term drops the bound from 362.67 to 122.5).
# Figures as of 2026-11-26 (b6fcb74); a deliberate change to the bound updates them.
. "$(dirname "$0")/../runtime/lib.sh"
ANY=$top_srcdir/tests/synth/synth_any.pps
# want DESC "-D ..." BOUND TERM TERMS
want() {
  j=$("$PPSC" synth --json "$ANY" $2 -D effort=0 2> "$WORK/err") || { fail "$1: ppsc synth failed"; cat "$WORK/err" >&2; return; }
  got=$(echo "$j" | sed -n 's/.*"lower_bound": \([^,]*\), "lower_bound_term": "\([^:"]*\)[^"]*", "lower_bound_terms": {\([^}]*\)}.*/\1|\2|\3/p')
  if [ "$got" = "$3|$4|$5" ]; then pass "$1: bound $3 ($4)"
  else fail "$1: got '$got', want '$3|$4|$5'"; fi
}
want "memory limit, linear P=8 m=32 L=1.5" "-D P=8 -D m=32 -D L=1.5 -D pl=0" 362.6666667 "memory limit" \
  '"path": 17, "work": 103, "ramp": 109.5, "ramp_cool": 122.5, "cool_down": 79, "memory": 362.6666667'
want "memory limit, vshape P=8 m=32 L=1.5" "-D P=8 -D m=32 -D L=1.5 -D pl=1" 192 "memory limit" \
  '"path": 16.5, "work": 99.5, "ramp": 106, "ramp_cool": 115, "cool_down": 71.5, "memory": 192'
want "warm-up and cool-down, linear P=4 m=8 L=3" "-D P=4 -D m=8 -D L=3 -D pl=0" 30 "warm-up and cool-down" \
  '"path": 9, "work": 27, "ramp": 28, "ramp_cool": 30, "cool_down": 23, "memory": 24'
want "warm-up, linear P=4 m=8 L=6 TB=2" "-D P=4 -D m=8 -D L=6 -D TB=2 -D pl=0" 36 "warm-up" \
  '"path": 13, "work": 35, "ramp": 36, "ramp_cool": 30, "cool_down": 34, "memory": 17.33333333'
want "cool-down, linear P=16 m=8" "-D P=16 -D m=8 -D L=100 -D pl=0" 47 "cool-down" \
  '"path": 33, "work": 39, "ramp": 0, "ramp_cool": 0, "cool_down": 47, "memory": 2.64'
want "work of one device, linear P=4 m=8 L=5" "-D P=4 -D m=8 -D L=5 -D pl=0" 27 "work of one device after its first pass can start" \
  '"path": 9, "work": 27, "ramp": 26, "ramp_cool": 24, "cool_down": 23, "memory": 14.4'
want "critical path, vshape P=8 m=4" "-D P=8 -D m=4 -D L=100 -D pl=1" 16.5 "critical path of one microbatch" \
  '"path": 16.5, "work": 15.5, "ramp": 0, "ramp_cool": 0, "cool_down": 15.5, "memory": 0.36'
finish
