/* data.c: training tokens for the gpt model (--data, --val-data): llm.c's uint16 token
 * files, Megatron-LM's indexed datasets (PREFIX.idx + PREFIX.bin, "MMIDIDX", every
 * integer token width) and plain bytes. Files are mapped read-only (MAP_PRIVATE), never
 * read whole: a 100 GB dataset costs the pages that training touches. Regular files only
 * (a FIFO or /dev/zero is refused before anything is read); every header field, size and
 * pointer is checked against the files' sizes with overflow-safe arithmetic, and tokens
 * against --vocab (the whole stream at load when it is small, else each sequence as it is
 * read), with messages naming the file. The token stream (an indexed dataset's sequences
 * concatenated in index order) is cut into sequences of T + 1 tokens, stride T. A blend
 * ("0.7 A 0.3 B", Megatron-LM's --data-path) takes each sequence from one of its datasets
 * by Megatron-LM's blending rule; --data-shuffle permutes each epoch's windows; --split
 * cuts each dataset into training, validation and test documents as Megatron-LM does. */
#include "config.h"
#include "rt.h"
#include "safeio.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { TOK_MAGIC = 20240520, TOK_HEADER = 256 };

/* Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py): the .idx
 * starts with 9 magic bytes, uint64 version 1, a uint8 dtype code, uint64 sequence and
 * document counts (34 bytes); then int32 sizes[S], int64 byte pointers[S] into the .bin,
 * int64 document indices[D] (0, ..., S), and for a multimodal dataset int8 modes[S]. */
static const unsigned char IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { IDX_HEAD = 34 };
/* its dtype codes; width 0: a float type, refused */
static const struct { int width, sgn; const char *name; } DTYPES[] = {
  {0, 0, NULL}, {1, 0, "uint8"}, {1, 1, "int8"}, {2, 1, "int16"}, {4, 1, "int32"}, {8, 1, "int64"},
  {0, 0, "float64"}, {0, 0, "float32"}, {2, 0, "uint16"}};

/* Token streams of at most this many bytes are checked against --vocab whole when they are
 * loaded; larger ones sequence by sequence as training reads them. PPSRT_DATA_SCAN=BYTES
 * sets another limit (0: always as read). */
#define DATA_SCAN_DEFAULT ((size_t)1 << 30)

/* A blend's sampling state: the datasets' sample counts at every BLEND_ROW-th sample
 * (row r: counts at sample r BLEND_ROW), extended on demand under the lock (devices are
 * threads sharing the tokens), so sample k costs at most BLEND_ROW steps of Megatron-LM's
 * rule from the nearest row. */
#define BLEND_ROW 1024
typedef struct blend {
  int nd;
  struct ppsrt_tokens **part;
  double *w;                    /* the weights, normalized to sum 1 */
  pthread_mutex_t lock;
  int64_t *rows;                /* nrows x nd counts */
  size_t nrows, cap;
} blend;

void ppsrt_tokens_free(ppsrt_tokens *t) {
  if (!t) return;
  if (t->blend) {
    blend *b = t->blend;
    for (int d = 0; d < b->nd; d++) ppsrt_tokens_free(b->part[d]);
    free(b->part);
    free(b->w);
    free(b->rows);
    pthread_mutex_destroy(&b->lock);
    free(b);
  }
  if (t->map) munmap((void *)t->map, t->map_size);
  if (t->imap) munmap((void *)t->imap, t->imap_size);
  free(t->cum);
  free(t->path);
  free(t->idx_path);
  free(t);
}

static int fail_file(ppsrt_tokens *t, int code, const char *msg) {
  ppsrt_tokens_free(t);
  return PPSRT_FAIL(code, "%s", msg);
}

/* Maps a regular file read-only. 0, or -1 with errno set (EPERM: not a regular file,
 * opened without blocking so that a FIFO never waits for a writer). A file of 0 bytes
 * maps to NULL. */
static int map_file(const char *path, void **map, size_t *size) {
  *map = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), e = 0;
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st)) e = errno;
  else if (S_ISDIR(st.st_mode)) e = EISDIR;
  else if (!S_ISREG(st.st_mode)) e = EPERM;
  else if ((uint64_t)st.st_size > SIZE_MAX / 2) e = EFBIG;
  if (!e && st.st_size > 0) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) e = errno;
    else { *map = p; *size = (size_t)st.st_size; }
  }
  close(fd);
  if (e) { errno = e; return -1; }
  return 0;
}

