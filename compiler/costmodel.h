/* costmodel.h: seconds and bytes from the `model { }` and `hardware { }` blocks:
 * per-stage TF, TB, TW (and the vocabulary passes), TC and TOFF from transformer
 * FLOPs and bandwidths, the bytes of one activation unit, and the static bytes
 * (weights, gradients, optimizer state) of each device, and the data-parallel model
 * (dp_derive; its simulation is dp.c's). See costmodel.c. */
#ifndef PPS_COSTMODEL_H
#define PPS_COSTMODEL_H
#include "ir.h"

typedef struct CostModel {
  int times;          /* TF TB TW (and TIF TIB TS TT) derived: layers, hidden, seq, micro_batch, flops */
  int bytes;          /* unit_bytes and static bytes derived: also heads */
  double tf, tb, tw;  /* one device share (L / P layers), seconds */
  double in_f, in_b, in_w, out_f, out_b, out_w; /* input layer (stage 0) and output layer (stage S-1) */
  double tif, tib, ts, tt;  /* vocabulary passes under `vocab parallel` (1/P of the layers) */
  int has_tc, has_toff;
  double tc, toff, treload; /* from peer_bandwidth; host link and copy engines */
  double flops_rate;  /* flops * efficiency */
  double act_layer;   /* bytes of one layer's activation for one microbatch */
  double unit_bytes;  /* one device share's activation for one microbatch */
  double *static_bytes; /* [ndev]: weights + gradients + optimizer state */
  double *stage_params; /* [nstage]: parameters of each stage (not the vocabulary-parallel
                           layers' shares); data-parallel gradient bytes (dp.c) */
  double memory;      /* hardware.memory, bytes (0: none) */
  Span memory_span;
  int link_devs;      /* hardware.devices_per_host_link (default 1) */
  double duplex;      /* hardware.duplex_bandwidth / host_bandwidth (default 1) */
} CostModel;

/* Reads s->model and s->hardware (s->ndev, s->nstage, s->vocab.mode must be set;
 * stage_dev[st] = device of stage st). Reports bad values (efficiency outside (0, 1],
 * non-positive sizes) as errors at their key. Returns the number of errors. */
int costmodel_derive(Arena *a, Diag *dg, const IrSchedule *s, const int32_t *stage_dev, CostModel *out);
/* After simulation: a device whose static bytes plus peak activation bytes exceed
 * hardware.memory is an error at the `memory` key. Returns errors reported. */
struct SimResult;
int costmodel_check_memory(Diag *dg, const IrSchedule *s, const struct SimResult *r);

/* What the hardware block says of data parallelism (NULL in IrDerived: D = 1; the
 * simulation of it: dp.h). */
typedef struct DpModel {
  int D;               /* replicas (> 1) */
  double bandwidth;    /* bytes/s of each device's link to its replicas */
  double latency;      /* seconds per ring step */
  double *bytes;       /* [nstage]: F32 gradient bytes of each stage */
  double *time;        /* [nstage]: ring all-reduce time of each stage alone */
} DpModel;

/* Reads the data-parallel keys of s->hardware (cm: what costmodel_derive found, for
 * the stage parameters). Errors at their key. Returns NULL when D = 1 or on error. */
DpModel *dp_derive(Arena *a, Diag *dg, const IrSchedule *s, const CostModel *cm);
/* The ring all-reduce time of `bytes` over D replicas: 2(D-1)/D bytes / bandwidth +
 * 2(D-1) latency. */
double dp_ring_time(int D, double bytes, double bandwidth, double latency);
#endif
