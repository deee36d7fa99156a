/* actstore.c: the activation store: what F(mb, stage) keeps for its backward, with
 * exact byte accounting per device. Counted bytes follow program order (save adds,
 * free/release subtract, an offload subtracts when issued, a reload adds when issued),
 * which is the memory model `ppsc sim` predicts from; `resident` counts what really
 * occupies device memory (an offloaded buffer is freed when its copy completes). The
 * model asks for the current pointer of an entry with ppsrt_act_get, which waits for
 * a reload in flight. What it does not: the copies themselves (offload.c), and no
 * pooling: each entry is one backend allocation, freed for real. */
#include "config.h"
#include "rt.h"
#include <stdlib.h>
#include <string.h>

int rt_store_init(rt_store *s, int nmb, int nstage, const uint8_t *used) {
  memset(s, 0, sizeof *s);
  s->nmb = nmb; s->nstage = nstage;
  s->col = malloc(((size_t)nstage + 1) * sizeof *s->col);
  if (!s->col) return PPSRT_FAIL(PPSRT_E_NOMEM, "activation store: out of host memory");
  for (int st = -1; st < nstage; st++) s->col[st + 1] = !used || used[st + 1] ? s->ncol++ : -1;
  s->slots = calloc((size_t)nmb * (s->ncol ? s->ncol : 1), sizeof *s->slots);
  if (!s->slots) { free(s->col); s->col = NULL; return PPSRT_FAIL(PPSRT_E_NOMEM, "activation store: out of host memory"); }
  return 0;
}

void rt_store_fini(rt_store *s, ppsrt_backend *be) {
  if (!s->slots) return;
  for (size_t i = 0; i < (size_t)s->nmb * (s->col ? s->ncol : s->nstage + 1); i++) {
    rt_slot *sl = &s->slots[i];
    for (int k = 0; k < sl->n; k++) {
      rt_act *e = &sl->e[k];
      if (be && e->ev) be->event_destroy(be, e->ev);
      if (be && e->dev) be->free(be, e->dev);
      if (be && e->rest) be->free(be, e->rest);
      if (be && e->host) be->host_free(be, e->host);
      if (be && e->old) be->free(be, e->old);
    }
    free(sl->e);
  }
  free(s->slots);
  free(s->col);
  free(s->pend);
  memset(s, 0, sizeof *s);
}

void rt_store_reset_peak(rt_store *s) {
  s->upeak = s->ucur;
  s->peak = s->cur;
  s->host_peak = s->host_cur;
  s->resident_peak = s->resident;
}

static rt_slot *slot_of(ppsrt_ctx *c, int mb, int stage) {
  rt_store *s = &c->store;
  if (mb < 0 || mb >= s->nmb || stage < -1 || stage >= s->nstage) return NULL;
  if (!s->col) return &s->slots[(size_t)mb * (s->nstage + 1) + (stage + 1)];   /* built by hand: every stage */
  if (s->col[stage + 1] < 0) return NULL;
  return &s->slots[(size_t)mb * s->ncol + s->col[stage + 1]];
}

void rt_store_sample(rt_store *s) {
  if (s->cur > s->peak) s->peak = s->cur;
  if (s->ucur > s->upeak) s->upeak = s->ucur;
}

size_t rt_store_slot_bytes(ppsrt_ctx *c, int mb, int stage) {
  rt_slot *sl = slot_of(c, mb, stage);
  size_t b = 0;
  for (int k = 0; sl && k < sl->n; k++) if (sl->e[k].state != RT_ACT_NONE) b += sl->e[k].bytes;
  return b;
}

/* Counted memory changes only move `cur`; the peak is sampled at op boundaries (the
 * memory model's granularity); `resident` is real device memory, peaked at once. */
static void count_add(rt_store *s, size_t bytes, double units) {
  s->cur += bytes;
  s->ucur += units;
  s->resident += bytes;
  if (s->resident > s->resident_peak) s->resident_peak = s->resident;
}

