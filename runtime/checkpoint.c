/* checkpoint.c: --save / --load / --save-every: checkpoints as one index file plus one
 * safetensors shard per device, so PyTorch (safetensors, or a few lines of Python) and
 * other tools read the weights, and any schedule, placement or P with the same model
 * loads them (re-partitioning is loading: no converter).
 *
 * The index (the --save path): a JSON object {"__metadata__": {...}, "shards": [...]}.
 * __metadata__ holds strings: format "pps-ppsrt-index", the model, its sizes (hidden,
 * heads, query_groups, seq, vocab, layers: every layer of the whole model; stages and
 * micro_batch of the run that saved, for information), the optimizer, "step" (the
 * iterations done), "data_position" (the training sequences consumed), and the
 * learning-rate schedule, clipping and the optimizer's settings (lr, lr_schedule,
 * warmup, min_lr, lr_decay_steps, clip_grad, weight_decay, adam_beta1, adam_beta2,
 * adam_eps), which a resumed run takes where its command line does
 * not set them. "shards" names the shard files, beside the index.
 *
 * A shard (PATH.STEP-NONCE.R-of-N.safetensors, R = device): an 8-byte little-endian
 * header length, a JSON header (padded with spaces to a multiple of 8), then the
 * tensor bytes. Every parameter the device holds is one F32 tensor of shape [numel]
 * (the runtime keeps no shapes), keyed by MODEL LAYER, not by stage or rank: the
 * runtime's "s2.l1.qkv.w" with 2 layers per stage is "layer5.qkv.w", "s3.lnf.g" is
 * "lnf.g", "vocab.tok" stays. With Adam its moments follow as "optim.m.KEY" and
 * "optim.v.KEY". A model's state that is no parameter (model.h nstate: the MoE
 * router's expert bias, "layerN.moe.router.expert_bias") follows, F32, whole, without
 * moments; a load without it keeps the model's initial values. A vocabulary shard holds a slice of the whole tensor: its
 * __metadata__ says "slice.KEY": "OFFSET/FULL" (elements [OFFSET, OFFSET + numel) of
 * FULL). Shard metadata also carries format "pps-ppsrt-shard", "step", "rank", "ranks".
 *
 * Saving (rt_ckpt_save, every device at once, in its own thread or process): each
 * device downloads its tensors and writes its shard (--expert-parallel: replica 0 writes
 * every expert, gathered from its expert-parallel group, under the names X = 1 gives
 * them, so the files do not depend on X) (safeio.h: a temporary file
 * renamed into place); the devices agree that all shards are written (an all-reduce
 * of failures); then device 0 writes the index the same way and removes what the
 * previous checkpoint of that path and killed runs left: shards the new index does not
 * name and temporary files. Shard names carry the step and a nonce of the run, so a
 * run killed at any point leaves the previous index and every shard it names intact.
 *
 * Loading: rt_ckpt_open (once per process, before the devices start) reads the index
 * and every shard's header and refuses what does not hold together, naming the file
 * and the field: a step that is not an integer from 0 to 2^31 - 1, a model or size
 * field that contradicts this run or the tensors, an optimizer that contradicts the
 * moments present, duplicate tensor keys, overlapping or out-of-file data_offsets, a
 * dtype other than F32. It sets the run's step and data position and restores the
 * schedule settings. rt_ckpt_load (each device) then reads the pieces of its own
 * parameters from whichever shards hold them; a tensor missing or of another shape is
 * an error naming the tensor and both shapes.
 *
 * The single-file checkpoints of earlier versions (format "pps-ppsrt": one safetensors
 * file keyed by runtime names) still load, under the same stages and layers per
 * stage as the run that saved them. */
#include "config.h"
#include "rt.h"
#include "safeio.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- tensor keys ---- */

/* The checkpoint key of runtime parameter `name`: "sS.lL.REST" -> "layer(S*lps+L).REST",
 * "sS.REST" -> "REST", anything else unchanged (rt.h; also --init-method-std's hash name). */
void rt_ckpt_layer_key(const char *name, int lps, char *out, size_t cap) {
  int s, l, n = 0;
  if (sscanf(name, "s%d.l%d.%n", &s, &l, &n) == 2 && n > 0 && s >= 0 && l >= 0) {
    snprintf(out, cap, "layer%ld.%s", (long)s * lps + l, name + n);
    return;
  }
  n = 0;
  if (sscanf(name, "s%d.%n", &s, &n) == 1 && n > 0) { snprintf(out, cap, "%s", name + n); return; }
  snprintf(out, cap, "%s", name);
}

/* 1: a key of a model's state tensor (model.h; the MoE router's expert bias), which is no
 * weight (no optimizer moments) */
static int state_key(const char *key) {
  static const char sfx[] = ".router.expert_bias";
  size_t n = strlen(key), k = sizeof sfx - 1;
  return n >= k && !strcmp(key + n - k, sfx);
}

/* ---- one safetensors file (a shard, or a checkpoint of the old single-file format) ---- */

typedef struct CkKV { char k[128]; char v[256]; } CkKV;
typedef struct CkEntry {
  char name[256]; char dtype[16];
  size_t numel, lo, hi;
  size_t off, full;       /* the slice it holds: [off, off + numel) of full elements */
} CkEntry;
typedef struct CkFile {
  char *path;
  int fd;
  size_t size, data0;     /* file size; the first data byte (8 + header length) */
  char *h; size_t hlen, pos;   /* header text, parse position */
  CkEntry *e; int ne, cape;
  CkKV *kv; int nkv, capkv;
} CkFile;

/* The checkpoint being loaded (run->ck). */
struct rt_ckpt {
  char *path;
  int legacy;             /* the old single-file format: keys are runtime names */
  CkKV *kv; int nkv, capkv;    /* the index's metadata (legacy: the file's) */
  CkFile *f; int nf;
  int adam;               /* moments present */
  long size[5];           /* its size fields (size_fields), 0: not given */
};

/* The size fields of the metadata that decide the tensors' shapes (the mlp model's
 * only hidden); the flag that sets each. */
enum { NSIZE = 5 };
static const struct { const char *k, *flag; int gpt_only; } size_fields[NSIZE] = {{"hidden", "--hidden", 0},
  {"heads", "--heads", 1}, {"query_groups", "--query-groups", 1}, {"seq", "--seq", 1}, {"vocab", "--vocab", 1}};

static int bad(CkFile *f, const char *what) {
  return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': malformed header at byte %zu: %s", f->path,
                    f->pos + f->data0 - f->hlen, what);
}
static void ws(CkFile *f) { while (f->pos < f->hlen && strchr(" \t\r\n", f->h[f->pos])) f->pos++; }
static int peek(CkFile *f, char ch) { ws(f); return f->pos < f->hlen && f->h[f->pos] == ch; }
static int lit(CkFile *f, char ch) {
  if (peek(f, ch)) { f->pos++; return 0; }
  char m[32];
  snprintf(m, sizeof m, "expected '%c'", ch);
  return bad(f, m);
}
static int str(CkFile *f, char *out, size_t cap) {
  ws(f);
  if (f->pos >= f->hlen || f->h[f->pos] != '"') return bad(f, "expected a string");
  f->pos++;
  size_t n = 0;
  while (f->pos < f->hlen && f->h[f->pos] != '"') {
    char ch = f->h[f->pos++];
    if (ch == '\\') {
      if (f->pos >= f->hlen) break;
      ch = f->h[f->pos++];
      if (ch == 'u') return bad(f, "\\u escapes are not supported in names");
      ch = ch == 'n' ? '\n' : ch == 't' ? '\t' : ch;
    }
    if (n + 1 >= cap) return bad(f, "string too long");
    out[n++] = ch;
  }
  if (f->pos >= f->hlen) return bad(f, "unterminated string");
  f->pos++;
  out[n] = 0;
  return 0;
}
static int num(CkFile *f, size_t *out) {
  ws(f);
  size_t v = 0;
  int any = 0;
  while (f->pos < f->hlen && f->h[f->pos] >= '0' && f->h[f->pos] <= '9') {
    if (v > (SIZE_MAX - 9) / 10) return bad(f, "number too large");
    v = v * 10 + (size_t)(f->h[f->pos++] - '0');
    any = 1;
  }
  if (!any) return bad(f, "expected a number");
  *out = v;
  return 0;
}
static int next(CkFile *f, char close) {   /* 1 more, 0 end, <0 error */
  ws(f);
  if (f->pos < f->hlen && f->h[f->pos] == ',') { f->pos++; return 1; }
  if (f->pos < f->hlen && f->h[f->pos] == close) { f->pos++; return 0; }
  bad(f, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
  return -1;
}

static const char *kv_find(const CkKV *kv, int n, const char *k) {
  for (int i = 0; i < n; i++) if (!strcmp(kv[i].k, k)) return kv[i].v;
  return NULL;
}

/* {"k": "v", ...} into kv (a key given twice is refused) */
static int parse_kv(CkFile *f, CkKV **kv, int *nkv, int *capkv) {
  int rc;
  if ((rc = lit(f, '{'))) return rc;
  if (peek(f, '}')) { f->pos++; return 0; }
  for (int more = 1; more;) {
    if (*nkv == *capkv) {
      *capkv = *capkv ? 2 * *capkv : 32;
      CkKV *n = realloc(*kv, (size_t)*capkv * sizeof *n);
      if (!n) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
      *kv = n;
    }
    CkKV *e = &(*kv)[*nkv];
    if ((rc = str(f, e->k, sizeof e->k)) || (rc = lit(f, ':')) || (rc = str(f, e->v, sizeof e->v))) return rc;
    if (kv_find(*kv, *nkv, e->k))
      return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' given twice", f->path, e->k);
    (*nkv)++;
    if ((more = next(f, '}')) < 0) return PPSRT_E_USAGE;
  }
  return 0;
}

static int parse_entry(CkFile *f, CkEntry *e) {
  int rc, seen_dt = 0, seen_sh = 0, seen_off = 0;
  if ((rc = lit(f, '{'))) return rc;
  int more = !peek(f, '}');
  if (!more) f->pos++;
  while (more) {
    char k[64];
    if ((rc = str(f, k, sizeof k)) || (rc = lit(f, ':'))) return rc;
    if (!strcmp(k, "dtype")) {
      if ((rc = str(f, e->dtype, sizeof e->dtype))) return rc;
      seen_dt = 1;
    } else if (!strcmp(k, "shape") || !strcmp(k, "data_offsets")) {
      int shape = k[0] == 's', n = 0;
      if ((rc = lit(f, '['))) return rc;
      int go = !peek(f, ']');
      if (!go) f->pos++;
      while (go) {
        size_t v = 0;
        if ((rc = num(f, &v))) return rc;
        if (shape) {
          if (v && e->numel > SIZE_MAX / v) return bad(f, "shape too large");
          e->numel *= v;
        } else if (n == 0) e->lo = v;
        else if (n == 1) e->hi = v;
        n++;
        if ((go = next(f, ']')) < 0) return PPSRT_E_USAGE;
      }
      if (!shape && n != 2) return bad(f, "data_offsets needs two numbers");
      if (shape) seen_sh = 1; else seen_off = 1;
    } else {
      return bad(f, "unknown key in a tensor entry");
    }
    if ((more = next(f, '}')) < 0) return PPSRT_E_USAGE;
  }
  if (!seen_dt || !seen_sh || !seen_off)
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s' lacks its %s", f->path, e->name,
                      !seen_dt ? "dtype" : !seen_sh ? "shape" : "data_offsets");
  return 0;
}

