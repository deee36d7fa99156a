/* cpu_backend.h: internal glue between cpu_backend.c (memory, streams, gemm) and
 * cpu_kernels.c (the numerical kernels). Not part of any public interface. */
#ifndef PPSRT_CPU_BACKEND_H
#define PPSRT_CPU_BACKEND_H
#include "backend.h"

/* Fills the kernel entries of b's table (cpu_kernels.c). */
void ppsrt_cpu_install_kernels(ppsrt_backend *b);
/* The kernels enter their stream through b->stream_sync (cpu_backend.c validates the
 * stream and, on a copy stream, waits until its queue is empty, so that a kernel runs on
 * the caller's thread in stream order): this file is the only way back. */
/* Makes b's allocator safe for a second thread of the same device (the collective
 * lane, coll_lane.c): allocations and frees then take a lock. Call before that thread
 * starts. */
void ppsrt_cpu_backend_share(ppsrt_backend *b);
#endif