/* little-endian integers of the files */
static uint64_t le64(const unsigned char *q) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = v << 8 | q[k];
  return v;
}
static int64_t tok_get(const unsigned char *q, int width, int sgn) {
  switch (width) {
    case 1: return sgn ? (int64_t)(int8_t)q[0] : (int64_t)q[0];
    case 2: { uint16_t v = (uint16_t)(q[0] | q[1] << 8); return sgn ? (int64_t)(int16_t)v : (int64_t)v; }
    case 4: return (int64_t)(int32_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24);
    default: return (int64_t)le64(q);
  }
}

/* an indexed dataset's sequence i: its size, its byte pointer, its first stream position */
static int32_t idx_size(const ppsrt_tokens *t, size_t i) {
  const unsigned char *q = t->imap + IDX_HEAD + 4 * i;
  return (int32_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24);
}
static int64_t idx_ptr(const ppsrt_tokens *t, size_t i) {
  return (int64_t)le64(t->imap + IDX_HEAD + 4 * t->nseq + 8 * i);
}
static size_t idx_start(const ppsrt_tokens *t, size_t i) {
  return t->cum ? t->cum[i] : (size_t)(idx_ptr(t, i) - idx_ptr(t, 0)) / (size_t)t->width;
}
/* the index sequence holding stream position p < n: the last i with start(i) <= p */
static size_t idx_seq_of(const ppsrt_tokens *t, size_t p) {
  size_t lo = 0, hi = t->nseq;   /* start(lo) <= p < start(hi) (start(nseq) = n) */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (idx_start(t, mid) <= p) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* Stream position p < n: its bytes, and how many tokens follow contiguously from there. */
static const unsigned char *tok_at(const ppsrt_tokens *t, size_t p, size_t *avail) {
  if (!t->cum) {
    *avail = t->n - p;
    return t->base + p * (size_t)t->width;
  }
  size_t i = idx_seq_of(t, p), off = p - t->cum[i];
  *avail = t->cum[i + 1] - p;
  return t->map + (size_t)idx_ptr(t, i) + off * (size_t)t->width;
}

/* the message for token v at stream position p out of range (training sequence `sample`,
 * or -1 in the scan at load) */
static int bad_token(const ppsrt_tokens *t, size_t p, int64_t v, long sample) {
  char where[160] = "", when[160] = "";
  if (t->indexed) {
    size_t i = idx_seq_of(t, p);
    snprintf(where, sizeof where, " (sequence %zu of the index, its token %zu)", i, p - idx_start(t, i));
  }
  if (sample >= 0)
    snprintf(when, sizeof when, ", read for training sequence %ld (streams over %zu bytes are checked as they are read, "
             "not at load)", sample, t->scan_max);
  return PPSRT_FAIL(PPSRT_E_USAGE, "data file '%s': token %lld at position %zu%s is out of range for --vocab %d%s%s", t->path,
                    (long long)v, p, where, t->vocab, when,
                    t->bytes ? " (hint: a file read as bytes needs --vocab 256)" : "");
}

/* lo..hi (a block's least and greatest token) within [0, vocab)? (int64_t parameters:
 * one test for every token type) */
static int in_range(int64_t lo, int64_t hi, int64_t vocab) { return lo >= 0 && hi < vocab; }

/* The scan at load reads the stream in chunks of this many bytes; the pages of each
 * leave the process after it (they stay in the page cache), so the scan of a large file
 * does not make the run's resident memory the file's size. */
#define SCAN_CHUNK ((size_t)64 << 20)
static void drop_pages(const unsigned char *r, size_t n) {
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)r + pg - 1) / pg * pg, e = ((uintptr_t)r + n) / pg * pg;
  if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);   /* never written: the pages come back from the file */
}

/* The first of cnt tokens at q outside [0, vocab), or cnt. Whole-stream scans go
 * through it: blocks are reduced to their least and greatest token first (a loop that
 * compilers vectorize), and only a block holding a bad token is searched token by token. */
