/* arena.h: the compiler's allocator. One arena per compilation; everything the
 * phases allocate lives until arena_free at exit. Allocation failure ends ppsc with
 * a message naming the --max-ops limit to lower, exit status 2 (the compiler has no
 * useful way to go on without memory). */
#ifndef PPS_ARENA_H
#define PPS_ARENA_H
#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;
typedef struct Arena {
  ArenaChunk *head;   /* newest chunk first */
  size_t total;       /* bytes handed out, for statistics */
} Arena;

void *arena_alloc(Arena *a, size_t size);            /* zeroed, 16-byte aligned */
void *arena_alloc_fill(Arena *a, size_t size, int byte); /* every byte set to byte (not zeroed first) */
void *arena_alloc_raw(Arena *a, size_t size);        /* not zeroed: for an array the caller writes whole */
void *arena_grow(Arena *a, void *old, size_t old_size, size_t new_size); /* realloc-like */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);
/* Moves from's memory into `into` (freed with it); from is left empty. */
void arena_adopt(Arena *into, Arena *from);
/* Out of memory: prints what was asked for and the --max-ops hint, exits 2. */
void arena_out_of_memory(size_t n) __attribute__((noreturn));
void arena_set_oom_hint(long max_ops);
/* The default --max-ops: 50,000,000, or fewer ops where half the machine's memory
 * (or RLIMIT_AS) holds fewer at about 215 bytes per op. */
long arena_default_max_ops(void);

/* Growable array of fixed-size elements in an arena:
 *   T *p = VEC_PUSH(arena, v, n, cap);   (v: T*, n and cap: int; p is zeroed) */
void *arena_vec_grow(Arena *a, void *v, int *cap, size_t elem);
#define VEC_PUSH(A, V, N, CAP) \
  ((N) >= (CAP) ? (void)((V) = arena_vec_grow((A), (V), &(CAP), sizeof *(V))) : (void)0, &(V)[(N)++])
#endif
