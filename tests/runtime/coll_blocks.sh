#!/bin/sh
# tests/runtime/coll_blocks.sh: the transports' reduce_scatter_f32 and allgather (the
# distributed optimizer's collectives, runtime/transport.h), by tests/runtime/coll_blocks
# (its header says what it checks), on every transport this build has, for D = 1, 2, 3:
#  - threads, host buffers (b = NULL, the CPU path).
# Seconds in all.
. "$(dirname "$0")/lib.sh"
CB=$top_builddir/tests/runtime/coll_blocks
for d in 1 2 3; do
  expect_exit 0 "threads, host buffers, D=$d" "$CB" threads host $d
done
finish
