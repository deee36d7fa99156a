# bench/bench.mk: benchmark programs (built on demand with `make bench`, never timed in tests).