static int parse_header(CkFile *f) {
  int rc;
  if ((rc = lit(f, '{'))) return rc;
  if (peek(f, '}')) { f->pos++; return 0; }
  for (int more = 1; more;) {
    char key[256];
    if ((rc = str(f, key, sizeof key)) || (rc = lit(f, ':'))) return rc;
    if (!strcmp(key, "__metadata__")) {
      if ((rc = parse_kv(f, &f->kv, &f->nkv, &f->capkv))) return rc;
    } else {
      if (f->ne == f->cape) {
        f->cape = f->cape ? 2 * f->cape : 64;
        CkEntry *ne = realloc(f->e, (size_t)f->cape * sizeof *ne);
        if (!ne) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
        f->e = ne;
      }
      CkEntry *e = &f->e[f->ne++];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "%s", key);
      e->numel = 1;
      if ((rc = parse_entry(f, e))) return rc;
    }
    if ((more = next(f, '}')) < 0) return PPSRT_E_USAGE;
  }
  ws(f);
  if (f->pos != f->hlen) return bad(f, "text after the header's object");
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const CkEntry *const *)a)->name, (*(const CkEntry *const *)b)->name);
}
static int cmp_lo(const void *a, const void *b) {
  const CkEntry *x = *(const CkEntry *const *)a, *y = *(const CkEntry *const *)b;
  return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Refuses what cannot be a consistent file: a dtype other than F32, data_offsets that
 * disagree with the shape, leave the file or overlap another tensor's, a key given
 * twice; reads the slices of the shard's metadata. */
static int check_entries(CkFile *f) {
  int rc = 0;
  const CkEntry **by = malloc(((size_t)f->ne + 1) * sizeof *by);
  if (!by) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  size_t dsize = f->size - f->data0;
  for (int i = 0; i < f->ne && !rc; i++) {
    CkEntry *e = &f->e[i];
    by[i] = e;
    e->off = 0; e->full = e->numel;
    if (strcmp(e->dtype, "F32"))
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s': dtype '%s', expected F32", f->path, e->name, e->dtype);
    else if (e->hi < e->lo || e->numel > SIZE_MAX / 4 || e->hi - e->lo != e->numel * 4)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s': data_offsets [%zu, %zu] do not hold its shape [%zu] "
                      "of F32", f->path, e->name, e->lo, e->hi, e->numel);
    else if (e->hi > dsize)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s': data_offsets [%zu, %zu] end past the file's %zu data "
                      "bytes (truncated?)", f->path, e->name, e->lo, e->hi, dsize);
  }
  if (!rc && f->ne > 1) {
    qsort(by, (size_t)f->ne, sizeof *by, cmp_name);
    for (int i = 1; i < f->ne && !rc; i++)
      if (!strcmp(by[i - 1]->name, by[i]->name))
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor key '%s' given twice", f->path, by[i]->name);
    qsort(by, (size_t)f->ne, sizeof *by, cmp_lo);
    const CkEntry *reach = by[0];   /* of the tensors so far, the one that ends last */
    for (int i = 1; i < f->ne && !rc; i++) {
      if (by[i]->lo < reach->hi && by[i]->hi > by[i]->lo)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': data_offsets of tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] "
                        "overlap", f->path, reach->name, reach->lo, reach->hi, by[i]->name, by[i]->lo, by[i]->hi);
      if (by[i]->hi > reach->hi) reach = by[i];
    }
  }
  free(by);
  for (int i = 0; i < f->nkv && !rc; i++) {
    if (strncmp(f->kv[i].k, "slice.", 6)) continue;
    const char *key = f->kv[i].k + 6;
    CkEntry *e = NULL;
    for (int j = 0; j < f->ne && !e; j++) if (!strcmp(f->e[j].name, key)) e = &f->e[j];
    unsigned long long off, full;
    int n = 0;
    if (!e || sscanf(f->kv[i].v, "%llu/%llu%n", &off, &full, &n) != 2 || f->kv[i].v[n] || off > full ||
        e->numel > full - off)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is '%s': not OFFSET/FULL of a tensor of "
                      "this file", f->path, f->kv[i].k, f->kv[i].v);
    else { e->off = (size_t)off; e->full = (size_t)full; }
  }
  return rc;
}

static void file_close(CkFile *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->path); free(f->h); free(f->e); free(f->kv);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

/* Reads the first `cap` bytes (or all) of a regular file; the fd stays open. */
static int open_regular(const char *path, int *fd, size_t *size) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': %s", path, pps_read_error(errno));
  struct stat st;
  int e = fstat(*fd, &st) ? errno : 0;   /* (errno means something only when fstat failed) */
  if (e || !S_ISREG(st.st_mode)) {
    close(*fd);
    *fd = -1;
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': %s", path, e ? strerror(e) : S_ISDIR(st.st_mode) ? "is a directory" :
                      "not a regular file");
  }
  *size = (size_t)st.st_size;
  return 0;
}

