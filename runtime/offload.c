/* offload.c: offload and reload of stored activations on the copy streams.
 * offload(mb, stage) copies the chosen entries (a fraction of the stage's bytes, in
 * save order) to host buffers on the D2H stream after the compute
 * stream's work so far, and frees the device buffers once the copy's completion event
 * fires; reload(mb, stage) allocates device buffers again and copies back on the H2D
 * stream; the compute stream waits for that event when the model asks for the entry.
 * Completions are polled at op boundaries (and waited for at the end of an iteration)
 * and recorded on the copy-engine tracks of the trace. What it does not: no pooling of
 * pinned buffers (the CUDA backend pools them itself). A fraction is met exactly in
 * bytes: whole entries, and the entry where it falls split in two. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static rt_slot *slot(ppsrt_ctx *c, int mb, int stage) {
  rt_store *s = &c->store;
  if (mb < 0 || mb >= s->nmb || stage < 0 || stage >= s->nstage) return NULL;
  if (!s->col) return &s->slots[(size_t)mb * (s->nstage + 1) + (stage + 1)];   /* built by hand: every stage */
  if (s->col[stage + 1] < 0) return NULL;
  return &s->slots[(size_t)mb * s->ncol + s->col[stage + 1]];
}

static int pend_add(ppsrt_ctx *c, int mb, int stage, int idx, int dir) {
  rt_store *s = &c->store;
  if (s->npend == s->cappend) {
    int cap = s->cappend ? 2 * s->cappend : 16;
    struct rt_pending *p = realloc(s->pend, (size_t)cap * sizeof *p);
    if (!p) return PPSRT_FAIL(PPSRT_E_NOMEM, "offload: out of host memory");
    s->pend = p; s->cappend = cap;
  }
  s->pend[s->npend++] = (struct rt_pending){mb, stage, idx, (uint8_t)dir, rt_now() - c->run->epoch, c->cur_op};
  return 0;
}

static int ensure_event(ppsrt_ctx *c, rt_act *e) {
  return e->ev ? 0 : c->be->event_create(c->be, &e->ev);
}

/* Moves `fraction` of what F(mb, stage) keeps: whole entries in save order, and the
 * entry where the fraction falls is split: its first bytes go to the host, the rest to
 * a smaller device buffer, so the bytes moved are exactly round(fraction x total) and
 * the counted memory matches the schedule's memory model. */
int rt_offload(ppsrt_ctx *c, int mb, int stage, double fraction) {
  ppsrt_backend *be = c->be;
  rt_slot *sl = slot(c, mb, stage);
  if (!sl) return PPSRT_FAIL(PPSRT_E_USAGE, "offload(%d, %d): out of range", mb, stage);
  size_t total = 0;
  for (int k = 0; k < sl->n; k++) if (sl->e[k].state == RT_ACT_DEV) total += sl->e[k].bytes;
  if (!total)
    return PPSRT_FAIL(PPSRT_E_USAGE, "offload(%d, %d): nothing of F(%d, %d) is on the device\n"
                      "hint: offload must follow F and precede B/W of the same (mb, stage)", mb, stage, mb, stage);
  if (fraction <= 0 || fraction > 1) fraction = 1;
  size_t want = (size_t)llround(fraction * (double)total), moved = 0;
  int rc;
  /* the copy starts after everything the compute stream has done so far (F) */
  /* (one marker per device, re-recorded: the copy stream's wait keeps the generation it
   * was enqueued with; destroyed only after the copy streams drained, in rt_ctx_fini) */
  if (!c->mark && (rc = be->event_create(be, &c->mark))) return rc;
  if ((rc = be->event_record(be, c->mark, PPSRT_STREAM_COMPUTE)) ||
      (rc = be->stream_wait_event(be, PPSRT_STREAM_D2H, c->mark)))
    return rc;
  for (int k = 0; k < sl->n && moved < want; k++) {
    rt_act *e = &sl->e[k];
    if (e->state != RT_ACT_DEV || !e->bytes) continue;
    if (e->cancelled) {   /* offloaded again before its cancelled copy ended: wait for it */
      if ((rc = be->event_sync(be, e->ev))) break;
      if ((rc = rt_poll_copies(c, 0))) break;
    }
    size_t part = want - moved < e->bytes ? want - moved : e->bytes;
    if ((rc = ensure_event(c, e))) break;
    if ((rc = be->host_alloc(be, part, &e->host))) break;
    if (part < e->bytes) {
      if ((rc = be->alloc(be, e->bytes - part, &e->rest))) { be->host_free(be, e->host); e->host = NULL; break; }
      c->store.resident += e->bytes - part;
      if (c->store.resident > c->store.resident_peak) c->store.resident_peak = c->store.resident;
      if ((rc = be->memcpy_async(be, PPSRT_STREAM_D2H, e->rest, (char *)e->dev + part, e->bytes - part, 0))) break;
    }
    if ((rc = be->memcpy_async(be, PPSRT_STREAM_D2H, e->host, e->dev, part, 2))) break;
    if ((rc = be->event_record(be, e->ev, PPSRT_STREAM_D2H))) break;
    e->state = RT_ACT_OFFLOADING;
    e->hbytes = part;
    c->store.cur -= part;
    c->store.ucur -= rt_part_units(e, part);
    c->store.host_cur += part;
    if (c->store.host_cur > c->store.host_peak) c->store.host_peak = c->store.host_cur;
    moved += part;
    if ((rc = pend_add(c, mb, stage, k, 0))) break;
  }
  return rc;
}

