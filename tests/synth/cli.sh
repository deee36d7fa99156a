#!/bin/sh
# tests/synth/cli.sh: `synthesize;` end to end (compiler/synth.c, cmd_synth.c): the
# exact form of issue 11 goes through check, sim, expand, emit-c and build, and the
# program runs on the CPU backend with --check; the same input gives the same order;
# `ppsc synth -o` writes a literal file whose header figures are those `ppsc sim` finds
# for it, with makespan >= lower bound; --json has the same fields; a limit below what
# any order can reach, bad options, passes written beside `synthesize` and a file
# without it are located errors that leave no output file; below effort 3 the search
# ends early where a seed stays the best order, effort 3 searches its whole budget.
. "$(dirname "$0")/../runtime/lib.sh"
f=$top_srcdir/tests/synth/issue.pps
for cmd in check sim expand; do
  expect_exit 0 "ppsc $cmd on the issue's form" "$PPSC" $cmd "$f"
done
expect_exit 0 "ppsc emit-c" "$PPSC" emit-c "$f" -o "$WORK/s.c"
[ -s "$WORK/s.c" ] && pass "emit-c wrote C" || fail "emit-c wrote nothing"
if build issue "$f"; then pass "ppsc build"; else fail "ppsc build"; fi
# a smaller instance runs on the CPU backend, checked against the sequential model
if build small "$f" -D P=3 -D m=6 -D L=3 -D TW=0.5; then
  expect_exit 0 "synthesised P=3 m=6 runs with --check" "$WORK/small" --check --hidden 8 --seq 4 --micro-batch 1 --iterations 2 -q
else fail "build small"; fi

# determinism: the same order every time
"$PPSC" expand "$f" -D TC=0.1 -D TW=0.5 > "$WORK/e1" && "$PPSC" expand "$f" -D TC=0.1 -D TW=0.5 > "$WORK/e2" &&
  cmp -s "$WORK/e1" "$WORK/e2" && pass "same input, same order" || fail "expand differs between runs"

# the seeds (stdlib schedules) are embedded: the order does not depend on the
# environment (no stdlib directory at all, or a named one), and a placement written
# as an explicit list gets the seeds of the standard placement it equals
any=$top_srcdir/tests/synth/synth_any.pps
for pt in "-D P=6 -D m=18 -D TF=1.5 -D TB=2 -D TW=2 -D TC=0.25 -D pl=1 -D L=6" "-D P=4 -D m=8 -D TC=0.1 -D pl=0 -D L=4" \
          "-D P=4 -D m=12 -D TW=0.5 -D pl=2 -D v=2 -D L=6"; do
  PPS_STDLIB=/nonexistent "$PPSC" synth $pt "$any" -o "$WORK/env1.pps" 2> "$WORK/env1.err" &&
    "$PPSC" synth --stdlib "$top_srcdir/stdlib" $pt "$any" -o "$WORK/env2.pps" &&
    "$PPSC" synth --stdlib "$WORK" $pt "$any" -o "$WORK/env3.pps" || fail "synth $pt"
  grep -v '^// search:' "$WORK/env1.pps" > "$WORK/env1" ; grep -v '^// search:' "$WORK/env2.pps" > "$WORK/env2"
  grep -v '^// search:' "$WORK/env3.pps" > "$WORK/env3"
  cmp -s "$WORK/env1" "$WORK/env2" && cmp -s "$WORK/env1" "$WORK/env3" && [ ! -s "$WORK/env1.err" ] \
    && pass "$pt: the same order with no stdlib directory, the source one or an empty one" || fail "$pt: the order depends on the stdlib directory"
  pl=$(echo "$pt" | sed 's/.*pl=\([0-9]\).*/\1/')
  a=$("$PPSC" synth --json $pt "$any" | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"policy": \(.*\)}/\1 \2/p')
  b=$("$PPSC" synth --json $pt -D pl=$((pl + 3)) "$any" | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"policy": \(.*\)}/\1 \2/p')
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "pl=$pl as an explicit list: the same result ($a)" || fail "pl=$pl: $a, as a list: $b"
done

