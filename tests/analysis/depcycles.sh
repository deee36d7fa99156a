#!/bin/sh
# tests/analysis/depcycles.sh: the compiler's phases and the runtime's files call one
# way. No circle among libppsc's object files, nor among libppsrt's (its CUDA backend's
# included): A uses a symbol B defines, and B, directly or through others, one of A's;
# measured from their symbols with nm (tools/depcycles.py).
# And the compiler's phases in order: the front end and the order phase (parse,
# elaborate, synthesize, squeeze) call none of the later phases (lower, verify,
# simulate, the executor, the reports, code generation): synthesize gets its check of a
# candidate from the driver (Options.synth_check).
# First the checker itself is shown a planted circle (two tiny objects calling each
# other, and a third calling one of them) and must report exactly that one, and a
# forbidden use (c -> a) must be reported as such.
# Skipped (77) without python3, nm or a C compiler, or when libppsc's objects are not
# plain object files (an LTO build).
set -u
: "${top_srcdir:?}" "${top_builddir:?}"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tool="$top_srcdir/tools/depcycles.py"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0

# 1. the checker sees a planted circle (a <-> b; c -> a is no circle)
cc=${CC:-cc}
printf 'int b_fn(int);\nint a_fn(int x) { return x ? b_fn(x - 1) : 0; }\n' > "$tmp/a.c"
printf 'int a_fn(int);\nint b_fn(int x) { return x ? a_fn(x - 1) : 1; }\n' > "$tmp/b.c"
printf 'int a_fn(int);\nint c_fn(int x) { return a_fn(x); }\n' > "$tmp/c.c"
if (cd "$tmp" && $cc -c a.c b.c c.c) >/dev/null 2>&1; then
  python3 "$tool" "$tmp/a.o" "$tmp/b.o" "$tmp/c.o" > "$tmp/planted" 2>&1
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qx 'circle: a <-> b' "$tmp/planted" || grep -q 'c ->' "$tmp/planted"; then
    echo "FAIL: the checker missed the planted circle a <-> b (exit $rc):"; cat "$tmp/planted"; fail=1
  else
    echo "ok: the checker reports a planted circle"
  fi
  python3 "$tool" --forbid c:a "$tmp/c.o" "$tmp/a.o" > "$tmp/forbid" 2>&1
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qx 'forbidden: c -> a (a_fn)' "$tmp/forbid"; then
    echo "FAIL: the checker missed the forbidden use c -> a (exit $rc):"; cat "$tmp/forbid"; fail=1
  else
    echo "ok: the checker reports a forbidden use"
  fi
else
  echo "SKIP part 1: no working C compiler ($cc)"
fi

# 2. libppsc's objects, then libppsrt's (libtool puts them in .libs/, else beside)
objs_of() { # DIR PREFIX
  o=$(ls "$1"/.libs/"$2"*.o 2>/dev/null)
  [ -n "$o" ] || o=$(ls "$1"/"$2"*.o 2>/dev/null)
  echo $o
}
check() { # LABEL [--forbid A:B]... OBJ...
  label=$1; shift
  fb=
  while [ "${1:-}" = --forbid ]; do fb="$fb --forbid $2"; shift 2; done
  [ $# -gt 0 ] || { echo "SKIP: no $label objects under $top_builddir"; return 77; }
  n=$(nm "$@" 2>/dev/null | grep -c ' T ')
  [ "$n" -gt 50 ] || { echo "SKIP: the $label objects have no plain symbols (LTO?)"; return 77; }
  # shellcheck disable=SC2086
  if python3 "$tool" $fb "$@" > "$tmp/out" 2>&1; then
    echo "ok: no circle among the $label's $# object files${fb:+, and no later phase called early}"
  else
    echo "FAIL: circles among the $label's object files:"; cat "$tmp/out"; fail=1
  fi
  return 0
}
# shellcheck disable=SC2046
early=parse,front,elab,order,synth,block
late=lower,exec,verify,sim,analysis,dp,report,svg,emit_c,cmd_check,cmd_build,cmd_synth,compare,grid,torch_csv
# shellcheck disable=SC2046
check compiler --forbid "$early:$late" $(objs_of "$top_builddir/compiler" libppsc_la-) || exit 77
# shellcheck disable=SC2046
check runtime $(objs_of "$top_builddir/runtime" libppsrt_la-) $(objs_of "$top_builddir/runtime/cuda" "") || exit 77
exit $fail
