#!/bin/sh
# tests/stdlib/docs.sh: the figures table in docs/stdlib.md is what the schedules
# give now (regenerate it with tools/stdlib-table.sh).
: "${PPSC:?}" "${top_srcdir:?}"
# the example of docs/stdlib.md (its only ``` block) checks
tmp=${TMPDIR:-/tmp}/pps-stdlib-doc.$$.pps
trap 'rm -f "$tmp"' EXIT
awk '/^```$/ { on = !on; next } on' "$top_srcdir/docs/stdlib.md" > "$tmp"
"$PPSC" check --stdlib "$top_srcdir/stdlib" "$tmp" || { echo "FAIL: the example of docs/stdlib.md"; exit 1; }
PPSC=$PPSC sh "$top_srcdir/tools/stdlib-table.sh" --check
