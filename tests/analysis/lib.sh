# tests/analysis/lib.sh: what the cost-model tests (dp, dp_dist, tie, tp, cp) share,
# sourced after their header comment: python3 or skip (77), a temporary folder $tmp
# removed at exit, bad() to count a failure in $fail, PPS_STDLIB, PPSC as an absolute
# path (the tests also run in folders of $tmp), keyerr, and $tmp/figs.py (what the
# tests' check.py scripts share).
set -u
: "${PPSC:?}" "${top_srcdir:?}"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
PPS_STDLIB=$(cd "$top_srcdir/stdlib" && pwd) && export PPS_STDLIB || exit 99
case $PPSC in /*) ;; *) PPSC=$(pwd)/$PPSC ;; esac

# keyerr NAME MODEL HARDWARE WHERE MESSAGE: `ppsc check` of a two-device file with these
# model and hardware keys (in $tmp, the current folder) fails with exit 1 and the error
# MESSAGE at line:column WHERE of NAME.pps
keyerr() {
  printf 'schedule e {\n  devices 2; microbatches 2;\n  model { %s }\n  hardware { %s }\n  device 0 { F(0) F(1) BW(0) BW(1) }\n  device 1 { F(0) BW(0) F(1) BW(1) }\n}\n' "$2" "$3" > "$tmp/$1.pps"
  "$PPSC" check "$1.pps" --color=never > "$tmp/$1.out" 2>&1
  rc=$?
  [ $rc = 1 ] || bad "$1: exit $rc, expected 1"
  grep -q "^$1.pps:$4: error: $5" "$tmp/$1.out" || bad "$1: no error at $4 '$5': $(cat "$tmp/$1.out")"
}

# figs.py, imported by a test's check.py (sys.path[0] is $tmp): bad, a list of the
# figures that differ; want(NAME, GOT, WANT), which adds one unless GOT is within 1e-9
# relative of WANT; costs(TEXT), the `cost` statements of `ppsc expand`'s output as
# {"TF": .., "0TF": .. (stage 0's), ...}
cat > "$tmp/figs.py" <<'PY'
import re
bad = []
def near(a, b): return abs(a - b) <= 1e-9 * max(1e-12, abs(b))   # relative 1e-9
def want(name, got, w):
    if got is None or not near(got, w): bad.append("%s = %s, want %.12g" % (name, got, w))
def costs(x):
    c = {}
    for mt in re.finditer(r"^  cost (.*);$", x, re.M):
        st = re.match(r"stage (\d+): (.*)", mt.group(1))
        for k, v in re.findall(r"(\w+) = ([-0-9.e+]+)", st.group(2) if st else mt.group(1)):
            c[(st.group(1) if st else "") + k] = float(v)
    return c
PY
