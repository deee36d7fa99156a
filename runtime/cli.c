/* cli.c: ppsrt_main, the executable's command line: parses the flags (model sizes over
 * the program's model { } defaults, iterations, optimizer, --check, --trace, --json,
 * backend, transport, timeout), checks the program table, creates the transport and,
 * per device, the backend, the model and the interpreter context, runs every device
 * (threads: one thread each; MPI/NCCL under mpirun: this process's rank), and reports:
 * per-iteration lines (with achieved FLOP/s and MFU: FLOPs counted from the op tables,
 * peak from --peak-flops or, on the GPU, the hardware block), the --check verdict,
 * measured vs predicted memory, the trace and the JSON object. Exit status: 0 ok, 1
 * runtime error or failed check, 2 bad flags.
 * What it does not: no exit() (it returns the status), no computation of its own.
 * Optional parts (gpt model, CUDA backend, NCCL and MPI transports) are weak references:
 * when a part is not built in, asking for it is a usage error naming what is missing. */
#include "config.h"
#include "rt.h"
#include "gpt.h"
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#pragma weak ppsrt_gpt_create
#pragma weak ppsrt_gpt_pass_flops
#pragma weak ppsrt_gpt_check_config
#pragma weak ppsrt_gpt_ffn
#pragma weak ppsrt_gpt_kv_channels
#pragma weak ppsrt_cpu_backend_create
#pragma weak ppsrt_cuda_backend_create
#pragma weak ppsrt_nccl_transport_create
#pragma weak ppsrt_nccl_transport_group
#pragma weak ppsrt_mpi_transport_create
#pragma weak ppsrt_mpi_transport_split

static const char usage_text[] =
  "usage: %s [options]\n"
  "\n"
  "Runs the pipeline schedule '%s' (%s): %d devices, %d stages, %d microbatches.\n"
  "\n"
  "model:\n"
  "  --model mlp|gpt          the model (default mlp)\n"
  "  --hidden N --heads N --query-groups N --seq N --vocab N --micro-batch N\n"
  "  --layers-per-stage N     sizes (defaults: the schedule's model { } block, else tiny)\n"
  "  --arch gpt|llama         gpt: GPT-2's layer (default), or Llama's: --mlp swiglu --norm rmsnorm\n"
  "                           --position rope --bias off (each flag below overrides it)\n"
  "  --mlp gelu|swiglu --norm layernorm|rmsnorm --position learned|rope --bias on|off\n"
  "  --embeddings untied|tied gpt: the output layer its own matrix (default) or the input's\n"
  "  --qk-layernorm           gpt: each query and key head normalised (the --norm kind, gains\n"
  "                           of the head size) before RoPE: Qwen3, Megatron's --qk-layernorm\n"
  "  --kv-channels D          gpt: each attention head's size (default hidden / heads; even with\n"
  "                           RoPE), Megatron's --kv-channels, HF's head_dim: QKV [h, (a + 2g) D],\n"
  "                           the projection [a D, h]; default from model { kv_channels }\n"
  "  --add-qkv-bias           gpt with --bias off: the QKV projection alone keeps its bias\n"
  "                           (Qwen2's; Megatron-LM's --add-qkv-bias); model { qkv_bias = 1 }\n"
  "  --norm-epsilon X         gpt: every norm's epsilon, added to the variance (RMS: the mean\n"
  "                           square), X > 0 (default 1e-5; Qwen2, Llama 2: 1e-6); Megatron-LM's\n"
  "                           --norm-epsilon; model { norm_epsilon }\n"
  "  --init-method-std S      gpt: Megatron-LM's initialisation (its --init-method-std, S > 0, its\n"
  "                           default 0.02): weights, embeddings, position table, output layer and\n"
  "                           router ~ Normal(0, S); the attention's projection and the MLP's and\n"
  "                           experts' FC2 ~ Normal(0, S / sqrt(2 L)), L = stages x layers per\n"
  "                           stage; biases 0, norm gains 1. Default: uniform, unit-variance outputs\n"
  "  --ffn-hidden N --rope-base X   gpt: MLP width (default 4h; SwiGLU 8h/3 rounded down to\n"
  "                           a multiple of 64), RoPE base (default 10000); defaults from model { }\n"
  "  --rope-scaling none|linear|llama3   gpt with RoPE: its frequencies scaled as Hugging Face's\n"
  "                           rope_type of that name (default none): linear divides them by\n"
  "                           --rope-scaling-factor F (default 8); llama3 (Llama 3.1's) divides\n"
  "                           those of wavelengths over N / --rope-low-freq-factor L (default 1) by F,\n"
  "                           keeps those under N / --rope-high-freq-factor H (default 4), blends\n"
  "                           between; N: --rope-original-max-positions N (default 8192)\n"
  "  --hidden-dropout P --attention-dropout P   gpt: dropout rates, 0 <= P < 1 (default 0: none),\n"
  "                           Megatron-LM's: on the embedding's, attention block's and MLP's\n"
  "                           outputs / on the attention probabilities (--val-data: none)\n"
  "  --num-experts E          gpt: every layer's MLP a mixture of E experts (2..1024; Megatron-LM's\n"
  "                           --num-experts: top-K routing, dropless, expert tensor parallel =\n"
  "                           --tensor-parallel, --expert-parallel X); --moe-topk K experts a token\n"
  "                           (default 2; ties to the lower expert); --moe-ffn-hidden N an expert's\n"
  "                           width (default --ffn-hidden's); --moe-aux-loss-coeff A the switch-style\n"
  "                           load-balancing loss's coefficient (default 0: none); docs/models.md\n"
  "  --moe-shared-ffn-hidden S   gpt experts: a shared expert, a dense MLP of width S on every token\n"
  "                           added to the routed experts' output (Megatron-LM's\n"
  "                           --moe-shared-expert-intermediate-size; default: none)\n"
  "  --moe-shared-expert-gate   gpt experts: the shared expert's output scaled per token by\n"
  "                           sigmoid(x . wg), x the MoE layer's input, wg [h] (Megatron-LM's\n"
  "                           --moe-shared-expert-gate, Qwen2-MoE's; needs --moe-shared-ffn-hidden)\n"
  "  --moe-expert-capacity-factor CF   gpt experts: each expert keeps at most ceil(CF N K / E) of a\n"
  "                           rank's N K slots a microbatch, the others dropped (default: dropless);\n"
  "                           --moe-token-drop-policy probs|position keeps the largest routing\n"
  "                           weights (default) or the first tokens (no --context-parallel)\n"
  "  --moe-router-score-function softmax|sigmoid   gpt experts' scores (default softmax: over the\n"
  "                           top-K logits; sigmoid: the chosen sigmoids renormalised when K > 1);\n"
  "                           --moe-router-pre-softmax: softmax over all experts, then the top-K;\n"
  "                           --moe-router-topk-scaling-factor S multiplies the weights (default 1);\n"
  "                           --moe-z-loss-coeff Z adds Z mean(logsumexp(logits)^2) (default 0)\n"
  "  --moe-router-enable-expert-bias   sigmoid router: aux-loss-free load balancing, a per-layer\n"
  "                           bias on the scores for the choice only, after each iteration\n"
  "                           += U sign(mean load - load) (--moe-router-bias-update-rate U,\n"
  "                           default 1e-3); saved in checkpoints (router.expert_bias)\n"
  "  --moe-token-dispatcher allgather|alltoall   gpt experts under --expert-parallel X: every rank\n"
  "                           gathers the group's tokens (default), or sends each kept slot's row\n"
  "                           to its expert's rank only and takes the output back (Megatron-LM's\n"
  "                           --moe-token-dispatcher-type, also accepted); the same at X = 1\n"
  "training:\n"
  "  --iterations N           iterations (default 1); --seed N (default 1234)\n"
  "  --lr X                   learning rate (default 0.01); --optimizer sgd|adam (default sgd)\n"
  "  --lr-schedule constant|cosine|linear|inverse-square-root   after --warmup N steps\n"
  "                           (linear from lr/N): constant, cosine or linear down to --min-lr X\n"
  "                           (default 0) at --lr-decay-steps N (default: the run's last step),\n"
  "                           or lr sqrt(max(N,1)/step) down to --min-lr\n"
  "  --weight-decay X         decoupled weight decay (AdamW; default 0) on matrices and\n"
  "                           embeddings, not on biases and norms\n"
  "  --adam-beta1 X --adam-beta2 X --adam-eps X   Adam's (defaults 0.9, 0.999, 1e-8)\n"
  "  --clip-grad X            scale the gradients to a global 2-norm of at most X (every rank)\n"
  "  --data FILE              gpt: train on FILE's tokens: a Megatron-LM indexed dataset (PREFIX,\n"
  "                           PREFIX.bin or PREFIX.idx; any integer dtype, any --vocab), an llm.c\n"
  "                           .bin token file, or any other file as bytes (--vocab 256); files are\n"
  "                           mapped, not read whole; --data-format indexed|tokens|bytes forces one;\n"
  "                           --data \"0.7 A 0.3 B\": a blend with Megatron-LM's --data-path weights\n"
  "  --data-shuffle SEED      each epoch of --data in a seeded order of its sequences (restored\n"
  "                           by --load unless given)\n"
  "  --split A,B,C            Megatron-LM's: --data's documents cut into training, validation and\n"
  "                           test parts by these weights; the validation part is --val-data's\n"
  "                           (unless given), the test part is held out\n"
  "  --val-data FILE          validation loss on FILE every --val-every N iterations (default 10)\n"
  "                           and after the last: forward passes only, through the pipeline\n"
  "  --eval-iters K           each validation evaluates K batches (default 1): the first\n"
  "                           K x D x nmb x micro-batch sequences of the validation data\n"
  "  --data-parallel D        D replicas of the pipeline (P x D ranks), gradients averaged\n"
  "  --distributed-optimizer  with --data-parallel: optimizer state sharded over the replicas\n"
  "                           (gradients reduce-scattered, weights all-gathered; ZeRO-1)\n"
  "  --tensor-parallel T      gpt: each device's layers split over T ranks (P x D x T ranks; Megatron's\n"
  "                           split: heads and MLP columns, two all-reduces in F and in B a layer;\n"
  "                           the embeddings and output layer by vocabulary rows: T | --vocab;\n"
  "                           vocabulary-parallel schedules: each device's rows, P T | --vocab)\n"
  "  --sequence-parallel      with --tensor-parallel T: the residual stream, layer norms and biases\n"
  "                           on each rank's N/T token rows (Megatron's sequence parallelism:\n"
  "                           all-gathers and reduce-scatters instead of the all-reduces)\n"
  "  --context-parallel C     gpt: each sequence split over C ranks (P x D x C x T ranks; Megatron's\n"
  "                           context parallelism: 2C chunks, rank c holding chunks c and 2C-1-c;\n"
  "                           keys and values all-gathered in attention, their gradients\n"
  "                           reduce-scattered; weight gradients summed over D x C; 2C | --seq)\n"
  "  --expert-parallel X      gpt with --num-experts E: each MoE layer's experts split over X\n"
  "                           consecutive replicas (Megatron's --expert-model-parallel-size, the\n"
  "                           allgather dispatcher): group rank j holds experts [j E/X, (j+1) E/X);\n"
  "                           X | --data-parallel D, X | E; the experts' gradients summed over the\n"
  "                           D/X replicas holding them (--distributed-optimizer: their state sharded\n"
  "                           over those; default 1)\n"
  "  --save FILE              after the run, checkpoint to FILE (an index) and one safetensors\n"
  "                           shard per device beside it; --save-every N also every N steps\n"
  "  --load FILE              start from a --save checkpoint, of any schedule and P with this\n"
  "                           model (continues its step, data and learning-rate schedule)\n"
  "checks and reports:\n"
  "  --check                  compare loss and gradients with a one-device run, and\n"
  "                           measured with predicted peak memory (exit 1 on a difference)\n"
  "  --check-memory           only the memory comparison\n"
  "  --trace OUT.json         Chrome trace of what ran (every device; under MPI rank 0 writes it)\n"
  "  --profile FILE           measured per-stage pass, hop and copy times for `cost profile` (threads)\n"
  "  --json                   one JSON object on stdout (see docs/runtime.md)\n"
  "  -q, --quiet              no per-iteration lines\n"
  "  --peak-flops X           peak FLOP/s of one device, for MFU (default: on --backend cuda\n"
  "                           the schedule's hardware { flops }; else MFU is n/a)\n"
  "execution:\n"
  "  --backend cpu|cuda       compute backend (default cpu)\n"
  "  --transport threads|mpi|nccl   default threads, or mpi when started by mpirun\n"
  "  --timeout SECONDS        a rank waiting longer stops every rank (default 300; over 1e9 means 1e9)\n"
  "  --allow-nonfinite-loss   a loss that is NaN or infinite is not an error (exit 0)\n"
  "  --no-compute             skip the model's kernels (runtime overhead benchmark)\n"
  "  --blocking-collectives   run vocabulary collectives where issued, blocking (default:\n"
  "                           on their own lane per device with the cpu backend on threads/mpi,\n"
  "                           and with cuda on nccl in one process)\n"
  "  -h, --help               this text; --version the library version\n"
  "\n"
  "exit status: 0 success (and a match with --check), 1 runtime error or failed check, 2 bad flags.\n";