# ppsc synth: header, literal file, figures equal to ppsc sim's
expect_exit 0 "ppsc synth -o" "$PPSC" synth "$f" -D TC=0.1 -D TB=1.5 -D L=6 -o "$WORK/out.pps"
grep -v '^//' "$WORK/out.pps" | grep -q synthesize && fail "output is not literal" || pass "output is literal"
hdr_mk=$(sed -n 's|^// makespan \([0-9.e+-]*\), peak memory \([0-9.e+-]*\).*|\1 \2|p' "$WORK/out.pps")
hdr_lb=$(sed -n 's|^// lower bound \([0-9.e+-]*\) .*gap \([0-9.e+-]*\)%.*|\1 \2|p' "$WORK/out.pps")
grep -q "^// search: [0-9]* candidate orders in [0-9.]* s" "$WORK/out.pps" && pass "header: search time" || fail "header: no search line"
grep -q "^// inputs: 8 devices, 16 stages (placement vshape), 32 microbatches; TF = 1, TB = 1.5, TW = 1, TC = 0.1 .*memory limit 6" "$WORK/out.pps" \
  && pass "header: inputs" || fail "header: inputs"
sim=$("$PPSC" sim --json "$WORK/out.pps" | sed -n 's/.*"makespan":\([0-9.e+-]*\),.*"peak_memory":\([0-9.e+-]*\),.*/\1 \2/p')
set -- $hdr_mk $hdr_lb $sim
if [ $# -eq 6 ] && awk -v mk=$1 -v pk=$2 -v lb=$3 -v gap=$4 -v smk=$5 -v spk=$6 'BEGIN {
     e = 1e-6; exit !(mk == smk && pk == spk && pk <= 6 + e && lb <= mk + e && lb > 0 &&
                     (gap - 100 * (mk / lb - 1)) ^ 2 < 1e-4) }'; then
  pass "header figures = ppsc sim of the output (makespan $1, peak $2, bound $3, gap $4%)"
else fail "header/sim figures: $*"; fi
# --json: the same figures
"$PPSC" synth "$f" -D TC=0.1 -D TB=1.5 -D L=6 --json -o "$WORK/out2.pps" > "$WORK/j" || fail "synth --json"
for k in makespan peak_memory lower_bound gap search_seconds candidates memory_limit min_memory_limit policy; do
  grep -q "\"$k\": " "$WORK/j" || fail "--json lacks $k"
done
jmk=$(sed -n 's/.*"makespan": \([0-9.e+-]*\),.*/\1/p' "$WORK/j")
[ "$jmk" = "$1" ] && pass "--json makespan = header's" || fail "--json makespan $jmk, header $1"
cmp -s "$WORK/out.pps" "$WORK/out2.pps" || {
  # only the search time may differ
  diff "$WORK/out.pps" "$WORK/out2.pps" | grep '^[<>]' | grep -v '^[<>] // search:' && fail "two synth runs differ" ; }
pass "two synth runs give the same file (but the search time)"