static int read_at(int fd, void *buf, size_t n, size_t at) {
  char *p = buf;
  while (n) {
    ssize_t r = pread(fd, p, n, (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r; n -= (size_t)r; at += (size_t)r;
  }
  return 0;
}

static int file_open(CkFile *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  if (!(f->path = strdup(path))) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  int rc = open_regular(path, &f->fd, &f->size);
  if (rc) return rc;
  unsigned char len8[8];
  if (f->size < 8 || read_at(f->fd, len8, 8, 0))
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': truncated (%zu bytes)", path, f->size);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)len8[i] << (8 * i);
  if (hl > f->size - 8 || hl > (64u << 20))
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': not a safetensors file (header length %llu, file %zu bytes)", path,
                      (unsigned long long)hl, f->size);
  f->hlen = (size_t)hl;
  f->data0 = 8 + f->hlen;
  if (!(f->h = malloc(f->hlen + 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  if (read_at(f->fd, f->h, f->hlen, 8)) return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': cannot read its header", path);
  f->h[f->hlen] = 0;
  if ((rc = parse_header(f))) return rc;
  return check_entries(f);
}

/* ---- metadata ---- */

/* A field of integer value lo..hi, given exactly in decimal digits (no sign, no
 * spaces, no atol): else an error naming the file and the field. */
static int meta_int(const char *path, const CkKV *kv, int n, const char *k, long lo, long hi, int need, long *out) {
  const char *v = kv_find(kv, n, k);
  if (!v) {
    if (need) return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': no metadata field '%s'", path, k);
    return 1;
  }
  long x = 0;
  int okd = *v != 0;
  for (const char *p = v; *p && okd; p++) {
    if (*p < '0' || *p > '9' || x > (LONG_MAX - 9) / 10) okd = 0;
    else x = x * 10 + (*p - '0');
  }
  if (!okd || x < lo || x > hi)
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is '%s': not an integer from %ld to %ld", path,
                      k, v, lo, hi);
  *out = x;
  return 0;
}
static int meta_real(const char *path, const CkKV *kv, int n, const char *k, double *out) {
  const char *v = kv_find(kv, n, k);
  if (!v) return 1;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= 0) || isinf(x))
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is '%s': not a number >= 0", path, k, v);
  *out = x;
  return 0;
}

static void meta_kv(FILE *f, const char *k, const char *v, int *first) {
  fprintf(f, "%s\"%s\":\"%s\"", *first ? "" : ",", k, v);
  *first = 0;
}

/* The gpt model's layer (cli.c's --mlp, --norm, --position, --bias, --embeddings,
 * --qk-layernorm, --add-qkv-bias): field, flag, value 0 (GPT-2's, which a checkpoint without the field was
 * saved with), value 1; the run's. (The last, "off"/"on", is a flag without a value.) */
enum { NARCH = 7 };
static const char *const arch_names[NARCH][4] = {{"mlp", "--mlp", "gelu", "swiglu"}, {"norm", "--norm", "layernorm", "rmsnorm"},
                                                 {"position", "--position", "learned", "rope"}, {"bias", "--bias", "on", "off"},
                                                 {"embeddings", "--embeddings", "untied", "tied"},
                                                 {"qk_layernorm", "--qk-layernorm", "off", "on"},
                                                 {"qkv_bias", "--add-qkv-bias", "off", "on"}};
static int arch_value(const ppsrt_model_config *cfg, int i) {
  return i == 0 ? cfg->swiglu != 0 : i == 1 ? cfg->rmsnorm != 0 : i == 2 ? cfg->rope != 0 : i == 3 ? cfg->no_bias != 0
         : i == 4 ? cfg->tie_embeddings != 0 : i == 5 ? cfg->qk_layernorm != 0
         : cfg->no_bias && cfg->qkv_bias;   /* (--add-qkv-bias under --bias on: every bias, as without it) */
}

/* The gpt model's dropout rates: field, flag; the run's. */
static const char *const drop_names[2][2] = {{"hidden_dropout", "--hidden-dropout"}, {"attention_dropout", "--attention-dropout"}};
static double drop_rate(const ppsrt_model_config *cfg, int i) { return i ? cfg->attention_dropout : cfg->hidden_dropout; }

/* The run's metadata fields (the index's; the old format had them in its one file). */
static void write_meta(FILE *h, const ppsrt_run *run, long step, int *first) {
  const rt_opts *o = &run->o;
  const ppsrt_model_config *cfg = &o->cfg;
  char buf[64];
  meta_kv(h, "model", o->model, first);
  meta_kv(h, "optimizer", o->optimizer == 1 ? "adam" : "sgd", first);
  snprintf(buf, sizeof buf, "%ld", step); meta_kv(h, "step", buf, first);
  snprintf(buf, sizeof buf, "%ld", run->data0 + (step - run->step0) * (long)cfg->nmb * run->nrep * cfg->micro_batch);
  meta_kv(h, "data_position", buf, first);
  meta_kv(h, "data", o->data ? "file" : "synthetic", first);   /* (which file is the user's to say again) */
  if (o->data && o->split_on) {   /* --split's normalized weights: the data position counts that part */
    char sbuf[96];
    snprintf(sbuf, sizeof sbuf, "%.17g,%.17g,%.17g", o->split[0], o->split[1], o->split[2]);
    meta_kv(h, "data_split", sbuf, first);
  }
  if (o->data && o->data_shuffle_on) {
    snprintf(buf, sizeof buf, "%llu", o->data_shuffle);
    meta_kv(h, "data_shuffle", buf, first);
  }
  const struct { const char *k; long v; } sizes[] = {{"hidden", cfg->hidden}, {"heads", cfg->heads},
    {"query_groups", cfg->query_groups}, {"seq", cfg->seq}, {"vocab", cfg->vocab},
    {"layers", (long)cfg->layers_per_stage * cfg->nstage}, {"micro_batch", cfg->micro_batch},
    {"stages", cfg->nstage}, {"layers_per_stage", cfg->layers_per_stage},
    {"warmup", o->warmup}, {"lr_decay_steps", o->decay_steps}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    snprintf(buf, sizeof buf, "%ld", sizes[i].v);
    meta_kv(h, sizes[i].k, buf, first);
  }
  if (!strcmp(o->model, "gpt")) {   /* the layer's architecture */
    for (int i = 0; i < NARCH; i++) meta_kv(h, arch_names[i][0], arch_names[i][2 + arch_value(cfg, i)], first);
    snprintf(buf, sizeof buf, "%d", cfg->ffn_hidden); meta_kv(h, "ffn_hidden", buf, first);
    snprintf(buf, sizeof buf, "%d", cfg->kv_channels); meta_kv(h, "kv_channels", buf, first);   /* (resolved: cli.c) */
    snprintf(buf, sizeof buf, "%.17g", cfg->norm_epsilon > 0 ? cfg->norm_epsilon : PPSRT_NORM_EPS);
    meta_kv(h, "norm_epsilon", buf, first);
    if (cfg->num_experts) {   /* the experts (runtime/moe.c); absent: a dense MLP */
      snprintf(buf, sizeof buf, "%d", cfg->num_experts); meta_kv(h, "num_experts", buf, first);
      snprintf(buf, sizeof buf, "%d", cfg->moe_topk); meta_kv(h, "moe_topk", buf, first);
      snprintf(buf, sizeof buf, "%d", cfg->moe_ffn_hidden); meta_kv(h, "moe_ffn_hidden", buf, first);
      if (cfg->moe_shared_ffn) {   /* the shared expert (absent: none) */
        snprintf(buf, sizeof buf, "%d", cfg->moe_shared_ffn); meta_kv(h, "moe_shared_ffn_hidden", buf, first);
        if (cfg->moe_shared_gate) meta_kv(h, "moe_shared_expert_gate", "1", first);   /* (absent: none) */
      }
      snprintf(buf, sizeof buf, "%.17g", cfg->moe_aux_coeff); meta_kv(h, "moe_aux_loss_coeff", buf, first);
      /* the router (--moe-router-*, --moe-z-loss-coeff): the score function and pre-softmax
       * must match on a resume (the function the weights compute), the rest is recorded */
      meta_kv(h, "moe_router_score_function", cfg->moe_router_sigmoid ? "sigmoid" : "softmax", first);
      if (cfg->moe_router_pre_softmax) meta_kv(h, "moe_router_pre_softmax", "1", first);
      if (cfg->moe_router_scale > 0) {
        snprintf(buf, sizeof buf, "%.17g", cfg->moe_router_scale); meta_kv(h, "moe_router_topk_scaling_factor", buf, first);
      }
      if (cfg->moe_z_coeff > 0) { snprintf(buf, sizeof buf, "%.17g", cfg->moe_z_coeff); meta_kv(h, "moe_z_loss_coeff", buf, first); }
      if (cfg->moe_expert_bias) {
        meta_kv(h, "moe_router_enable_expert_bias", "1", first);
        snprintf(buf, sizeof buf, "%.17g", cfg->moe_bias_rate > 0 ? cfg->moe_bias_rate : 1e-3);
        meta_kv(h, "moe_router_bias_update_rate", buf, first);
      }
      if (cfg->moe_capacity > 0) {   /* (recorded as the coefficient is: the computation's, no tensor's) */
        snprintf(buf, sizeof buf, "%.17g", cfg->moe_capacity); meta_kv(h, "moe_expert_capacity_factor", buf, first);
        meta_kv(h, "moe_token_drop_policy", cfg->moe_drop_position ? "position" : "probs", first);
      }
    }
    if (cfg->rope) { snprintf(buf, sizeof buf, "%.17g", cfg->rope_base > 0 ? cfg->rope_base : 10000.0); meta_kv(h, "rope_base", buf, first); }
    if (cfg->rope) {   /* RoPE's scaling and the parameters it takes */
      meta_kv(h, "rope_scaling", rt_rope_scaling_names[cfg->rope_scaling], first);
      const struct { const char *k; double v; int llama3; } rs[] = {{"rope_scaling_factor", cfg->rope_factor, 0},
        {"rope_low_freq_factor", cfg->rope_low_freq, 1}, {"rope_high_freq_factor", cfg->rope_high_freq, 1},
        {"rope_original_max_positions", cfg->rope_orig_max, 1}};
      for (size_t i = 0; i < sizeof rs / sizeof *rs; i++)
        if (cfg->rope_scaling == PPSRT_ROPE_LLAMA3 || (cfg->rope_scaling == PPSRT_ROPE_LINEAR && !rs[i].llama3)) {
          snprintf(buf, sizeof buf, "%.17g", rs[i].v);
          meta_kv(h, rs[i].k, buf, first);
        }
    }
    for (int i = 0; i < 2; i++) {   /* the dropout rates (a field missing: 0) */
      snprintf(buf, sizeof buf, "%.17g", drop_rate(&o->cfg, i));
      meta_kv(h, drop_names[i][0], buf, first);
    }
  }
  meta_kv(h, "lr_schedule", rt_lr_schedule_names[o->lr_schedule], first);
  const struct { const char *k; double v; } reals[] = {{"lr", o->lr}, {"min_lr", o->min_lr}, {"clip_grad", o->clip_grad},
    {"weight_decay", o->weight_decay}, {"adam_beta1", o->beta1}, {"adam_beta2", o->beta2}, {"adam_eps", o->eps}};
  for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
    snprintf(buf, sizeof buf, "%.17g", reals[i].v);
    meta_kv(h, reals[i].k, buf, first);
  }
}

/* ---- save ---- */

/* "DIR/NAME" (malloc), NULL when out of memory */
static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, name);
  return s;
}

static char *shard_name(const char *base, long step, unsigned nonce, int rank, int nranks) {
  size_t n = strlen(base) + 80;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s.%ld-%08x.%d-of-%d.safetensors", base, step, nonce, rank, nranks);
  return s;
}

