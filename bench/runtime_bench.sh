#!/bin/sh
# runtime_bench.sh: the runtime-overhead benchmark (make bench-runtime): the runtime's
# own cost per op with --no-compute against a bare table walk, on 1F1B tables of a few
# sizes, threads transport (P = 1 first: no messages, nothing to wait for, the store
# and the IO box alone). Prints the benchmark's own header, columns and footer.
# What it does not: no MPI or GPU runs (see bench/README.md for those commands).
set -e
B=${top_builddir:-.}/bench/runtime_overhead
for pm in "1 2048" "2 512" "4 512" "8 1024" "4 2048"; do
  set -- $pm
  "$B" "$1" "$2" 30 threads
  echo
done
