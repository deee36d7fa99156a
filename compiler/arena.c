/* arena.c: bump allocation in large chunks; see arena.h. */
#include "arena.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

struct ArenaChunk {
  ArenaChunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

static char oom_hint[160];

void arena_set_oom_hint(long max_ops) {
  snprintf(oom_hint, sizeof oom_hint, ": lower --max-ops (now %ld) or give ppsc more memory", max_ops);
}

void arena_out_of_memory(size_t n) {
  fprintf(stderr, "ppsc: out of memory (asked for %zu more bytes)%s\n", n, oom_hint);
  fflush(stdout);
  _exit(2);
}

static void *arena_oom(size_t n) {
  arena_out_of_memory(n);
  return NULL;
}

long arena_default_max_ops(void) {
  const long cap = 50000000, bytes_per_op = 300;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double mem = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
  struct rlimit rl;
  if (!getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY && (mem <= 0 || (double)rl.rlim_cur < mem))
    mem = (double)rl.rlim_cur;
  if (!(mem > 0)) return cap;
  double n = mem / 2 / bytes_per_op;  /* half the memory for the IR and analysis */
  if (n >= cap) return cap;
  return n < 100000 ? 100000 : (long)n;
}

/* glibc would give every chunk over 128 KiB its own mapping and return it at
 * arena_free, and trim the heap on every free: the phases' short-lived arenas
 * (lowering's rounds) then fault their memory in again each time. Up to 32 MiB a
 * chunk comes from the heap, and freed memory stays there for the next arena. */
static void arena_tune(void) {
#ifdef __GLIBC__
  static int done;
  if (done) return;
  done = 1;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
#endif
}

void *arena_alloc(Arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  ArenaChunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t want = size > (4u << 20) ? size : (4u << 20);
    arena_tune();
    /* chunks are whole 2 MiB pages, aligned, and the kernel is asked for large pages
       where it gives them on request (transparent huge pages in madvise mode): a big
       schedule's arrays then fault in 2 MiB at a time, not 4 KiB (zb_v at P = 64,
       m = 1024: 44,600 page faults -> under 1,000) */
    size_t huge = 2u << 20, bytes = (sizeof *c + want + huge - 1) & ~(huge - 1);
    void *mem = NULL;
    if (posix_memalign(&mem, huge, bytes)) mem = NULL;
    c = mem;
    if (!c) arena_oom(size);
    want = bytes - sizeof *c;
#ifdef MADV_HUGEPAGE
    (void)madvise(c, bytes, MADV_HUGEPAGE);
#endif
    c->next = a->head;
    c->size = want;
    c->used = 0;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  a->total += size;
  memset(p, 0, size);
  return p;
}

void *arena_grow(Arena *a, void *old, size_t old_size, size_t new_size) {
  if (new_size <= old_size) return old;
  /* Extend in place when old is the last allocation of the newest chunk. */
  ArenaChunk *c = a->head;
  size_t old_r = (old_size + 15) & ~(size_t)15, new_r = (new_size + 15) & ~(size_t)15;
  if (old && c && (unsigned char *)old + old_r == c->data + c->used && c->size - c->used >= new_r - old_r) {
    memset(c->data + c->used, 0, new_r - old_r);
    c->used += new_r - old_r;
    a->total += new_r - old_r;
    return old;
  }
  void *p = arena_alloc(a, new_size);
  if (old) memcpy(p, old, old_size);
  return p;
}

void *arena_vec_grow(Arena *a, void *v, int *cap, size_t elem) {
  size_t old = (size_t)*cap * elem;
  *cap = *cap ? 2 * *cap : 16;
  return arena_grow(a, v, old, (size_t)*cap * elem);
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void arena_free(Arena *a) {
  for (ArenaChunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  a->head = NULL;
  a->total = 0;
}