static int usage_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", prog);
  return 2;
}

/* the largest value an integer flag takes (sizes whose products overflow are refused
   when the model is created) */
#define INT_FLAG_MAX 1000000000
static int parse_int(const char *s, int lo, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > INT_FLAG_MAX) return -1;
  *out = (int)v;
  return 0;
}

static int parse_double(const char *s, double lo, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo) || isinf(v)) return -1;
  *out = v;
  return 0;
}

/* On the NCCL transport: group g of --data-parallel's replica groups (kind 0, g = d T + t:
 * the D x C ranks (r, c) of device d at tensor rank t, ranked r C + c: the gradients'
 * group, Megatron's data-parallel group with context parallelism), of --tensor-parallel's
 * groups (kind 1, g = (r P + d) C + c: the T ranks of device d of replica r at context
 * rank c), of the pipelines (kind 2, or 3 for the collective lane's: g = r C T + c T + t,
 * the P devices of replica r at context rank c and tensor rank t) or of
 * --context-parallel's groups (kind 4, g = (r P + d) T + t: the C ranks of device d of
 * replica r at tensor rank t); world rank ((r P + d) C + c) T + t (Megatron's order:
 * tensor ranks fastest, then context ranks, devices, replicas). */
static int nccl_group(ppsrt_transport *tr, int P, int D, int C, int T, int kind, int g, ppsrt_transport **out) {
  static const char *const what[5] = {"replica group", "tensor-parallel group", "pipeline group", "lane pipeline group",
                                      "context-parallel group"};
  int TC = C * T;
  int n = kind == 0 ? D * C : kind == 1 ? T : kind == 4 ? C : P;
  int ng = kind == 0 ? P * T : kind == 1 ? D * P * C : kind == 4 ? D * P * T : D * TC;   /* (kinds 2, 3) */
  int *m = malloc((size_t)n * sizeof *m);
  if (!m) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  for (int i = 0; i < n; i++)
    m[i] = kind == 0 ? ((i / C * P + g / T) * C + i % C) * T + g % T
         : kind == 1 ? g * T + i
         : kind == 4 ? (g / T * C + i) * T + g % T
                     : (g / TC * P + i) * TC + g % TC;
  int rc = ppsrt_nccl_transport_group(tr, ng, g, n, m, what[kind], out);
  free(m);
  return rc;
}

/* On the NCCL transport, --expert-parallel X's groups (ep.c): kind 0 the expert-parallel
 * group g = ((q P + d) C + c) T + t, the X replicas r = q X + i (ranked i); kind 1 the
 * expert-data-parallel group g = (j P + d) T + t, the ranks (r = q X + j, c) ranked q C + c. */
static int nccl_ep_group(ppsrt_transport *tr, int P, int D, int X, int C, int T, int kind, int g, ppsrt_transport **out) {
  int n = kind == 0 ? X : D / X * C, ng = kind == 0 ? D / X * P * C * T : X * P * T;
  int *m = malloc((size_t)n * sizeof *m);
  if (!m) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  for (int i = 0; i < n; i++) {
    int q = kind == 0 ? g / T / C / P : i / C, j = kind == 0 ? i : g / T / P;
    int d = g / T % P, c = kind == 0 ? g / T % C : i % C, t = g % T;
    if (kind == 0) d = g / T / C % P;
    m[i] = (((q * X + j) * P + d) * C + c) * T + t;
  }
  int rc = ppsrt_nccl_transport_group(tr, ng, g, n, m, kind == 0 ? "expert-parallel group" : "expert-data-parallel group", out);
  free(m);
  return rc;
}

static int under_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK");
}

static double kv_get(const ppsrt_kv *kv, int n, const char *key, double dflt) {
  for (int i = 0; kv && i < n; i++)
    if (kv[i].key && !strcmp(kv[i].key, key)) return kv[i].value;
  return dflt;
}

static double model_kv(const ppsrt_program *p, const char *key, double dflt) {
  return kv_get(p->model, p->nmodel, key, dflt);
}

/* Checks what the generated tables promise; returns 0 or prints why and returns 1. */
static int check_program(const ppsrt_program *p, const char *argv0) {
  if (!p) { fprintf(stderr, "%s: error: no program\n", argv0); return 1; }
  if (p->abi != PPSRT_ABI_VERSION) {
    fprintf(stderr, "%s: error: program built for runtime ABI %d, this libppsrt is ABI %d (the program table's "
            "layout differs)\nhint: rebuild it with the ppsc that matches this libppsrt\n", argv0, p->abi,
            PPSRT_ABI_VERSION);
    return 1;
  }
  if (p->ndev <= 0 || p->nstage <= 0 || p->nmb <= 0 || !p->stages || !p->ops || !p->nops) {
    fprintf(stderr, "%s: error: empty program (%d devices, %d stages, %d microbatches)\n", argv0, p->ndev,
            p->nstage, p->nmb);
    return 1;
  }
  for (int s = 0; s < p->nstage; s++)
    if (p->stages[s].device < 0 || p->stages[s].device >= p->ndev) {
      fprintf(stderr, "%s: error: stage %d placed on device %d of %d\n", argv0, s, p->stages[s].device, p->ndev);
      return 1;
    }
  const char *why;
  int rst;
  if (rt_recompute_check(p, &why, &rst)) {
    fprintf(stderr, "%s: error: stage %d is recomputed with ratio %g: %s\nhint: rebuild it with ppsc (recompute "
            "and offload each cover other stages)\n", argv0, rst, p->stages[rst].recompute, why);
    return 1;
  }
  for (int d = 0; d < p->ndev; d++)
    for (int i = 0; i < p->nops[d]; i++) {
      const ppsrt_op *op = &p->ops[d][i];
      int bad = op->kind >= PPSRT_OP_NKINDS || op->mb < 0 || op->mb >= p->nmb || op->stage < -1 ||
                op->stage >= p->nstage ||
                ((op->kind == PPSRT_OP_SEND || op->kind == PPSRT_OP_RECV) &&
                 (op->peer < 0 || op->peer >= p->ndev || op->peer == d || op->stage < 0));
      if (op->kind <= PPSRT_OP_BW || op->kind == PPSRT_OP_OFFLOAD || op->kind == PPSRT_OP_RELOAD)
        bad |= op->stage < 0 || p->stages[op->stage].device != d;
      if (bad) {
        char buf[96];
        rt_format_op(p, op, buf, sizeof buf);
        fprintf(stderr, "%s: error: device %d, op #%d %s at %s:%d is out of range for this program\n", argv0, d, i,
                buf, p->source ? p->source : "?", op->line);
        return 1;
      }
    }
  return 0;
}

/* Per device: backend, model, unit of memory. */
static int setup_device(ppsrt_ctx *c) {
  ppsrt_run *run = c->run;
  const ppsrt_program *p = run->prog;
  int rc;
  ppsrt_error_set_rank(c->rank);
  /* (the world rank: --data-parallel's replicas are on GPUs of their own, as the NCCL transport places them) */
  if (!strcmp(run->o.backend, "cuda")) rc = ppsrt_cuda_backend_create(c->wrank, &c->be);
  else rc = ppsrt_cpu_backend_create(c->rank, &c->be);
  if (rc) return rc;
  int *held = malloc((size_t)p->nstage * sizeof *held), nheld = 0;
  if (!held) return PPSRT_FAIL(PPSRT_E_NOMEM, "out of host memory");
  for (int s = 0; s < p->nstage; s++) if (p->stages[s].device == c->rank) held[nheld++] = s;
  ppsrt_model_config cfg = run->o.cfg;
  cfg.mb0 = c->replica * cfg.nmb;   /* --data-parallel: this replica's part of the global batch */
  cfg.replica = c->replica;
  cfg.tp_rank = c->tp_rank;   /* --tensor-parallel: its slice of every layer */
  cfg.cp_rank = c->cp_rank;   /* --context-parallel: its chunks of every sequence */
  cfg.ep_rank = c->ep_rank;   /* --expert-parallel: its experts of every layer */
  rc = run->create(&cfg, c->be, c->rank, held, nheld, &c->model);
  if (!rc) rc = rt_replica_flatten(c);   /* --data-parallel: each stage's gradients in one buffer */
  if (!rc) {
    /* units per byte of each stage: F(mb, s) keeping act_bytes(s) counts stages[s].act */
    for (int s = -1; s < p->nstage; s++) {
      size_t ab = c->model->act_bytes(c->model, s);
      double act = s < 0 ? p->vocab_act_s : p->stages[s].act;
      c->upb[s + 1] = ab ? act / (double)ab : 0;
    }
    int s0 = -1;
    for (int k = 0; k < nheld && s0 < 0; k++) if (p->stages[held[k]].act > 0) s0 = held[k];
    if (s0 < 0 && p->stages[0].act > 0 && nheld) s0 = held[0];
    double act = s0 >= 0 ? p->stages[s0].act : 0;
    c->act_unit = act > 0 ? (size_t)llround((double)c->model->act_bytes(c->model, s0) / act) : 0;
  }
  free(held);
  return rc;
}