static size_t first_bad(const unsigned char *q, size_t cnt, int width, int sgn, int64_t vocab) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SCAN(TY)                                                                     \
  for (size_t b = 0; b < cnt; b += 4096) {                                           \
    size_t e = cnt - b < 4096 ? cnt - b : 4096;                                      \
    const unsigned char *r = q + b * sizeof(TY);                                     \
    TY lo, hi, v;                                                                    \
    memcpy(&lo, r, sizeof lo);                                                       \
    hi = lo;                                                                         \
    for (size_t i = 1; i < e; i++) {                                                 \
      memcpy(&v, r + i * sizeof v, sizeof v);                                        \
      lo = v < lo ? v : lo;                                                          \
      hi = v > hi ? v : hi;                                                          \
    }                                                                                \
    if (!in_range((int64_t)lo, (int64_t)hi, vocab))                                  \
      for (size_t i = 0; i < e; i++) {                                               \
        memcpy(&v, r + i * sizeof v, sizeof v);                                      \
        if (!in_range((int64_t)v, (int64_t)v, vocab)) return b + i;                  \
      }                                                                              \
  }                                                                                  \
  return cnt;
  switch (width * 2 + sgn) {
    case 2: SCAN(uint8_t)
    case 3: SCAN(int8_t)
    case 4: SCAN(uint16_t)
    case 5: SCAN(int16_t)
    case 9: SCAN(int32_t)
    case 17: SCAN(int64_t)
  }
#undef SCAN
#endif
  for (size_t i = 0; i < cnt; i++) {
    int64_t v = tok_get(q + i * (size_t)width, width, sgn);
    if (v < 0 || v >= vocab) return i;
  }
  return cnt;
}

/* Checks the tokens of stream positions [p, p + count) against the vocabulary; with
 * ids/tgt given, stores them as a window's inputs and targets (token k of the span is
 * input k and target k - 1). */
static int tok_span(const ppsrt_tokens *t, size_t p, size_t count, long sample, int32_t *ids, int32_t *tgt) {
  size_t k = 0;
  while (k < count) {
    size_t avail;
    const unsigned char *q = tok_at(t, p + k, &avail);
    if (avail > count - k) avail = count - k;
    if (!ids && !tgt) {   /* a check only (the scan at load), in chunks of SCAN_CHUNK bytes */
      size_t w = (size_t)t->width;
      for (size_t done = 0; done < avail;) {
        size_t c = avail - done < SCAN_CHUNK / w ? avail - done : SCAN_CHUNK / w;
        const unsigned char *r = q + done * w;
        size_t b = first_bad(r, c, t->width, t->sgn, t->vocab);
        if (b < c) return bad_token(t, p + k + done + b, tok_get(r + b * w, t->width, t->sgn), sample);
        drop_pages(r, c * w);
        done += c;
      }
      k += avail;
      continue;
    }
    for (size_t e = k + avail; k < e; k++, q += t->width) {
      int64_t v = tok_get(q, t->width, t->sgn);
      if (v < 0 || v >= t->vocab) return bad_token(t, p + k, v, sample);
      if (ids && k + 1 < count) ids[k] = (int32_t)v;
      if (tgt && k > 0) tgt[k - 1] = (int32_t)v;
    }
  }
  return 0;
}

/* Reads PREFIX.idx and maps PREFIX.bin (ppsrt_tokens_load's indexed part); t->path is
 * the .bin, t->idx_path the .idx. 0, or a failure with msg set. */
