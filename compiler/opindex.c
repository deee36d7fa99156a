/* opindex.c: the op index (AnaIndex), the links between ops (SimLinks: channels,
 * collective sequence numbers, reload/offload pairs, posted recvs' consumers, and
 * whether each recv gets its own message: nmisfit, for verify's FIFO check) and the
 * passes' device time (sim_cost), shared by lowering, the executor, verification and
 * simulation. See opindex.h. */
#include "opindex.h"
#include "recompute.h"
#include <string.h>

double ana_offload_fraction(const IrSchedule *s, int stage) {
  double f = (stage >= 0 && stage < s->nstage) ? s->stages[stage].offload : 0;
  if (f > 0) return f > 1 ? 1 : f;
  if (s->offload.enabled && s->offload.ratio > 0) return s->offload.ratio > 1 ? 1 : s->offload.ratio;
  return 1; /* an offload the file wrote without a policy moves the whole activation */
}

int ana_index(Arena *a, const IrSchedule *s, AnaIndex *ix) {
  memset(ix, 0, sizeof *ix);
  ix->ndev = s->ndev > 0 ? s->ndev : 0;
  ix->nstage = s->nstage > 0 ? s->nstage : 0;
  ix->nmb = s->nmb > 0 ? s->nmb : 0;
  int64_t total = 0;
  for (int d = 0; d < ix->ndev; d++) total += s->devs[d].nops;
  if (total >= INT32_MAX) return -1;
  int64_t slots = (int64_t)ix->nmb * ix->nstage;
  if (slots > ANA_MAX_SLOTS(total)) return -1;
  ix->total = total;
  int64_t stride = ((int64_t)ix->nmb + 15) / 16 * 16;   /* whole 64-byte lines, an odd number of them */
  if (stride / 16 % 2 == 0) stride += 16;
  ix->mbstride = stride <= INT32_MAX ? (int32_t)stride : ix->nmb;
  ix->nslots = (int64_t)ix->nstage * ix->mbstride;
  ix->off = arena_alloc(a, sizeof(int32_t) * (size_t)(ix->ndev + 1));
  ix->devof = arena_alloc(a, sizeof(int32_t) * (size_t)(total + 1));
  ix->kf = arena_alloc(a, (size_t)total + 1);
  int32_t **tabs[5] = {&ix->posF, &ix->posB, &ix->posW, &ix->posOff, &ix->posRel};
  for (int k = 0; k < 5; k++) {
    *tabs[k] = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(ix->nslots + 1), 0xff);
  }
  int32_t g = 0;
  for (int d = 0; d < ix->ndev; d++) {
    ix->off[d] = g;
    const IrDevice *dev = &s->devs[d];
    for (int k = 0; k < dev->nops; k++, g++) {
      const IrOp *op = &dev->ops[k];
      ix->devof[g] = d;
      ix->kf[g] = (uint8_t)((op->kind & 15) | (op->flags & 15) << 4);
      int32_t *t = NULL;
      switch ((IrKind)op->kind) {
      case IR_F: t = ix->posF; break;
      case IR_B: case IR_BW: t = ix->posB; break;
      case IR_W: t = ix->posW; break;
      case IR_OFFLOAD: t = ix->posOff; ix->noffload++; break;
      case IR_RELOAD: t = ix->posRel; ix->noffload++; break;
      case IR_SEND: case IR_RECV: ix->ncomm++; break;
      case IR_IF: case IR_IB: case IR_S: case IR_T: case IR_COLL: ix->nvocab++; break;
      default: break;
      }
      if (t && ana_valid_pass(s, op)) {
        int64_t sl = ANA_SLOT(ix, op->mb, op->stage);
        if (t[sl] < 0) t[sl] = g;
      }
    }
  }
  ix->off[ix->ndev] = g;
  return 0;
}


double sim_cost(const IrSchedule *s, const IrOp *op) {
  const IrStage *st = (op->stage >= 0 && op->stage < s->nstage) ? &s->stages[op->stage] : NULL;
  switch ((IrKind)op->kind) {
  case IR_F: return st ? st->tf : 0;
  case IR_B: return st ? st->tb + recompute_time(s, op) : 0;   /* recompute.c */
  case IR_W: return st ? st->tw : 0;
  case IR_BW: return st ? st->tbw + recompute_time(s, op) : 0;
  case IR_IF: return s->vocab.t_if;
  case IR_IB: return s->vocab.t_ib;
  case IR_S: return s->vocab.t_s;
  case IR_T: return s->vocab.t_t;
  default: return 0;
  }
}

