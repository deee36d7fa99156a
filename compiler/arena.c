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

struct ArenaChunk {
  ArenaChunk *next;
  size_t size, used;
  size_t dirty;   /* bytes of data an earlier arena wrote (a reused chunk); beyond, zeros */
  _Alignas(16) unsigned char data[];
};

/* Chunks of freed arenas, kept for the next arenas (the phases' short-lived arenas,
 * lowering's rounds, take and give back the same sizes). The compiler is one thread. */
static ArenaChunk *spare;

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

/* A chunk of at least want bytes of data: a spare one (first fit), else a new mapping.
 * Chunks are whole 2 MiB pages, aligned, and the kernel is asked for large pages where
 * it gives them on request (transparent huge pages in madvise mode): a big schedule's
 * arrays then fault in 2 MiB at a time, not 4 KiB (zb_v at P = 64, m = 1024: 44,600
 * page faults -> under 1,000). A new mapping is zero: arena_alloc clears only what an
 * earlier arena wrote (dirty), not the kernel's zeros again. */
static ArenaChunk *chunk_get(size_t want) {
  for (ArenaChunk **pp = &spare; *pp; pp = &(*pp)->next)
    if ((*pp)->size >= want) {
      ArenaChunk *c = *pp;
      *pp = c->next;
      return c;
    }
  size_t huge = 2u << 20, bytes = (sizeof(ArenaChunk) + want + huge - 1) & ~(huge - 1);
  if (bytes < want) arena_oom(want);
  /* a mapping one large page longer, cut to an aligned one */
  unsigned char *m = mmap(NULL, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) arena_oom(want);
  uintptr_t at = ((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1);
  if (at > (uintptr_t)m) munmap(m, at - (uintptr_t)m);
  size_t tail = (size_t)((uintptr_t)m + bytes + huge - (at + bytes));
  if (tail) munmap((void *)(at + bytes), tail);
  ArenaChunk *c = (ArenaChunk *)at;
#ifdef MADV_HUGEPAGE
  (void)madvise(c, bytes, MADV_HUGEPAGE);
#endif
  c->size = bytes - sizeof *c;
  c->dirty = 0;
  return c;
}

/* Zeroes [from, to) of c's data where an earlier arena wrote it. */
static void chunk_clear(ArenaChunk *c, size_t from, size_t to) {
  if (from < c->dirty) memset(c->data + from, 0, (to < c->dirty ? to : c->dirty) - from);
}

void *arena_alloc(Arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  ArenaChunk *c = a->head;
  if (!c || c->size - c->used < size) {
    c = chunk_get(size > (4u << 20) ? size : (4u << 20));
    c->next = a->head;
    c->used = 0;
    a->head = c;
  }
  void *p = c->data + c->used;
  chunk_clear(c, c->used, c->used + size);
  c->used += size;
  a->total += size;
  return p;
}

/* (what was there stays: an earlier arena's data, or the kernel's zeros; the caller
 * writes every byte of size, and the rounding is cleared as arena_alloc's) */
void *arena_alloc_raw(Arena *a, size_t size) {
  size_t r = (size + 15) & ~(size_t)15;
  ArenaChunk *c = a->head;
  if (!c || c->size - c->used < r) {
    c = chunk_get(r > (4u << 20) ? r : (4u << 20));
    c->next = a->head;
    c->used = 0;
    a->head = c;
  }
  void *p = c->data + c->used;
  chunk_clear(c, c->used + size, c->used + r);
  c->used += r;
  a->total += r;
  return p;
}

void *arena_alloc_fill(Arena *a, size_t size, int byte) {
  void *p = arena_alloc_raw(a, size);
  memset(p, byte, size);
  return p;
}

void *arena_grow(Arena *a, void *old, size_t old_size, size_t new_size) {
  if (new_size <= old_size) return old;
  /* Extend in place when old is the last allocation of the newest chunk. */
  ArenaChunk *c = a->head;
  size_t old_r = (old_size + 15) & ~(size_t)15, new_r = (new_size + 15) & ~(size_t)15;
  if (old && c && (unsigned char *)old + old_r == c->data + c->used && c->size - c->used >= new_r - old_r) {
    chunk_clear(c, c->used, c->used + new_r - old_r);
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

void arena_adopt(Arena *into, Arena *from) {
  ArenaChunk *c = from->head;
  if (!c) return;
  ArenaChunk *last = c;
  while (last->next) last = last->next;
  if (into->head) {   /* behind into's newest chunk, which it goes on filling */
    last->next = into->head->next;
    into->head->next = c;
  } else {
    into->head = c;
  }
  into->total += from->total;
  from->head = NULL;
  from->total = 0;
}

void arena_free(Arena *a) {
  for (ArenaChunk *c = a->head, *n; c; c = n) {   /* to the spares, for the next arena */
    n = c->next;
    if (c->used > c->dirty) c->dirty = c->used;
    c->next = spare;
    spare = c;
  }
  a->head = NULL;
  a->total = 0;
}