static int load_indexed(ppsrt_tokens *t, char *msg, size_t msz) {
  const char *ip = t->idx_path, *bp = t->path;
  void *m;
  size_t isz, bsz;
  if (map_file(ip, &m, &isz)) {
    int e = errno;
    snprintf(msg, msz, "data index '%s': %s", ip, pps_read_error(e));
    return e == ENOMEM ? PPSRT_E_NOMEM : PPSRT_E_USAGE;
  }
  t->imap = m;
  t->imap_size = isz;
  const unsigned char *h = t->imap;
  if (isz < IDX_HEAD) {
    snprintf(msg, msz, "data index '%s': truncated: %zu bytes, shorter than the %d-byte header of a Megatron-LM index", ip, isz,
             IDX_HEAD);
    return PPSRT_E_USAGE;
  }
  if (memcmp(h, IDX_MAGIC, sizeof IDX_MAGIC)) {
    snprintf(msg, msz, "data index '%s': not a Megatron-LM index (its first 9 bytes are not \"MMIDIDX\\0\\0\")", ip);
    return PPSRT_E_USAGE;
  }
  uint64_t version = le64(h + 9), S = le64(h + 18), D = le64(h + 26);
  unsigned code = h[17];
  if (version != 1) {
    snprintf(msg, msz, "data index '%s': version %llu is not supported (expected 1)", ip, (unsigned long long)version);
    return PPSRT_E_USAGE;
  }
  if (code >= sizeof DTYPES / sizeof *DTYPES || !DTYPES[code].name) {
    snprintf(msg, msz, "data index '%s': unknown dtype code %u (Megatron-LM's: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
             "8 uint16; 6 float64, 7 float32)", ip, code);
    return PPSRT_E_USAGE;
  }
  if (!DTYPES[code].width) {
    snprintf(msg, msz, "data index '%s': dtype %s (code %u): token ids must be integers (uint8, int8, int16, uint16, int32 "
             "or int64)", ip, DTYPES[code].name, code);
    return PPSRT_E_USAGE;
  }
  t->width = DTYPES[code].width;
  t->sgn = DTYPES[code].sgn;
  t->dtype = DTYPES[code].name;
  /* the arrays' sizes, each bound checked before it is multiplied */
  size_t room = isz - IDX_HEAD;
  if (S > room / 12 || D > (room - 12 * S) / 8) {
    snprintf(msg, msz, "data index '%s': truncated: its header promises %llu sequences (12 bytes each) and %llu document "
             "indices (8 bytes each), the file holds %zu bytes after the header", ip, (unsigned long long)S,
             (unsigned long long)D, room);
    return PPSRT_E_USAGE;
  }
  size_t extra = room - 12 * (size_t)S - 8 * (size_t)D;
  if (extra && extra != S) {
    snprintf(msg, msz, "data index '%s': %zu bytes after its %llu sequences and %llu document indices, expected none (or %llu: "
             "a multimodal dataset's sequence modes)", ip, extra, (unsigned long long)S, (unsigned long long)D,
             (unsigned long long)S);
    return PPSRT_E_USAGE;
  }
  t->nseq = (size_t)S;
  /* the document indices: 0, never decreasing, the sequence count last */
  const unsigned char *di = h + IDX_HEAD + 12 * (size_t)S;
  if (D == 0 || le64(di) != 0 || le64(di + 8 * (D - 1)) != S) {
    snprintf(msg, msz, "data index '%s': the document indices must run from 0 to the sequence count %llu (%s)", ip,
             (unsigned long long)S, D == 0 ? "there are none" : "they do not");
    return PPSRT_E_USAGE;
  }
  for (uint64_t j = 1; j < D; j++)
    if (le64(di + 8 * j) < le64(di + 8 * (j - 1))) {
      snprintf(msg, msz, "data index '%s': document index %llu (%llu) is below the one before it (%llu)", ip,
               (unsigned long long)j, (unsigned long long)le64(di + 8 * j), (unsigned long long)le64(di + 8 * (j - 1)));
      return PPSRT_E_USAGE;
    }
  if (map_file(bp, &m, &bsz)) {
    int e = errno;
    snprintf(msg, msz, "data file '%s': %s (the tokens of the index '%s')", bp, pps_read_error(e), ip);
    return e == ENOMEM ? PPSRT_E_NOMEM : PPSRT_E_USAGE;
  }
  t->map = m;
  t->map_size = bsz;
  /* each sequence within the .bin; the stream's length; are they back to back? */
  size_t n = 0;
  int contiguous = 1;
  for (size_t i = 0; i < t->nseq; i++) {
    int32_t sz = idx_size(t, i);
    int64_t ptr = idx_ptr(t, i);
    if (sz < 0 || ptr < 0) {
      snprintf(msg, msz, "data index '%s': sequence %zu has a negative %s (%lld)", ip, i, sz < 0 ? "size" : "pointer",
               sz < 0 ? (long long)sz : (long long)ptr);
      return PPSRT_E_USAGE;
    }
    size_t nb = (size_t)sz * (size_t)t->width;   /* < 2^31 x 8 */
    if ((uint64_t)ptr > bsz || nb > bsz - (size_t)ptr) {
      snprintf(msg, msz, "data index '%s': sequence %zu (%d tokens of %d bytes at byte %lld) ends past the end of '%s' (%zu bytes)",
               ip, i, (int)sz, t->width, (long long)ptr, bp, bsz);
      return PPSRT_E_USAGE;
    }
    if (i && (uint64_t)ptr != (uint64_t)idx_ptr(t, i - 1) + (uint64_t)idx_size(t, i - 1) * (uint64_t)t->width) contiguous = 0;
    if ((size_t)sz > SIZE_MAX / 2 - n) {
      snprintf(msg, msz, "data index '%s': more tokens than this machine can address", ip);
      return PPSRT_E_USAGE;
    }
    n += (size_t)sz;
  }
  t->n = n;
  if (contiguous) {
    t->base = t->nseq ? t->map + (size_t)idx_ptr(t, 0) : t->map;
  } else {   /* sequences apart or out of order: each one's first stream position */
    if (t->nseq >= SIZE_MAX / sizeof *t->cum || !(t->cum = malloc((t->nseq + 1) * sizeof *t->cum))) {
      snprintf(msg, msz, "data index '%s': out of host memory for its %zu sequence offsets", ip, t->nseq);
      return PPSRT_E_NOMEM;
    }
    t->cum[0] = 0;
    for (size_t i = 0; i < t->nseq; i++) t->cum[i + 1] = t->cum[i] + (size_t)idx_size(t, i);
  }
  return 0;
}