static void *device_main(void *arg) {
  ppsrt_ctx *c = arg;
  int rc = setup_device(c);
  if (!rc && c->run->ck) rc = rt_ckpt_load(c, c->run->ck);
  const rt_opts *o = &c->run->o;
  if (!rc && c->run->ck && c->rank == 0 && !o->json && !o->quiet) {
    ppsrt_run *run = c->run;
    const ppsrt_tokens *t = o->cfg.data;
    pthread_mutex_lock(&run->print_lock);
    fprintf(run->out, "loaded %s: step %ld, data position %ld sequences", o->load, run->step0, run->data0);
    if (t && t->blend) fprintf(run->out, " (a blend: its sample %ld next)", run->data0);
    else if (t) fprintf(run->out, " (%s: sequence %ld of %zu)", o->data, run->data0 % (long)((t->n - 1) / (size_t)o->cfg.seq),
                        (t->n - 1) / (size_t)o->cfg.seq);
    fprintf(run->out, "; iterations %ld to %ld\n", run->step0 + 1, run->step0 + o->iterations);
    fflush(run->out);
    pthread_mutex_unlock(&run->print_lock);
  }
  if (rc) {
    char who[64];
    snprintf(c->errmsg, sizeof c->errmsg, "%s: setup: %s", rt_who(c, who, sizeof who), ppsrt_last_error());
    c->status = rc;
    c->tr->abort(c->tr, c->rank, c->errmsg);
    if (c->lane_tr) c->lane_tr->abort(c->lane_tr, c->rank, c->errmsg);
    if (c->gtr) c->gtr->abort(c->gtr, c->grank, c->errmsg);
    if (c->ttr) c->ttr->abort(c->ttr, c->tp_rank, c->errmsg);
    if (c->ctr) c->ctr->abort(c->ctr, c->cp_rank, c->errmsg);
    if (c->xtr) c->xtr->abort(c->xtr, c->ep_rank, c->errmsg);
    if (c->etr) c->etr->abort(c->etr, c->erank, c->errmsg);
    return NULL;
  }
  c->status = rt_run_device(c);
  return NULL;
}

/* --split "A,B,C" (or A/B/C; fewer weights: the rest 0): w normalized to sum 1. 0, or -1. */
static int parse_split(const char *v, double w[3]) {
  if (!v || !*v) return -1;
  int n = 0;
  const char *q = v;
  w[0] = w[1] = w[2] = 0;
  for (;;) {
    char *end;
    errno = 0;
    if (n == 3 || (!(*q >= '0' && *q <= '9') && *q != '.')) return -1;
    w[n++] = strtod(q, &end);
    if (errno || end == q || !(w[n - 1] >= 0) || w[n - 1] > 1e300) return -1;
    if (!*end) break;
    if (*end != ',' && *end != '/') return -1;
    q = end + 1;
  }
  double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) return -1;
  for (int k = 0; k < 3; k++) w[k] /= sum;
  return 0;
}

static int flag_is(const char *a, const char *name, const char **val, int argc, char **argv, int *i) {
  size_t n = strlen(name);
  if (strncmp(a, name, n)) return 0;
  if (a[n] == '=') { *val = a + n + 1; return 1; }
  if (a[n]) return 0;
  *val = *i + 1 < argc ? argv[++*i] : NULL;
  return 1;
}