/* An offload whose reload was asked for before its D2H copy finished is cancelled:
 * the device buffer was never freed, so no H2D copy is issued and nothing waits for
 * the D2H copy. The backward may write a saved tensor in place (gelu_bwd's dx over
 * its input) while the D2H copy still reads it, so the entry moves to a copy made on
 * the device (compute stream, device to device: tens of times faster than the host
 * link, and ordered after F like the D2H copy; without device memory for it, the
 * compute stream waits for the D2H copy instead). The old buffer, the host buffer and a
 * split entry's `rest` are freed when the D2H event fires (rt_poll_copies), or when the
 * entry is dropped (drop() waits for the event first). The trace shows the cancelled
 * reload as an instant on the host->device track and the D2H copy's own end. */
static int cancel_offload(ppsrt_ctx *c, int mb, int stage, int k, rt_act *e) {
  rt_store *s = &c->store;
  void *nd = NULL;
  int rc = c->be->alloc(c->be, e->bytes, &nd);
  if (rc == PPSRT_E_NOMEM) {
    /* no room for the copy: the compute stream waits for the D2H copy instead (what
     * every reload of an offload in flight did before), and the buffer stays */
    if ((rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, e->ev))) return rc;
  } else if (rc) {
    return rc;
  } else {
    if ((rc = c->be->memcpy_async(c->be, PPSRT_STREAM_COMPUTE, nd, e->dev, e->bytes, 0))) { c->be->free(c->be, nd); return rc; }
    e->old = e->dev;
    e->dev = nd;
    s->resident += e->bytes;
    if (s->resident > s->resident_peak) s->resident_peak = s->resident;
  }
  for (int i = 0; i < s->npend; i++)
    if (s->pend[i].mb == mb && s->pend[i].stage == stage && s->pend[i].idx == k && s->pend[i].dir == 0) {
      s->pend[i].dir = 2;
      break;
    }
  e->state = RT_ACT_DEV;
  e->cancelled = 1;
  s->cur += e->hbytes;
  s->ucur += rt_part_units(e, e->hbytes);
  s->host_cur -= e->hbytes;
  return 0;
}

/* The copy of a cancelled offload ended: the buffer it read, its host buffer and
 * `rest` go. */
void rt_cancel_done(ppsrt_ctx *c, rt_act *e) {
  c->be->host_free(c->be, e->host);
  e->host = NULL;
  if (e->old) { c->be->free(c->be, e->old); e->old = NULL; c->store.resident -= e->bytes; }
  if (e->rest) { c->be->free(c->be, e->rest); e->rest = NULL; c->store.resident -= e->bytes - e->hbytes; }
  e->hbytes = 0;
  e->cancelled = 0;
}