/* path ends in ext */
static int ends_with(const char *path, const char *ext) {
  size_t pl = strlen(path), el = strlen(ext);
  return pl >= el && !strcmp(path + pl - el, ext);
}
static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Megatron-LM's blending rule (build_blending_indices): sample i goes to the dataset
 * whose weight x max(i, 1) exceeds the samples it has had by the most (the first such
 * on ties); it is that dataset's next sample. counts: the datasets' samples before i. */
static int blend_step(const blend *b, int64_t i, int64_t *counts) {
  double x = i > 1 ? (double)i : 1.0, best = b->w[0] * x - (double)counts[0];
  int bd = 0;
  for (int d = 1; d < b->nd; d++) {
    double e = b->w[d] * x - (double)counts[d];
    if (e > best) { best = e; bd = d; }
  }
  counts[bd]++;
  return bd;
}

/* sample k of the blend: dataset *d, its sample *j */
static int blend_pick(blend *b, int64_t k, int *d, int64_t *j) {
  int64_t counts[64];
  size_t r = (size_t)(k / BLEND_ROW);
  pthread_mutex_lock(&b->lock);
  while (b->nrows <= r) {
    if (b->nrows == b->cap) {
      size_t nc = b->cap * 2;
      int64_t *nr = realloc(b->rows, nc * (size_t)b->nd * sizeof *nr);
      if (!nr) { pthread_mutex_unlock(&b->lock); return PPSRT_FAIL(PPSRT_E_NOMEM, "--data blend: out of host memory"); }
      b->rows = nr;
      b->cap = nc;
    }
    int64_t *row = b->rows + b->nrows * (size_t)b->nd;
    memcpy(row, row - b->nd, (size_t)b->nd * sizeof *row);
    for (int64_t i = (int64_t)(b->nrows - 1) * BLEND_ROW; i < (int64_t)b->nrows * BLEND_ROW; i++) blend_step(b, i, row);
    b->nrows++;
  }
  memcpy(counts, b->rows + r * (size_t)b->nd, (size_t)b->nd * sizeof *counts);
  pthread_mutex_unlock(&b->lock);
  for (int64_t i = (int64_t)r * BLEND_ROW; i < k; i++) blend_step(b, i, counts);
  int64_t before[64];
  memcpy(before, counts, (size_t)b->nd * sizeof *counts);
  *d = blend_step(b, k, counts);
  *j = before[*d];
  return 0;
}

/* "W1 PATH1 W2 PATH2 ...": a blend of datasets (each of `format`) with Megatron-LM's
 * --data-path weights. */