# tolerances are relative: a limit of 1e-9 activations holds as exactly as one of 1
# (the peak never exceeds it, the makespan never goes below the bound)
cat > "$WORK/tiny.pps" <<'PPS'
schedule t(P = 4, m = 8, A: real = 1e-9) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1, TC = 0;
  memory act = A;
  memory limit = A;
  synthesize;
}
PPS
for A in 1e-9 1; do
  j=$("$PPSC" synth --json "$WORK/tiny.pps" -D A=$A) || fail "synth act = limit = $A"
  set -- $(echo "$j" | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"peak_memory": \([0-9.e+-]*\),.*"lower_bound": \([0-9.e+-]*\),.*"optimal": \([a-z]*\).*/\1 \2 \3 \4/p')
  [ $# -eq 4 ] && awk -v mk=$1 -v pk=$2 -v lb=$3 -v A=$A 'BEGIN { exit !(pk <= A * (1 + 1e-9) && lb <= mk * (1 + 1e-9)) }' \
    && pass "act = limit = $A: makespan $1 peak $2 bound $3 optimal $4" || fail "act = limit = $A: $*"
  [ "$A" = 1e-9 ] && mk_tiny=$1 || mk_one=$1
done
[ -n "$mk_tiny" ] && [ "$mk_tiny" = "$mk_one" ] && pass "the same makespan at act 1e-9 and 1 ($mk_one)" || fail "act 1e-9 gives $mk_tiny, act 1 $mk_one"
# the cool-down term of the bound: linear P = 128, m = 64, no limit: 383 proven optimal
# (device 127 starts at 127, runs 64 (F + B), then the backward chain to stage 0 and W)
cat > "$WORK/deep.pps" <<'PPS'
schedule d(P = 128, m = 64) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1, TC = 0;
  synthesize;
}
PPS
"$PPSC" synth "$WORK/deep.pps" -o "$WORK/deep_out.pps" 2> "$WORK/deep_err" && ! grep -q "internal error" "$WORK/deep_err" && grep -q "^// makespan 383," "$WORK/deep_out.pps" &&
  grep -q "^// lower bound 383 (cool-down: .*gap 0% (optimal)" "$WORK/deep_out.pps" \
  && pass "P=128 m=64 linear: 383, proven optimal by the cool-down term" || { fail "cool-down bound"; head -5 "$WORK/deep_out.pps"; }

# errors: located, exit 1, no output file
expect_exit 1 "limit below the minimum" "$PPSC" synth "$f" -D L=0.5 -o "$WORK/no.pps"
grep -q "issue.pps:6:3: error: synthesize: memory limit 0.5 is below 1, the least any order can reach: device 0 must hold the activations of stages 0 and 15" "$WORK/out" \
  && pass "limit error located, with the bound" || { fail "limit error text"; cat "$WORK/out"; }
[ -e "$WORK/no.pps" ] && fail "output left after an error" || pass "no output after an error"
expect_exit 1 "check also rejects it" "$PPSC" check "$f" -D L=0.5
cat > "$WORK/bad.pps" <<'PPS'
schedule b(P = 2, m = 4) {
  devices P; microbatches m;
  synthesize effort = 9, colour = 1;
}
PPS
expect_exit 1 "bad options" "$PPSC" check "$WORK/bad.pps"
grep -q "bad.pps:3:23: error: 'effort' must be 0..4, got 9" "$WORK/out" && grep -q "bad.pps:3:26: error: unknown synthesize option 'colour'" "$WORK/out" \
  && pass "option errors located" || { fail "option errors"; cat "$WORK/out"; }
cat > "$WORK/both.pps" <<'PPS'
schedule b(P = 2, m = 2) {
  devices P; microbatches m;
  synthesize;
  device 0 { F(0) }
}
PPS
expect_exit 1 "passes beside synthesize" "$PPSC" check "$WORK/both.pps"
grep -q "both.pps:3:3: error: 'synthesize' chooses every pass" "$WORK/out" && pass "located" || fail "passes beside synthesize: message"
expect_exit 1 "ppsc synth on a file without synthesize" "$PPSC" synth "$top_srcdir/examples/1f1b.pps" -o "$WORK/no2.pps"
grep -q "does not say 'synthesize;'" "$WORK/out" && pass "said so" || fail "no-synthesize message"
[ -e "$WORK/no2.pps" ] && fail "output left" || pass "no output"
# fused = true: only BW passes
cat > "$WORK/fused.pps" <<'PPS'
schedule s(P = 4, m = 8) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1, TC = 0.1;
  memory limit = 3;
  synthesize fused = true, effort = 0, time_limit = 5;
}
PPS
"$PPSC" expand "$WORK/fused.pps" > "$WORK/fx" && grep -q "BW(" "$WORK/fx" && ! grep -q " W(" "$WORK/fx" \
  && pass "fused = true: BW only" || fail "fused = true"
expect_exit 0 "fused schedule checks" "$PPSC" check "$WORK/fused.pps"
# an instance too large to search is refused at once, located
printf 'schedule h { devices 65536; microbatches 1;\n  synthesize; }\n' > "$WORK/huge.pps"
expect_exit 1 "too large to synthesise" "$PPSC" check "$WORK/huge.pps"
grep -q "huge.pps:2:3: error: synthesize: 1 microbatches on 65536 stages and 65536 devices is too large" "$WORK/out" \
  && pass "located" || { fail "too-large message"; cat "$WORK/out"; }
