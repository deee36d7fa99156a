/* check.c: the --check reference harness, and the test-only fault hook (PPSRT_FAULT).
 * After the first pipelined iteration (before the optimizer step) each rank builds the
 * same model unpipelined on one device (every stage, no vocabulary partitioning, the
 * same seed: the same initial weights and data; after --load, the checkpoint's weights;
 * the gpt's dropout masks too: they hash the global step, microbatch, layer and element
 * (runtime/dropout.h), which the reference's cfg keeps: step0, the global mb, seed),
 * runs every microbatch in order (F over
 * all stages, then BW from the last stage down), and compares the loss and every weight
 * gradient tensor this rank holds with the reference's (a vocabulary shard against its
 * slice of the full tensor; with --distributed-optimizer, the shard of it this replica
 * reduced), per tensor in the 2-norm:
 *
 *     ||a - b|| <= k ||b||          (the loss: |a - b| <= k_loss |b|)
 *
 * with k derived from the unit roundoffs of the activation dtype and of F32
 * accumulation, the longest sum, the tokens and the depth of the model (check_k below;
 * docs/runtime.md, "--check", writes the derivation down; PPSRT_CHECK_K and
 * PPSRT_CHECK_K_LOSS override them for experiments). It prints k, every tensor outside
 * it and the largest relative difference; comparing no value at all is a failure. With
 * experts the reference replays the pipeline's routing (gather_routing: the top-K
 * choices and capacity drops of every (microbatch, layer) slot, forced on its MoE
 * layers, moe.c replay_route), so a bf16 near-tie of two experts' logits cannot send a
 * token elsewhere there; it says in how many slots its own choice differed (a failure
 * in F32) and that the replayed routing is the pipeline's (ppsrt_gpt_route_compare;
 * with --context-parallel each context rank over its own tokens, on a line of its own).
 * Every rank compares what it holds and writes its own lines: with --data-parallel each
 * replica its gradients (after the all-reduce, or its --distributed-optimizer shard) and
 * its own microbatches' routing; interp.c sums every rank's mismatches over the world.
 * PPSRT_FAULT (tests only) scales one gradient tensor of the pipeline, shifts its loss,
 * moves one token's expert in each MoE slot of the pipeline (route: moe.c fault_route; on
 * one replica's or context rank's ranks alone: route@replica=R, route@context=C), makes
 * every tensor rank record its routing (record-twice: each slot gathered T times) or
 * lists the tensors compared, so that tests can watch the check say no.
 * What it does not: it does not check timing or memory (cli.c compares measured and
 * predicted memory), and it never exits; the caller turns mismatches into exit status 1. */
#include "config.h"
#include "rt.h"
#include "gpt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs one reference iteration of model `ref` in context `rc_`; returns its loss. */
static int run_reference(ppsrt_ctx *rx, double *loss) {
  ppsrt_model *m = rx->model;
  int S = m->cfg.nstage, rc;
  if (m->begin_iteration && (rc = m->begin_iteration(m, rx, 0))) return rc;
  for (int i = 0; i < m->cfg.nmb; i++) {
    for (int s = 0; s < S; s++)
      if ((rc = m->f(m, rx, i, s))) return rc;
    for (int s = S - 1; s >= 0; s--) {
      if (m->bw) rc = m->bw(m, rx, i, s);
      else if (!(rc = m->b(m, rx, i, s))) rc = m->w(m, rx, i, s);
      if (rc) return rc;
    }
  }
  rt_box_clear(rx);
  *loss = 0;
  if (m->end_iteration && (rc = m->end_iteration(m, rx, loss))) return rc;
  return 0;
}

static int download(ppsrt_backend *be, float *dst, float *src, size_t n) {
  return be->download_f32(be, dst, (ppsrt_tensor){src, n, PPSRT_F32});
}

/* ---- the tolerance ---- */