int ppsrt_act_adopt(ppsrt_ctx *c, int mb, int stage, void *buf, size_t bytes, int *index) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl) return PPSRT_FAIL(PPSRT_E_USAGE, "activation store: (mb %d, stage %d) out of range", mb, stage);
  if (sl->n == sl->cap) {
    int cap = sl->cap ? 2 * sl->cap : 8;
    rt_act *e = realloc(sl->e, (size_t)cap * sizeof *e);
    if (!e) return PPSRT_FAIL(PPSRT_E_NOMEM, "activation store: out of host memory");
    sl->e = e; sl->cap = cap;
  }
  int at = sl->n;
  if (c->recomputing && c->rc_fill >= 0 && mb == c->rc_mb && stage == c->rc_stage) {
    /* a partial rebuild (recompute.c) refills the entries its layers had, in order */
    if (c->rc_fill >= sl->mark || sl->e[c->rc_fill].state != RT_ACT_NONE)
      return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: F(%d, %d) run again saved more than its recomputed layers did (%d "
                        "entries)\nhint: the model must save the same entries in the same order each time", mb, stage,
                        sl->mark);
    at = c->rc_fill++;
  }
  rt_act *e = &sl->e[at];
  memset(e, 0, sizeof *e);
  e->dev = buf; e->bytes = bytes; e->state = RT_ACT_DEV;
  e->units = c->store.upb ? (double)bytes * c->store.upb[stage + 1] : 0;
  if (index) *index = at;
  if (at == sl->n) sl->n++;
  count_add(&c->store, bytes, e->units);
  return 0;
}

int ppsrt_act_save(ppsrt_ctx *c, int mb, int stage, size_t bytes, void **out, int *index) {
  void *p = NULL;
  int rc = c->be->alloc(c->be, bytes ? bytes : 1, &p);
  if (rc) return rc;
  if ((rc = ppsrt_act_adopt(c, mb, stage, p, bytes, index))) { c->be->free(c->be, p); return rc; }
  *out = p;
  return 0;
}

int ppsrt_act_get(ppsrt_ctx *c, int mb, int stage, int index, void **out) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl || index < 0 || index >= sl->n || sl->e[index].state == RT_ACT_NONE)
    return PPSRT_FAIL(PPSRT_E_USAGE,
                      "activation %d of (mb %d, stage %d) is not in the store (freed, or F did not run)\n"
                      "hint: B/W need F(%d, %d) first, and W must not run before B", index, mb, stage, mb, stage);
  rt_act *e = &sl->e[index];
  if (e->state == RT_ACT_HOST || e->state == RT_ACT_OFFLOADING)
    return PPSRT_FAIL(PPSRT_E_USAGE,
                      "activation of (mb %d, stage %d) is on the host\n"
                      "hint: the schedule offloads it but has no reload(%d, %d) before this pass", mb, stage, mb, stage);
  if (e->state == RT_ACT_RELOADING) {
    int rc = rt_act_wait(c, mb, stage, index);
    if (rc) return rc;
  }
  *out = e->dev;
  return 0;
}

static void drop(ppsrt_ctx *c, rt_act *e) {
  rt_store *s = &c->store;
  ppsrt_backend *be = c->be;
  if (e->state == RT_ACT_OFFLOADING || e->state == RT_ACT_RELOADING || e->cancelled) be->event_sync(be, e->ev);
  if (e->cancelled) rt_cancel_done(c, e);   /* its copy ended: host buffer and rest go */
  if (e->state == RT_ACT_DEV || e->state == RT_ACT_RELOADING) {
    s->cur -= e->bytes;
    s->ucur -= e->units;
  } else {   /* on the host (or going there): what stayed is counted on the device */
    s->cur -= e->bytes - e->hbytes;
    s->ucur -= e->units - rt_part_units(e, e->hbytes);
    s->host_cur -= e->hbytes;
  }
  if (e->dev) { be->free(be, e->dev); s->resident -= e->bytes; }
  if (e->rest) { be->free(be, e->rest); s->resident -= e->bytes - e->hbytes; }
  if (e->host) be->host_free(be, e->host);
  if (e->ev) be->event_destroy(be, e->ev);
  e->dev = e->host = e->rest = e->old = NULL; e->ev = NULL; e->hbytes = 0;
  e->state = RT_ACT_NONE;
}

/* Forgets copies in flight of entries about to go (their events were synced). */
static void purge_pend(ppsrt_ctx *c, int mb, int stage, int idx) {
  rt_store *s = &c->store;
  for (int i = 0; i < s->npend;) {
    struct rt_pending *p = &s->pend[i];
    if (p->mb == mb && p->stage == stage && (idx < 0 || p->idx == idx)) *p = s->pend[--s->npend];
    else i++;
  }
}

int ppsrt_act_free(ppsrt_ctx *c, int mb, int stage, int index) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl || index < 0 || index >= sl->n || sl->e[index].state == RT_ACT_NONE)
    return PPSRT_FAIL(PPSRT_E_USAGE, "free of activation %d of (mb %d, stage %d): not in the store", index, mb, stage);
  rt_poll_copies(c, 0);
  purge_pend(c, mb, stage, index);
  drop(c, &sl->e[index]);
  return 0;
}

