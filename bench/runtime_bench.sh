#!/bin/sh
# runtime_bench.sh: runs the runtime overhead benchmark (being written)