# offload auto: the synthesiser also chooses what to offload; never slower than
# without, the limit and the host limit hold in the simulation of the output
cat > "$WORK/oa.pps" <<'PPS'
schedule oa(P = 4, m = 8, L: real = 2, H: real = 100, auto: bool = true) {
  devices P; microbatches m; placement linear;
  cost TF = 1, TB = 1, TW = 1, TC = 0, TOFF = 0.5;
  memory limit = L, host_limit = H;
  if auto { offload auto; }
  synthesize;
}
PPS
for L in 1 2 3 4; do
  a=$("$PPSC" synth --json "$WORK/oa.pps" -D L=$L -o "$WORK/oa_out.pps" | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*/\1/p')
  b=$("$PPSC" synth --json "$WORK/oa.pps" -D L=$L -D auto=false | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*/\1/p')
  set -- $("$PPSC" sim --json "$WORK/oa_out.pps" | awk '
    function val(key,   i, s) { i = index($0, "\"" key "\":"); s = substr($0, i + length(key) + 3); sub(/[,}\]].*/, "", s); return s }
    { print val("valid"), val("makespan"), val("peak_memory") }')
  if [ "$1" = true ] && awk -v a="$a" -v b="$b" -v mk="$2" -v pk="$3" -v L=$L 'BEGIN { exit !(a != "" && b != "" && a <= b + 1e-9 && mk == a && pk <= L + 1e-9) }'; then
    pass "offload auto L=$L: makespan $a (without offload $b), peak $3"
  else fail "offload auto L=$L: $a vs $b; sim of the output: $*"; fi
done
# (at L = 3: a reload comes back one pass before its B, so offload needs that room)
"$PPSC" synth "$WORK/oa.pps" -D L=3 -o "$WORK/oa2.pps" && grep -q "^  offload ratio 1 stages 0\.\." "$WORK/oa2.pps" \
  && pass "offload auto at L=3 offloads (the literal file states the policy it chose)" || fail "offload auto at L=3 chose no offload"
"$PPSC" synth "$WORK/oa.pps" -D L=2 -D H=0 -o "$WORK/oa3.pps" && ! grep -q "^  offload ratio" "$WORK/oa3.pps" \
  && pass "host_limit 0: nothing offloaded" || fail "host_limit 0 not respected"
# a host limit that binds: the search keeps offloaded activations within it, and the
# result is never slower than without offload, valid, within both limits
for H in 2 3; do
  a=$("$PPSC" synth --json "$WORK/oa.pps" -D L=2 -D H=$H -o "$WORK/oa_h.pps" | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*/\1/p')
  b=$("$PPSC" synth --json "$WORK/oa.pps" -D L=2 -D H=$H -D auto=false | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*/\1/p')
  set -- $("$PPSC" sim --json "$WORK/oa_h.pps" | awk '
    function val(key,   i, s) { i = index($0, "\"" key "\":"); s = substr($0, i + length(key) + 3); sub(/[,}\]].*/, "", s); return s }
    { print val("valid"), val("peak_memory"), val("host_memory") }')
  [ "$1" = true ] && awk -v a="$a" -v b="$b" -v pk="$2" -v h="$3" -v H=$H 'BEGIN { exit !(a != "" && a <= b + 1e-9 && pk <= 2 + 1e-9 && h <= H + 1e-9) }' \
    && pass "offload auto L=2 host_limit $H: makespan $a (without offload $b), host memory $3" || fail "offload auto host_limit $H: $a vs $b; sim: $*"
done
expect_exit 1 "limit below one activation even offloading" "$PPSC" check "$WORK/oa.pps" -D L=0.5
grep -q "below 1, the least any order can reach even offloading everything" "$WORK/out" && pass "said so" || fail "offload auto limit message"
sed 's/  synthesize;//' "$WORK/oa.pps" > "$WORK/oa_nos.pps"
expect_exit 1 "offload auto without synthesize" "$PPSC" check "$WORK/oa_nos.pps"
grep -q "oa_nos.pps:5:13: error: 'offload auto' needs 'synthesize'" "$WORK/out" && pass "located" || { fail "offload auto without synthesize: message"; cat "$WORK/out"; }

# effort: below 3 the search ends early where a seed stays the best order and brings
# nothing better for a while (docs/synth.md, "The search"); 3 and 4 search their whole
# budget. P = 16, m = 32, vshape, limit 16, TC = 0.1: no seed reaches the bound there.
zbv="-D P=16 -D m=32 -D pl=1 -D L=16 -D TC=0.1"
eff() { "$PPSC" synth --json $zbv -D effort=$1 "$any" | sed -n 's/.*"candidates": \([0-9]*\),.*"stalled": \([a-z]*\),.*/\2 \1/p'; }
set -- $(eff 0) $(eff 2) $(eff 3)
[ $# -eq 6 ] && [ "$1 $3 $5" = "true true false" ] && [ "$2" -le "$4" ] && [ "$4" -lt "$6" ] \
  && pass "effort 0 and 2 end early ($2, $4 candidates), effort 3 searches its whole budget ($6)" \
  || fail "effort 0, 2, 3: stalled and candidates: $*"
"$PPSC" synth $zbv "$any" -o "$WORK/eff.pps" && grep -q "^// search: .*(ended where no better order came; effort 3 or 4 searches further)" "$WORK/eff.pps" \
  && pass "the header says the default search ended early" || fail "header: no word of the early end"
[ $FAILS -eq 0 ]
