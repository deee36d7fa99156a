#!/bin/sh
# tests/runtime/layers.sh: the runtime's files call each other in one direction only.
# From the object files' symbols (nm: what each object defines, what it leaves
# undefined) it builds the dependency graph among runtime/*.o (runtime/cuda/*.o
# included: A -> B when A uses a symbol B defines) and fails on any circle, printing
# its files and the symbols that close it. The compiler's objects (compiler/*.o) are
# checked the same way but only reported (notes), until their circles are gone.
#   layers.sh [DIR...]  checks the objects under the DIRs instead (the planted-bug check).
: "${top_builddir:?set top_builddir}"
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layers.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# objects DIR...: the object files of the DIRs (libtool's .libs/ copies when there are)
objects() {
  for d in "$@"; do
    if ls "$d"/.libs/*.o >/dev/null 2>&1; then ls "$d"/.libs/*.o; else ls "$d"/*.o 2>/dev/null; fi
  done
}

# circles LABEL OBJ...: prints "circle: ..." lines for every strongly connected set of
# two or more objects; exit status 1 when there is one
circles() {
  label=$1; shift
  : > "$tmp/syms"
  for o in "$@"; do
    n=$(basename "$o" .o); n=${n#*_la-}
    nm -g --defined-only "$o" 2>/dev/null | awk -v n="$n" 'NF >= 3 && $2 ~ /^[TDBRWVGSCiu]$/ { print "D", n, $3 }' >> "$tmp/syms"
    nm -u "$o" 2>/dev/null | awk -v n="$n" '{ print "U", n, $NF }' >> "$tmp/syms"
  done
  awk -v label="$label" '
    $1 == "D" { def[$3] = $2; node[$2] = 1; next }
    $1 == "U" { use[++nu] = $2 SUBSEP $3; node[$2] = 1 }
    END {
      for (k = 1; k <= nu; k++) {
        split(use[k], a, SUBSEP)
        if ((a[2] in def) && def[a[2]] != a[1] && !((a[1], def[a[2]]) in edge)) edge[a[1], def[a[2]]] = a[2]
      }
      n = 0; for (x in node) name[++n] = x
      for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) r[i, j] = ((name[i], name[j]) in edge)
      for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if (r[i, k]) for (j = 1; j <= n; j++) if (r[k, j]) r[i, j] = 1
      bad = 0
      for (i = 1; i <= n; i++) {
        if (done[i] || !r[i, i]) continue
        set = ""; edges = ""
        for (j = 1; j <= n; j++) if (r[i, j] && r[j, i]) { done[j] = 1; set = set " " name[j]; m[j] = 1 }
        for (a2 = 1; a2 <= n; a2++) for (b2 = 1; b2 <= n; b2++)
          if (m[a2] && m[b2] && ((name[a2], name[b2]) in edge)) edges = edges "; " name[a2] " -> " name[b2] " (" edge[name[a2], name[b2]] ")"
        split("", m)
        print label ": circle:" set ": " substr(edges, 3)
        bad = 1
      }
      exit bad
    }' "$tmp/syms"
}

if [ $# -gt 0 ]; then
  set -- $(objects "$@")
  [ $# -gt 0 ] || { echo "FAIL: no object files"; exit 1; }
  circles objects "$@" && echo "ok: no circle among $# objects"
  exit $?
fi
fail=0
set -- $(objects "$top_builddir/runtime" "$top_builddir/runtime/cuda")
if [ $# -lt 5 ]; then echo "FAIL: only $# runtime object files under $top_builddir/runtime"; exit 1; fi
if circles runtime "$@"; then echo "ok: no circle among the runtime's $# object files"; else fail=1; fi
set -- $(objects "$top_builddir/compiler")
if [ $# -gt 0 ]; then
  circles compiler "$@" | sed 's/^/note: /'
  echo "(the compiler's circles above are reported, not yet failed)"
fi
exit $fail