/* path split into its directory ("." when none) and base name */
static int split_path(const char *path, char **dir, const char **base) {
  const char *sl = strrchr(path, '/');
  *base = sl ? sl + 1 : path;
  *dir = sl ? strndup(path, (size_t)(sl - path) + (sl == path)) : strdup(".");
  return *dir ? 0 : -1;
}

/* 1: `name` is a shard of the index `base` ("BASE.STEP-NONCE.R-of-N.safetensors"); 2: a
 * temporary file of safeio.h for the index or such a shard (".BASE.pps-out.XXXXXX",
 * ".SHARD.pps-out.XXXXXX"); 0: anything else. */
static int ours(const char *name, const char *base) {
  size_t bl = strlen(base);
  int hidden = name[0] == '.';
  const char *q = name + hidden;
  if (strncmp(q, base, bl) || q[bl] != '.') return 0;
  const char *p = q + bl + 1;
  if (hidden && !strncmp(p, "pps-out.", 8)) return strlen(p + 8) == 6 ? 2 : 0;
  long step; unsigned nonce; int r, n, k = 0;
  if (sscanf(p, "%ld-%8x.%d-of-%d.safetensors%n", &step, &nonce, &r, &n, &k) != 4 || k <= 0) return 0;
  p += k;
  if (!hidden) return *p ? 0 : 1;
  return !strncmp(p, ".pps-out.", 9) && strlen(p + 9) == 6 ? 2 : 0;
}

static int write_file(const char *path, const void *hdr, size_t hlen, int safetensors, float *const *parts,
                      const size_t *sizes, int nparts) {
  pps_out out;
  int badw = pps_out_open(&out, path, 0666) != 0;
  int err = errno;
  if (!badw) {
    if (safetensors) {
      unsigned char len8[8];
      uint64_t L = hlen;
      for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(L >> (8 * i));
      badw |= pps_out_write(&out, len8, 8);
    }
    badw |= pps_out_write(&out, hdr, hlen);
    for (int j = 0; j < nparts && !badw; j++) badw |= pps_out_write(&out, parts[j], sizes[j] * sizeof(float));   /* little-endian hosts */
    if (badw) { err = errno; pps_out_abort(&out); }
    else if (pps_out_close(&out)) { badw = 1; err = errno; }
  }
  if (badw) return PPSRT_FAIL(PPSRT_E_USAGE, "--save: cannot write '%s': %s", path, pps_write_error(err ? err : EIO));
  return 0;
}

/* This device's shard (file). --distributed-optimizer: every replica calls it, to gather
 * the sharded optimizer state whole (replica.c); replica 0 writes it. */
static int write_shard(ppsrt_ctx *c, const char *path, long step) {
  ppsrt_run *run = c->run;
  ppsrt_model *m = c->model;
  int adam = run->o.optimizer == 1, np = adam ? 3 : 1, rc = 0;
  int nt = m->nparams * np, ns = m->state ? m->nstate : 0;   /* the parameters' parts, then the state's (model.h) */
  float **parts = calloc((size_t)nt + ns + 1, sizeof *parts);
  size_t *sizes = calloc((size_t)nt + ns + 1, sizeof *sizes);
  char *hdr = NULL;
  size_t hlen = 0;
  FILE *h = NULL;
  if (!parts || !sizes) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory"); goto out; }
  if ((rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE))) goto out;
  for (int k = 0; k < m->nparams && !rc; k++) {
    ppsrt_param *p = &m->params[k];
    float *src[3] = {p->master, p->m, p->v};
    if (p->shared) continue;   /* a copy (tied embeddings): the original's device writes it */
    int ex = p->expert && run->nep > 1;   /* --expert-parallel: the group's X experts, in group rank order */
    size_t nx = ex ? (size_t)run->nep : 1;
    for (int q = 0; q < np && !rc; q++) {
      int j = k * np + q;
      sizes[j] = p->numel;
      if (!(parts[j] = malloc((p->numel ? p->numel : 1) * sizeof(float)))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
      else if (p->chunk && (q || p->master != p->param.data)) rc = rt_replica_gather_state(c, p, src[q], parts[j]);
      else if (!c->grank || ex) rc = c->be->download_f32(c->be, parts[j], (ppsrt_tensor){src[q], p->numel, PPSRT_F32});
      if (!rc && ex) {
        float *all = malloc(nx * (p->numel ? p->numel : 1) * sizeof *all);
        if (!all) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
        else rc = rt_ep_gather(c, p, parts[j], all);
        if (all) { free(parts[j]); parts[j] = all; sizes[j] = nx * p->numel; }
      }
      /* --tensor-parallel: the group's slices gathered into the whole tensor (or a
         vocabulary-parallel device's rows), which tensor rank 0 writes (the file is the
         same as without tensor parallelism); --expert-parallel: each of the group's nx
         copies of an expert tensor in turn */
      if (!rc && !c->grank && p->tp_split) {
        float *full = NULL;
        size_t gn = ppsrt_param_group_numel(p);
        if (!c->tp_rank && !(full = malloc(nx * gn * sizeof *full))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
        for (size_t u = 0; u < nx && !rc; u++) rc = rt_tp_gather(c, p, parts[j] + u * p->numel, full ? full + u * gn : NULL);
        if (full) { free(parts[j]); parts[j] = full; sizes[j] = nx * gn; }
      }
    }
  }
  if (c->grank || c->tp_rank) goto out;   /* it helped replica 0 (--distributed-optimizer, --expert-parallel) or tensor rank 0 gather */
  for (int i = 0; i < ns && !rc; i++) {   /* the state: host copies, the same on every replica */
    char nm[128];
    const float *v = m->state(m, i, nm, sizeof nm, &sizes[nt + i]);
    if (!(parts[nt + i] = malloc((sizes[nt + i] ? sizes[nt + i] : 1) * sizeof(float))))
      rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
    else memcpy(parts[nt + i], v, sizes[nt + i] * sizeof(float));
  }
  if (!rc && !(h = open_memstream(&hdr, &hlen))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  if (!rc) {
    char buf[64], key[300];
    int first = 1;
    fputs("{\"__metadata__\":{", h);
    meta_kv(h, "format", "pps-ppsrt-shard", &first);
    snprintf(buf, sizeof buf, "%ld", step); meta_kv(h, "step", buf, &first);
    snprintf(buf, sizeof buf, "%d", c->rank); meta_kv(h, "rank", buf, &first);
    snprintf(buf, sizeof buf, "%d", run->prog->ndev); meta_kv(h, "ranks", buf, &first);
    for (int k = 0; k < m->nparams; k++) {
      ppsrt_param *p = &m->params[k];
      size_t full = p->full_numel ? p->full_numel : p->numel, off = p->full_numel ? p->offset : 0;
      if ((full == ppsrt_param_group_numel(p) && !off) || p->shared) continue;   /* (a tensor-parallel tensor: its group's) */
      rt_ckpt_layer_key(p->name, run->o.cfg.layers_per_stage, key, sizeof key);
      for (int q = 0; q < np; q++) {
        char mk[340];
        snprintf(mk, sizeof mk, "slice.%s%s", q == 0 ? "" : q == 1 ? "optim.m." : "optim.v.", key);
        snprintf(buf, sizeof buf, "%zu/%zu", off, full);
        meta_kv(h, mk, buf, &first);
      }
    }
    fputc('}', h);
    size_t at = 0;
    for (int k = 0; k < m->nparams && !rc; k++) {
      ppsrt_param *p = &m->params[k];
      if (p->shared) continue;
      int nx = p->expert && run->nep > 1 ? run->nep : 1;   /* --expert-parallel: the group's experts */
      for (int q = 0; q < np && !rc; q++)
        for (int u = 0; u < nx && !rc; u++) {
          char nm[300];
          if (nx > 1 && (rc = rt_ep_name(c, p->name, u, nm, sizeof nm))) break;
          rt_ckpt_layer_key(nx > 1 ? nm : p->name, run->o.cfg.layers_per_stage, key, sizeof key);
          size_t n = sizes[k * np + q] / (size_t)nx, bytes = n * sizeof(float);
          fprintf(h, ",\"%s%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                  q == 0 ? "" : q == 1 ? "optim.m." : "optim.v.", key, n, at, at + bytes);
          at += bytes;
        }
    }
    for (int i = 0; i < ns; i++) {
      char nm[128];
      size_t n;
      m->state(m, i, nm, sizeof nm, &n);
      rt_ckpt_layer_key(nm, run->o.cfg.layers_per_stage, key, sizeof key);
      fprintf(h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}", key, n, at,
              at + n * sizeof(float));
      at += n * sizeof(float);
    }
    fputc('}', h);
    while ((ftell(h) + 8) % 8) fputc(' ', h);
    int e = fclose(h);
    h = NULL;
    if (e) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  }
  if (!rc) rc = write_file(path, hdr, hlen, 1, parts, sizes, nt + ns);
out:
  if (h) fclose(h);
  free(hdr);
  for (int j = 0; parts && j < nt + ns; j++) free(parts[j]);
  free(parts);
  free(sizes);
  return rc;
}

/* Device 0: the index, then what the previous checkpoint and killed runs left. */
static int write_index(ppsrt_run *run, const char *path, long step, unsigned nonce) {
  char *dir = NULL, *hdr = NULL;
  const char *base;
  size_t hlen = 0;
  int nd = run->prog->ndev, rc = 0;
  if (split_path(path, &dir, &base)) return PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  FILE *h = open_memstream(&hdr, &hlen);
  if (!h) { free(dir); return PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory"); }
  int first = 1;
  fputs("{\"__metadata__\":{", h);
  meta_kv(h, "format", "pps-ppsrt-index", &first);
  write_meta(h, run, step, &first);
  fputs("},\n\"shards\":[", h);
  for (int r = 0; r < nd; r++) {
    char *s = shard_name(base, step, nonce, r, nd);
    if (!s) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory"); break; }
    fprintf(h, "%s\"%s\"", r ? "," : "", s);
    free(s);
  }
  fputs("]}\n", h);
  if (fclose(h) && !rc) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  if (!rc) rc = write_file(path, hdr, hlen, 0, NULL, NULL, 0);
  free(hdr);
  if (rc) {
    /* no index names the new shards: they go */
    for (int r = 0; r < nd; r++) {
      char *s = shard_name(base, step, nonce, r, nd), *full = s ? join(dir, s) : NULL;
      if (full) unlink(full);
      free(full);
      free(s);
    }
  } else {
    /* the new index is in place: remove every other shard of this path and leftover
       temporary files (of a killed run, or of this path's previous checkpoints) */
    DIR *d = opendir(dir);
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".%ld-%08x.", step, nonce);
    for (struct dirent *de; d && (de = readdir(d));) {
      int kind = ours(de->d_name, base);
      if (!kind || (kind == 1 && !strncmp(de->d_name + strlen(base), suffix, strlen(suffix)))) continue;   /* the new shards stay */
      char *full = join(dir, de->d_name);
      if (full) unlink(full);
      free(full);
    }
    if (d) closedir(d);
  }
  free(dir);
  return rc;
}

int rt_ckpt_save(ppsrt_ctx *c, const char *path, long step, int *peer) {
  ppsrt_run *run = c->run;
  int rc;
  *peer = 0;
  if (!c->nonce_set) {
    /* one nonce per run, device 0's, so that shard names never collide with a
       checkpoint another run left at the same step */
    float v[2] = {0, 0};
    if (c->rank == 0) {
      unsigned x = (unsigned)time(NULL) * 2654435761u ^ (unsigned)getpid() * 40503u ^ (unsigned)(rt_now() * 1e6);
      v[0] = (float)(x >> 16); v[1] = (float)(x & 0xffff);
    }
    if ((rc = rt_allreduce_host(c, v, 2, PPSRT_SUM))) return rc;
    c->nonce = (unsigned)v[0] << 16 | (unsigned)v[1];
    c->nonce_set = 1;
  }
  char *dir = NULL, *sp = NULL;
  const char *base;
  if (split_path(path, &dir, &base)) return PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  char *name = shard_name(base, step, c->nonce, c->rank, run->prog->ndev);
  if (name) sp = join(dir, name);
  free(name);
  free(dir);
  /* --data-parallel: the replicas hold the same weights; replica 0 writes them (with
     --distributed-optimizer after every replica gathered the state; with --expert-parallel
     after its expert-parallel group gathered the experts, every group alike) */
  int mine = c->grank && !run->o.distopt && run->nep < 2 ? 0 : sp ? write_shard(c, sp, step) : PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  free(sp);
  char why[1024];
  snprintf(why, sizeof why, "%s", mine ? ppsrt_last_error() : "");
  /* every shard is in place before the index names them */
  float fl[2] = {(float)(mine != 0), 0};
  if ((rc = rt_allreduce_host(c, fl, 2, PPSRT_SUM))) return rc;
  if (mine) return PPSRT_FAIL(mine, "%s", why);
  if (fl[0] > 0) { *peer = 1; return PPSRT_FAIL(PPSRT_E_COMM, "stopped: another device could not write its checkpoint shard"); }
  if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0 && run->o.die_save == step) {
    /* test hook (--die-in-save): the process is killed while the index is being
       written, its temporary file half done, every new shard in place */
    pps_out out;
    if (!pps_out_open(&out, path, 0666)) pps_out_write(&out, "{\"__meta", 8);
    raise(SIGKILL);
  }
  if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0) {
    mine = write_index(run, path, step, c->nonce);
    snprintf(why, sizeof why, "%s", mine ? ppsrt_last_error() : "");
  }
  fl[0] = (float)(mine != 0);
  if ((rc = rt_allreduce_host(c, fl, 2, PPSRT_SUM))) return rc;
  if (mine) return PPSRT_FAIL(mine, "%s", why);
  if (fl[0] > 0) { *peer = 1; return PPSRT_FAIL(PPSRT_E_COMM, "stopped: device 0 could not write the checkpoint index"); }
  return 0;
}