/* Posted recv g's consumer (sim_links, in op order: the first posted recv a consumer
 * waits for is the earliest): the pass that reads its data, later on its device (else
 * it stays a plain recv, waited for where it stands). */
static void link_posted(const IrSchedule *s, const AnaIndex *ix, SimLinks *L, const IrOp *op, int32_t g) {
  if (op->mb < 0 || op->mb >= s->nmb) return;
  int st = op->xfer == IR_XFER_ACT ? op->stage + 1 : op->xfer == IR_XFER_GRAD ? op->stage - 1 : -1;
  if (st < 0 || st >= s->nstage) return;
  int32_t c = op->xfer == IR_XFER_ACT ? ix->posF[ANA_SLOT(ix, op->mb, st)] : ix->posB[ANA_SLOT(ix, op->mb, st)];
  if (c <= g || ix->devof[c] != ix->devof[g] || L->postwait[c] >= 0) return;
  L->postwait[c] = g;
  L->postcons[g] = c;
}

void sim_links(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L) {
  memset(L, 0, sizeof *L);
  int64_t n = ix->total;
  int P = ix->ndev;
  L->link = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(n + 1), 0xff);
  L->chan = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(n + 1), 0xff);
  L->seq = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->ncoll = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int64_t maxch = (int64_t)P * P < ix->ncomm ? (int64_t)P * P : ix->ncomm;
  int hcap = 64;
  while (hcap < 2 * maxch + 64) hcap *= 2;
  int64_t *hk = arena_alloc_fill(a, sizeof(int64_t) * (size_t)hcap, 0xff);
  int32_t *hv = arena_alloc(a, sizeof(int32_t) * (size_t)hcap);
  size_t chcap = sizeof(int32_t) * (size_t)(hcap / 2 + 1);
  int32_t *nsend = arena_alloc(a, chcap), *nrecv = arena_alloc(a, chcap);
  int32_t *src = arena_alloc(a, chcap), *dst = arena_alloc(a, chcap);
  /* the linked sends (g) and recvs (-1 - g) in op order, so that the passes below
     read neither the ops nor the other ops' entries. Until the linking, each one's
     link holds its message's key (microbatch, stage, transfer) in 32 bits, MSG_ANY
     where it does not fit: a send or recv has no other link yet */
  int32_t *cg = arena_alloc(a, sizeof(int32_t) * (size_t)(ix->ncomm + 1));
  const uint32_t MSG_ANY = UINT32_MAX;
  int keyfit = (int64_t)ix->nmb * ix->nstage * 4 < (int64_t)MSG_ANY;
  int64_t ncg = 0;
  int nc = 0, nposted = 0;
  /* each device's channel to (dir 0) and from (dir 1) each peer, valid where its
     stamp is the device: the hash is probed once per (device, peer, direction) */
  int32_t *pstamp = arena_alloc(a, sizeof(int32_t) * (size_t)(2 * P + 1));
  int32_t *pchan = arena_alloc(a, sizeof(int32_t) * (size_t)(2 * P + 1));
  memset(pstamp, 0xff, sizeof(int32_t) * (size_t)(2 * P + 1));
  /* the kinds other than send/recv that get a link (B/BW only when reloads exist) */
  unsigned linked = 1u << IR_COLL | 1u << IR_S | 1u << IR_RELOAD | (ix->noffload ? 1u << IR_B | 1u << IR_BW : 0);
  for (int d = 0; d < P; d++) {
    const IrDevice *dev = &s->devs[d];
    const uint8_t *kf = ix->kf + ix->off[d];
    for (int k = 0; k < dev->nops; k++) {
      int32_t g = ix->off[d] + k;
      int kind = ANA_KIND(kf[k]);   /* (the ops of the other kinds are not read) */
      if (kind == IR_SEND || kind == IR_RECV) {
        const IrOp *op = &dev->ops[k];
        int dir = kind == IR_RECV;
        if (dir && (op->flags & IR_FLAG_POSTED)) {
          if (!L->postwait) {   /* the first posted recv */
            L->postwait = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(n + 1), 0xff);
            L->postcons = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(n + 1), 0xff);
          }
          link_posted(s, ix, L, op, g);
        }
        if (op->peer < 0 || op->peer >= P) continue;
        int c, pk = dir * P + op->peer;
        if (pstamp[pk] == d) {
          c = pchan[pk];
        } else {
          int sd = dir ? op->peer : d, rd = dir ? d : op->peer;
          int64_t key = (int64_t)sd * P + rd;
          uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
          int i = (int)(h >> 40) & (hcap - 1);
          while (hk[i] >= 0 && hk[i] != key) i = (i + 1) & (hcap - 1);
          if (hk[i] < 0) {
            if (nc >= (hcap >> 1)) continue; /* absurd number of channels: leave unlinked */
            hk[i] = key;
            hv[i] = nc;
            src[nc] = sd;
            dst[nc] = rd;
            nc++;
          }
          c = hv[i];
          pstamp[pk] = d;
          pchan[pk] = c;
        }
        L->chan[g] = c;
        L->seq[g] = dir ? nrecv[c]++ : nsend[c]++;
        if (ncg < ix->ncomm) {
          cg[ncg++] = dir ? -1 - g : g;
          L->link[g] = (int32_t)(keyfit && ana_valid_pass(s, op) && (op->xfer == IR_XFER_ACT || op->xfer == IR_XFER_GRAD)
                                 ? (uint32_t)((int64_t)op->mb * ix->nstage + op->stage) * 4 + op->xfer : MSG_ANY);
        }
        nposted += dir && (op->flags & IR_FLAG_POSTED);
        continue;
      }
      if (!(linked >> kind & 1)) continue;
      if (kind == IR_COLL || kind == IR_S) {
        L->link[g] = L->ncoll[d]++;
        continue;
      }
      const IrOp *op = &dev->ops[k];   /* B/BW -> its reload, reload -> its offload */
      if (!ana_valid_pass(s, op)) continue;
      int32_t r = (kind == IR_RELOAD ? ix->posOff : ix->posRel)[ANA_SLOT(ix, op->mb, op->stage)];
      if (r >= 0 && ix->devof[r] == d) L->link[g] = r;
    }
  }
  /* posted recvs are linked to their consumers when one of them names a channel */
  if (!nposted) L->postwait = L->postcons = NULL;
  L->nchan = nc;
  L->chan_nsend = nsend;
  L->chan_nrecv = nrecv;
  L->chan_src = src;
  L->chan_dst = dst;
  /* the sends of each channel in order, at soff[c] of one array: the k-th recv of a
     channel links to the k-th send, and compares its message's key with the send's */
  int64_t *soff = arena_alloc(a, sizeof(int64_t) * (size_t)(nc + 1));
  for (int c = 0; c < nc; c++) soff[c + 1] = soff[c] + nsend[c];
  int32_t *sends = arena_alloc(a, sizeof(int32_t) * (size_t)(soff[nc] + 1));
  for (int64_t k = 0; k < ncg; k++)
    if (cg[k] >= 0) sends[soff[L->chan[cg[k]]] + L->seq[cg[k]]] = cg[k];
  for (int64_t k = 0; k < ncg; k++) {
    if (cg[k] >= 0) continue;
    int32_t g = -1 - cg[k];
    int c = L->chan[g], q = L->seq[g];
    uint32_t key = (uint32_t)L->link[g];
    if (q >= nsend[c]) {
      L->link[g] = -1;
      continue;
    }
    int32_t sd = sends[soff[c] + q];
    L->link[g] = sd;
    L->nmisfit += key == MSG_ANY || (uint32_t)L->link[sd] != key;
  }
  for (int64_t k = 0; k < ncg; k++)   /* a send links to nothing */
    if (cg[k] >= 0) L->link[cg[k]] = -1;
}