int ppsrt_main(const ppsrt_program *program, int argc, char **argv) {
  const char *argv0 = argc > 0 && argv[0] ? argv[0] : "ppsrt";
  const char *slash = strrchr(argv0, '/');
  const char *me = slash ? slash + 1 : argv0;
  if (check_program(program, me)) return 1;
  const ppsrt_program *p = program;

  ppsrt_run run;
  memset(&run, 0, sizeof run);
  run.prog = p;
  run.out = stdout;
  rt_opts *o = &run.o;
  o->model = "mlp";
  o->iterations = 1;
  o->lr = 0.01;
  o->beta1 = 0.9; o->beta2 = 0.999; o->eps = 1e-8;
  o->backend = "cpu";
  o->transport = under_mpirun() ? "mpi" : "threads";
  o->timeout_s = 300;
  o->die_rank = -1;
  o->die_tp = -1;
  ppsrt_model_config *cfg = &o->cfg;
  cfg->hidden = (int)model_kv(p, "hidden", 16);
  cfg->heads = (int)model_kv(p, "heads", 2);
  cfg->query_groups = (int)model_kv(p, "query_groups", 1);
  cfg->seq = (int)model_kv(p, "seq", 4);
  cfg->vocab = (int)model_kv(p, "vocab", 32);
  cfg->micro_batch = (int)model_kv(p, "micro_batch", 1);
  double layers = model_kv(p, "layers", 0);
  cfg->layers_per_stage = (int)model_kv(p, "layers_per_stage", layers >= p->nstage ? floor(layers / p->nstage) : 1);
  cfg->seed = 1234;
  cfg->ffn_hidden = (int)model_kv(p, "ffn_hidden", 0);
  cfg->kv_channels = (int)model_kv(p, "kv_channels", 0);
  cfg->swiglu = model_kv(p, "swiglu", 0) != 0;
  cfg->rmsnorm = model_kv(p, "rmsnorm", 0) != 0;
  cfg->rope = model_kv(p, "rope", 0) != 0;
  cfg->qk_layernorm = model_kv(p, "qk_layernorm", 0) != 0;
  cfg->no_bias = model_kv(p, "bias", 1) == 0;
  cfg->qkv_bias = model_kv(p, "qkv_bias", 0) != 0;
  cfg->norm_epsilon = model_kv(p, "norm_epsilon", PPSRT_NORM_EPS);
  cfg->tie_embeddings = model_kv(p, "tie_embeddings", 0) != 0;
  cfg->num_experts = (int)model_kv(p, "experts", 0);          /* (the flags below win) */
  cfg->moe_topk = (int)model_kv(p, "moe_topk", 0);
  cfg->moe_ffn_hidden = (int)model_kv(p, "moe_ffn_hidden", 0);
  cfg->moe_shared_ffn = (int)model_kv(p, "moe_shared_ffn_hidden", 0);
  cfg->moe_shared_gate = model_kv(p, "moe_shared_gate", 0) != 0;
  cfg->moe_capacity = model_kv(p, "moe_capacity_factor", 0);
  cfg->rope_factor = 8; cfg->rope_low_freq = 1; cfg->rope_high_freq = 4; cfg->rope_orig_max = 8192;   /* Llama 3.1's */
  /* --arch, then the architecture flags over it (-1: not given) */
  int arch = -1, a_mlp = -1, a_norm = -1, a_pos = -1, a_nobias = -1, a_tie = -1, arch_flag = 0;
  int drop_policy = 0;   /* --moe-token-drop-policy given */

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int n;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf(usage_text, me, p->name ? p->name : "?", p->source ? p->source : "?", p->ndev, p->nstage, p->nmb);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("libppsrt %s\n", ppsrt_version());
      return 0;
    } else if (!strcmp(a, "--check")) { o->check = 1;
    } else if (!strcmp(a, "--check-memory")) { o->check_memory = 1;
    } else if (!strcmp(a, "--json")) { o->json = 1;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o->quiet = 1;
    } else if (!strcmp(a, "--blocking-collectives")) { o->blocking_coll = 1;
    } else if (!strcmp(a, "--no-compute")) { o->no_compute = 1;
    } else if (!strcmp(a, "--qk-layernorm")) { cfg->qk_layernorm = arch_flag = 1;
    } else if (!strcmp(a, "--add-qkv-bias")) { cfg->qkv_bias = arch_flag = 1;
    } else if (!strcmp(a, "--distributed-optimizer")) { o->distopt = 1;
    } else if (!strcmp(a, "--die-hard")) { o->die_hard = 1;
    } else if (flag_is(a, "--model", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "mlp") && strcmp(v, "gpt"))) return usage_error(me, "--model needs mlp or gpt");
      o->model = v;
    } else if (flag_is(a, "--backend", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "cpu") && strcmp(v, "cuda"))) return usage_error(me, "--backend needs cpu or cuda");
      o->backend = v;
    } else if (flag_is(a, "--transport", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "threads") && strcmp(v, "mpi") && strcmp(v, "nccl")))
        return usage_error(me, "--transport needs threads, mpi or nccl");
      o->transport = v;
    } else if (flag_is(a, "--optimizer", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "sgd") && strcmp(v, "adam"))) return usage_error(me, "--optimizer needs sgd or adam");
      o->optimizer = !strcmp(v, "adam");
      o->given |= RT_GIVEN_OPTIMIZER;
    } else if (flag_is(a, "--trace", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--trace needs a file name");
      o->trace = v;
    } else if (flag_is(a, "--profile", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--profile needs a file name");
      o->profile = v;
    } else if (flag_is(a, "--lr", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->lr)) return usage_error(me, "--lr needs a number >= 0");
      o->given |= RT_GIVEN_LR;
    } else if (flag_is(a, "--min-lr", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->min_lr)) return usage_error(me, "--min-lr needs a number >= 0");
      o->given |= RT_GIVEN_MIN_LR;
    } else if (flag_is(a, "--clip-grad", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->clip_grad) || !(o->clip_grad > 0))
        return usage_error(me, "--clip-grad needs a gradient norm > 0");
      o->given |= RT_GIVEN_CLIP;
    } else if (flag_is(a, "--lr-schedule", &v, argc, argv, &i)) {
      if ((o->lr_schedule = rt_lr_schedule_parse(v)) < 0)
        return usage_error(me, "--lr-schedule needs constant, cosine, linear or inverse-square-root, got '%s'", v ? v : "");
      o->given |= RT_GIVEN_SCHEDULE;
    } else if (flag_is(a, "--weight-decay", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->weight_decay)) return usage_error(me, "--weight-decay needs a number >= 0");
      o->given |= RT_GIVEN_WD;
    } else if (flag_is(a, "--adam-beta1", &v, argc, argv, &i) || flag_is(a, "--adam-beta2", &v, argc, argv, &i)) {
      int two = a[11] == '2';
      double *b = two ? &o->beta2 : &o->beta1;
      if (!v || parse_double(v, 0, b) || !(*b < 1))
        return usage_error(me, "--adam-beta%d needs a number from 0 to below 1, got '%s'", two ? 2 : 1, v ? v : "");
      o->given |= two ? RT_GIVEN_BETA2 : RT_GIVEN_BETA1;
    } else if (flag_is(a, "--adam-eps", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->eps) || !(o->eps > 0)) return usage_error(me, "--adam-eps needs a number > 0, got '%s'", v ? v : "");
      o->given |= RT_GIVEN_EPS;
    } else if (flag_is(a, "--warmup", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 0, &o->warmup)) return usage_error(me, "--warmup needs an integer from 0 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
      o->given |= RT_GIVEN_WARMUP;
    } else if (flag_is(a, "--lr-decay-steps", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &n)) return usage_error(me, "--lr-decay-steps needs an integer from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
      o->decay_steps = n;
      o->given |= RT_GIVEN_DECAY;
    } else if (flag_is(a, "--data-parallel", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->data_parallel) || o->data_parallel > 4096)
        return usage_error(me, "--data-parallel needs a number of replicas from 1 to 4096, got '%s'", v ? v : "");
    } else if (flag_is(a, "--tensor-parallel", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->tensor_parallel) || o->tensor_parallel > 1024)
        return usage_error(me, "--tensor-parallel needs a group size from 1 to 1024, got '%s'", v ? v : "");
    } else if (flag_is(a, "--expert-parallel", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->expert_parallel) || o->expert_parallel > 1024)
        return usage_error(me, "--expert-parallel needs a group size from 1 to 1024, got '%s'", v ? v : "");
    } else if (flag_is(a, "--context-parallel", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->context_parallel) || o->context_parallel > 1024)
        return usage_error(me, "--context-parallel needs a group size from 1 to 1024, got '%s'", v ? v : "");
    } else if (!strcmp(a, "--sequence-parallel")) {
      o->sequence_parallel = 1;
    } else if (flag_is(a, "--save-every", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->save_every)) return usage_error(me, "--save-every needs an integer from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
    } else if (flag_is(a, "--die-in-save", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &n)) return usage_error(me, "--die-in-save needs a step");
      o->die_save = n;
    } else if (flag_is(a, "--peak-flops", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->peak_flops) || !(o->peak_flops > 0))
        return usage_error(me, "--peak-flops needs a number of FLOP/s per device > 0");
    } else if (flag_is(a, "--timeout", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &o->timeout_s) || o->timeout_s <= 0)
        return usage_error(me, "--timeout needs a number of seconds > 0");
      if (o->timeout_s > 1e9) o->timeout_s = 1e9; /* ~31 years: a deadline that still fits a time_t */
    } else if (!strcmp(a, "--allow-nonfinite-loss")) { o->allow_nonfinite = 1;
    } else if (flag_is(a, "--seed", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 0, &n)) return usage_error(me, "--seed needs an integer from 0 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
      cfg->seed = (uint64_t)n;
    } else if (flag_is(a, "--data", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--data needs a file name");
      o->data = v;
    } else if (flag_is(a, "--data-format", &v, argc, argv, &i)) {
      static const char *const fmts[] = {"tokens", "bytes", "indexed"};
      o->data_format = 0;
      for (int k = 0; v && k < 3; k++)
        if (!strcmp(v, fmts[k])) o->data_format = k + 1;
      if (!o->data_format) return usage_error(me, "--data-format needs tokens, bytes or indexed, got '%s'", v ? v : "");
    } else if (flag_is(a, "--data-shuffle", &v, argc, argv, &i)) {
      char *end;
      errno = 0;
      o->data_shuffle = v && *v != '-' ? strtoull(v, &end, 10) : 0;
      if (!v || *v == '-' || errno || end == v || *end)
        return usage_error(me, "--data-shuffle needs a seed, a whole number from 0 to 18446744073709551615, got '%s'", v ? v : "");
      o->data_shuffle_on = 1;
    } else if (flag_is(a, "--split", &v, argc, argv, &i)) {
      if (parse_split(v, o->split)) return usage_error(me, "--split needs up to three weights >= 0 with a sum above 0, "
                                                       "separated by commas (Megatron-LM's, e.g. 969,30,1), got '%s'", v ? v : "");
      o->split_on = 1;
    } else if (flag_is(a, "--val-data", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--val-data needs a file name");
      o->val_data = v;
    } else if (flag_is(a, "--eval-iters", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->eval_iters))
        return usage_error(me, "--eval-iters needs a number of batches from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
    } else if (flag_is(a, "--val-every", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &o->val_every)) return usage_error(me, "--val-every needs an integer from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
    } else if (flag_is(a, "--save", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--save needs a file name");
      o->save = v;
    } else if (flag_is(a, "--load", &v, argc, argv, &i)) {
      if (!v || !*v) return usage_error(me, "--load needs a file name");
      o->load = v;
    } else if (flag_is(a, "--init-method-std", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->init_method_std) || !(cfg->init_method_std > 0))
        return usage_error(me, "--init-method-std needs a finite number above 0 (Megatron-LM's default 0.02), got '%s'",
                           v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--norm-epsilon", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->norm_epsilon) || !(cfg->norm_epsilon > 0))
        return usage_error(me, "--norm-epsilon needs a finite number above 0 (default %g), got '%s'", PPSRT_NORM_EPS,
                           v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--rope-base", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->rope_base) || !(cfg->rope_base > 1))
        return usage_error(me, "--rope-base needs a number above 1, got '%s'", v ? v : "");
      arch_flag = 1;
      o->given |= RT_GIVEN_ROPE_BASE;
    } else if (flag_is(a, "--rope-scaling", &v, argc, argv, &i)) {
      if ((cfg->rope_scaling = rt_rope_scaling_parse(v)) < 0)
        return usage_error(me, "--rope-scaling needs none, linear or llama3, got '%s'", v ? v : "");
      arch_flag = 1;
      o->given |= RT_GIVEN_ROPE_SCALING;
    } else if (flag_is(a, "--rope-scaling-factor", &v, argc, argv, &i) || flag_is(a, "--rope-low-freq-factor", &v, argc, argv, &i) ||
               flag_is(a, "--rope-high-freq-factor", &v, argc, argv, &i)) {
      int k = a[7] == 's' ? 0 : a[7] == 'l' ? 1 : 2;   /* --rope-[s]caling, [l]ow, [h]igh */
      double *to[] = {&cfg->rope_factor, &cfg->rope_low_freq, &cfg->rope_high_freq};
      if (!v || parse_double(v, 0, to[k]) || !(*to[k] > 0) || isinf(*to[k]))
        return usage_error(me, "%.*s needs a number above 0, got '%s'", (int)strcspn(a, "="), a, v ? v : "");
      arch_flag = 1;
      o->given |= k == 0 ? RT_GIVEN_ROPE_FACTOR : k == 1 ? RT_GIVEN_ROPE_LOW : RT_GIVEN_ROPE_HIGH;
    } else if (flag_is(a, "--rope-original-max-positions", &v, argc, argv, &i)) {
      if (!v || parse_int(v, 1, &cfg->rope_orig_max))
        return usage_error(me, "--rope-original-max-positions needs an integer from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
      arch_flag = 1;
      o->given |= RT_GIVEN_ROPE_ORIG;
    } else if (flag_is(a, "--moe-aux-loss-coeff", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->moe_aux_coeff) || !(cfg->moe_aux_coeff >= 0 && isfinite(cfg->moe_aux_coeff)))
        return usage_error(me, "--moe-aux-loss-coeff needs a number from 0, got '%s'", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--moe-expert-capacity-factor", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->moe_capacity) || !(cfg->moe_capacity > 0 && isfinite(cfg->moe_capacity)))
        return usage_error(me, "--moe-expert-capacity-factor needs a number above 0, got '%s'", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--moe-token-drop-policy", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "probs") && strcmp(v, "position")))
        return usage_error(me, "--moe-token-drop-policy needs probs or position, got '%s'", v ? v : "");
      cfg->moe_drop_position = !strcmp(v, "position");
      drop_policy = arch_flag = 1;
    } else if (flag_is(a, "--moe-router-score-function", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "softmax") && strcmp(v, "sigmoid")))
        return usage_error(me, "--moe-router-score-function needs softmax or sigmoid, got '%s'", v ? v : "");
      cfg->moe_router_sigmoid = !strcmp(v, "sigmoid");
      arch_flag = 1;
    } else if (!strcmp(a, "--moe-shared-expert-gate")) { cfg->moe_shared_gate = arch_flag = 1;
    } else if (!strcmp(a, "--moe-router-pre-softmax")) { cfg->moe_router_pre_softmax = arch_flag = 1;
    } else if (!strcmp(a, "--moe-router-enable-expert-bias")) { cfg->moe_expert_bias = arch_flag = 1;
    } else if (flag_is(a, "--moe-router-topk-scaling-factor", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->moe_router_scale) || !(cfg->moe_router_scale > 0 && cfg->moe_router_scale <= 1e6))
        return usage_error(me, "--moe-router-topk-scaling-factor needs a number above 0 (at most 1e6), got '%s'", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--moe-z-loss-coeff", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->moe_z_coeff) || !(cfg->moe_z_coeff >= 0 && isfinite(cfg->moe_z_coeff)))
        return usage_error(me, "--moe-z-loss-coeff needs a number from 0, got '%s'", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--moe-router-bias-update-rate", &v, argc, argv, &i)) {
      if (!v || parse_double(v, 0, &cfg->moe_bias_rate) || !(cfg->moe_bias_rate > 0 && cfg->moe_bias_rate <= 1))
        return usage_error(me, "--moe-router-bias-update-rate needs a number above 0 (at most 1), got '%s'", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--moe-token-dispatcher", &v, argc, argv, &i) ||
               flag_is(a, "--moe-token-dispatcher-type", &v, argc, argv, &i)) {
      if (!v || (strcmp(v, "allgather") && strcmp(v, "alltoall")))
        return usage_error(me, "--moe-token-dispatcher needs allgather or alltoall, got '%s'", v ? v : "");
      cfg->moe_a2a = !strcmp(v, "alltoall");
      arch_flag = 1;
    } else if (flag_is(a, "--hidden-dropout", &v, argc, argv, &i) || flag_is(a, "--attention-dropout", &v, argc, argv, &i)) {
      int att = a[2] == 'a';
      double *rate = att ? &cfg->attention_dropout : &cfg->hidden_dropout;
      if (!v || parse_double(v, 0, rate) || !(*rate >= 0 && *rate < 1))
        return usage_error(me, "--%s-dropout needs a rate from 0 to below 1, got '%s'", att ? "attention" : "hidden", v ? v : "");
      arch_flag = 1;
    } else if (flag_is(a, "--die-at", &v, argc, argv, &i)) {
      /* two or three whole numbers from 0, colon-separated, nothing else */
      char buf[64], *f[4] = {0};
      int nf = 0;
      if (v && strlen(v) < sizeof buf) {
        strcpy(buf, v);
        for (char *q = buf; nf < 4 && q; nf++) { f[nf] = q; if ((q = strchr(q, ':'))) *q++ = 0; }
      }
      int *dst[3] = {&o->die_rank, &o->die_op, &o->die_tp};
      int bad = nf != 2 && nf != 3;
      for (int k = 0; k < nf && !bad; k++) bad = parse_int(f[k], 0, dst[k]) != 0;
      if (bad) return usage_error(me, "--die-at needs RANK:OP or RANK:OP:TENSOR_RANK (whole numbers from 0), got '%s'", v ? v : "");
      if (nf == 2) o->die_tp = -1;
    } else {
      static const struct { const char *name; size_t off; int lo; } ints[] = {
        {"--hidden", offsetof(ppsrt_model_config, hidden), 1},
        {"--heads", offsetof(ppsrt_model_config, heads), 1},
        {"--query-groups", offsetof(ppsrt_model_config, query_groups), 1},
        {"--seq", offsetof(ppsrt_model_config, seq), 1},
        {"--vocab", offsetof(ppsrt_model_config, vocab), 1},
        {"--micro-batch", offsetof(ppsrt_model_config, micro_batch), 1},
        {"--layers-per-stage", offsetof(ppsrt_model_config, layers_per_stage), 1},
        {"--ffn-hidden", offsetof(ppsrt_model_config, ffn_hidden), 1},
        {"--kv-channels", offsetof(ppsrt_model_config, kv_channels), 1},
        {"--num-experts", offsetof(ppsrt_model_config, num_experts), 1},
        {"--moe-topk", offsetof(ppsrt_model_config, moe_topk), 1},
        {"--moe-ffn-hidden", offsetof(ppsrt_model_config, moe_ffn_hidden), 1},
        {"--moe-shared-ffn-hidden", offsetof(ppsrt_model_config, moe_shared_ffn), 1},
      };
      int matched = 0;
      /* the gpt's layer: two values each, the second Llama's (or tied embeddings) */
      static const struct { const char *name, *v0, *v1; } ch[] = {{"--arch", "gpt", "llama"}, {"--mlp", "gelu", "swiglu"},
        {"--norm", "layernorm", "rmsnorm"}, {"--position", "learned", "rope"}, {"--bias", "on", "off"},
        {"--embeddings", "untied", "tied"}};
      int *chv[] = {&arch, &a_mlp, &a_norm, &a_pos, &a_nobias, &a_tie};
      for (size_t k = 0; k < sizeof ch / sizeof *ch && !matched; k++)
        if (flag_is(a, ch[k].name, &v, argc, argv, &i)) {
          matched = arch_flag = 1;
          if (!v || (strcmp(v, ch[k].v0) && strcmp(v, ch[k].v1)))
            return usage_error(me, "%s needs %s or %s", ch[k].name, ch[k].v0, ch[k].v1);
          *chv[k] = !strcmp(v, ch[k].v1);
        }
      for (size_t k = 0; k < sizeof ints / sizeof *ints && !matched; k++)
        if (flag_is(a, ints[k].name, &v, argc, argv, &i)) {
          matched = 1;
          if (!v || parse_int(v, ints[k].lo, &n)) return usage_error(me, "%s needs an integer from %d to %d, got '%s'", ints[k].name, ints[k].lo,
                                                   INT_FLAG_MAX, v ? v : "");
          *(int *)((char *)cfg + ints[k].off) = n;
          size_t off = ints[k].off;   /* --ffn-hidden and the experts' flags: the gpt's layer */
          if (off == offsetof(ppsrt_model_config, ffn_hidden) || off == offsetof(ppsrt_model_config, num_experts) ||
              off == offsetof(ppsrt_model_config, kv_channels) ||
              off == offsetof(ppsrt_model_config, moe_topk) || off == offsetof(ppsrt_model_config, moe_ffn_hidden) ||
              off == offsetof(ppsrt_model_config, moe_shared_ffn))
            arch_flag = 1;
        }
      if (!matched && flag_is(a, "--iterations", &v, argc, argv, &i)) {
        matched = 1;
        if (!v || parse_int(v, 1, &o->iterations)) return usage_error(me, "--iterations needs an integer from 1 to %d, got '%s'", INT_FLAG_MAX, v ? v : "");
      }
      if (!matched) return usage_error(me, "unknown option '%s'", a);
    }
  }
  if (arch >= 0) cfg->swiglu = cfg->rmsnorm = cfg->rope = cfg->no_bias = arch;
  if (a_mlp >= 0) cfg->swiglu = a_mlp;
  if (a_norm >= 0) cfg->rmsnorm = a_norm;
  if (a_pos >= 0) cfg->rope = a_pos;
  if (a_nobias >= 0) cfg->no_bias = a_nobias;
  if (a_tie >= 0) cfg->tie_embeddings = a_tie;
  if (arch_flag && strcmp(o->model, "gpt"))
    return usage_error(me, "--arch, --mlp, --norm, --position, --bias, --add-qkv-bias, --norm-epsilon, --init-method-std, --embeddings, "
                       "--qk-layernorm, --kv-channels, --ffn-hidden, --rope-base, "
                       "--rope-scaling (and its parameters), --hidden-dropout, --attention-dropout and the --num-experts "
                       "and --moe-* flags choose the gpt model's layer\n"
                       "hint: add --model gpt");
  if (drop_policy && !(cfg->moe_capacity > 0))
    return usage_error(me, "--moe-token-drop-policy chooses the slots an expert over its capacity drops: it needs "
                       "--moe-expert-capacity-factor CF (or the schedule's model { moe_capacity_factor })");
  if ((o->given & (RT_GIVEN_ROPE_SCALING | RT_GIVEN_ROPE_PARAMS)) && !cfg->rope)
    return usage_error(me, "--rope-scaling and its parameters scale RoPE's frequencies, and this gpt has learned "
                       "positions\nhint: add --position rope (or --arch llama)");
  /* a parameter the scaling does not take (with --load and no --rope-scaling: once the
     checkpoint's scaling is known, checkpoint.c) */
  const char *unused = o->given & RT_GIVEN_ROPE_SCALING || !o->load ? rt_rope_param_unused(cfg, o->given) : NULL;
  if (unused)
    return usage_error(me, "%s%s", unused, o->given & RT_GIVEN_ROPE_SCALING ? "" : " (or --load a checkpoint saved with it)");
  cfg->name = o->model;
  cfg->nstage = p->nstage;
  cfg->nmb = p->nmb;
  cfg->ndev = p->ndev;
  cfg->vocab_mode = p->vocab_mode;
  cfg->no_compute = o->no_compute;
  if (!strcmp(o->model, "gpt")) {
    if (!ppsrt_gpt_create || !ppsrt_gpt_pass_flops)
      return usage_error(me, "the gpt model is not built into this libppsrt");
    run.create = ppsrt_gpt_create;
    /* sizes whose tensors cannot exist are bad flags (exit 2), before any rank starts */
    ppsrt_model_config chk = *cfg;
    if (o->load) chk.rope_scaling = PPSRT_ROPE_NONE;   /* its parameters may come from the checkpoint: checked restored */
    if (ppsrt_gpt_check_config && ppsrt_gpt_check_config(&chk)) return usage_error(me, "%s", ppsrt_last_error());
    if (ppsrt_gpt_ffn) cfg->ffn_hidden = ppsrt_gpt_ffn(cfg);   /* resolved: what the JSON and checkpoints report */
    if (ppsrt_gpt_kv_channels) cfg->kv_channels = ppsrt_gpt_kv_channels(cfg);   /* (the head size, likewise) */
    if (cfg->num_experts) {   /* resolved too (moe.c's defaults) */
      if (!cfg->moe_topk) cfg->moe_topk = 2;
      if (!cfg->moe_ffn_hidden) cfg->moe_ffn_hidden = cfg->ffn_hidden;
    }
  } else {
    if (p->vocab_mode)
      return usage_error(me, "schedule '%s' uses vocabulary parallelism (Vocab-%d); the mlp model has no vocabulary "
                         "layers\nhint: run it with --model gpt", p->name, p->vocab_mode);
    run.create = ppsrt_mlp_create;
    if (ppsrt_mlp_check_config(cfg)) return usage_error(me, "%s", ppsrt_last_error());   /* as gpt's, above */
  }
  if (!strcmp(o->backend, "cuda") && !ppsrt_cuda_backend_create)
    return usage_error(me, "--backend cuda: this libppsrt was built without CUDA");
  if (!strcmp(o->backend, "cuda") && cfg->attention_dropout > 0 && getenv("PPSRT_CUDA_ATTN") &&
      !strcmp(getenv("PPSRT_CUDA_ATTN"), "cudnn"))   /* (the backend refuses it too, at the first attention) */
    return usage_error(me, "--attention-dropout %g: the fused cuDNN attention (PPSRT_CUDA_ATTN=cudnn) has no dropout\n"
                       "hint: unset PPSRT_CUDA_ATTN (auto runs attention dropout on the cuBLAS attention) or set it to "
                       "cublas", cfg->attention_dropout);
  if (!strcmp(o->backend, "cpu") && !ppsrt_cpu_backend_create)
    return usage_error(me, "--backend cpu: the CPU backend is not built into this libppsrt");
  if (!strcmp(o->transport, "mpi") && !ppsrt_mpi_transport_create)
    return usage_error(me, "--transport mpi: this libppsrt was built without MPI\nhint: configure --with-mpi");
  if (!strcmp(o->transport, "nccl") && !ppsrt_nccl_transport_create)
    return usage_error(me, "--transport nccl: this libppsrt was built without NCCL");
  if (!strcmp(o->transport, "nccl") && strcmp(o->backend, "cuda"))
    return usage_error(me, "--transport nccl needs --backend cuda");
  if (o->check && o->no_compute) return usage_error(me, "--check and --no-compute exclude each other");
  cfg->moe_record = o->check && cfg->num_experts > 0;   /* (--check replays the pipeline's routing: check.c) */
  int fault_st = rt_fault_setup(&run, cfg, o->check, me);  /* tests only (check.c) */
  if (fault_st >= 0) return fault_st;
  if (o->data && strcmp(o->model, "gpt")) return usage_error(me, "--data trains the gpt model: add --model gpt");
  if (o->val_data && !o->data) return usage_error(me, "--val-data needs --data (the training tokens)");
  if (o->data_shuffle_on && !o->data) return usage_error(me, "--data-shuffle needs --data (the training tokens)");
  if (o->split_on && !o->data) return usage_error(me, "--split needs --data (the documents it splits)");
  if (o->split_on && !(o->split[0] > 0)) return usage_error(me, "--split: the training part's weight (the first) must be above 0");
  if (!o->val_every) o->val_every = 10;
  if (o->eval_iters && !o->val_data && !(o->split_on && o->split[1] > 0))
    return usage_error(me, "--eval-iters needs validation data: --val-data FILE, or --split with a validation part");
  if (!o->eval_iters) o->eval_iters = 1;
  if (o->save_every && !o->save) return usage_error(me, "--save-every needs --save FILE");
  run.nrep = o->data_parallel > 1 ? o->data_parallel : 1;
  cfg->nrep = run.nrep;
  run.ntp = o->tensor_parallel > 1 ? o->tensor_parallel : 1;
  cfg->tp = run.ntp;
  if (o->sequence_parallel && run.ntp < 2)
    return usage_error(me, "--sequence-parallel splits the token rows over a tensor-parallel group: add --tensor-parallel T (T >= 2)");
  cfg->sp = o->sequence_parallel;
  run.ncp = o->context_parallel > 1 ? o->context_parallel : 1;
  cfg->cp = run.ncp;
  run.ngrad = run.nrep * run.ncp;
  if (run.ncp > 1 && strcmp(o->model, "gpt"))
    return usage_error(me, "--context-parallel does not run with --model mlp (it splits the gpt's sequences)");
  if (run.ncp > 1 && !strcmp(o->backend, "cuda") && getenv("PPSRT_CUDA_ATTN") && !strcmp(getenv("PPSRT_CUDA_ATTN"), "cudnn"))
    return usage_error(me, "--context-parallel: the fused cuDNN attention (PPSRT_CUDA_ATTN=cudnn) has no query block at an "
                       "offset\nhint: unset PPSRT_CUDA_ATTN or set it to cublas");
  if (run.ncp > 1 && cfg->num_experts && cfg->moe_capacity > 0)
    return usage_error(me, "--moe-expert-capacity-factor %g does not run with --context-parallel %d: a context rank's "
                       "tokens are parts of sequences, and the capacity of its share would drop other slots than the "
                       "whole sequences' (--check's reference)", cfg->moe_capacity, run.ncp);
  if (run.ncp > 1 && ppsrt_gpt_check_config && ppsrt_gpt_check_config(cfg)) return usage_error(me, "%s", ppsrt_last_error());
  if (o->die_rank >= p->ndev)
    return usage_error(me, "--die-at: device %d does not exist (the schedule's devices are 0..%d)", o->die_rank, p->ndev - 1);
  if (o->die_tp >= run.ntp)
    return usage_error(me, "--die-at: tensor rank %d does not exist (tensor ranks 0..%d, --tensor-parallel %d)", o->die_tp,
                       run.ntp - 1, run.ntp);
  if (run.ntp > 1 && strcmp(o->model, "gpt"))
    return usage_error(me, "--tensor-parallel does not run with --model mlp (it splits the gpt's layers)");
  /* the split's own rules on the gpt's sizes (whole key/value groups, vocabulary rows,
     token rows under --sequence-parallel: gpt_check_sizes), asked again now that cfg has T */
  if (run.ntp > 1 && ppsrt_gpt_check_config && ppsrt_gpt_check_config(cfg)) return usage_error(me, "%s", ppsrt_last_error());
  int nw = p->ndev * run.nrep * run.ncp * run.ntp;   /* world ranks: ((replica x P + device) x C + cp) x T + tensor rank */
  /* --expert-parallel X (ep.c): groups of X consecutive replicas share out the experts */
  run.nep = o->expert_parallel > 1 ? o->expert_parallel : 1;
  if (run.nep > 1 && !cfg->num_experts)
    return usage_error(me, "--expert-parallel %d splits the experts of a mixture-of-experts model: add --num-experts E "
                       "(--model gpt)", run.nep);
  if (run.nep > 1 && run.nrep % run.nep)
    return usage_error(me, "--expert-parallel %d must divide --data-parallel %d: an expert-parallel group is X "
                       "consecutive replicas", run.nep, run.nrep);
  if (run.nep > 1 && cfg->num_experts % run.nep)
    return usage_error(me, "--expert-parallel %d must divide --num-experts %d: each rank of a group holds E/X experts",
                       run.nep, cfg->num_experts);
  cfg->ep = run.nep;
  if (cfg->moe_a2a && !cfg->num_experts)
    return usage_error(me, "--moe-token-dispatcher sends the tokens of a mixture-of-experts model to their experts: "
                       "add --num-experts E (and --expert-parallel X)");
  if (o->distopt && run.ngrad < 2)
    return usage_error(me, "--distributed-optimizer shards the optimizer state over data-parallel replicas (and context "
                           "ranks): add --data-parallel D (D >= 2) or --context-parallel C");
  cfg->distopt = o->distopt;
  if ((o->given & (RT_GIVEN_MIN_LR | RT_GIVEN_DECAY)) && o->lr_schedule == RT_LR_CONSTANT && !o->load)
    return usage_error(me, "--min-lr and --lr-decay-steps shape a decaying schedule: add --lr-schedule cosine, linear or "
                           "inverse-square-root");
  if ((o->given & RT_GIVEN_DECAY) && o->lr_schedule == RT_LR_INVSQRT)
    return usage_error(me, "--lr-decay-steps: inverse-square-root decays without an end step (--min-lr is its floor)");
  if ((o->given & (RT_GIVEN_BETA1 | RT_GIVEN_BETA2 | RT_GIVEN_EPS)) && !o->optimizer && !o->load)
    return usage_error(me, "--adam-beta1, --adam-beta2 and --adam-eps are Adam's: add --optimizer adam");
  ppsrt_tokens *tokens = NULL;
  if (o->data) {
    if (ppsrt_tokens_load(o->data, o->data_format, cfg->vocab, cfg->seq, &tokens)) {
      fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
      return 2;
    }
    cfg->data = tokens;
  }
  ppsrt_tokens *val_tokens = NULL;
  /* validation: --val-data, else --split's validation part of --data (loaded again: its own windows) */
  const char *vpath = o->val_data ? o->val_data : o->split_on && o->split[1] > 0 ? o->data : NULL;
  if (vpath) {
    if (ppsrt_tokens_load(vpath, o->data_format, cfg->vocab, cfg->seq, &val_tokens) ||
        (!o->val_data && ppsrt_tokens_split(val_tokens, o->split, 1, cfg->seq))) {
      fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
      ppsrt_tokens_free(tokens);
      ppsrt_tokens_free(val_tokens);
      return 2;
    }
    run.val_tokens = val_tokens;
  }
  if (tokens && o->split_on && ppsrt_tokens_split(tokens, o->split, 0, cfg->seq)) {
    fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
    ppsrt_tokens_free(tokens);
    ppsrt_tokens_free(val_tokens);
    return 2;
  }
  /* peak FLOP/s per device for MFU: the flag, else (on the GPU: the hardware block
   * describes the target device, not a CPU) the hardware block's flops */
  if (o->peak_flops > 0) {
    run.peak_flops = o->peak_flops;
    run.peak_source = "--peak-flops";
  } else if (!strcmp(o->backend, "cuda") && kv_get(p->hardware, p->nhardware, "flops", 0) > 0) {
    run.peak_flops = kv_get(p->hardware, p->nhardware, "flops", 0);
    run.peak_source = "hardware";
  }

  /* ---- transport ---- */
  int rc = 0, my_rank = 0;
  ppsrt_transport *tr = NULL;
  run.nlocal = p->ndev;
  if (!strcmp(o->transport, "threads")) {
    run.nlocal = nw;
    rc = ppsrt_threads_transport_create(nw, o->timeout_s, &tr);
  } else if (!strcmp(o->transport, "mpi")) {
    rc = ppsrt_mpi_transport_create(o->timeout_s, &tr, &my_rank);
    run.nlocal = 1;
  } else {
    int use_mpi = under_mpirun();
    rc = ppsrt_nccl_transport_create(nw, o->timeout_s, use_mpi, &tr, &my_rank);
    run.nlocal = use_mpi ? 1 : nw;
  }
  if (rc) {
    fprintf(stderr, "%s: error: transport %s: %s\n", me, o->transport, ppsrt_last_error());
    ppsrt_tokens_free(tokens);
    ppsrt_tokens_free(val_tokens);
    return 1;
  }
  if (tr->nranks != nw) {
    int status = run.nrep > 1 || run.ntp > 1 || run.ncp > 1 ?
      usage_error(me, "the schedule has %d devices x --data-parallel %d replicas x --context-parallel %d x --tensor-parallel "
                  "%d but the %s transport has %d ranks\nhint: mpirun -np %d %s", p->ndev, run.nrep, run.ncp, run.ntp,
                  o->transport, tr->nranks, nw, argv0) :
      tr->nranks > p->ndev && tr->nranks % p->ndev == 0 ?
      usage_error(me, "the schedule has %d devices but the %s transport has %d ranks\nhint: mpirun -np %d %s, or "
                  "--data-parallel %d for %d replicas of the pipeline", p->ndev, o->transport, tr->nranks, p->ndev, argv0,
                  tr->nranks / p->ndev, tr->nranks / p->ndev) :
      usage_error(me, "the schedule has %d devices but the %s transport has %d ranks\nhint: mpirun -np %d %s",
                  p->ndev, o->transport, tr->nranks, p->ndev, argv0);
    tr->destroy(tr);
    ppsrt_tokens_free(tokens);
    ppsrt_tokens_free(val_tokens);
    return status;
  }
  run.tr = tr;
  /* the hardware block may plan a deployment this run is not: say where they differ
   * (once, from the first rank), so that nobody reads this run as that plan */
  double hw_tp = kv_get(p->hardware, p->nhardware, "tensor_parallel", 0), hw_dp = kv_get(p->hardware, p->nhardware, "data_parallel", 0);
  if (my_rank == 0 && hw_tp >= 1 && hw_tp != run.ntp)
    fprintf(stderr, "%s: note: the schedule's hardware { tensor_parallel = %g } plans %g tensor ranks a device; this run has "
            "%d (%s)\n", me, hw_tp, hw_tp, run.ntp, run.ntp > 1 ? "--tensor-parallel" : "give --tensor-parallel T for them");
  if (my_rank == 0 && hw_dp >= 1 && hw_dp != run.nrep)
    fprintf(stderr, "%s: note: the schedule's hardware { data_parallel = %g } plans %g replicas; this run has %d (%s)\n", me,
            hw_dp, hw_dp, run.nrep, run.nrep > 1 ? "--data-parallel" : "give --data-parallel D for replicas");
  double hw_ep = kv_get(p->hardware, p->nhardware, "expert_parallel", 0);
  if (my_rank == 0 && hw_ep >= 1 && hw_ep != run.nep)
    fprintf(stderr, "%s: note: the schedule's hardware { expert_parallel = %g } plans expert-parallel groups of %g "
            "replicas; this run has %d (%s)\n", me, hw_ep, hw_ep, run.nep,
            run.nep > 1 ? "--expert-parallel" : "give --expert-parallel X for them");
  double hw_a2a = kv_get(p->hardware, p->nhardware, "ep_alltoall", -1);   /* (-1: not given, nothing to note) */
  if (my_rank == 0 && run.nep > 1 && hw_a2a >= 0 && (hw_a2a == 1) != (cfg->moe_a2a != 0))
    fprintf(stderr, "%s: note: the schedule's hardware { ep_alltoall = %g } times the %s token dispatcher; this run uses "
            "the %s one (--moe-token-dispatcher)\n", me, hw_a2a, hw_a2a == 1 ? "alltoall" : "allgather",
            cfg->moe_a2a ? "alltoall" : "allgather");
  double hw_cp = kv_get(p->hardware, p->nhardware, "context_parallel", 0);
  if (my_rank == 0 && hw_cp >= 1 && hw_cp != run.ncp)
    fprintf(stderr, "%s: note: the schedule's hardware { context_parallel = %g } plans %g context ranks a device; this run "
            "has %d (%s)\n", me, hw_cp, hw_cp, run.ncp, run.ncp > 1 ? "--context-parallel" : "give --context-parallel C for them");
  double hw_sp = kv_get(p->hardware, p->nhardware, "sequence_parallel", -1);   /* -1: not given */
  if (my_rank == 0 && hw_sp >= 0 && (hw_sp != 0) != (o->sequence_parallel != 0))
    fprintf(stderr, "%s: note: the schedule's hardware { sequence_parallel = %g } plans %s sequence parallelism; this run %s\n",
            me, hw_sp, hw_sp != 0 ? "with" : "without", o->sequence_parallel ? "has it (--sequence-parallel)" : "has none (give --sequence-parallel)");
  /* vocabulary collectives on a lane per device (coll_lane.c) wherever the transport
   * gives it a second transport of the same ranks (dup: threads, MPI with
   * MPI_THREAD_MULTIPLE, NCCL in one process), on either backend; else (no dup, dup
   * refused, --blocking-collectives) they block */
  if (p->vocab_mode && !o->blocking_coll && (!tr->dup || tr->dup(tr, &run.lane_tr))) {
    run.lane_tr = NULL;
    /* said once per process: a schedule proven with `vocab async` may need the lane
     * (ppsc check warns where it does), and would then stop at --timeout */
    fprintf(stderr, "%s: warning: vocabulary collectives block (no collective lane: %s)\n", me,
            tr->dup ? ppsrt_last_error() : "the transport cannot give a second communicator");
  }
  run.first_rank = run.nlocal == 1 ? my_rank : 0;
  if (run.nlocal == 1 && my_rank != 0) run.out = stdout;
  /* --load: the checkpoint's index and shard headers, read by every process; its step,
     data position and schedule settings (those not on the command line) go on */
  /* (the RoPE scaling restored with the flags given: checked whole now) */
  if (o->load && (rt_ckpt_open(&run, o->load, &run.ck) ||
                  (!strcmp(o->model, "gpt") && ppsrt_gpt_check_config && ppsrt_gpt_check_config(cfg)))) {
    if (run.first_rank == 0) fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
    rt_ckpt_close(run.ck);
    if (run.lane_tr) run.lane_tr->destroy(run.lane_tr);
    tr->destroy(tr);
    ppsrt_tokens_free(tokens);
    ppsrt_tokens_free(val_tokens);
    return 1;
  }
  if (tokens && o->data_shuffle_on) ppsrt_tokens_shuffle(tokens, o->data_shuffle);   /* (after --load: it may restore it) */
  if (run.ck && run.ck_data && !o->data && run.first_rank == 0)
    fprintf(stderr, "%s: note: checkpoint '%s' was trained on a --data file (%ld sequences read); this run has no --data "
            "and trains on the synthetic tokens\nhint: give --data FILE again to go on with the file\n", me, o->load, run.data0);
  if (!o->decay_steps) o->decay_steps = run.step0 + o->iterations;
  cfg->data0 = run.data0;
  cfg->step0 = run.step0;   /* (the dropout masks go on from the checkpoint's step) */

  int it = o->iterations, nd = p->ndev;
  run.ctx = calloc((size_t)run.nlocal, sizeof *run.ctx);
  run.dev_busy = calloc((size_t)it * nd, sizeof *run.dev_busy);
  run.dev_span = calloc((size_t)it * nd, sizeof *run.dev_span);
  run.dev_peak = calloc((size_t)it * nd, sizeof *run.dev_peak);
  run.dev_resident = calloc((size_t)nd, sizeof(size_t));
  run.dev_params = calloc(2 * (size_t)nd, sizeof(size_t));
  run.dev_host = calloc((size_t)nd, sizeof(size_t));
  run.dev_unit = calloc((size_t)nd, sizeof(size_t));
  run.dev_mem = calloc((size_t)it * nd, sizeof(size_t));
  run.dev_cancel = calloc((size_t)nd, sizeof(long));
  run.dev_rctime = calloc((size_t)it * nd, sizeof *run.dev_rctime);
  run.dev_rccount = calloc((size_t)it * nd, sizeof *run.dev_rccount);
  run.dev_a2a = calloc(2 * (size_t)nd, sizeof *run.dev_a2a);
  run.loss = calloc((size_t)it, sizeof *run.loss);
  run.dev_units = calloc((size_t)it * nd, sizeof *run.dev_units);
  run.dev_membad = calloc((size_t)nd, sizeof *run.dev_membad);
  run.dev_actbad = calloc((size_t)nd, sizeof *run.dev_actbad);
  run.dev_flops = calloc((size_t)nd, sizeof *run.dev_flops);
  run.validate_step = rt_validate_step;
  run.val_loss = calloc((size_t)it, sizeof *run.val_loss);
  run.val_time = calloc((size_t)it, sizeof *run.val_time);
  run.dev_val_peak = calloc((size_t)nd, sizeof *run.dev_val_peak);
  run.dev_val_mem = calloc((size_t)nd, sizeof *run.dev_val_mem);
  run.val_seqs = (long)o->eval_iters * run.nrep * cfg->nmb * cfg->micro_batch;
  run.lr_it = calloc((size_t)it, sizeof *run.lr_it);
  run.gnorm_it = calloc((size_t)it, sizeof *run.gnorm_it);
  pthread_mutex_init(&run.print_lock, NULL);
  run.epoch = rt_now();
  int status = 0;
  if (!run.ctx || !run.dev_busy || !run.dev_span || !run.dev_peak || !run.dev_resident || !run.dev_params || !run.dev_host ||
      !run.dev_unit || !run.dev_mem || !run.dev_cancel || !run.dev_rctime || !run.dev_rccount || !run.dev_a2a || !run.loss || !run.dev_units || !run.dev_membad || !run.dev_actbad ||
      !run.dev_flops || !run.val_loss || !run.val_time || !run.dev_val_peak || !run.dev_val_mem || !run.lr_it || !run.gnorm_it) {
    fprintf(stderr, "%s: error: out of host memory\n", me);
    status = 1;
    goto done;
  }
  /* world rank w = ((r P + d) C + c) T + t = (r P + d) TC + u: u = c T + t its lane */
  int T = run.ntp, C = run.ncp, TC = C * T, npipe = run.nrep * TC;
  int my_d = my_rank / TC % p->ndev, my_r = my_rank / TC / p->ndev, my_c = my_rank / T % C, my_t = my_rank % T;
  if (run.ngrad > 1) {
    /* each (device, tensor rank)'s D x C ranks (replicas and context ranks) sum their
       gradients on a transport of their own: one per pair (threads; NCCL: a
       communicator of the pair's ranks), or this process's (MPI_Comm_split by the pair;
       NCCL over MPI: its pair's communicator), ranked r C + c */
    int ng = run.nlocal == 1 ? 1 : p->ndev * T, nccl = !strcmp(o->transport, "nccl");
    if (!(run.groups = calloc((size_t)ng, sizeof *run.groups))) { fprintf(stderr, "%s: error: out of host memory\n", me); status = 1; goto done; }
    for (int g = 0; g < ng; g++)
      if (nccl ? nccl_group(tr, p->ndev, run.nrep, C, T, 0, run.nlocal == 1 ? my_d * T + my_t : g, &run.groups[g])
          : run.nlocal == 1 ? ppsrt_mpi_transport_split(tr, my_d * T + my_t, my_r * C + my_c, &run.groups[g])
                            : ppsrt_threads_transport_create(run.ngrad, o->timeout_s, &run.groups[g])) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
    for (int g = 0; g < ng && o->distopt; g++)
      if (!run.groups[g]->reduce_scatter_f32 || !run.groups[g]->allgather) {
        fprintf(stderr, "%s: error: --distributed-optimizer: the %s transport has no reduce-scatter and all-gather\n", me,
                run.groups[g]->name);
        status = 1;
        goto done;
      }
  }
  if (T > 1) {
    /* each (replica, device, context rank)'s tensor-parallel group: threads,
       MPI_Comm_split, or a communicator of the NCCL transport's */
    int ng = run.nlocal == 1 ? 1 : run.nrep * p->ndev * C, nccl = !strcmp(o->transport, "nccl");
    if (!(run.tgroups = calloc((size_t)ng, sizeof *run.tgroups))) { fprintf(stderr, "%s: error: out of host memory\n", me); status = 1; goto done; }
    for (int g = 0; g < ng; g++)
      if (nccl ? nccl_group(tr, p->ndev, run.nrep, C, T, 1, run.nlocal == 1 ? my_rank / T : g, &run.tgroups[g])
          : run.nlocal == 1 ? ppsrt_mpi_transport_split(tr, my_rank / T, my_rank % T, &run.tgroups[g])
                            : ppsrt_threads_transport_create(T, o->timeout_s, &run.tgroups[g])) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
  }
  if (C > 1) {
    /* each (replica, device, tensor rank)'s context-parallel group (cp.c): threads,
       MPI_Comm_split, or a communicator of the NCCL transport's */
    int ng = run.nlocal == 1 ? 1 : run.nrep * p->ndev * T, nccl = !strcmp(o->transport, "nccl");
    if (!(run.cgroups = calloc((size_t)ng, sizeof *run.cgroups))) { fprintf(stderr, "%s: error: out of host memory\n", me); status = 1; goto done; }
    for (int g = 0; g < ng; g++)
      if (nccl ? nccl_group(tr, p->ndev, run.nrep, C, T, 4, run.nlocal == 1 ? my_rank / TC * T + my_t : g, &run.cgroups[g])
          : run.nlocal == 1 ? ppsrt_mpi_transport_split(tr, my_rank / TC * T + my_t, my_c, &run.cgroups[g])
                            : ppsrt_threads_transport_create(C, o->timeout_s, &run.cgroups[g])) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
    for (int g = 0; g < ng; g++)
      if (!run.cgroups[g]->reduce_scatter_f32 || !run.cgroups[g]->allgather) {
        fprintf(stderr, "%s: error: --context-parallel: the %s transport has no reduce-scatter and all-gather\n", me,
                run.cgroups[g]->name);
        status = 1;
        goto done;
      }
  }
  int X = run.nep, nedp = run.nrep / X * C;   /* --expert-parallel: group size, expert-data-parallel group size */
  if (X > 1) {
    /* each (group q, device, context rank, tensor rank)'s expert-parallel group (ep.c),
       and each (expert rank j, device, tensor rank)'s expert-data-parallel group (when
       D/X x C > 1): threads, MPI_Comm_split, or communicators of the NCCL transport's */
    int nx = run.nlocal == 1 ? 1 : run.nrep / X * p->ndev * TC, ne = nedp < 2 ? 0 : run.nlocal == 1 ? 1 : X * p->ndev * T;
    int nccl = !strcmp(o->transport, "nccl"), my_j = my_r % X, my_q = my_r / X;
    if (!(run.xgroups = calloc((size_t)nx, sizeof *run.xgroups)) || !(run.egroups = calloc((size_t)ne + 1, sizeof *run.egroups))) {
      fprintf(stderr, "%s: error: out of host memory\n", me);
      status = 1;
      goto done;
    }
    for (int g = 0; g < nx; g++)
      if (nccl ? nccl_ep_group(tr, p->ndev, run.nrep, X, C, T, 0, run.nlocal == 1 ? ((my_q * p->ndev + my_d) * C + my_c) * T + my_t : g, &run.xgroups[g])
          : run.nlocal == 1 ? ppsrt_mpi_transport_split(tr, ((my_q * p->ndev + my_d) * C + my_c) * T + my_t, my_j, &run.xgroups[g])
                            : ppsrt_threads_transport_create(X, o->timeout_s, &run.xgroups[g])) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
    for (int g = 0; g < ne; g++)
      if (nccl ? nccl_ep_group(tr, p->ndev, run.nrep, X, C, T, 1, run.nlocal == 1 ? (my_j * p->ndev + my_d) * T + my_t : g, &run.egroups[g])
          : run.nlocal == 1 ? ppsrt_mpi_transport_split(tr, (my_j * p->ndev + my_d) * T + my_t, my_q * C + my_c, &run.egroups[g])
                            : ppsrt_threads_transport_create(nedp, o->timeout_s, &run.egroups[g])) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
    for (int g = 0; g < ne && o->distopt; g++)
      if (!run.egroups[g]->reduce_scatter_f32 || !run.egroups[g]->allgather) {
        fprintf(stderr, "%s: error: --distributed-optimizer: the %s transport has no reduce-scatter and all-gather\n", me,
                run.egroups[g]->name);
        status = 1;
        goto done;
      }
    for (int g = 0; g < nx; g++)
      if (cfg->moe_a2a && !run.xgroups[g]->alltoallv) {
        fprintf(stderr, "%s: error: --moe-token-dispatcher alltoall: the %s transport has no all-to-all\n", me,
                run.xgroups[g]->name);
        status = 1;
        goto done;
      }
    for (int g = 0; g < nx; g++)
      if (!run.xgroups[g]->reduce_scatter_f32 || !run.xgroups[g]->allgather) {
        fprintf(stderr, "%s: error: --expert-parallel: the %s transport has no reduce-scatter and all-gather\n", me,
                run.xgroups[g]->name);
        status = 1;
        goto done;
      }
  }
  if (npipe > 1) {
    /* each pipeline (replica, context rank, tensor rank) speaks to its own view of the world transport
       (replica.c), and its collective lane to its own view of the lane's; the views'
       collectives go to a transport of the pipeline's P ranks (threads, MPI_Comm_split
       by pipeline, an NCCL communicator of them), the lane's to another */
    int ng = run.nlocal == 1 ? 1 : npipe, nccl = !strcmp(o->transport, "nccl");
    int mine = my_r * TC + my_rank % TC;   /* this process's pipeline (over MPI) */
    if (!(run.views = calloc((size_t)npipe, sizeof *run.views)) ||
        (run.lane_tr && !(run.lane_views = calloc((size_t)npipe, sizeof *run.lane_views))) ||
        !(run.pgroups = calloc((size_t)ng, sizeof *run.pgroups)) ||
        (run.lane_tr && !(run.lane_pgroups = calloc((size_t)ng, sizeof *run.lane_pgroups)))) {
      fprintf(stderr, "%s: error: out of host memory\n", me);
      status = 1;
      goto done;
    }
    for (int k = 0; k < (run.lane_tr ? 2 : 1); k++) {
      ppsrt_transport *base = k ? run.lane_tr : tr, **pg = k ? run.lane_pgroups : run.pgroups;
      for (int g = 0; g < ng; g++)
        if (nccl ? nccl_group(base, p->ndev, run.nrep, C, T, 2 + k, run.nlocal == 1 ? mine : g, &pg[g])
            : run.nlocal == 1 ? ppsrt_mpi_transport_split(base, mine, my_d, &pg[g])
                              : ppsrt_threads_transport_create(p->ndev, o->timeout_s, &pg[g])) {
          fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
          status = 1;
          goto done;
        }
    }
    for (int q = 0; q < npipe; q++)
      if (rt_replica_view(tr, run.pgroups[run.nlocal == 1 ? 0 : q], p->ndev, run.nrep, TC, q / TC, q % TC, &run.views[q]) ||
          (run.lane_tr && rt_replica_view(run.lane_tr, run.lane_pgroups[run.nlocal == 1 ? 0 : q], p->ndev, run.nrep, TC,
                                          q / TC, q % TC, &run.lane_views[q]))) {
        fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
        status = 1;
        goto done;
      }
  }
  run.flops_known = !o->no_compute;
  rt_count_flops(&run, !strcmp(o->model, "gpt") ? ppsrt_gpt_pass_flops : ppsrt_mlp_pass_flops);
  for (int l = 0; l < run.nlocal; l++) {
    /* world rank w = ((replica x P + device) x C + context rank) x T + tensor rank */
    int w = run.first_rank + l, t = w % T, cr = w / T % C, d = w / TC % p->ndev, r = w / TC / p->ndev;
    if ((rc = rt_ctx_init(&run, &run.ctx[l], d))) {
      fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
      status = 1;
      goto done;
    }
    run.ctx[l].replica = r;
    run.ctx[l].tp_rank = t;
    run.ctx[l].cp_rank = cr;
    run.ctx[l].grank = r * C + cr;
    run.ctx[l].wrank = w;
    run.ctx[l].wtr = tr;
    run.ctx[l].lane_tr = run.lane_tr;
    if (npipe > 1) {
      run.ctx[l].tr = run.views[r * TC + cr * T + t];
      if (run.lane_tr) run.ctx[l].lane_tr = run.lane_views[r * TC + cr * T + t];
    }
    if (run.ngrad > 1) run.ctx[l].gtr = run.groups[run.nlocal == 1 ? 0 : d * T + t];
    if (T > 1) run.ctx[l].ttr = run.tgroups[run.nlocal == 1 ? 0 : w / T];
    if (C > 1) run.ctx[l].ctr = run.cgroups[run.nlocal == 1 ? 0 : w / TC * T + t];
    run.ctx[l].ep_rank = r % X;
    run.ctx[l].erank = r / X * C + cr;
    if (X > 1) run.ctx[l].xtr = run.xgroups[run.nlocal == 1 ? 0 : ((r / X * p->ndev + d) * C + cr) * T + t];
    if (X > 1 && nedp > 1) run.ctx[l].etr = run.egroups[run.nlocal == 1 ? 0 : ((r % X) * p->ndev + d) * T + t];
  }

  /* ---- run ---- */
  if (run.nlocal == 1) {
    device_main(&run.ctx[0]);
  } else {
    pthread_t *th = calloc((size_t)run.nlocal, sizeof *th);
    if (!th) { fprintf(stderr, "%s: error: out of host memory\n", me); status = 1; goto done; }
    int started = 0;
    for (; started < run.nlocal; started++)
      if (pthread_create(&th[started], NULL, device_main, &run.ctx[started])) {
        run.ctx[started].status = PPSRT_E_NOMEM;
        snprintf(run.ctx[started].errmsg, sizeof run.ctx[started].errmsg, "device %d: cannot start its thread",
                 run.ctx[started].rank);
        tr->abort(tr, run.ctx[started].wrank, run.ctx[started].errmsg);
        break;
      }
    for (int l = 0; l < started; l++) pthread_join(th[l], NULL);
    free(th);
  }

  /* ---- report: the root cause first (a rank stopped by another's abort says so) ---- */
  {
    /* every device that failed on its own (a timeout, an error) is a root cause; the
     * ones stopped by another's abort (PPSRT_E_COMM "stopped: ...") are counted */
    int root = -1, nfail = 0;
    for (int l = 0; l < run.nlocal; l++)
      if (run.ctx[l].status) {
        nfail++;
        int stopped = run.ctx[l].status == PPSRT_E_COMM && strstr(run.ctx[l].errmsg, "stopped: ");
        int root_stopped = root >= 0 && run.ctx[root].status == PPSRT_E_COMM && strstr(run.ctx[root].errmsg, "stopped: ");
        if (root < 0 || (root_stopped && !stopped)) root = l;
      }
    if (root >= 0) {
      snprintf(run.first_error, sizeof run.first_error, "%s", run.ctx[root].errmsg);
      int shown = 0;
      for (int l = 0; l < run.nlocal; l++)
        if (run.ctx[l].status && (l == root || run.ctx[l].status != PPSRT_E_COMM || !strstr(run.ctx[l].errmsg, "stopped: "))) {
          fprintf(stderr, "%s: error: %s\n", me, run.ctx[l].errmsg);
          shown++;
        }
      if (nfail > shown)   /* (with replicas or tensor ranks, the world's ranks) */
        fprintf(stderr, "%s: note: %d other %s stopped because of it\n", me, nfail - shown,
                run.nrep * run.ncp * run.ntp > 1 ? "rank(s)" : "device(s)");
      status = 1;
    }
  }
  int printer = run.first_rank == 0;
  if (!status) {
    int print = printer && !o->json;
    if (run.nlocal > 1 || printer) {
      int memory_bad = p->predicted_peak || p->predicted_peak_order ? rt_compare_memory(&run, print && (o->check || o->check_memory || !o->quiet)) : 0;
      if ((o->check || o->check_memory) && memory_bad) status = 1;
    }
    if (print && !o->quiet) rt_print_flops(&run);
    for (int k = 0; k < run.iterations_done && !o->allow_nonfinite; k++)
      if (!isfinite(run.loss[k])) {
        if (printer)
          fprintf(stderr, "%s: error: the loss of iteration %d is %g, not a finite number: stopped there, %d of %d "
                  "iterations run (--allow-nonfinite-loss to go on)\n", me, k + 1, run.loss[k], k + 1, o->iterations);
        status = 1;
        break;
      }
    if (o->check && (run.check_mismatches || run.check_loss_bad)) status = 1;
    if (print && o->check)
      fprintf(run.out, "check: %s\n", status ? "FAILED" : "passed (loss, gradients and peak memory match)");
  }
  if (o->trace && run.nlocal == 1 && nw > 1 && !run.first_error[0]) {
    /* one process per rank: world rank 0 gathers every rank's records and writes one file */
    rt_event **evs = calloc((size_t)nw, sizeof *evs);
    int *nev = calloc((size_t)nw, sizeof *nev);
    ppsrt_ctx *all = calloc((size_t)nw, sizeof *all);
    if (!evs || !nev || !all || rt_gather_events(&run.ctx[0], nw, evs, nev)) {
      fprintf(stderr, "%s: error: --trace: %s\n", me, evs && nev && all ? ppsrt_last_error() : "out of host memory");
      status = 1;
    } else if (my_rank == 0) {
      for (int w = 0; w < nw; w++) {   /* world rank w = ((replica x P + device) x C + context rank) x T + tensor rank */
        int d = w / TC % p->ndev;
        all[w].run = &run; all[w].rank = d; all[w].wrank = w; all[w].replica = w / TC / p->ndev; all[w].tp_rank = w % T;
        all[w].cp_rank = w / T % C;
        all[w].ops = p->ops[d]; all[w].nops = p->nops[d];
        all[w].ev = evs[w]; all[w].nev = nev[w];
      }
      ppsrt_run tmp = run;
      tmp.ctx = all; tmp.nlocal = nw;
      if (rt_write_trace(&tmp, o->trace)) { fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error()); status = 1; }
    }
    for (int w = 0; evs && w < nw; w++) free(evs[w]);
    free(evs); free(nev); free(all);
  } else if (o->trace && (run.nlocal > 1 || my_rank == 0)) {
    if (rt_write_trace(&run, o->trace)) {
      fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
      status = 1;
    }
  }
  if (o->profile && !run.first_error[0]) {
    if (run.nlocal == 1 && nw > 1) {
      fprintf(stderr, "%s: error: --profile needs every rank in this process (--transport threads)\n", me);
      status = 1;
    } else if (rt_write_profile(&run, o->profile)) {
      fprintf(stderr, "%s: error: %s\n", me, ppsrt_last_error());
      status = 1;
    }
  }
  if (o->json && printer) rt_print_json(&run, status);
done:
  for (int l = 0; l < run.nlocal && run.ctx; l++) rt_ctx_fini(&run.ctx[l]);
  for (int l = 0; run.ctx && l < run.nlocal; l++) free(run.ctx[l].check_text);
  ppsrt_tokens_free(tokens);
  ppsrt_tokens_free(val_tokens);
  free(run.val_loss);
  free(run.val_time);
  free(run.dev_val_peak);
  free(run.dev_val_mem);
  free(run.lr_it); free(run.gnorm_it);
  rt_ckpt_close(run.ck);
  free(run.ctx);
  free(run.dev_busy); free(run.dev_span); free(run.dev_peak);
  free(run.dev_resident); free(run.dev_params); free(run.dev_host); free(run.dev_unit); free(run.dev_mem); free(run.dev_cancel); free(run.dev_rctime); free(run.dev_rccount); free(run.dev_a2a); free(run.loss);
  free(run.dev_units); free(run.dev_membad); free(run.dev_actbad); free(run.dev_flops);
  pthread_mutex_destroy(&run.print_lock);
  fflush(stdout);
  for (int k = 0; k < 2; k++) {   /* (before the transports they were made from) */
    ppsrt_transport **pg = k ? run.lane_pgroups : run.pgroups;
    for (int g = 0; pg && g < (run.nlocal == 1 ? 1 : run.nrep * run.ncp * run.ntp); g++)
      if (pg[g]) pg[g]->destroy(pg[g]);
    free(pg);
  }
  for (int q = 0; run.lane_views && q < run.nrep * run.ncp * run.ntp; q++)
    if (run.lane_views[q]) run.lane_views[q]->destroy(run.lane_views[q]);
  free(run.lane_views);
  if (run.lane_tr) run.lane_tr->destroy(run.lane_tr);
  for (int q = 0; run.views && q < run.nrep * run.ncp * run.ntp; q++)
    if (run.views[q]) run.views[q]->destroy(run.views[q]);
  free(run.views);
  for (int g = 0; run.groups && g < (run.nlocal == 1 ? 1 : p->ndev * run.ntp); g++)
    if (run.groups[g]) run.groups[g]->destroy(run.groups[g]);
  free(run.groups);
  for (int g = 0; run.tgroups && g < (run.nlocal == 1 ? 1 : run.nrep * p->ndev * run.ncp); g++)
    if (run.tgroups[g]) run.tgroups[g]->destroy(run.tgroups[g]);
  free(run.tgroups);
  for (int g = 0; run.cgroups && g < (run.nlocal == 1 ? 1 : run.nrep * p->ndev * run.ntp); g++)
    if (run.cgroups[g]) run.cgroups[g]->destroy(run.cgroups[g]);
  free(run.cgroups);
  for (int g = 0; run.xgroups && g < (run.nlocal == 1 ? 1 : run.nrep / run.nep * p->ndev * run.ncp * run.ntp); g++)
    if (run.xgroups[g]) run.xgroups[g]->destroy(run.xgroups[g]);
  free(run.xgroups);
  for (int g = 0; run.egroups && run.nrep / run.nep * run.ncp > 1 && g < (run.nlocal == 1 ? 1 : run.nep * p->ndev * run.ntp); g++)
    if (run.egroups[g]) run.egroups[g]->destroy(run.egroups[g]);
  free(run.egroups);
  if (tr) {
    tr->destroy(tr);
  }
  return status;
}
