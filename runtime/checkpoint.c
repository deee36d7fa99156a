/* checkpoint.c: --save / --load in the safetensors format, so PyTorch (safetensors,
 * or a few lines of Python) and other tools read the weights.
 *
 * The file: an 8-byte little-endian header length, a JSON header (padded with spaces
 * to a multiple of 8), then the tensor bytes. Every parameter is one F32 tensor under
 * its runtime name ("s0.l1.qkv.w", "vocab.tok", ...; shape [numel]: the runtime keeps
 * no shapes), the whole tensor even where devices hold vocabulary shards of it; with
 * Adam its moments follow as "optim.m.NAME" and "optim.v.NAME". "__metadata__" holds
 * strings: format "pps-ppsrt", the model, its sizes, the optimizer and "step", the
 * iterations done (a resumed run continues the data position and Adam's step from it).
 *
 * Saving: each device copies its parameters to the host after its last iteration
 * (rt_ckpt_collect), then the process writes one file (rt_ckpt_write, through
 * safeio.h: temporary file and rename, never a partial checkpoint; the mode of an
 * existing file is kept, a device or FIFO written in place). Loading: each device reads the file and
 * takes its own parameters (and slices) from it (rt_ckpt_load), before the first
 * iteration; a missing tensor, a size or dtype that does not match, or a malformed
 * file is an error naming the file and the tensor. */
#include "config.h"
#include "rt.h"
#include "safeio.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- save ---- */

int rt_ckpt_collect(ppsrt_ctx *c) {
  ppsrt_model *m = c->model;
  size_t total = 0;
  for (int k = 0; k < m->nparams; k++) total += 3 * m->params[k].numel;
  free(c->ckpt);
  c->ckpt = malloc((total ? total : 1) * sizeof(float));
  if (!c->ckpt) return PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  float *at = c->ckpt;
  for (int k = 0; k < m->nparams; k++) {
    ppsrt_param *p = &m->params[k];
    size_t n = p->numel;
    int rc;
    if ((rc = c->be->stream_sync(c->be, PPSRT_STREAM_COMPUTE)) ||
        (rc = c->be->download_f32(c->be, at, (ppsrt_tensor){p->master, n, PPSRT_F32})) ||
        (rc = c->be->download_f32(c->be, at + n, (ppsrt_tensor){p->m, n, PPSRT_F32})) ||
        (rc = c->be->download_f32(c->be, at + 2 * n, (ppsrt_tensor){p->v, n, PPSRT_F32})))
      return rc;
    at += 3 * n;
  }
  return 0;
}

typedef struct CkTensor { const char *name; size_t full; float *w, *m, *v; } CkTensor;

static void meta_kv(FILE *f, const char *k, const char *v, int *first) {
  fprintf(f, "%s\"%s\":\"%s\"", *first ? "" : ",", k, v);
  *first = 0;
}

