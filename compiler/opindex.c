/* opindex.c: the op index (AnaIndex), the links between ops (SimLinks: channels,
 * collective sequence numbers, reload/offload pairs, posted recvs' consumers) and the
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
    *tabs[k] = arena_alloc(a, sizeof(int32_t) * (size_t)(ix->nslots + 1));
    memset(*tabs[k], 0xff, sizeof(int32_t) * (size_t)(ix->nslots + 1));
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
  L->link = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->chan = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->seq = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->ncoll = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  memset(L->link, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  memset(L->chan, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  int64_t maxch = (int64_t)P * P < ix->ncomm ? (int64_t)P * P : ix->ncomm;
  int hcap = 64;
  while (hcap < 2 * maxch + 64) hcap *= 2;
  int64_t *hk = arena_alloc(a, sizeof(int64_t) * (size_t)hcap);
  int32_t *hv = arena_alloc(a, sizeof(int32_t) * (size_t)hcap);
  memset(hk, 0xff, sizeof(int64_t) * (size_t)hcap);
  size_t chcap = sizeof(int32_t) * (size_t)(hcap / 2 + 1);
  int32_t *nsend = arena_alloc(a, chcap), *nrecv = arena_alloc(a, chcap);
  int32_t *src = arena_alloc(a, chcap), *dst = arena_alloc(a, chcap);
  /* the linked sends (g) and recvs (-1 - g) in op order, so that the passes below
     read neither the ops nor the other ops' entries; with each, its message's key
     (microbatch, stage, transfer) in 32 bits, MSG_ANY where it does not fit */
  int32_t *cg = arena_alloc(a, sizeof(int32_t) * (size_t)(ix->ncomm + 1));
  uint32_t *ckey = arena_alloc(a, sizeof(uint32_t) * (size_t)(ix->ncomm + 1));
  const uint32_t MSG_ANY = UINT32_MAX;
  int keyfit = (int64_t)ix->nmb * ix->nstage * 4 < (int64_t)MSG_ANY;
  int64_t ncg = 0;
  int nc = 0, nposted = 0;
  for (int d = 0; d < P; d++) {
    const IrDevice *dev = &s->devs[d];
    int64_t lastkey[2] = {-1, -1};   /* the channel of the device's last send and last recv: */
    int lastc[2] = {0, 0};           /* most of its messages go to one or two peers */
    for (int k = 0; k < dev->nops; k++) {
      int32_t g = ix->off[d] + k;
      switch ((IrKind)ANA_KIND(ix->kf[g])) {   /* (the ops of the other kinds are not read) */
      case IR_SEND: case IR_RECV: {
        const IrOp *op = &dev->ops[k];
        if (op->kind == IR_RECV && (op->flags & IR_FLAG_POSTED)) {
          if (!L->postwait) {   /* the first posted recv */
            L->postwait = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
            L->postcons = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
            memset(L->postwait, 0xff, sizeof(int32_t) * (size_t)(n + 1));
            memset(L->postcons, 0xff, sizeof(int32_t) * (size_t)(n + 1));
          }
          link_posted(s, ix, L, op, g);
        }
        if (op->peer < 0 || op->peer >= P) break;
        int sd = op->kind == IR_SEND ? d : op->peer, rd = op->kind == IR_SEND ? op->peer : d;
        int64_t key = (int64_t)sd * P + rd;
        int dir = op->kind == IR_RECV, c;
        if (key == lastkey[dir]) {
          c = lastc[dir];
        } else {
          uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
          int i = (int)(h >> 40) & (hcap - 1);
          while (hk[i] >= 0 && hk[i] != key) i = (i + 1) & (hcap - 1);
          if (hk[i] < 0) {
            if (nc >= (hcap >> 1)) break; /* absurd number of channels: leave unlinked */
            hk[i] = key;
            hv[i] = nc;
            src[nc] = sd;
            dst[nc] = rd;
            nc++;
          }
          c = hv[i];
          lastkey[dir] = key;
          lastc[dir] = c;
        }
        L->chan[g] = c;
        L->seq[g] = op->kind == IR_SEND ? nsend[c]++ : nrecv[c]++;
        if (ncg < ix->ncomm) {
          cg[ncg] = op->kind == IR_SEND ? g : -1 - g;
          ckey[ncg++] = keyfit && ana_valid_pass(s, op) && (op->xfer == IR_XFER_ACT || op->xfer == IR_XFER_GRAD)
                        ? (uint32_t)ANA_SLOT(ix, op->mb, op->stage) * 4 + op->xfer : MSG_ANY;
        }
        nposted += op->kind == IR_RECV && (op->flags & IR_FLAG_POSTED);
        break;
      }
      case IR_COLL: case IR_S: L->link[g] = L->ncoll[d]++; break;
      case IR_B: case IR_BW: {
        if (!ix->noffload) break;   /* (no reloads) */
        const IrOp *op = &dev->ops[k];
        if (ana_valid_pass(s, op)) {
          int32_t r = ix->posRel[ANA_SLOT(ix, op->mb, op->stage)];
          if (r >= 0 && ix->devof[r] == d) L->link[g] = r;
        }
        break;
      }
      case IR_RELOAD: {
        const IrOp *op = &dev->ops[k];
        if (ana_valid_pass(s, op)) {
          int32_t o = ix->posOff[ANA_SLOT(ix, op->mb, op->stage)];
          if (o >= 0 && ix->devof[o] == d) L->link[g] = o;
        }
        break;
      }
      default: break;
      }
    }
  }
  /* posted recvs are linked to their consumers when one of them names a channel */
  if (!nposted) L->postwait = L->postcons = NULL;
  L->nchan = nc;
  L->chan_nsend = nsend;
  L->chan_nrecv = nrecv;
  L->chan_src = src;
  L->chan_dst = dst;
  L->chan_sends = arena_alloc(a, sizeof(int32_t *) * (size_t)(nc + 1));
  uint32_t **skey = arena_alloc(a, sizeof(uint32_t *) * (size_t)(nc + 1));   /* the sends' keys, channel order */
  for (int c = 0; c < nc; c++) {
    L->chan_sends[c] = arena_alloc(a, sizeof(int32_t) * (size_t)(nsend[c] + 1));
    skey[c] = arena_alloc(a, sizeof(uint32_t) * (size_t)(nsend[c] + 1));
  }
  for (int64_t k = 0; k < ncg; k++)
    if (cg[k] >= 0) {
      int c = L->chan[cg[k]], q = L->seq[cg[k]];
      L->chan_sends[c][q] = cg[k];
      skey[c][q] = ckey[k];
    }
  for (int64_t k = 0; k < ncg; k++) {
    if (cg[k] >= 0) continue;
    int32_t g = -1 - cg[k];
    int c = L->chan[g], q = L->seq[g];
    if (q >= nsend[c]) continue;   /* (link -1) */
    L->link[g] = L->chan_sends[c][q];
    L->nmisfit += ckey[k] == MSG_ANY || skey[c][q] != ckey[k];
  }
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
