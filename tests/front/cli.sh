#!/bin/sh
# tests/front/cli.sh: the ppsc command line itself (compiler/main.c): --help and
# --version exit 0; every usage error exits 2 with a message and the --help hint;
# a missing input file exits 2; --max-errors limits what is printed, not the count;
# an option the command would ignore (--comms/--drop outside export-csv, -D/--cost/
# --memory/--schedule/--stdlib with import-csv, --grid with -q or --json, arguments
# after -- outside build) and two outputs on standard output are usage errors;
# --policy sets offload and vocabulary policies of any file; a -D naming a cost,
# memory key or policy the file has no parameter for says which option sets it.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=${TMPDIR:-/tmp}/pps-cli.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
fail=0
ex=$top_srcdir/examples/1f1b.pps
# expect CODE PATTERN ARGS...: ppsc ARGS exits CODE and its output matches PATTERN
expect() {
  want=$1 pat=$2; shift 2
  "$PPSC" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL ppsc $*: exit $rc, expected $want"; fail=1
  elif ! grep -q -- "$pat" "$tmp/out"; then echo "FAIL ppsc $*: no '$pat' in:"; cat "$tmp/out"; fail=1
  else echo "ok: ppsc $* (exit $rc)"; fi
}
expect 0 "usage: ppsc COMMAND" --help
expect 0 "usage: ppsc COMMAND" check --help
expect 0 "^ppsc (PPS) " --version
expect 2 "no command given"
expect 2 "unknown command 'chek'" chek "$ex"
expect 2 "Try 'ppsc --help'" chek "$ex"
expect 2 "unknown option '--bogus'" check "$ex" --bogus
expect 2 "check needs an input file" check
expect 2 "more than one input file" check "$ex" "$ex"
expect 2 "-D needs NAME=VALUE, got 'P'" check "$ex" -D P
expect 2 "-D needs NAME=VALUE" check "$ex" -D
expect 2 "-o needs a file name" emit-c "$ex" -o
expect 2 "--max-errors needs a count" check "$ex" --max-errors x
expect 2 "--max-ops needs a positive count" check "$ex" --max-ops 0
expect 2 "--trace needs a file name" sim "$ex" --trace
expect 2 "cannot\|No such file" check "$tmp/absent.pps"
# options a command would ignore are usage errors (the applicability table of main.c),
# before anything is read or written
printf '0F0,0B0\n' > "$tmp/k.csv"
for c in check sim expand; do
  expect 2 "--comms does not apply to '$c'" $c "$ex" --comms
  expect 2 "--drop does not apply to '$c'" $c "$ex" --drop
done
expect 2 "--comms does not apply to 'emit-c'" emit-c "$ex" --comms -o "$tmp/x.c"
expect 2 "--drop does not apply to 'build'" build "$ex" --drop -o "$tmp/x"
expect 2 "-D does not apply to 'import-csv'" import-csv "$tmp/k.csv" -D P=2 -o "$tmp/k.pps"
expect 2 "--cost does not apply to 'import-csv'" import-csv "$tmp/k.csv" --cost TF=2 -o "$tmp/k.pps"
expect 2 "--memory does not apply to 'import-csv'" import-csv "$tmp/k.csv" --memory limit=2 -o "$tmp/k.pps"
expect 2 "--schedule does not apply to 'import-csv'" import-csv "$tmp/k.csv" --schedule s -o "$tmp/k.pps"
expect 2 "--stdlib does not apply to 'import-csv'" import-csv "$tmp/k.csv" --stdlib "$tmp" -o "$tmp/k.pps"
expect 2 "arguments after -- do not apply to 'check'" check "$ex" -- -O2
expect 2 "--grid cannot go with -q" sim "$ex" --grid -q
expect 2 "--grid cannot go with --json" sim "$ex" --grid --json
# one output at most on standard output
expect 2 "--json and --trace - both write to standard output" sim "$ex" -q --trace - --svg - --json
expect 2 "--trace - and --svg - both write to standard output" sim "$ex" -q --trace - --svg -
expect 2 "the text summary (-q leaves it out) and --svg - both write" sim "$ex" --svg -
expect 2 "--json and -o - both write to standard output" synth "$ex" --json -o -
[ -e "$tmp/k.pps" ] || [ -e "$tmp/x.c" ] || [ -e "$tmp/x" ] && { echo "FAIL: a rejected command wrote a file"; fail=1; }
# what is allowed still works: one output on stdout, import-csv alone
"$PPSC" sim "$ex" -q --trace - > "$tmp/t.json" 2>"$tmp/err" && grep -q displayTimeUnit "$tmp/t.json" &&
  echo "ok: sim -q --trace - writes the trace to stdout" || { echo "FAIL: sim -q --trace -"; cat "$tmp/err"; fail=1; }