void ana_remap(Arena *tmp, const IrSchedule *s, AnaIndex *ix, SimLinks *L, const int32_t *newid) {
#define NEW(g) (newid[g] >= 0 ? newid[g] : (g))
  int32_t *tabs[5] = {ix->posF, ix->posB, ix->posW, ix->posOff, ix->posRel};
  for (int k = 0; k < 5; k++)
    for (int64_t sl = 0; sl < ix->nslots; sl++)
      if (tabs[k][sl] >= 0) tabs[k][sl] = NEW(tabs[k][sl]);
  int maxn = 0;
  for (int d = 0; d < ix->ndev; d++) if (s->devs[d].nops > maxn) maxn = s->devs[d].nops;
  int32_t *ol = arena_alloc(tmp, sizeof(int32_t) * 3 * (size_t)(maxn + 1)), *oc = ol + maxn + 1, *os = oc + maxn + 1;
  uint8_t *ok = arena_alloc(tmp, (size_t)maxn + 1);
  /* links by global id (recv -> send, B/BW -> reload, reload -> offload) follow their
     target; a collective's or S pass's sequence number stays; read with the old kinds */
  const unsigned byid = 1u << IR_RECV | 1u << IR_B | 1u << IR_BW | 1u << IR_RELOAD;
  for (int d = 0; d < ix->ndev; d++) {
    int32_t base = ix->off[d];
    int n = s->devs[d].nops;
    const int32_t *mv = newid + base;
    uint8_t *kf = ix->kf + base;
    int32_t *link = L->link + base;
    if (n && mv[0] >= 0) {   /* a device with moves: every op has its new id */
      memcpy(ol, link, sizeof(int32_t) * (size_t)n);
      memcpy(oc, L->chan + base, sizeof(int32_t) * (size_t)n);
      memcpy(os, L->seq + base, sizeof(int32_t) * (size_t)n);
      memcpy(ok, kf, (size_t)n);
      for (int k = 0; k < n; k++) {
        int32_t v = ol[k], ng = mv[k];
        if (v >= 0 && (byid >> ANA_KIND(ok[k]) & 1)) v = NEW(v);
        L->link[ng] = v;
        L->chan[ng] = oc[k];
        L->seq[ng] = os[k];
        ix->kf[ng] = ok[k];
      }
    } else {
      for (int k = 0; k < n; k++)
        if (link[k] >= 0 && (byid >> ANA_KIND(kf[k]) & 1)) link[k] = NEW(link[k]);
    }
  }
#undef NEW
  L->postwait = L->postcons = NULL;
}