static int load_blend(const char *spec, int format, int vocab, int seq, ppsrt_tokens *t) {
  blend *b = calloc(1, sizeof *b);
  char *buf = strdup(spec);
  if (!b || !buf) { free(b); free(buf); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  t->blend = b;
  pthread_mutex_init(&b->lock, NULL);
  char *words[129];
  int nw = 0;
  for (char *q = strtok(buf, " \t\n"); q; q = strtok(NULL, " \t\n")) {
    if (nw == 128) { free(buf); return PPSRT_FAIL(PPSRT_E_USAGE, "--data '%s': a blend of more than 64 datasets", spec); }
    words[nw++] = q;
  }
  if (nw % 2) {
    free(buf);
    return PPSRT_FAIL(PPSRT_E_USAGE, "--data '%s': a blend is WEIGHT PATH pairs (Megatron-LM's --data-path), got %d words", spec, nw);
  }
  b->nd = nw / 2;
  b->part = calloc((size_t)b->nd, sizeof *b->part);
  b->w = calloc((size_t)b->nd, sizeof *b->w);
  b->cap = 16;
  b->rows = calloc(b->cap * (size_t)b->nd, sizeof *b->rows);
  b->nrows = 1;   /* row 0: no samples yet */
  if (!b->part || !b->w || !b->rows) { free(buf); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  double sum = 0;
  for (int d = 0; d < b->nd; d++) {
    char *end;
    errno = 0;
    b->w[d] = strtod(words[2 * d], &end);
    if (*end || end == words[2 * d] || errno || !(b->w[d] > 0) || b->w[d] > 1e300) {
      int rc = PPSRT_FAIL(PPSRT_E_USAGE, "--data '%s': weight '%s' of '%s' is not a number above 0", spec, words[2 * d],
                          words[2 * d + 1]);
      free(buf);
      return rc;
    }
    sum += b->w[d];
  }
  for (int d = 0; d < b->nd; d++) b->w[d] /= sum;
  for (int d = 0; d < b->nd; d++) {
    int rc = ppsrt_tokens_load(words[2 * d + 1], format, vocab, seq, &b->part[d]);
    if (rc) { free(buf); return rc; }
    t->n += b->part[d]->n;
  }
  free(buf);
  return 0;
}

/* a blend: the value names no file and starts with a number */
static int is_blend(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0) return 0;
  char *end;
  while (*path == ' ' || *path == '\t') path++;
  (void)strtod(path, &end);
  return end != path && (*end == ' ' || *end == '\t');
}

int ppsrt_tokens_load(const char *path, int format, int vocab, int seq, ppsrt_tokens **out) {
  *out = NULL;
  char msg[1024];
  if (!strcmp(path, "-"))   /* (a pipe cannot be mapped, nor read twice by P ranks) */
    return PPSRT_FAIL(PPSRT_E_USAGE, "data file '-': the training tokens are read from a file, not standard input "
                      "(they are memory-mapped)\nhint: write them to a file and give its name");
  if (is_blend(path)) {
    ppsrt_tokens *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) { free(t); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
    t->vocab = vocab;
    int rc = load_blend(path, format, vocab, seq, t);
    if (rc) { ppsrt_tokens_free(t); return rc; }
    t->len = t->n;
    *out = t;
    return 0;
  }
  ppsrt_tokens *t = calloc(1, sizeof *t);
  size_t pl = strlen(path);
  char *prefix = malloc(pl + 5);
  if (!t || !prefix) { free(t); free(prefix); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  /* PREFIX: the name without .bin or .idx */
  memcpy(prefix, path, pl + 1);
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) prefix[pl - 4] = 0;
  size_t xl = strlen(prefix);
  if (format == 0) {
    /* auto: NAME.idx, or NAME.bin with a NAME.idx beside it, or a NAME that is not there
       itself but PREFIX.idx is: indexed; else NAME.bin is an llm.c file, anything else bytes */
    strcpy(prefix + xl, ".idx");
    int has_idx = exists(prefix);
    prefix[xl] = 0;
    if (ends_with(path, ".idx") || (has_idx && (ends_with(path, ".bin") || !exists(path)))) format = 3;
    else format = ends_with(path, ".bin") ? 1 : 2;
  }
  t->vocab = vocab;
  t->bytes = format == 2;
  t->indexed = format == 3;
  const char *env = getenv("PPSRT_DATA_SCAN");
  t->scan_max = env && *env ? (size_t)strtoull(env, NULL, 10) : DATA_SCAN_DEFAULT;
  if (format == 3) {
    t->path = malloc(xl + 5);
    t->idx_path = malloc(xl + 5);
    if (!t->path || !t->idx_path) { free(prefix); return fail_file(t, PPSRT_E_NOMEM, "out of host memory"); }
    snprintf(t->path, xl + 5, "%s.bin", prefix);
    snprintf(t->idx_path, xl + 5, "%s.idx", prefix);
    free(prefix);
    int rc = load_indexed(t, msg, sizeof msg);
    if (rc) return fail_file(t, rc, msg);
  } else {
    free(prefix);
    if (!(t->path = strdup(path))) return fail_file(t, PPSRT_E_NOMEM, "out of host memory");
    void *m;
    size_t size;
    /* a regular file only (a FIFO would block, /dev/zero never end) */
    if (map_file(path, &m, &size)) {
      int e = errno;
      snprintf(msg, sizeof msg, "data file '%s': %s", path, pps_read_error(e));
      return fail_file(t, e == ENOMEM ? PPSRT_E_NOMEM : PPSRT_E_USAGE, msg);
    }
    t->map = m;
    t->map_size = size;
    t->width = format == 1 ? 2 : 1;
    t->dtype = format == 1 ? "uint16" : "uint8";
    t->base = t->map;
    t->n = size;
    if (format == 1) {
      int32_t hdr[TOK_HEADER];
      if (size < sizeof hdr) {
        snprintf(msg, sizeof msg, "data file '%s': truncated: %zu bytes, shorter than the %zu-byte header of a token file",
                 path, size, sizeof hdr);
        return fail_file(t, PPSRT_E_USAGE, msg);
      }
      for (int k = 0; k < 3; k++) hdr[k] = (int32_t)tok_get(t->map + 4 * k, 4, 1);
      if (hdr[0] != TOK_MAGIC) {
        snprintf(msg, sizeof msg, "data file '%s': not a token file (magic %d, expected %d)%s", path, (int)hdr[0], TOK_MAGIC,
                 " (hint: --data-format bytes reads any file as bytes; a Megatron-LM dataset needs its .idx beside the .bin)");
        return fail_file(t, PPSRT_E_USAGE, msg);
      }
      if (hdr[1] != 1) {
        snprintf(msg, sizeof msg, "data file '%s': token file version %d is not supported (version 1: uint16 tokens)", path,
                 (int)hdr[1]);
        return fail_file(t, PPSRT_E_USAGE, msg);
      }
      if (hdr[2] < 0) {
        snprintf(msg, sizeof msg, "data file '%s': negative token count %d in the header", path, (int)hdr[2]);
        return fail_file(t, PPSRT_E_USAGE, msg);
      }
      t->n = (size_t)hdr[2];
      t->base = t->map + sizeof hdr;
      size_t have = (size - sizeof hdr) / 2;
      if (have < t->n) {
        snprintf(msg, sizeof msg, "data file '%s': truncated: the header promises %zu tokens, the file holds %zu", path, t->n,
                 have);
        return fail_file(t, PPSRT_E_USAGE, msg);
      }
    }
  }
  /* a small stream is checked whole now; a large one as it is read (ppsrt_tokens_window) */
  if (t->n <= t->scan_max / (size_t)t->width) {
    if (tok_span(t, 0, t->n, -1, NULL, NULL)) {
      ppsrt_tokens_free(t);
      return PPSRT_E_USAGE;
    }
  }
  if (t->n < (size_t)seq + 1) {
    snprintf(msg, sizeof msg, "data file '%s': %zu tokens, fewer than one sequence of --seq %d plus its next token", t->path, t->n,
             seq);
    return fail_file(t, PPSRT_E_USAGE, msg);
  }
  t->len = t->n;
  *out = t;
  return 0;
}

/* --data-shuffle's permutation (docs/models.md): splitmix64's mixer; a 4-round Feistel
 * network on 2h-bit numbers (2^(2h) the least power of 4 >= W, so that at most 4 values
 * are tried a step on average), walked until the value is below W. */
static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static uint64_t shuffle_index(uint64_t seed, uint64_t epoch, uint64_t i, uint64_t W) {
  if (W < 2) return 0;
  int h = 1;
  while ((uint64_t)1 << (2 * h) < W) h++;
  uint64_t mask = ((uint64_t)1 << h) - 1, key = mix64(seed ^ mix64(epoch)), x = i;
  do {
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t r = 0; r < 4; r++) {
      uint64_t F = mix64(key ^ (r << 56) ^ R) & mask, nl = R;
      R = L ^ F;
      L = nl;
    }
    x = L << h | R;
  } while (x >= W);
  return x;
}