"$PPSC" import-csv "$tmp/k.csv" -o "$tmp/k.pps" 2>"$tmp/err" && [ -s "$tmp/k.pps" ] &&
  echo "ok: import-csv without extra options" || { echo "FAIL: import-csv"; cat "$tmp/err"; fail=1; }
# -D of a cost, memory key or policy the file has no parameter for: the error says
# which option sets it in any file
expect 2 "has no parameter 'TC' (to set it in any file: --cost TC=0.1)" check "$ex" -D TC=0.1
expect 2 "(to set it in any file: --memory limit=2)" check "$ex" -D limit=2
expect 2 "(to set it in any file: --policy offload=all)" check "$ex" -D offload=all
# --policy: offload and vocabulary policies of any file from the command line
js() { "$PPSC" check "$@" --json 2>/dev/null | grep -o "\"$key\":[0-9.]*" | head -1 | cut -d: -f2; }  # top-level key
key=peak_memory; a=$(js "$ex"); b=$(js "$ex" --policy offload=all)
key=host_memory; h=$(js "$ex" --policy offload=all)
# (TOFF = 0: an activation leaves at once and comes back one pass before its B, so
# two stay; the last stage's, whose B follows its F, are not offloaded: host 3)
[ "$a" = 4 ] && [ "$b" = 2 ] && [ "$h" = 3 ] && echo "ok: --policy offload=all: peak $a -> $b, host $h" ||
  { echo "FAIL: --policy offload=all: peak '$a' -> '$b', host '$h'"; fail=1; }
key=peak_memory; c=$(js "$ex" --policy offload=0.5 --policy offload_stages=0..1)
[ "$c" = 3 ] && echo "ok: --policy offload_stages=0..1: device 0's peak 4 goes below device 1's 3: peak $c" ||
  { echo "FAIL: offload_stages peak '$c'"; fail=1; }
key=host_memory; h=$(js "$top_srcdir/stdlib/pipeoffload.pps" --policy offload=none)
[ "$h" = 0 ] && echo "ok: --policy offload=none turns pipeoffload's offload off" || { echo "FAIL: offload=none: host '$h'"; fail=1; }
# a vocabulary policy added to or taken from a file: export-csv (which refuses
# vocabulary parallelism) tells whether it is there
expect 1 "vocabulary parallelism (Vocab-1)" export-csv "$top_srcdir/stdlib/1f1b.pps" --policy vocab=1 -o "$tmp/v.csv"
rm -f "$tmp/v.csv"
"$PPSC" export-csv "$top_srcdir/stdlib/vocab_1f1b.pps" --policy vocab=0 -o "$tmp/v.csv" 2>"$tmp/err" && [ -s "$tmp/v.csv" ] && echo "ok: --policy vocab=0 exports vocab_1f1b" || { echo "FAIL: --policy vocab=0"; fail=1; }
expect 0 "valid" check "$top_srcdir/stdlib/vocab_1f1b.pps" --policy vocab_async=true
expect 2 "--policy vocab=3: expected 0 (none), 1 or 2" check "$ex" --policy vocab=3
expect 2 "--policy offload=2: expected none, all or a ratio in (0, 1]" check "$ex" --policy offload=2
expect 2 "--policy offload_stages=0..9: expected a range" check "$ex" --policy offload_stages=0..9
expect 2 "--policy bogus: unknown key" check "$ex" --policy bogus=1
expect 2 "--policy needs KEY=VALUE" check "$ex" --policy offload
# --max-errors 2: two errors printed, the rest counted
{ echo 'schedule s(P = 2, m = 2) { devices P; microbatches m; placement linear;'
  echo '  device 0 { F(9) F(9, 1) B(7) W(8) BW(6) } }'; } > "$tmp/many.pps"
expect 1 "more errors not shown" check "$tmp/many.pps" --max-errors 2
n=$(grep -c ': error: ' "$tmp/out")
[ "$n" = 2 ] && echo "ok: --max-errors 2 prints 2 errors" || { echo "FAIL --max-errors 2 printed $n errors"; fail=1; }
exit $fail
