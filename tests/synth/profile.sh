#!/bin/sh
# tests/synth/profile.sh: the measured-costs loop (runtime/metrics.c rt_write_profile,
# compiler/profile.c): a built schedule run with --profile writes per-stage F, B, W and
# SEND figures; a schedule that says `cost profile "FILE";` and `synthesize;` takes them
# (sim reports a makespan in seconds, the costs in the expanded file are the measured
# means), builds and runs; a missing or malformed profile is a located error.
. "$(dirname "$0")/../runtime/lib.sh"
cat > "$WORK/a.pps" <<'PPS'
schedule a(P = 2, m = 4) {
  devices P; microbatches m; placement linear;
  memory limit = 2;
  synthesize;
}
PPS
build a "$WORK/a.pps" || fail "build a"
expect_exit 0 "run with --profile" "$WORK/a" --hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q --profile "$WORK/prof.txt"
for k in "F 0" "B 0" "W 0" "F 1" "B 1" "W 1" "SEND 0" "SEND 1"; do
  grep -q "^$k [0-9.e+-]* [0-9.e+-]* [0-9]*$" "$WORK/prof.txt" && pass "profile has $k" || fail "profile lacks '$k'"
done
sed 's/memory limit = 2;/cost profile "prof.txt"; memory limit = 2;/' "$WORK/a.pps" > "$WORK/b.pps"
expect_exit 0 "cost profile + synthesize checks" "$PPSC" check "$WORK/b.pps"
f0=$(awk '$1 == "F" && $2 == 0 { print $3 }' "$WORK/prof.txt")
"$PPSC" expand "$WORK/b.pps" > "$WORK/b.exp" || fail "expand b"
grep -q "cost stage 0:.*TF = $f0" "$WORK/b.exp" || grep -q "cost TF = $f0" "$WORK/b.exp" \
  && pass "measured F of stage 0 ($f0) is the stage's cost" || { fail "stage 0 TF is not $f0"; cat "$WORK/b.exp"; }
build b "$WORK/b.pps" && expect_exit 0 "the synthesised, profiled schedule runs --check" "$WORK/b" --check --hidden 8 --seq 4 --micro-batch 1 -q \
  || fail "build b"
# errors
sed 's/prof.txt/nope.txt/' "$WORK/b.pps" > "$WORK/c.pps"
expect_exit 1 "missing profile" "$PPSC" check "$WORK/c.pps"
grep -q "c.pps:3:16: error: cost profile: cannot read '.*nope.txt'" "$WORK/out" && pass "located" || { fail "missing profile message"; cat "$WORK/out"; }
printf 'F 0 0.5 0.1 3\nF x\n' > "$WORK/prof.txt"
expect_exit 1 "malformed profile" "$PPSC" check "$WORK/b.pps"
grep -q "cost profile: .*prof.txt:2: expected 'KIND STAGE MEAN SPREAD COUNT'" "$WORK/out" && pass "line named" || { fail "malformed message"; cat "$WORK/out"; }
printf 'F 7 0.5 0.1 3\n' > "$WORK/prof.txt"
expect_exit 1 "profile of another placement" "$PPSC" check "$WORK/b.pps"
grep -q "stage 7 out of range 0..2" "$WORK/out" && pass "stage range" || fail "stage range message"
expect_exit 2 "--profile needs a file" "$WORK/a" --profile
[ $FAILS -eq 0 ]