/* The shape of the computation (docs/runtime.md, "--check"): n, the longest F32 sum (a
 * weight gradient over every token of the iteration, or a dot product over the widest
 * layer: mlp hidden; gpt 4 hidden in the MLP, the vocabulary in the softmax, the
 * sequence in attention); T, the tokens of an iteration (the loss is their mean); D,
 * the stored roundings of one forward pass along the layers: tensors a pass writes in
 * the activation dtype, per layer 2 for the mlp (h = xW + b, gelu(h)) and 12 for the
 * gpt (two layer norms, q, k, v, scores, probabilities, attention output, projection,
 * two residual sums, fc, gelu, fc2: counted as 12), plus 3 for the gpt's vocabulary
 * layers (embedding, final norm, logits). */
static void model_shape(const ppsrt_model_config *cfg, double *n, double *tokens, double *depth_fwd) {
  int gpt = cfg->name && !strcmp(cfg->name, "gpt");
  double layers = (double)cfg->nstage * (cfg->layers_per_stage > 0 ? cfg->layers_per_stage : 1);
  *tokens = (double)cfg->nmb * cfg->micro_batch * cfg->seq;
  double width = gpt ? fmax(fmax(4.0 * cfg->hidden, cfg->vocab), cfg->seq) : cfg->hidden;
  *n = fmax(*tokens, width);
  *depth_fwd = gpt ? 12 * layers + 3 : 2 * layers;
}

/* Where the two runs compute a value differently (vocabulary shards, partial results
 * summed across ranks, another summation order) one stored value differs by up to a
 * unit of the stored dtype (us: F32 2^-24, BF16 2^-8) plus the F32 rounding error of a
 * sum of n terms (ua sqrt(n), ua = 2^-24, the probabilistic bound):
 *     e1 = us + ua sqrt(n).
 * A gradient passes D stored roundings forward and D backward; independent differences
 * add in quadrature, with a factor 2 of margin:
 *     k = 2 sqrt(2 D) e1.
 * The loss passes D + 1 (the sum over microbatches and ranks) and is the mean over T
 * tokens, whose independent differences average out:
 *     k_loss = 2 sqrt(D + 1) e1 / sqrt(T). */
static void check_k(double us, const ppsrt_model_config *cfg, double *k, double *k_loss) {
  const double ua = 0x1p-24;
  double n, tokens, depth;
  model_shape(cfg, &n, &tokens, &depth);
  double e1 = us + ua * sqrt(n);
  *k = 2 * sqrt(2 * depth) * e1;
  *k_loss = 2 * sqrt(depth + 1) * e1 / sqrt(fmax(tokens, 1));
}

static double env_k(const char *var, double dflt) {
  const char *v = getenv(var);
  if (!v || !*v) return dflt;
  char *end;
  double x = strtod(v, &end);
  return *end || !(x >= 0) ? dflt : x;  /* rt_fault_setup rejected a bad value already */
}

/* ---- the fault hook (tests only) ---- */

static struct {
  int kind;         /* 0 none, 1 grad=NAME*SCALE, 2 loss+=X, 3 route[@replica=R|@context=C], 4 record-twice */
  char name[256];
  double scale, dloss;
} fault;

#pragma weak ppsrt_cpu_backend_create

static int fault_list(ppsrt_run *run, const ppsrt_model_config *mc, const char *me) {
  if (!ppsrt_cpu_backend_create) {
    fprintf(stderr, "%s: error: PPSRT_FAULT=list needs the CPU backend, not built into this libppsrt\n", me);
    return 1;
  }
  ppsrt_backend *be = NULL;
  ppsrt_model *m = NULL;
  ppsrt_model_config cfg = *mc;
  cfg.ndev = 1; cfg.vocab_mode = 0;
  cfg.ep = 1; cfg.ep_rank = 0;   /* (every expert's name) */
  int *all = malloc((size_t)cfg.nstage * sizeof *all), st = 1;
  if (!all) { fprintf(stderr, "%s: error: out of host memory\n", me); return 1; }
  for (int s = 0; s < cfg.nstage; s++) all[s] = s;
  if (ppsrt_cpu_backend_create(0, &be) || run->create(&cfg, be, 0, all, cfg.nstage, &m)) {
    fprintf(stderr, "%s: error: PPSRT_FAULT=list: %s\n", me, ppsrt_last_error());
  } else {
    for (int k = 0; k < m->nparams; k++) printf("%s\n", m->params[k].name);
    st = fflush(stdout) ? 1 : 0;
  }
  if (m) m->destroy(m);
  if (be) be->destroy(be);
  free(all);
  return st;
}