/* ---- load ---- */

void rt_ckpt_close(rt_ckpt *ck) {
  if (!ck) return;
  for (int i = 0; i < ck->nf; i++) file_close(&ck->f[i]);
  free(ck->f); free(ck->kv); free(ck->path);
  free(ck);
}

/* The index: {"__metadata__": {...}, "shards": ["...", ...]} */
static int read_index(rt_ckpt *ck, int fd, size_t size) {
  CkFile t;
  memset(&t, 0, sizeof t);
  t.fd = -1;
  t.path = ck->path;
  int rc = 0;
  if (size > (64u << 20)) return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': an index of %zu bytes is too large", ck->path, size);
  if (!(t.h = malloc(size + 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  if (read_at(fd, t.h, size, 0)) { free(t.h); return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': cannot read it", ck->path); }
  t.h[size] = 0;
  t.hlen = size;
  t.data0 = size;
  char **names = NULL;
  int nn = 0, seen_meta = 0, seen_shards = 0;
  char dbuf[4096];
  const char *sl = strrchr(ck->path, '/');
  snprintf(dbuf, sizeof dbuf, "%.*s", sl ? (int)(sl - ck->path) : 1, sl ? ck->path : ".");
  if (sl == ck->path) snprintf(dbuf, sizeof dbuf, "/");
  if ((rc = lit(&t, '{'))) goto out;
  for (int more = !peek(&t, '}'); more;) {
    char key[64];
    if ((rc = str(&t, key, sizeof key)) || (rc = lit(&t, ':'))) goto out;
    if (!strcmp(key, "__metadata__") && !seen_meta) {
      seen_meta = 1;
      if ((rc = parse_kv(&t, &ck->kv, &ck->nkv, &ck->capkv))) goto out;
    } else if (!strcmp(key, "shards") && !seen_shards) {
      seen_shards = 1;
      if ((rc = lit(&t, '['))) goto out;
      for (int go = !peek(&t, ']') || (t.pos++, 0); go;) {
        char s[1024];
        if ((rc = str(&t, s, sizeof s))) goto out;
        if (!*s || strchr(s, '/')) {
          rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': field 'shards': '%s' is not a file name beside the index",
                          ck->path, s);
          goto out;
        }
        char **nw = realloc(names, ((size_t)nn + 1) * sizeof *nw);
        if (nw) names = nw;
        if (!nw || !(nw[nn] = join(dbuf, s))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); goto out; }
        nn++;
        if ((go = next(&t, ']')) < 0) { rc = PPSRT_E_USAGE; goto out; }
      }
    } else {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': unexpected field '%s' in the index", ck->path, key);
      goto out;
    }
    if ((more = next(&t, '}')) < 0) { rc = PPSRT_E_USAGE; goto out; }
  }
  if (!seen_meta || !seen_shards || !nn) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': the index has no %s", ck->path, !seen_meta ? "__metadata__" : "shards");
    goto out;
  }
  if (!(ck->f = calloc((size_t)nn, sizeof *ck->f))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); goto out; }
  for (int i = 0; i < nn; i++) ck->f[i].fd = -1;
  ck->nf = nn;
  for (int i = 0; i < nn && !rc; i++) rc = file_open(&ck->f[i], names[i]);
out:
  for (int i = 0; i < nn; i++) free(names[i]);
  free(names);
  free(t.h);
  return rc;
}

static int option_given(const ppsrt_run *run, unsigned bit) { return (run->o.given & bit) != 0; }