int rt_reload(ppsrt_ctx *c, int mb, int stage) {
  ppsrt_backend *be = c->be;
  rt_slot *sl = slot(c, mb, stage);
  if (!sl) return PPSRT_FAIL(PPSRT_E_USAGE, "reload(%d, %d): out of range", mb, stage);
  int any = 0, cancelled = 0, rc = 0;
  /* offloads whose copy has ended become RT_ACT_HOST; the others are still in flight */
  if ((rc = rt_poll_copies(c, 0))) return rc;
  for (int k = 0; k < sl->n; k++) {
    rt_act *e = &sl->e[k];
    if (e->state != RT_ACT_HOST && e->state != RT_ACT_OFFLOADING) continue;
    any = 1;
    if (e->state == RT_ACT_OFFLOADING) {
      if ((rc = cancel_offload(c, mb, stage, k, e))) return rc;
      cancelled = 1;
      continue;
    }
    if ((rc = be->alloc(be, e->bytes, &e->dev))) return rc;
    c->store.resident += e->bytes;
    if (c->store.resident > c->store.resident_peak) c->store.resident_peak = c->store.resident;
    if ((rc = be->memcpy_async(be, PPSRT_STREAM_H2D, e->dev, e->host, e->hbytes, 1))) return rc;
    if (e->rest && (rc = be->memcpy_async(be, PPSRT_STREAM_H2D, (char *)e->dev + e->hbytes, e->rest,
                                          e->bytes - e->hbytes, 0)))
      return rc;
    if ((rc = be->event_record(be, e->ev, PPSRT_STREAM_H2D))) return rc;
    e->state = RT_ACT_RELOADING;
    c->store.cur += e->hbytes;
    c->store.ucur += rt_part_units(e, e->hbytes);
    c->store.host_cur -= e->hbytes;
    if ((rc = pend_add(c, mb, stage, k, 1))) return rc;
  }
  if (!any)
    return PPSRT_FAIL(PPSRT_E_USAGE, "reload(%d, %d): nothing of (mb %d, stage %d) is on the host\n"
                      "hint: reload must follow offload(%d, %d)", mb, stage, mb, stage, mb, stage);
  if (cancelled) {   /* one instant per reload op on the host->device track */
    double t = rt_now() - c->run->epoch;
    c->store.ncancel++;
    if ((rc = rt_event_add(c, t, t, c->cur_op, 2 | RT_TRACK_CANCELLED))) return rc;
  }
  return 0;
}

/* Completes the copies whose events fired (all of them, waiting, with wait_all). */
int rt_poll_copies(ppsrt_ctx *c, int wait_all) {
  rt_store *s = &c->store;
  ppsrt_backend *be = c->be;
  for (int i = 0; i < s->npend;) {
    struct rt_pending *p = &s->pend[i];
    rt_slot *sl = slot(c, p->mb, p->stage);
    rt_act *e = sl && p->idx < sl->n ? &sl->e[p->idx] : NULL;
    int done = 1;
    if (e && e->ev && (e->state == RT_ACT_OFFLOADING || e->state == RT_ACT_RELOADING || (p->dir == 2 && e->cancelled))) {
      if (wait_all) { int rc = be->event_sync(be, e->ev); if (rc) return rc; }
      else { done = be->event_query(be, e->ev); if (done < 0) return done; }
    }
    if (!done) { i++; continue; }
    if (e && e->state == RT_ACT_OFFLOADING && p->dir == 0) {
      be->free(be, e->dev);   /* the device memory is really released */
      e->dev = NULL;
      s->resident -= e->bytes;
      e->state = RT_ACT_HOST;
    } else if (e && p->dir == 2 && e->cancelled) {
      rt_cancel_done(c, e);
    } else if (e && e->state == RT_ACT_RELOADING && p->dir == 1) {
      be->host_free(be, e->host);
      e->host = NULL;
      if (e->rest) { be->free(be, e->rest); e->rest = NULL; s->resident -= e->bytes - e->hbytes; }
      e->hbytes = 0;
      e->state = RT_ACT_DEV;
    }
    rt_event_add(c, p->t0, rt_now() - c->run->epoch, p->op, p->dir == 1 ? 2 : p->dir == 2 ? 1 | RT_TRACK_CANCELLED : 1);
    *p = s->pend[--s->npend];
  }
  return 0;
}

/* The model needs entry idx now: the compute stream waits for its reload. */
int rt_act_wait(ppsrt_ctx *c, int mb, int stage, int idx) {
  rt_slot *sl = slot(c, mb, stage);
  rt_act *e = &sl->e[idx];
  int rc = c->be->stream_wait_event(c->be, PPSRT_STREAM_COMPUTE, e->ev);
  if (rc) return rc;
  return rt_poll_copies(c, 0);
}