int rt_ckpt_write(ppsrt_run *run, const char *path, long step) {
  int adam = run->o.optimizer == 1, rc = 0;
  CkTensor *ts = NULL;
  int nt = 0, capt = 0;
  /* unique names over the devices of this process, with their full sizes */
  for (int l = 0; l < run->nlocal && !rc; l++) {
    ppsrt_model *m = run->ctx[l].model;
    for (int k = 0; k < m->nparams && !rc; k++) {
      ppsrt_param *p = &m->params[k];
      int j = 0;
      while (j < nt && strcmp(ts[j].name, p->name)) j++;
      if (j == nt) {
        if (nt == capt) {
          capt = capt ? 2 * capt : 64;
          CkTensor *nts = realloc(ts, (size_t)capt * sizeof *ts);
          if (!nts) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory"); break; }
          ts = nts;
        }
        size_t full = p->full_numel ? p->full_numel : p->numel;
        ts[nt] = (CkTensor){p->name, full, calloc(full ? full : 1, sizeof(float)), calloc(full ? full : 1, sizeof(float)),
                            calloc(full ? full : 1, sizeof(float))};
        if (!ts[nt].w || !ts[nt].m || !ts[nt].v) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
        nt++;
      }
      if (rc) break;
      const float *src = run->ctx[l].ckpt;
      for (int q = 0; q < k; q++) src += 3 * m->params[q].numel;
      size_t n = p->numel, off = p->full_numel ? p->offset : 0;
      memcpy(ts[j].w + off, src, n * sizeof(float));
      memcpy(ts[j].m + off, src + n, n * sizeof(float));
      memcpy(ts[j].v + off, src + 2 * n, n * sizeof(float));
    }
  }
  char *hdr = NULL;
  size_t hlen = 0;
  FILE *h = rc ? NULL : open_memstream(&hdr, &hlen);
  if (!rc && !h) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  if (!rc) {
    const ppsrt_model_config *cfg = &run->o.cfg;
    char buf[64];
    int first = 1;
    fputs("{\"__metadata__\":{", h);
    meta_kv(h, "format", "pps-ppsrt", &first);
    meta_kv(h, "model", run->o.model, &first);
    meta_kv(h, "optimizer", adam ? "adam" : "sgd", &first);
    snprintf(buf, sizeof buf, "%ld", step); meta_kv(h, "step", buf, &first);
    const struct { const char *k; int v; } sizes[] = {{"hidden", cfg->hidden}, {"heads", cfg->heads},
      {"query_groups", cfg->query_groups}, {"seq", cfg->seq}, {"vocab", cfg->vocab},
      {"micro_batch", cfg->micro_batch}, {"layers_per_stage", cfg->layers_per_stage}, {"stages", cfg->nstage}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      snprintf(buf, sizeof buf, "%d", sizes[i].v);
      meta_kv(h, sizes[i].k, buf, &first);
    }
    fputc('}', h);
    size_t off = 0;
    for (int j = 0; j < nt; j++)
      for (int part = 0; part < (adam ? 3 : 1); part++) {
        size_t bytes = ts[j].full * sizeof(float);
        fprintf(h, ",\"%s%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                part == 0 ? "" : part == 1 ? "optim.m." : "optim.v.", ts[j].name, ts[j].full, off, off + bytes);
        off += bytes;
      }
    fputc('}', h);
    while ((ftell(h) + 8) % 8) fputc(' ', h);
    if (fclose(h)) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--save: out of host memory");
  }
  if (!rc) {
    /* safeio.h: a temporary file beside the target, renamed once complete (never a
       partial checkpoint); a device or FIFO is written in place, never replaced */
    pps_out out;
    int bad = pps_out_open(&out, path, 0666) != 0;
    int err = errno;
    if (!bad) {
      unsigned char len8[8];
      uint64_t L = hlen;
      for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(L >> (8 * i));
      bad |= pps_out_write(&out, len8, 8) || pps_out_write(&out, hdr, hlen);
      for (int j = 0; j < nt && !bad; j++)
        for (int part = 0; part < (adam ? 3 : 1) && !bad; part++) {
          const float *d = part == 0 ? ts[j].w : part == 1 ? ts[j].m : ts[j].v;
          bad |= pps_out_write(&out, d, sizeof(float) * ts[j].full);   /* little-endian hosts */
        }
      if (bad) { err = errno; pps_out_abort(&out); }
      else if (pps_out_close(&out)) { bad = 1; err = errno; }
    }
    if (bad) rc = PPSRT_FAIL(PPSRT_E_USAGE, "--save: cannot write '%s': %s", path, pps_write_error(err ? err : EIO));
  }
  free(hdr);
  for (int j = 0; j < nt; j++) { free(ts[j].w); free(ts[j].m); free(ts[j].v); }
  free(ts);
  return rc;
}

/* ---- load: a small parser for the safetensors header ---- */

typedef struct CkEntry { char name[256]; char dtype[16]; size_t numel, lo, hi; } CkEntry;
typedef struct CkFile {
  const char *path;
  unsigned char *buf; size_t size;
  const char *h; size_t hlen, pos;   /* header text */
  const unsigned char *data; size_t dsize;
  CkEntry *e; int ne, cape;
  long step; int has_step;
  char model[32], optimizer[16];
} CkFile;

static int bad(CkFile *f, const char *what) {
  return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': malformed safetensors header at byte %zu: %s", f->path, f->pos + 8, what);
}
static void ws(CkFile *f) { while (f->pos < f->hlen && strchr(" \t\r\n", f->h[f->pos])) f->pos++; }
static int lit(CkFile *f, char ch) {
  ws(f);
  if (f->pos < f->hlen && f->h[f->pos] == ch) { f->pos++; return 0; }
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

static int parse_header(CkFile *f) {
  int rc;
  if ((rc = lit(f, '{'))) return rc;
  ws(f);
  if (f->pos < f->hlen && f->h[f->pos] == '}') return 0;
  for (;;) {
    char key[256];
    if ((rc = str(f, key, sizeof key)) || (rc = lit(f, ':')) || (rc = lit(f, '{'))) return rc;
    int meta = !strcmp(key, "__metadata__");
    CkEntry *e = NULL;
    if (!meta) {
      if (f->ne == f->cape) {
        f->cape = f->cape ? 2 * f->cape : 64;
        CkEntry *ne = realloc(f->e, (size_t)f->cape * sizeof *ne);
        if (!ne) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
        f->e = ne;
      }
      e = &f->e[f->ne++];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "%s", key);
      e->numel = 1;
    }
    ws(f);
    int more = !(f->pos < f->hlen && f->h[f->pos] == '}');
    if (!more) f->pos++;
    while (more) {
      char k[64];
      if ((rc = str(f, k, sizeof k)) || (rc = lit(f, ':'))) return rc;
      if (meta) {
        char v[256];
        if ((rc = str(f, v, sizeof v))) return rc;
        if (!strcmp(k, "step")) { f->step = atol(v); f->has_step = 1; }
        if (!strcmp(k, "model")) snprintf(f->model, sizeof f->model, "%.31s", v);
        if (!strcmp(k, "optimizer")) snprintf(f->optimizer, sizeof f->optimizer, "%.15s", v);
      } else if (!strcmp(k, "dtype")) {
        if ((rc = str(f, e->dtype, sizeof e->dtype))) return rc;
      } else if (!strcmp(k, "shape") || !strcmp(k, "data_offsets")) {
        int shape = k[0] == 's', n = 0;
        if ((rc = lit(f, '['))) return rc;
        ws(f);
        int go = !(f->pos < f->hlen && f->h[f->pos] == ']');
        if (!go) f->pos++;
        while (go) {
          size_t v = 0;
          if ((rc = num(f, &v))) return rc;
          if (shape) e->numel *= v;
          else if (n == 0) e->lo = v;
          else if (n == 1) e->hi = v;
          n++;
          if ((go = next(f, ']')) < 0) return PPSRT_E_USAGE;
        }
        if (!shape && n != 2) return bad(f, "data_offsets needs two numbers");
      } else {
        return bad(f, "unknown key in a tensor entry");
      }
      if ((more = next(f, '}')) < 0) return PPSRT_E_USAGE;
    }
    int go = next(f, '}');
    if (go < 0) return PPSRT_E_USAGE;
    if (!go) break;
  }
  return 0;
}

static const CkEntry *find(const CkFile *f, const char *prefix, const char *name) {
  char full[300];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  for (int i = 0; i < f->ne; i++)
    if (!strcmp(f->e[i].name, full)) return &f->e[i];
  return NULL;
}

int rt_ckpt_load(ppsrt_ctx *c, const char *path, long *step) {
  CkFile f;
  memset(&f, 0, sizeof f);
  f.path = path;
  int rc = 0;
  /* safeio.h: a regular file only (a FIFO or device would block or never end) */
  f.buf = (unsigned char *)pps_read_file(path, 1, SIZE_MAX / 2, &f.size);
  if (!f.buf) {
    int e = errno;
    if (e == ENOMEM) return PPSRT_FAIL(PPSRT_E_NOMEM, "checkpoint '%s': out of host memory", path);
    return PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': %s", path, pps_read_error(e));
  }
  uint64_t hl = 0;
  if (!rc && f.size < 8) rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': truncated (%zu bytes)", path, f.size);
  if (!rc) {
    for (int i = 0; i < 8; i++) hl |= (uint64_t)f.buf[i] << (8 * i);
    if (hl > f.size - 8)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': not a safetensors file (header length %llu, file %zu bytes)", path,
                      (unsigned long long)hl, f.size);
  }
  if (!rc) {
    f.h = (const char *)f.buf + 8;
    f.hlen = (size_t)hl;
    f.data = f.buf + 8 + hl;
    f.dsize = f.size - 8 - (size_t)hl;
    rc = parse_header(&f);
  }
  if (!rc && strcmp(f.model, c->run->o.model))
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' holds a '%s' model, this run trains '%s'", path,
                    f.model[0] ? f.model : "(unnamed)", c->run->o.model);
  ppsrt_model *m = c->model;
  float *tmp = NULL;
  for (int k = 0; k < m->nparams && !rc; k++) {
    ppsrt_param *p = &m->params[k];
    size_t full = p->full_numel ? p->full_numel : p->numel, off = p->full_numel ? p->offset : 0;
    for (int part = 0; part < 3 && !rc; part++) {
      const CkEntry *e = find(&f, part == 0 ? "" : part == 1 ? "optim.m." : "optim.v.", p->name);
      if (!e) {
        if (part == 0)
          rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s' has no tensor '%s' (saved from another model or schedule "
                          "with other sizes?)", path, p->name);
        continue;   /* no moments (saved with sgd): they start at zero */
      }
      if (strcmp(e->dtype, "F32"))
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s' is %s, expected F32", path, e->name, e->dtype);
      else if (e->numel != full || e->hi < e->lo || e->hi - e->lo != full * sizeof(float) || e->hi > f.dsize)
        rc = PPSRT_FAIL(PPSRT_E_USAGE, "checkpoint '%s': tensor '%s' has %zu elements (bytes %zu..%zu of %zu), this "
                        "model's has %zu (other --hidden, --seq, --vocab...?)", path, e->name, e->numel, e->lo, e->hi,
                        f.dsize, full);
      if (rc) break;
      free(tmp);
      if (!(tmp = malloc((p->numel ? p->numel : 1) * sizeof *tmp))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory"); break; }
      memcpy(tmp, f.data + e->lo + off * sizeof(float), p->numel * sizeof(float));
      if (part == 0) {
        rc = c->be->upload_f32(c->be, p->param, tmp);
        if (!rc && p->master != p->param.data) rc = c->be->upload_f32(c->be, (ppsrt_tensor){p->master, p->numel, PPSRT_F32}, tmp);
      } else {
        rc = c->be->upload_f32(c->be, (ppsrt_tensor){part == 1 ? p->m : p->v, p->numel, PPSRT_F32}, tmp);
      }
    }
  }
  free(tmp);
  if (!rc) *step = f.has_step ? f.step : 0;
  free(f.e);
  free(f.buf);
  return rc;
}