/* PPSRT_FAULT=route's tail `at`: "" (every rank's routing), "@replica=R" or "@context=C"
 * (that replica's or context rank's alone: cfg moe_fault_replica, moe_fault_cp, R + 1 and
 * C + 1; moe.c). Sets fault.kind 3; a rank that does not exist: its message, 1. */
static int route_fault_at(const ppsrt_run *run, ppsrt_model_config *cfg, const char *at, const char *me) {
  static const char *what[2] = {"@replica=", "@context="};
  const int have[2] = {run->o.data_parallel > 1 ? run->o.data_parallel : 1,
                       run->o.context_parallel > 1 ? run->o.context_parallel : 1};
  const char *flag[2] = {"--data-parallel", "--context-parallel"};
  if (!*at) { fault.kind = 3; return 0; }
  for (int i = 0; i < 2; i++) {
    size_t len = strlen(what[i]);
    if (strncmp(at, what[i], len) || at[len] < '0' || at[len] > '9') continue;
    char *end;
    long r = strtol(at + len, &end, 10);
    if (*end) return 0;   /* (not a number: the usage error below) */
    if (r >= have[i]) {
      fprintf(stderr, "%s: error: PPSRT_FAULT='route%s': %s %ld does not exist (%s %d: %s 0..%d)\n", me, at,
              i ? "context rank" : "replica", r, flag[i], have[i], i ? "context ranks" : "replicas", have[i] - 1);
      return 1;
    }
    if (i) cfg->moe_fault_cp = (int)r + 1;
    else cfg->moe_fault_replica = (int)r + 1;
    fault.kind = 3;
  }
  return 0;
}

int rt_fault_setup(ppsrt_run *run, ppsrt_model_config *cfg, int check, const char *me) {
  static const char *vars[] = {"PPSRT_CHECK_K", "PPSRT_CHECK_K_LOSS"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    if (v && *v && (strtod(v, &end), *end || !(strtod(v, NULL) >= 0))) {
      fprintf(stderr, "%s: error: %s='%s': expected a number >= 0\n", me, vars[i], v);
      return 2;
    }
  }
  const char *f = getenv("PPSRT_FAULT");
  if (!f || !*f) return -1;
  if (!strcmp(f, "list")) return fault_list(run, cfg, me);
  char *end;
  if (!strncmp(f, "loss+=", 6) && f[6]) {
    fault.dloss = strtod(f + 6, &end);
    if (!*end && isfinite(fault.dloss)) fault.kind = 2;
  } else if (!strncmp(f, "route", 5)) {   /* the pipeline's routing of one token moved (moe.c fault_route) */
    if (cfg->num_experts > 0 && route_fault_at(run, cfg, f + 5, me)) return 2;
  } else if (!strcmp(f, "record-twice")) {   /* every tensor rank records its routing (gather_routing) */
    if (cfg->num_experts > 0 && run->o.tensor_parallel > 1) fault.kind = 4;
  } else if (!strncmp(f, "grad=", 5)) {
    const char *star = strrchr(f, '*');
    size_t len = star ? (size_t)(star - (f + 5)) : 0;
    if (star && len > 0 && len < sizeof fault.name && star[1]) {
      fault.scale = strtod(star + 1, &end);
      if (!*end && isfinite(fault.scale)) {
        memcpy(fault.name, f + 5, len);
        fault.name[len] = 0;
        fault.kind = 1;
      }
    }
  }
  if (!fault.kind) {
    fprintf(stderr, "%s: error: PPSRT_FAULT='%s': expected grad=NAME*SCALE, loss+=X, route, route@replica=R or "
            "route@context=C (with --num-experts), record-twice (with --num-experts and --tensor-parallel T >= 2) "
            "or list (a fault for tests)\n",
            me, f);
    return 2;
  }
  if (!check) {
    fprintf(stderr, "%s: error: PPSRT_FAULT='%s' plants a fault for --check to find: add --check\n", me, f);
    return 2;
  }
  if (fault.kind == 3) cfg->moe_record = 2;   /* (--check set 1: the pipeline records its routing) */
  fprintf(stderr, "%s: warning: PPSRT_FAULT='%s': a fault planted for tests; --check must fail\n", me, f);
  return -1;
}

