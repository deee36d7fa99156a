#!/bin/sh
# tests/gpu/link.sh: a build that found CUDA has the CUDA backend (and, with NCCL, the
# NCCL transport) inside libppsrt, linked against cudart and cuBLAS (and NCCL). Runs
# everywhere: it reads the library, it does not need a GPU.
. "$(dirname "$0")/../runtime/lib.sh"
lib=$top_builddir/.libs/libppsrt.so
if [ ! -f "$lib" ]; then echo "skip: no shared libppsrt in $top_builddir/.libs"; exit 77; fi
syms=$(nm -D --defined-only "$lib" 2>&1) || { fail "nm -D $lib: $syms"; finish; }
needed=$(objdump -p "$lib" 2>&1 | awk '$1 == "NEEDED" { print $2 }')
has_sym() { echo "$syms" | grep -q " T $1\$" && pass "libppsrt defines $1" || fail "libppsrt lacks $1"; }
needs() { echo "$needed" | grep -q "^$1" && pass "libppsrt needs $1" || fail "libppsrt does not link $1 (NEEDED: $(echo $needed))"; }
has_sym ppsrt_cuda_backend_create
needs libcudart
needs libcublas
if grep -q "HAVE_NCCL 1" "$top_builddir/config.h"; then
  has_sym ppsrt_nccl_transport_create
  needs libnccl
fi
finish