int ppsrt_act_release(ppsrt_ctx *c, int mb, int stage) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl) return PPSRT_FAIL(PPSRT_E_USAGE, "release of (mb %d, stage %d): out of range", mb, stage);
  rt_poll_copies(c, 0);
  purge_pend(c, mb, stage, -1);
  for (int k = 0; k < sl->n; k++)
    if (sl->e[k].state != RT_ACT_NONE) drop(c, &sl->e[k]);
  sl->n = 0;
  sl->mark = 0;
  return 0;
}

/* Entries still held at the end of an iteration (a schedule that never frees them, or a
 * model bug): reports the first and releases everything. */
int rt_store_leftover(ppsrt_ctx *c, int *mb, int *stage) {
  rt_store *s = &c->store;
  int found = 0;
  for (int i = 0; i < s->nmb; i++)
    for (int st = -1; st < s->nstage; st++) {
      rt_slot *sl = slot_of(c, i, st);
      if (!sl) continue;
      for (int k = 0; k < sl->n; k++)
        if (sl->e[k].state != RT_ACT_NONE) {
          if (!found) { *mb = i; *stage = st; }
          found++;
          drop(c, &sl->e[k]);
        }
      sl->n = 0;
    }
  s->npend = 0;
  return found;
}

/* Activation recomputation (recompute.c): after F, keep only entry 0 (the stage
 * input), or (partial) drop entries 1 .. mark - 1, what the recomputed layers saved;
 * before B, hand entry 0's buffer back uncounted and empty the slot (or, partial, only
 * entry 0), so that F running again stores everything anew (adopting that buffer as
 * its entry 0), or refills entries 0 .. mark - 1 (ppsrt_act_adopt). */
void rt_act_mark(ppsrt_ctx *c, int mb, int stage) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (sl) sl->mark = sl->n;
}

static int keep(ppsrt_ctx *c, int mb, int stage, int partial) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl || sl->n < 1 || sl->e[0].state != RT_ACT_DEV)
    return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: F(%d, %d) stored no stage input on the device (entry 0)", mb, stage);
  if (partial && sl->mark < 1)
    return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: F(%d, %d) marked no layer end, so part of its layers cannot be "
                      "recomputed\nhint: the model calls ppsrt_layer_end after each layer (model.h); else recompute "
                      "whole stages (ratio 1)", mb, stage);
  rt_poll_copies(c, 0);
  for (int k = 1; k < (partial ? sl->mark : sl->n); k++)
    if (sl->e[k].state != RT_ACT_NONE) {
      purge_pend(c, mb, stage, k);
      drop(c, &sl->e[k]);
    }
  return 0;
}
int rt_act_keep_first(ppsrt_ctx *c, int mb, int stage) { return keep(c, mb, stage, 0); }
int rt_act_keep_marked(ppsrt_ctx *c, int mb, int stage) { return keep(c, mb, stage, 1); }

int rt_act_detach_first(ppsrt_ctx *c, int mb, int stage, int partial, void **buf, size_t *bytes) {
  rt_slot *sl = slot_of(c, mb, stage);
  if (!sl || sl->n < 1 || sl->e[0].state != RT_ACT_DEV)
    return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: the kept input of F(%d, %d) is not on the device\n"
                      "hint: B needs F(%d, %d) first, once; a recomputed stage is not offloaded", mb, stage, mb, stage);
  for (int k = 1; k < (partial ? sl->mark : sl->n); k++)
    if (sl->e[k].state != RT_ACT_NONE)
      return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: (mb %d, stage %d) holds more than its input before B", mb, stage);
  rt_act *e = &sl->e[0];
  rt_store *s = &c->store;
  s->cur -= e->bytes;
  s->ucur -= e->units;
  s->resident -= e->bytes;
  if (e->ev) c->be->event_destroy(c->be, e->ev);
  *buf = e->dev;
  *bytes = e->bytes;
  memset(e, 0, sizeof *e);
  e->state = RT_ACT_NONE;
  if (partial) c->rc_fill = 0;
  else { sl->n = 0; c->rc_fill = -1; }
  return 0;
}

int rt_act_refilled(ppsrt_ctx *c, int mb, int stage) {
  rt_slot *sl = slot_of(c, mb, stage);
  for (int k = 0; sl && k < sl->mark; k++)
    if (sl->e[k].state == RT_ACT_NONE)
      return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: F(%d, %d) run again did not rebuild entry %d of its first layers\n"
                        "hint: the model must save the same entries in the same order each time", mb, stage, k);
  return 0;
}