/* ---- the comparison ---- */

/* --num-experts: the routing the pipeline's F passes chose, for the reference to replay
 * (docs/runtime.md "--check"): every (microbatch, stage, layer) slot of the global batch,
 * gathered over the world (each token's decisions written by the one device and replica
 * that routed it: tensor rank 0, every tensor rank routes alike; with --context-parallel
 * each context rank writes its tokens, chunks c and 2C - 1 - c of each sequence, at their
 * places in the whole sequences: ppsrt_gpt_route_record). *rec (malloc, the reference's
 * layout) or NULL where there is nothing to replay: no experts, PPSRT_CHECK_REPLAY=0
 * (tests), or a token's decision that not exactly one rank recorded (*why says which; that
 * one sets *broken: the gather's bookkeeping is wrong, and the check fails). Every rank
 * calls it. PPSRT_FAULT=record-twice (tests): every tensor rank records, so each slot has
 * T writers. */
static int gather_routing(ppsrt_ctx *c, const ppsrt_model_config *rcfg, int32_t **rec, const char **why, int *broken) {
  ppsrt_model *pm = c->model;
  const char *off = getenv("PPSRT_CHECK_REPLAY");
  *rec = NULL;
  *why = NULL;
  *broken = 0;
  if (pm->cfg.num_experts <= 0) return 0;
  if (off && !strcmp(off, "0")) { *why = "PPSRT_CHECK_REPLAY=0: not replayed"; return 0; }
  int K = pm->cfg.moe_topk > 0 ? pm->cfg.moe_topk : 2;
  size_t NK = (size_t)rcfg->micro_batch * rcfg->seq * K;
  size_t n = (size_t)rcfg->nmb * rcfg->nstage * (rcfg->layers_per_stage > 0 ? rcfg->layers_per_stage : 1) * NK;
  float *tab = calloc(n ? 2 * n : 1, sizeof *tab);   /* the choices (+ 1), then how many ranks wrote each */
  if (!tab) return PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory (the routing's replay)");
  int writer = c->tp_rank == 0 || fault.kind == 4;
  int rc = 0, mine = writer ? ppsrt_gpt_route_record(pm, pm->cfg.mb0, rcfg->nmb, tab) : 0;
  if (mine < 0) *why = "the pipeline kept no routing: not replayed";
  for (size_t i = 0; i < n; i++) tab[n + i] = tab[i] > 0;
  if (!(rc = rt_allreduce_host_on(c, c->wtr, c->wrank, tab, 2 * n, PPSRT_SUM)) && !*why) {
    int32_t *r = malloc((n ? n : 1) * sizeof *r);
    if (!r) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory (the routing's replay)");
    for (size_t i = 0; r && i < n; i++) {
      r[i] = (int32_t)tab[i] - 1;   /* (exactly one writer, else nothing is replayed) */
      if (tab[n + i] != 1 || r[i] < 0 || r[i] >= 2 * pm->cfg.num_experts) {
        *why = "a slot not recorded once: not replayed";
        *broken = 1;
        free(r);
        r = NULL;
      }
    }
    *rec = r;
  }
  free(tab);
  return rc;
}

int rt_check_gradients(ppsrt_ctx *c, double pipeline_loss, int *mismatch) {
  ppsrt_run *run = c->run;
  ppsrt_model *pm = c->model;
  ppsrt_backend *be = c->be;
  const double us = be->act_dtype != PPSRT_F32 ? 0x1p-8 : 0x1p-24;
  double k0, kl0;
  check_k(us, &pm->cfg, &k0, &kl0);
  const double k = env_k("PPSRT_CHECK_K", k0), kl = env_k("PPSRT_CHECK_K_LOSS", kl0);
  if (c->rank == run->first_rank) { run->check_k = k; run->check_k_loss = kl; } /* one writer: the run is shared */
  *mismatch = 0;
  if (fault.kind == 2) pipeline_loss += fault.dloss;

  ppsrt_ctx rx;
  int rc;
  if ((rc = rt_ref_ctx_init(&rx, run, c))) return rc;
  ppsrt_model_config cfg = pm->cfg;
  cfg.ndev = 1; cfg.vocab_mode = 0;
  cfg.nmb *= run->nrep > 1 ? run->nrep : 1;   /* --data-parallel: one device at the global batch */
  cfg.mb0 = 0; cfg.nrep = 1; cfg.distopt = 0; cfg.tp = 1; cfg.tp_rank = 0; cfg.sp = 0;   /* whole layers, every row */
  cfg.cp = 1; cfg.cp_rank = 0;   /* --context-parallel: whole sequences (the C = 1 computation) */
  cfg.ep = 1; cfg.ep_rank = 0;   /* --expert-parallel: every expert (the X = 1 computation) */
  int *all = malloc((size_t)cfg.nstage * sizeof *all);
  float *a = NULL, *b = NULL;
  int32_t *rec = NULL;   /* the pipeline's routing, replayed by the reference (--num-experts) */
  FILE *f = NULL;
  double ref_loss = 0;
  if (!all) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); goto out; }
  for (int s = 0; s < cfg.nstage; s++) all[s] = s;
  /* (--context-parallel: the reference records its routing, and its own choice, so that
     each context rank compares its tokens' part of a slot: ppsrt_gpt_route_compare) */
  cfg.moe_record = pm->cfg.cp > 1 && pm->cfg.num_experts > 0;
  const char *noreplay = NULL;
  int gather_broken = 0;
  if ((rc = gather_routing(c, &cfg, &rec, &noreplay, &gather_broken))) goto out;
  if ((rc = run->create(&cfg, be, 0, all, cfg.nstage, &rx.model))) goto out;
  if (rec && (rc = ppsrt_gpt_route_replay(rx.model, rec))) goto out;
  if (run->ck && (rc = rt_ckpt_load(&rx, run->ck))) goto out;   /* --load: the same weights */
  if (fault.kind == 1) {
    int found = 0;
    for (int j = 0; j < rx.model->nparams && !found; j++) found = !strcmp(rx.model->params[j].name, fault.name);
    if (!found) {
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "PPSRT_FAULT: the model has no tensor '%s' (PPSRT_FAULT=list prints them)",
                      fault.name);
      goto out;
    }
  }
  if ((rc = run_reference(&rx, &ref_loss))) goto out;

  /* this rank's lines go to its own buffer; interp.c prints every rank's in order */
  size_t textlen = 0;
  free(c->check_text);
  c->check_text = NULL;
  f = open_memstream(&c->check_text, &textlen);
  if (!f) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); goto out; }
  pthread_mutex_lock(&run->print_lock);
  int loss_bad = 0;
  char dev[128];  /* how the lines name this rank: "device 1", or with --data-parallel "device 1 (replica 1)",
                   * with --tensor-parallel "device 1 (tensor rank 0)", with --context-parallel "device 1
                   * (context rank 1)", with --expert-parallel "device 1 (expert rank 1)" (the replica named
                   * too where D > X: its expert rank alone does not tell it), several of them "device 1
                   * (replica 1, tensor rank 0, context rank 1)" */
  {
    int len = snprintf(dev, sizeof dev, "device %d", c->rank), first = 1;
    const char *what[4] = {"replica", "tensor rank", "context rank", "expert rank"};
    int has[4] = {run->nrep > run->nep, run->ntp > 1, run->ncp > 1, run->nep > 1};
    int of[4] = {c->replica, c->tp_rank, c->cp_rank, c->ep_rank};
    for (int i = 0; i < 4; i++)
      if (has[i] && len > 0 && (size_t)len < sizeof dev) {
        len += snprintf(dev + len, sizeof dev - (size_t)len, "%s%s %d", first ? " (" : ", ", what[i], of[i]);
        first = 0;
      }
    if (!first && len > 0 && (size_t)len < sizeof dev) snprintf(dev + len, sizeof dev - (size_t)len, ")");
  }
  /* --context-parallel: a context rank > 0 holds context rank 0's gradients (summed over
     the group) and says its routing alone, unless --distributed-optimizer gave it a shard
     of its own to compare. --data-parallel: every replica compares the gradients it holds
     after the all-reduce (or its shard) and its own microbatches' routing (interp.c sums
     every rank's mismatches over the world) */
  const int grads = c->cp_rank == 0 || pm->cfg.distopt;
  /* (the loss: the replicas' mean, the same on every replica, EP and CP rank: world rank 0's;
     interp.c sends its verdict to every process) */
  if (c->wrank == 0) {
    double d = fabs(pipeline_loss - ref_loss);
    loss_bad = !(d <= kl * fabs(ref_loss));
    if (!run->o.json)
      fprintf(f, "check: loss %.9g, reference %.9g, |diff| %.3g (tolerance |a-b| <= %.3g*|ref|): %s\n",
              pipeline_loss, ref_loss, d, kl, loss_bad ? "DIFFERS" : "ok");
    run->check_loss_bad = loss_bad;
  }
  long nbad = 0, ncmp = 0;
  double maxrel = 0;
  const char *maxname = "all equal";
  for (int t = 0; grads && t < pm->nparams; t++) {
    ppsrt_param *p = &pm->params[t];
    ppsrt_param *r = NULL;
    for (int j = 0; j < rx.model->nparams; j++)
      if (!strcmp(rx.model->params[j].name, p->name)) { r = &rx.model->params[j]; break; }
    if (!r || (p->tp_split ? p->full_numel != r->numel : p->offset + p->numel > r->numel)) {
      if (!run->o.json)
        fprintf(f, "check: %s: parameter %s has no counterpart in the reference\n", dev, p->name);
      nbad++;
      continue;
    }
    free(a); free(b);
    a = malloc(p->numel * sizeof *a);
    b = malloc(r->numel * sizeof *b);
    if (!a || !b) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); pthread_mutex_unlock(&run->print_lock); goto out; }
    if ((rc = download(be, a, p->grad, p->numel)) || (rc = download(be, b, r->grad, r->numel))) {
      pthread_mutex_unlock(&run->print_lock);
      goto out;
    }
    if (fault.kind == 1 && !strcmp(p->name, fault.name))  /* the pipeline's gradient, as downloaded */
      for (size_t i = 0; i < p->numel; i++) a[i] = (float)(a[i] * fault.scale);
    double dd = 0, rr = 0;  /* ||a - b||^2, ||b||^2 */
    /* --distributed-optimizer: the shard this replica reduced (the replicas together
       compare every element); else the whole tensor */
    for (size_t i = p->sh_lo; i < p->sh_lo + p->sh_n; i++) {
      double x = a[i], y = b[ppsrt_param_full_index(p, i)];   /* (a tensor-parallel slice: its elements) */
      dd += (x - y) * (x - y);
      rr += y * y;
    }
    ncmp += (long)p->sh_n;
    double dn = sqrt(dd), rn = sqrt(rr);
    double rel = dn == 0 ? 0 : rn > 0 ? dn / rn : INFINITY;  /* NaN stays NaN */
    if (rel > maxrel || isnan(rel)) { maxrel = isnan(rel) ? INFINITY : rel; maxname = p->name; }
    if (!(dn <= k * rn)) {
      nbad++;
      if (!run->o.json)
        fprintf(f, "check: %s: grad %s (%zu values): ||a-b|| %.3g, ||ref|| %.3g, relative %.3g > %.3g: DIFFERS\n",
                dev, p->name, p->numel, dn, rn, rel, k);
    }
  }
  /* --num-experts: the reference replayed the routing of this device's layers (rec), so
     the two runs compute the same experts' sums: its routing must be the pipeline's (else the
     replay failed), and its own choice (what it would have routed: a near-tie of two
     experts' logits can flip in bf16) is told, and in F32 must agree too (the guard on a
     wrong top-K, which the replay itself would copy into the reference); with
     --context-parallel, compared over this rank's tokens of each slot. Without a replay
     (PPSRT_CHECK_REPLAY=0): whether they routed alike explains a failure. */
  long nsl, ndiff, nown;
  if (pm->cfg.num_experts > 0 && !ppsrt_gpt_route_compare(pm, rx.model, pm->cfg.mb0, &nsl, &ndiff)) {
    if (rec && !ppsrt_gpt_route_ohash(pm, rx.model, pm->cfg.mb0, &nown)) {
      int f32 = be->act_dtype == PPSRT_F32, bad = ndiff > 0 || (f32 && nown > 0);
      nbad += bad;
      if (!run->o.json)
        fprintf(f, "check: %s: routing of %ld (microbatch, layer) slots replayed from the pipeline%s; the reference's own "
                "choice differed in %ld%s\n", dev, nsl, ndiff ? " FAILED" : "", nown,
                f32 && nown ? ": DIFFERS (in F32 the choices agree: a wrong top-K?)" : nown ? " (near-ties in bf16)" : "");
    } else if (!run->o.json) {
      char why[128];   /* (why not replayed; a slot not gathered once fails: the replay's bookkeeping is wrong) */
      snprintf(why, sizeof why, "%s%s%s", noreplay ? "; " : "", noreplay ? noreplay : "", gather_broken ? ": FAILED" : "");
      if (!ndiff)
        fprintf(f, "check: %s: routing of %ld (microbatch, layer) slots: the reference's%s\n", dev, nsl, why);
      else
        fprintf(f, "check: %s: routing of %ld of %ld (microbatch, layer) slots differs from the reference's%s%s\n", dev,
                ndiff, nsl, nbad ? ": the gradients above compare two routings (in bf16 a near-tie of two experts' logits "
                "can flip; in F32, on the CPU backend, it should not)" : "", why);
    }
  }
  nbad += gather_broken;
  if (ncmp == 0 && grads) {
    nbad++;
    if (!run->o.json) fprintf(f, "check: %s: no gradient value compared: FAILED\n", dev);
  }
  if (!run->o.json && grads)
    fprintf(f, "check: %s: %ld gradient values of %d tensors compared, max relative difference %.3g (%s), "
            "tolerance ||a-b|| <= %.3g*||ref|| per tensor: %s\n", dev, ncmp, pm->nparams, maxrel, maxname, k,
            nbad ? "MISMATCH" : "match");
  if (maxrel > run->check_maxdiff) run->check_maxdiff = maxrel;
  pthread_mutex_unlock(&run->print_lock);
  *mismatch = nbad > 0x7fffffff ? 0x7fffffff : (int)nbad;
out:
  if (f) fclose(f);
  free(a); free(b); free(all); free(rec);
  if (rx.model) {
    /* the reference's gradients must not leak into anything: it is destroyed here */
    rt_box_clear(&rx);
    rt_store_leftover(&rx, &(int){0}, &(int){0});
  }
  rt_store_fini(&rx.store, be);
  if (rx.model) rx.model->destroy(rx.model);
  free(rx.box);
  free(rx.bcol);
  return rc;
}