void ppsrt_tokens_shuffle(ppsrt_tokens *t, uint64_t seed) {
  if (t->blend) {
    blend *b = t->blend;
    for (int d = 0; d < b->nd; d++) ppsrt_tokens_shuffle(b->part[d], seed);
    return;
  }
  t->shuffled = 1;
  t->seed = seed;
}

/* the document count of t (an indexed dataset's documents, else its tokens) and the
 * stream position where document k starts (k = count: the end) */
static size_t split_units(const ppsrt_tokens *t) {
  return t->indexed ? (size_t)le64(t->imap + 26) - 1 : t->n;
}
static size_t split_pos(const ppsrt_tokens *t, size_t k) {
  if (!t->indexed) return k;
  size_t s = (size_t)le64(t->imap + IDX_HEAD + 12 * t->nseq + 8 * k);   /* its first sequence */
  return s >= t->nseq ? t->n : idx_start(t, s);
}

int ppsrt_tokens_split(ppsrt_tokens *t, const double w[3], int part, int seq) {
  static const char *const names[3] = {"training", "validation", "test"};
  if (t->blend) {
    blend *b = t->blend;
    t->len = 0;
    for (int d = 0; d < b->nd; d++) {
      int rc = ppsrt_tokens_split(b->part[d], w, part, seq);
      if (rc) return rc;
      t->len += b->part[d]->len;
    }
    return 0;
  }
  /* Megatron-LM's boundaries (get_split_indices): b[i + 1] = b[i] + round(w_i size), then
   * every one shifted by b[3] - size */
  size_t size = split_units(t);
  double sum = w[0] + w[1] + w[2];
  int64_t bnd[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; i++) bnd[i + 1] = bnd[i] + (int64_t)rint(w[i] / sum * (double)size);
  int64_t diff = bnd[3] - (int64_t)size;
  for (int i = 1; i < 4; i++) bnd[i] -= diff;
  int64_t a = bnd[part] < 0 ? 0 : bnd[part], e = bnd[part + 1] < a ? a : bnd[part + 1];
  size_t lo = split_pos(t, (size_t)a), hi = split_pos(t, (size_t)e);
  if (hi - lo < (size_t)seq + 1)
    return PPSRT_FAIL(PPSRT_E_USAGE, "--split: the %s part of '%s' is its %s %lld..%lld of %zu: %zu tokens, fewer than one "
                      "sequence of --seq %d plus its next token", names[part], t->path,
                      t->indexed ? "documents" : "tokens", (long long)a, (long long)e - 1, size, hi - lo, seq);
  t->lo = lo;
  t->len = hi - lo;
  return 0;
}

/* window `sample` of t's own stream, for training sequence `seqno` (messages) */
static int window(const ppsrt_tokens *t, long sample, long seqno, int T, int32_t *ids, int32_t *tgt) {
  size_t nwin = (t->len - 1) / (size_t)T, w = (size_t)sample % nwin;
  if (t->shuffled) w = (size_t)shuffle_index(t->seed, (uint64_t)sample / nwin, w, nwin);
  size_t start = t->lo + w * (size_t)T;
  return tok_span(t, start, (size_t)T + 1, seqno, ids, tgt);
}

int ppsrt_tokens_window(const ppsrt_tokens *t, long sample, int T, int32_t *ids, int32_t *tgt) {
  if (t->blend) {
    int d;
    int64_t j;
    int rc = blend_pick(t->blend, sample, &d, &j);
    return rc ? rc : window(((blend *)t->blend)->part[d], (long)j, sample, T, ids, tgt);
  }
  return window(t, sample, sample, T, ids, tgt);
}
