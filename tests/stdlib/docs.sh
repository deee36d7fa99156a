#!/bin/sh
# tests/stdlib/docs.sh: the figures table in docs/stdlib.md is what the schedules
# give now (regenerate it with tools/stdlib-table.sh).
: "${PPSC:?}" "${top_srcdir:?}"
PPSC=$PPSC exec sh "$top_srcdir/tools/stdlib-table.sh" --check