int rt_ckpt_open(ppsrt_run *run, const char *path, rt_ckpt **out) {
  *out = NULL;
  rt_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck || !(ck->path = strdup(path))) { free(ck); return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); }
  int fd = -1, rc;
  size_t size = 0;
  char first = 0;
  if ((rc = open_regular(path, &fd, &size))) goto fail;
  if (size >= 1 && read_at(fd, &first, 1, 0)) { rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': cannot read it", path); goto fail; }
  if (first == '{') {
    rc = read_index(ck, fd, size);
  } else {
    /* the old single-file format: its metadata is the index's */
    ck->legacy = 1;
    if (!(ck->f = calloc(1, sizeof *ck->f))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); goto fail; }
    ck->nf = 1;
    if (!(rc = file_open(&ck->f[0], path))) {
      ck->kv = ck->f[0].kv; ck->nkv = ck->f[0].nkv;
      ck->f[0].kv = NULL; ck->f[0].nkv = 0;
    }
  }
  close(fd);
  fd = -1;
  if (rc) goto fail;
  const CkKV *kv = ck->kv;
  int nkv = ck->nkv;
  const char *fmt = kv_find(kv, nkv, "format");
  if (!fmt || strcmp(fmt, ck->legacy ? "pps-ppsrt" : "pps-ppsrt-index")) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'format' is '%s', expected '%s'", path, fmt ? fmt : "(none)",
                    ck->legacy ? "pps-ppsrt" : "pps-ppsrt-index");
    goto fail;
  }
  const char *model = kv_find(kv, nkv, "model");
  if (!model || strcmp(model, run->o.model)) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a '%s' model (field 'model'), this run trains '%s'", path,
                    model ? model : "(unnamed)", run->o.model);
    goto fail;
  }
  long step = 0, v = 0;
  if ((rc = meta_int(path, kv, nkv, "step", 0, INT_MAX - 1, 1, &step))) goto fail;
  /* every shard says the same step, and the moments are there for every tensor or none */
  int nmom = 0, nw = 0;
  long maxlayer = -1, maxstage = -1;
  for (int i = 0; i < ck->nf; i++) {
    CkFile *f = &ck->f[i];
    if (!ck->legacy) {
      const char *sf = kv_find(f->kv, f->nkv, "format");
      if (!sf || strcmp(sf, "pps-ppsrt-shard")) {
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint shard '%s': metadata field 'format' is '%s', expected 'pps-ppsrt-shard'",
                        f->path, sf ? sf : "(none)");
        goto fail;
      }
      long s2 = -1;
      if ((rc = meta_int(f->path, f->kv, f->nkv, "step", 0, INT_MAX - 1, 1, &s2))) goto fail;
      if (s2 != step) {
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint shard '%s': metadata field 'step' is %ld, the index '%s' says %ld "
                        "(a shard of another checkpoint)", f->path, s2, path, step);
        goto fail;
      }
    }
    for (int j = 0; j < f->ne; j++) {
      const char *n = f->e[j].name;
      if (!strncmp(n, "optim.m.", 8) || !strncmp(n, "optim.v.", 8)) { nmom++; continue; }
      if (state_key(n)) continue;   /* (no weight: no moments) */
      nw++;
      long a, b;
      int k = 0;
      if (ck->legacy ? sscanf(n, "s%ld.%n", &a, &k) == 1 && k > 0 : sscanf(n, "layer%ld.%n", &a, &k) == 1 && k > 0) {
        if (ck->legacy) { if (a > maxstage) maxstage = a; }
        else if (a > maxlayer) maxlayer = a;
      }
      (void)b;
    }
  }
  const char *opt = kv_find(kv, nkv, "optimizer");
  if (!opt || (strcmp(opt, "adam") && strcmp(opt, "sgd"))) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'optimizer' is '%s', expected adam or sgd", path,
                    opt ? opt : "(none)");
    goto fail;
  }
  ck->adam = !strcmp(opt, "adam");
  if (ck->adam ? nmom != 2 * nw : nmom != 0) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'optimizer' is '%s' but the tensors hold %d moment "
                    "tensors for %d weights (%s)", path, opt, nmom, nw, ck->adam ? "Adam keeps two per weight" : "SGD keeps none");
    goto fail;
  }
  /* the run continues with the checkpoint's optimizer; another one, asked for, would drop
     Adam's moments, or start them at zero in the middle of a run (with the bias
     correction of its late step): refused. At step 0 (weights no optimizer has moved:
     an imported model, python/pps_hf.py) either starts afresh. */
  if (!option_given(run, RT_GIVEN_OPTIMIZER)) run->o.optimizer = ck->adam;
  else if (run->o.optimizer != ck->adam && step == 0) {
    if (ck->adam) ck->adam = 0;   /* (moments saved at step 0 are zero: SGD keeps none) */
  } else if (run->o.optimizer != ck->adam) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' was saved with --optimizer %s, this run asks for %s (leave --optimizer "
                    "out to continue with %s)", path, opt, ck->adam ? "sgd" : "adam", opt);
    goto fail;
  }
  if (!ck->adam && run->o.optimizer != 1 && option_given(run, RT_GIVEN_BETA1 | RT_GIVEN_BETA2 | RT_GIVEN_EPS)) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' continues an SGD run: --adam-beta1, --adam-beta2 and --adam-eps are "
                    "Adam's", path);
    goto fail;
  }
  /* the sizes that make the tensors: they must be this run's (the tensors are checked
     against this run's model when each device loads its own), and say what the
     tensors hold */
  const ppsrt_model_config *cfg = &run->o.cfg;
  /* the gpt layer's architecture: the run's must be the checkpoint's (the tensors of a
     SwiGLU and a GeLU MLP can have the same shapes); a field missing is GPT-2's */
  for (int i = 0; i < NARCH && !strcmp(run->o.model, "gpt"); i++) {
    const char *a = kv_find(kv, nkv, arch_names[i][0]);
    int want = !a ? 0 : !strcmp(a, arch_names[i][2]) ? 0 : !strcmp(a, arch_names[i][3]) ? 1 : -1;
    if (want < 0) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is '%s', not '%s' or '%s'", path, arch_names[i][0], a,
                      arch_names[i][2], arch_names[i][3]);
      goto fail;
    }
    if (want != arch_value(cfg, i) && i >= 5) {   /* (a flag without a value) */
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt %s %s, this run's is %s it\nhint: run %s %s", path,
                      want ? "with" : "without", arch_names[i][1], want ? "without" : "with", want ? "with" : "without",
                      arch_names[i][1]);
      goto fail;
    }
    if (want != arch_value(cfg, i)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with %s %s, this run's has %s %s\nhint: run with %s %s",
                      path, arch_names[i][1], arch_names[i][2 + want], arch_names[i][1], arch_names[i][2 + arch_value(cfg, i)],
                      arch_names[i][1], arch_names[i][2 + want]);
      goto fail;
    }
  }
  /* the norms' epsilon: the run's must be the checkpoint's (the function its weights were
     trained in); a field missing: the default the runtime always had */
  if (!strcmp(run->o.model, "gpt")) {
    double x = PPSRT_NORM_EPS, have = cfg->norm_epsilon > 0 ? cfg->norm_epsilon : PPSRT_NORM_EPS;
    if ((rc = meta_real(path, kv, nkv, "norm_epsilon", &x)) < 0) goto fail;
    rc = 0;
    if (!(x > 0)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'norm_epsilon' is %g: out of range (above 0)", path, x);
      goto fail;
    }
    if (x != have) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' was trained with --norm-epsilon %.17g, this run's is %.17g\nhint: run "
                      "with --norm-epsilon %.17g", path, x, have, x);
      goto fail;
    }
  }
  /* the dropout rates: the run's must be the checkpoint's (a resumed run that dropped
     another share would not be the run that was saved); a field missing is 0 */
  for (int i = 0; i < 2 && !strcmp(run->o.model, "gpt"); i++) {
    double x = 0;
    if ((rc = meta_real(path, kv, nkv, drop_names[i][0], &x)) < 0) goto fail;
    rc = 0;
    if (!(x < 1)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is %g: out of range (from 0 to below 1)", path,
                      drop_names[i][0], x);
      goto fail;
    }
    double have = drop_rate(&run->o.cfg, i);
    if (x != have) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' was trained with %s %.17g, this run's is %.17g\nhint: run with %s %.17g",
                      path, drop_names[i][1], x, have, drop_names[i][1], x);
      goto fail;
    }
  }
  /* the experts: the run's --num-experts, --moe-topk and --moe-ffn-hidden must be the
     checkpoint's (a field missing: a dense MLP, 0); the aux loss's coefficient may change */
  static const char *const moe_names[3][2] = {{"num_experts", "--num-experts"}, {"moe_topk", "--moe-topk"},
                                              {"moe_ffn_hidden", "--moe-ffn-hidden"}};
  for (int i = 0; i < 3 && !strcmp(run->o.model, "gpt"); i++) {
    long x = 0, have = i == 0 ? cfg->num_experts : !cfg->num_experts ? 0 : i == 1 ? cfg->moe_topk : cfg->moe_ffn_hidden;
    if ((rc = meta_int(path, kv, nkv, moe_names[i][0], 1, INT_MAX, 0, &x)) < 0) goto fail;
    rc = 0;
    if (i > 0 && (!x || !have)) continue;   /* (the experts' own flags: only between two MoE models) */
    if (x != have) {
      if (!x)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with dense MLPs, this run's has --num-experts %ld\nhint: "
                        "drop --num-experts (or start from scratch)", path, have);
      else if (!have)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with %s %ld, this run's has dense MLPs\nhint: run with "
                        "%s %ld", path, moe_names[i][1], x, moe_names[i][1], x);
      else
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with %s %ld, this run's has %ld\nhint: run with %s %ld",
                        path, moe_names[i][1], x, have, moe_names[i][1], x);
      goto fail;
    }
  }
  /* the router's score function and pre-softmax (absent: softmax, none): as --moe-topk */
  if (!strcmp(run->o.model, "gpt") && cfg->num_experts && kv_find(kv, nkv, "num_experts")) {
    const char *sf = kv_find(kv, nkv, "moe_router_score_function"), *have_sf = cfg->moe_router_sigmoid ? "sigmoid" : "softmax";
    if (sf && strcmp(sf, "softmax") && strcmp(sf, "sigmoid")) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'moe_router_score_function' is '%s', expected softmax "
                      "or sigmoid", path, sf);
      goto fail;
    }
    if (strcmp(sf ? sf : "softmax", have_sf)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with --moe-router-score-function %s, this run's is %s\n"
                      "hint: run with --moe-router-score-function %s", path, sf ? sf : "softmax", have_sf, sf ? sf : "softmax");
      goto fail;
    }
    int pre = kv_find(kv, nkv, "moe_router_pre_softmax") != NULL;
    if (pre != (cfg->moe_router_pre_softmax != 0)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt %s --moe-router-pre-softmax, this run's %s\nhint: run %s "
                      "--moe-router-pre-softmax", path, pre ? "with" : "without", pre ? "is without" : "has it",
                      pre ? "with" : "without");
      goto fail;
    }
  }
  if (!strcmp(run->o.model, "gpt") && cfg->num_experts) {   /* the shared expert's width (missing: none, 0) */
    long x = 0;
    if ((rc = meta_int(path, kv, nkv, "moe_shared_ffn_hidden", 1, INT_MAX, 0, &x)) < 0) goto fail;
    rc = 0;
    if (x != cfg->moe_shared_ffn) {
      if (!x)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds experts without a shared expert, this run's has "
                        "--moe-shared-ffn-hidden %d\nhint: drop --moe-shared-ffn-hidden", path, cfg->moe_shared_ffn);
      else
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with --moe-shared-ffn-hidden %ld, this run's has %d\n"
                        "hint: run with --moe-shared-ffn-hidden %ld", path, x, cfg->moe_shared_ffn, x);
      goto fail;
    }
    int sg = kv_find(kv, nkv, "moe_shared_expert_gate") != NULL;   /* the shared expert's gate (absent: none) */
    if (sg != (cfg->moe_shared_gate != 0)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt %s --moe-shared-expert-gate, this run's %s\nhint: run "
                      "%s --moe-shared-expert-gate", path, sg ? "with" : "without", sg ? "is without" : "has it",
                      sg ? "with" : "without");
      goto fail;
    }
  }
  long hid = 0;   /* (another --hidden: the tensors' shapes say so, below) */
  if (!strcmp(run->o.model, "gpt") && meta_int(path, kv, nkv, "hidden", 1, INT_MAX, 0, &hid) == 0 && hid == cfg->hidden) {
    rc = meta_int(path, kv, nkv, "ffn_hidden", 1, INT_MAX, 0, &v);
    if (rc < 0) goto fail;
    if (rc == 0 && v != cfg->ffn_hidden) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with --ffn-hidden %ld, this run's has %d\nhint: run with "
                      "--ffn-hidden %ld", path, v, cfg->ffn_hidden, v);
      goto fail;
    }
    rc = 0;
  }
  /* the head size (--kv-channels; a checkpoint without it: hidden / heads, what it was saved
   * with), at the same --hidden and --heads (others: the size fields say so, below) */
  long hds = 0;
  if (!strcmp(run->o.model, "gpt") && hid == cfg->hidden && cfg->heads > 0 &&
      meta_int(path, kv, nkv, "heads", 1, INT_MAX, 0, &hds) == 0 && hds == cfg->heads) {
    long dk = cfg->hidden / cfg->heads, have = cfg->kv_channels ? cfg->kv_channels : dk;
    rc = meta_int(path, kv, nkv, "kv_channels", 1, INT_MAX, 0, &dk);
    if (rc < 0) goto fail;
    if (dk != have) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a gpt with --kv-channels %ld, this run's has %ld\nhint: run with "
                      "--kv-channels %ld", path, dk, have, dk);
      goto fail;
    }
    rc = 0;
  }
  for (int i = 0; i < NSIZE; i++) {
    rc = meta_int(path, kv, nkv, size_fields[i].k, 1, INT_MAX, 0, &ck->size[i]);
    if (rc > 0) { rc = 0; ck->size[i] = 0; }   /* not given */
    if (rc) goto fail;
  }
  if (ck->legacy) {
    rc = meta_int(path, kv, nkv, "stages", 1, INT_MAX, 0, &v);
    if (rc < 0 || (rc == 0 && v != maxstage + 1)) {
      if (!rc) rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'stages' is %ld, its tensors are of %ld stages",
                               path, v, maxstage + 1);
      goto fail;
    }
    rc = 0;
  } else {
    if ((rc = meta_int(path, kv, nkv, "layers", 1, INT_MAX, 1, &v))) goto fail;
    if (v != maxlayer + 1) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'layers' is %ld, its tensors are of %ld layers", path, v,
                      maxlayer + 1);
      goto fail;
    }
    long have = (long)cfg->layers_per_stage * cfg->nstage;
    if (v != have) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds %ld layers (field 'layers'), this run's model has %ld (%d "
                      "stages x --layers-per-stage %d)", path, v, have, cfg->nstage, cfg->layers_per_stage);
      goto fail;
    }
  }
  /* where the run goes on: the step, the data, the schedule settings not given */
  run->step0 = step;
  long pos = step * (long)cfg->nmb * cfg->micro_batch;
  if ((rc = meta_int(path, kv, nkv, "data_position", 0, LONG_MAX / 2, 0, &pos)) < 0) goto fail;
  run->data0 = pos;
  const char *dk = kv_find(kv, nkv, "data");
  run->ck_data = dk && !strcmp(dk, "file");
  double x;
  long w;
  rt_opts *o = &run->o;
  /* --split: the run's must be the checkpoint's (its data position counts the training part's sequences) */
  const char *spk = kv_find(kv, nkv, "data_split");
  if (o->data && run->ck_data && (spk || o->split_on)) {
    double sw[3] = {0, 0, 0};
    char *end = (char *)spk;
    int bad = 0;   /* exactly three finite weights from 0, separated by commas (as written above) */
    for (int k = 0; spk && k < 3 && !bad; k++) {
      char *at = end;
      sw[k] = strtod(at, &end);
      bad = end == at || !isfinite(sw[k]) || sw[k] < 0 || (k < 2 && *end != ',');
      if (k < 2 && !bad) end++;
    }
    if (spk && (bad || *end)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'data_split' is '%s': not three weights", path, spk);
      goto fail;
    }
    if (!spk || !o->split_on || sw[0] != o->split[0] || sw[1] != o->split[1] || sw[2] != o->split[2]) {
      char mine[96] = "none";
      if (o->split_on) snprintf(mine, sizeof mine, "%.17g,%.17g,%.17g", o->split[0], o->split[1], o->split[2]);
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' was trained on %s%s of its --data, this run on %s%s: its data position "
                      "counts the sequences of that part\nhint: give --split as the checkpoint's run did (normalized: %s)",
                      path, spk ? "--split " : "all", spk ? spk : "", o->split_on ? "--split " : "all", o->split_on ? mine : "",
                      spk ? spk : "no --split");
      goto fail;
    }
  }
  const char *shk = kv_find(kv, nkv, "data_shuffle");   /* --data-shuffle's seed, unless given again */
  if (shk && !o->data_shuffle_on) {
    char *end;
    errno = 0;
    unsigned long long seed = *shk != '-' ? strtoull(shk, &end, 10) : 0;
    if (*shk == '-' || errno || end == shk || *end) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'data_shuffle' is '%s': not a seed (a whole number "
                      "from 0)", path, shk);
      goto fail;
    }
    o->data_shuffle = seed;
    o->data_shuffle_on = 1;
  }
  if ((rc = meta_real(path, kv, nkv, "lr", &x)) < 0) goto fail;
  if (!rc && !option_given(run, RT_GIVEN_LR)) o->lr = x;
  if ((rc = meta_real(path, kv, nkv, "min_lr", &x)) < 0) goto fail;
  if (!rc && !option_given(run, RT_GIVEN_MIN_LR)) o->min_lr = x;
  if ((rc = meta_real(path, kv, nkv, "clip_grad", &x)) < 0) goto fail;
  if (!rc && !option_given(run, RT_GIVEN_CLIP)) o->clip_grad = x;
  /* RoPE's base: the checkpoint's, unless --rope-base says otherwise (a longer context's) */
  if ((rc = meta_real(path, kv, nkv, "rope_base", &x)) < 0) goto fail;
  if (!rc && !(x > 1 && isfinite(x))) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'rope_base' is %g: out of range (above 1)", path, x);
    goto fail;
  }
  if (!rc && cfg->rope && !option_given(run, RT_GIVEN_ROPE_BASE)) o->cfg.rope_base = x;
  /* RoPE's scaling and each of its parameters: the checkpoint's, unless given (as the
     base; a checkpoint without the field was saved without scaling) */
  const char *rsc = kv_find(kv, nkv, "rope_scaling");
  int rsk = rsc ? rt_rope_scaling_parse(rsc) : PPSRT_ROPE_NONE;
  if (rsk < 0) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'rope_scaling' is '%s', expected none, linear or llama3",
                    path, rsc);
    goto fail;
  }
  if (cfg->rope && !option_given(run, RT_GIVEN_ROPE_SCALING)) o->cfg.rope_scaling = rsk;
  const struct { const char *k; unsigned given; double *to; } rsp[] = {
    {"rope_scaling_factor", RT_GIVEN_ROPE_FACTOR, &o->cfg.rope_factor},
    {"rope_low_freq_factor", RT_GIVEN_ROPE_LOW, &o->cfg.rope_low_freq},
    {"rope_high_freq_factor", RT_GIVEN_ROPE_HIGH, &o->cfg.rope_high_freq}};
  for (size_t k = 0; k < sizeof rsp / sizeof *rsp; k++) {
    if ((rc = meta_real(path, kv, nkv, rsp[k].k, &x)) < 0) goto fail;
    if (!rc && !(x > 0)) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is %g: out of range (above 0)", path, rsp[k].k, x);
      goto fail;
    }
    if (!rc && cfg->rope && !option_given(run, rsp[k].given)) *rsp[k].to = x;
  }
  if ((rc = meta_int(path, kv, nkv, "rope_original_max_positions", 1, INT_MAX, 0, &w)) < 0) goto fail;
  if (!rc && cfg->rope && !option_given(run, RT_GIVEN_ROPE_ORIG)) o->cfg.rope_orig_max = (int)w;
  /* a parameter given without --rope-scaling (cli.c left this to the checkpoint's scaling) */
  const char *unused = option_given(run, RT_GIVEN_ROPE_SCALING) ? NULL : rt_rope_param_unused(&o->cfg, o->given);
  if (unused) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "%s: checkpoint '%s' was saved with --rope-scaling %s", unused, path,
                    rt_rope_scaling_names[o->cfg.rope_scaling]);
    goto fail;
  }
  if ((rc = meta_int(path, kv, nkv, "warmup", 0, INT_MAX, 0, &w)) < 0) goto fail;
  if (!rc && !option_given(run, RT_GIVEN_WARMUP)) o->warmup = (int)w;
  if ((rc = meta_int(path, kv, nkv, "lr_decay_steps", 0, INT_MAX, 0, &w)) < 0) goto fail;
  if (!rc && !option_given(run, RT_GIVEN_DECAY)) o->decay_steps = w;
  /* the optimizer's settings (checkpoints from before they were saved: the defaults) */
  const struct { const char *k; unsigned given; double *to, hi; } ost[] = {
    {"weight_decay", RT_GIVEN_WD, &o->weight_decay, INFINITY}, {"adam_beta1", RT_GIVEN_BETA1, &o->beta1, 1},
    {"adam_beta2", RT_GIVEN_BETA2, &o->beta2, 1}, {"adam_eps", RT_GIVEN_EPS, &o->eps, INFINITY}};
  for (size_t k = 0; k < sizeof ost / sizeof *ost; k++) {
    if ((rc = meta_real(path, kv, nkv, ost[k].k, &x)) < 0) goto fail;
    if (!rc && !(x < ost[k].hi && (ost[k].to != &o->eps || x > 0))) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is %g: out of range (%s)", path, ost[k].k, x,
                      ost[k].hi == 1 ? "from 0 to below 1" : ost[k].to == &o->eps ? "above 0" : "finite");
      goto fail;
    }
    if (!rc && !option_given(run, ost[k].given)) *ost[k].to = x;
  }
  const char *sch = kv_find(kv, nkv, "lr_schedule");
  int sk = sch ? rt_lr_schedule_parse(sch) : -1;
  if (sch && sk < 0) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field 'lr_schedule' is '%s', expected constant, cosine, "
                    "linear or inverse-square-root", path, sch);
    goto fail;
  }
  if (sch && !option_given(run, RT_GIVEN_SCHEDULE)) o->lr_schedule = sk;
  /* the command line's checks of these flags (cli.c) saw the schedule before the
   * checkpoint gave it: a flag the restored schedule would ignore is refused here */
  if (option_given(run, RT_GIVEN_DECAY) && o->lr_schedule == RT_LR_INVSQRT) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "--lr-decay-steps: checkpoint '%s' continues an inverse-square-root schedule, which decays "
                    "without an end step (--min-lr is its floor)", path);
    goto fail;
  }
  if (option_given(run, RT_GIVEN_MIN_LR | RT_GIVEN_DECAY) && o->lr_schedule == RT_LR_CONSTANT) {
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "--min-lr and --lr-decay-steps shape a decaying schedule, and checkpoint '%s' continues a "
                    "constant one: add --lr-schedule cosine, linear or inverse-square-root", path);
    goto fail;
  }
  rc = 0;
  *out = ck;
  return 0;
