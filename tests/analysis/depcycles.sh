#!/bin/sh
# tests/analysis/depcycles.sh: the compiler's phases call one way. No circle among
# libppsc's object files (A uses a symbol B defines, and B, directly or through
# others, one of A's), measured from their symbols with nm (tools/depcycles.py).
# First the checker itself is shown a planted circle (two tiny objects calling each
# other, and a third calling one of them) and must report exactly that one.
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
else
  echo "SKIP part 1: no working C compiler ($cc)"
fi

# 2. libppsc's objects (libtool puts them in compiler/.libs, else compiler/)
objs=$(ls "$top_builddir"/compiler/.libs/libppsc_la-*.o 2>/dev/null)
[ -n "$objs" ] || objs=$(ls "$top_builddir"/compiler/libppsc_la-*.o 2>/dev/null)
[ -n "$objs" ] || { echo "SKIP: no libppsc objects under $top_builddir/compiler"; exit 77; }
n=$(nm $objs 2>/dev/null | grep -c ' T ')
[ "$n" -gt 50 ] || { echo "SKIP: libppsc's objects have no plain symbols (LTO?)"; exit 77; }
# shellcheck disable=SC2086
if python3 "$tool" $objs > "$tmp/libppsc" 2>&1; then
  cat "$tmp/libppsc"
else
  echo "FAIL: circles among the compiler's object files:"; cat "$tmp/libppsc"; fail=1
fi
exit $fail
