# tests/runtime/split_lib.sh: what tp.sh and sp.sh (--tensor-parallel, --sequence-parallel)
# share, sourced after lib.sh: run NAME CMD... (CMD --json into $WORK/NAME, a failure
# reported), losses FILE (the iterations' losses of a --json run), close LABEL A B (A's
# losses equal B's within 1e-6 relative, as many of them), norms LABEL A B [TOL] (the
# same for the gradient norms of 4 iterations); gpt_setup (the gpt layer-option tests'
# programs and flags: below).
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

# gpt_setup: what the gpt layer-option tests (llama.sh, qknorm.sh, normeps.sh, kvch.sh)
# start from: 1F1B and ZB-V built at P = 2, m = 4 ($A, $Z), a small gpt's flags with Adam
# ($G) and Llama's layer on them ($L)
gpt_setup() {
  build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
  build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
  A=$WORK/a; Z=$WORK/z
  G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
  L="$G --arch llama --ffn-hidden 24"
}