void ana_link_posted(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L) {
  int64_t nposted = 0;
  L->postwait = L->postcons = NULL;
  for (int d = 0; d < ix->ndev; d++) {
    int32_t base = ix->off[d];
    int n = s->devs[d].nops;
    const uint8_t *kf = ix->kf + base;
    const IrOp *ops = s->devs[d].ops;
    for (int k = 0; k < n; k++) {
      if (ANA_KIND(kf[k]) != IR_RECV || !(ANA_FLAGS(kf[k]) & IR_FLAG_POSTED)) continue;
      if (!L->postwait) {
        L->postwait = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(ix->total + 1), 0xff);
        L->postcons = arena_alloc_fill(a, sizeof(int32_t) * (size_t)(ix->total + 1), 0xff);
      }
      link_posted(s, ix, L, &ops[k], base + k);
      nposted += L->chan[base + k] >= 0;
    }
  }
  if (!nposted) L->postwait = L->postcons = NULL;
}

/* Under `vocab async`: how many collectives op waits for (their (mb, coll) in need[]):
 * F(i, 0) input_fwd(i); T(i) output_fwd(i); the last stage's B/BW(i) output_bwd(i)
 * (Vocab-1) or output_fwd(i) (Vocab-2); IB(i) input_bwd(i). */
int sim_coll_needs(const IrSchedule *s, const IrOp *op, int *need) {
  if (op->mb < 0 || op->mb >= s->nmb) return 0;
  switch ((IrKind)op->kind) {
  case IR_F: if (op->stage != 0) return 0; need[0] = IR_COLL_INPUT_FWD; return 1;
  case IR_T: need[0] = IR_COLL_OUTPUT_FWD; return 1;
  case IR_IB: need[0] = IR_COLL_INPUT_BWD; return 1;
  case IR_B: case IR_BW:
    if (op->stage != s->nstage - 1) return 0;
    need[0] = s->vocab.mode == 1 ? IR_COLL_OUTPUT_BWD : IR_COLL_OUTPUT_FWD;
    return 1;
  default: return 0;
  }
}
