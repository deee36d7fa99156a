# tests/runtime/split_lib.sh: what tp.sh and sp.sh (--tensor-parallel, --sequence-parallel)
# share, sourced after lib.sh: run NAME CMD... (CMD --json into $WORK/NAME, a failure
# reported), losses FILE (the iterations' losses of a --json run), close LABEL A B (A's
# losses equal B's within 1e-6 relative, as many of them), norms LABEL A B [TOL] (the
# same for the gradient norms of 4 iterations).
losses() { grep -o '"loss":[-0-9.e+]*,"time_s"' "$1" | sed 's/"loss":\(.*\),"time_s"/\1/' | tr '\n' ' '; }
close() {
  a=$(losses "$2"); b=$(losses "$3")
  if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) > 0 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
  then pass "$1: $a"; else fail "$1: '$a' vs '$b'"; fi
}
# norms LABEL A B [TOL]: A's 4 gradient norms (--clip-grad) equal B's, the first within
# 1e-6 relative, the later ones within TOL (default 1e-6; ep.sh and ep_a2a.sh give 1e-5:
# with Adam a rounding difference in a gradient element near 0 moves a weight by about lr,
# and grows into the next iterations' norms)
norms() {
  g2=$(grep -o '"grad_norm":[0-9.e+-]*' "$2" | tr '\n' ' '); g1=$(grep -o '"grad_norm":[0-9.e+-]*' "$3" | tr '\n' ' ')
  python3 -c "
import sys
a, b = [[float(x.split(':')[1]) for x in s.split()] for s in sys.argv[1:3]]
t = float(sys.argv[3])
assert len(a) == len(b) == 4 and all(abs(x - y) <= (1e-6 if i == 0 else t) * y for i, (x, y) in enumerate(zip(a, b))), (a, b)" \
    "$g2" "$g1" "${4:-1e-6}" && pass "$1 ($g2)" || fail "$1: '$g2' vs '$g1'"
}
run() { out=$1; shift; "$@" --json >"$WORK/$out" 2>"$WORK/err" || { fail "$out: exit $?: $(cat "$WORK/err")"; }; }