fail:
  if (fd >= 0) close(fd);
  rt_ckpt_close(ck);
  return rc ? rc : PPSRT_E_USAGE;
}

/* The model's state (model.h; the MoE expert bias) from the shard that holds it, whole;
 * a tensor the checkpoint lacks (saved without --moe-router-enable-expert-bias) keeps its
 * initial values (zeros). Then copied to the device. */
static int load_state(ppsrt_ctx *c, const rt_ckpt *ck) {
  ppsrt_model *m = c->model;
  int rc = 0, lps = c->run->o.cfg.layers_per_stage;
  for (int i = 0; m->state && i < m->nstate && !rc; i++) {
    char nm[128], key[300];
    size_t n;
    float *v = m->state(m, i, nm, sizeof nm, &n);
    if (ck->legacy) snprintf(key, sizeof key, "%s", nm);
    else rt_ckpt_layer_key(nm, lps, key, sizeof key);
    for (int f = 0; f < ck->nf && !rc; f++)
      for (int j = 0; j < ck->f[f].ne && !rc; j++) {
        const CkEntry *e = &ck->f[f].e[j];
        if (strcmp(e->name, key)) continue;
        if (e->full != n || e->numel != n || e->off)
          rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s' has shape [%zu], this model's has shape [%zu] "
                          "(another --num-experts?)", ck->f[f].path, key, e->full, n);
        else if (read_at(ck->f[f].fd, v, n * sizeof(float), ck->f[f].data0 + e->lo))
          rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': cannot read tensor '%s'", ck->f[f].path, key);
      }
  }
  if (!rc && m->state_sync && m->nstate) rc = m->state_sync(m);
  return rc;
}

