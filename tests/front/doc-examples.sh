#!/bin/sh
# tests/front/doc-examples.sh: every ```pps block of docs/language.md is a complete
# file that `ppsc expand` accepts (exit 0); every ```pps-error block is rejected
# (exit 1) with located errors exactly on the lines it marks `// error:` (at least one).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
doc="$top_srcdir/docs/language.md"
tmp=${TMPDIR:-/tmp}/pps-doc.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
awk -v dir="$tmp" '
  /^```pps-error[ \t]*$/ { n++; f = sprintf("%s/bad%02d.pps", dir, n); printf "" > f; on = 1; next }
  /^```pps[ \t]*$/       { n++; f = sprintf("%s/ok%02d.pps", dir, n); printf "" > f; on = 1; next }
  /^```/                 { if (on) close(f); on = 0; next }
  on                     { print >> f }
' "$doc"
fail=0 n=0
for f in "$tmp"/*.pps; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  case $(basename "$f") in
  ok*)
    if ! "$PPSC" expand "$f" >/dev/null 2>"$tmp/err"; then
      echo "FAIL: example $(basename "$f") of docs/language.md is rejected:"; cat "$tmp/err"; sed 's/^/    /' "$f"; fail=1
    fi ;;
  bad*)
    "$PPSC" expand "$f" >/dev/null 2>"$tmp/err"; rc=$?
    # the errors are exactly on the lines marked `// error:` (one at least)
    want=$(grep -n '// error:' "$f" | cut -d: -f1 | sort -u | tr '\n' ' ')
    got=$(sed -n 's/^[^:]*:\([0-9][0-9]*\):[0-9][0-9]*: error: .*/\1/p' "$tmp/err" | sort -u | tr '\n' ' ')
    if [ $rc != 1 ] || [ -z "$want" ] || [ "$got" != "$want" ]; then
      echo "FAIL: error example $(basename "$f") of docs/language.md: exit $rc, errors on lines '$got', marked '$want'"
      cat "$tmp/err"; fail=1
    fi ;;
  esac
done
[ $n -ge 5 ] || { echo "FAIL: only $n examples found in $doc"; fail=1; }
echo "doc-examples: $n examples"
exit $fail