/* One device: its parameters' weights (and moments) from the shards that hold them. */
int rt_ckpt_load(ppsrt_ctx *c, const rt_ckpt *ck) {
  ppsrt_model *m = c->model;
  int rc = 0, lps = c->run->o.cfg.layers_per_stage;
  float *tmp = NULL, *whole = NULL;
  for (int k = 0; k < m->nparams && !rc; k++) {
    ppsrt_param *p = &m->params[k];
    size_t full = p->full_numel ? p->full_numel : p->numel, off = p->full_numel ? p->offset : 0;
    /* --tensor-parallel: the group's tensor (the whole one, or a vocabulary-parallel
       device's rows) is read, then this rank's slice taken from it */
    size_t n = ppsrt_param_group_numel(p);
    char key[300];
    if (ck->legacy) snprintf(key, sizeof key, "%s", p->name);
    else rt_ckpt_layer_key(p->name, lps, key, sizeof key);
    free(tmp);
    free(whole);
    whole = NULL;
    if (!(tmp = malloc((p->numel ? p->numel : 1) * sizeof *tmp)) || (p->tp_split && !(whole = malloc(n * sizeof *whole)))) {
      rc = PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
      break;
    }
    float *dst = whole ? whole : tmp;
    for (int part = 0; part < (ck->adam ? 3 : 1) && !rc; part++) {
      char want[340];
      snprintf(want, sizeof want, "%s%s", part == 0 ? "" : part == 1 ? "optim.m." : "optim.v.", key);
      size_t got = 0;
      int found = 0;
      for (int i = 0; i < ck->nf && !rc; i++) {
        const CkFile *f = &ck->f[i];
        for (int j = 0; j < f->ne && !rc; j++) {
          const CkEntry *e = &f->e[j];
          if (strcmp(e->name, want)) continue;
          found = 1;
          if (e->full != full) {
            rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s' has shape [%zu], this model's has shape [%zu] "
                            "(other --hidden, --seq, --vocab...?)", f->path, want, e->full, full);
            break;
          }
          /* the part of [e->off, e->off + e->numel) this device holds */
          size_t lo = e->off > off ? e->off : off, hi = e->off + e->numel < off + n ? e->off + e->numel : off + n;
          if (lo >= hi) continue;
          if (read_at(f->fd, dst + (lo - off), (hi - lo) * sizeof(float), f->data0 + e->lo + (lo - e->off) * sizeof(float)))
            rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': cannot read tensor '%s'", f->path, want);
          got += hi - lo;
        }
      }
      if (rc) break;
      if (!found)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' has no tensor '%s' (this model's '%s', shape [%zu]: saved from "
                        "another model, or with other sizes?)", ck->path, want, p->name, full);
      else if (got != n)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': the shards hold %zu elements of tensor '%s' [%zu, %zu), not %zu "
                        "(missing or overlapping slices)", ck->path, got, want, off, off + n, n);
      if (rc) break;
      if (whole)
        for (size_t i = 0; i < p->numel; i++) tmp[i] = whole[ppsrt_param_full_index(p, i) - off];
      if (part == 0) rc = ppsrt_param_set(c->be, p, tmp);   /* (a sharded master: its part) */
      else rc = c->be->upload_f32(c->be, (ppsrt_tensor){part == 1 ? p->m : p->v, p->sh_n, PPSRT_F32}, tmp + p->sh_lo);
    }
  }
  free(tmp);
  free(whole);
  if (!rc) rc = load_state(c, ck);
  /* every tensor has this run's shape: the size fields must say so too */
  const ppsrt_model_config *cfg = &c->run->o.cfg;
  const long have[NSIZE] = {cfg->hidden, cfg->heads, cfg->query_groups, cfg->seq, cfg->vocab};
  int gpt = !strcmp(c->run->o.model, "gpt");
  for (int i = 0; i < NSIZE && !rc; i++)
    if (ck->size[i] && (gpt || !size_fields[i].gpt_only) && ck->size[i] != have[i])
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': metadata field '%s' is %ld, which contradicts its tensors: they "
                      "have the shapes of this run's model, with %s %ld", ck->path, size_fields[i].k, ck->size[i], size_fields[i].flag, have[i]);
  return rc;
}
