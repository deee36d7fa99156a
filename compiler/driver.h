/* driver.h: what the `ppsc` commands share: parsed options, the compilation (arena +
 * diagnostics), the front end's entry point, and one function per command.
 *
 * Where each is implemented:
 *   front.c            front_compile (parse.c, elab.c, block.c, then order.c: synth.c,
 *                      block_squeeze behind it), front_seed, cmd_expand
 *   cmd_check.c        cmd_check, cmd_sim (analysis.c: lower.c, verify.c, exec.c, sim.c;
 *                      report.c behind them)
 *   csv.c              cmd_import_csv, cmd_export_csv
 *   cmd_build.c        cmd_emit_c, cmd_build (emit_c.c behind them)
 * Exit codes every command honours: 0 valid/success, 1 invalid input, 2 usage or I/O. */
#ifndef PPS_DRIVER_H
#define PPS_DRIVER_H
#include "arena.h"
#include "diag.h"
#include "ir.h"
#include "synth.h"

enum { PPSC_OK = 0, PPSC_INVALID = 1, PPSC_USAGE = 2 };

typedef struct Define {
  const char *name;
  const char *value;  /* text as given; parsed as a PPS literal (int, real, true/false) */
} Define;

/* --cost KEY=VALUE / --memory KEY=VALUE / --policy KEY=VALUE / --hardware KEY=VALUE /
 * --model KEY=VALUE: a schedule-wide cost, memory setting, policy, hardware or model key
 * that replaces the file's (or adds it), whatever the file declares as parameters. */
typedef struct KeyOverride {
  int memory;         /* 0: --cost, 1: --memory, 2: --policy, 3: --hardware, 4: --model */
  const char *key;    /* as written before '=' (owned by main.c) */
  const char *value;  /* text after '=' */
} KeyOverride;

typedef struct Options {
  const char *cmd;          /* check, sim, expand, emit-c, build, import-csv, export-csv */
  const char *file;         /* input file ("-" = stdin) */
  Define *defs; int ndefs;  /* -D NAME=VALUE, in order (a later one wins) */
  const char *schedule;     /* --schedule NAME: which schedule of the file (default: last) */
  const char *out;          /* -o FILE */
  const char *trace;        /* --trace FILE (Chrome trace JSON) */
  const char *svg;          /* --svg FILE */
  const char *stdlib_dir;   /* --stdlib DIR, else $PPS_STDLIB, else the installed path */
  int json;                 /* --json */
  int quiet;                /* -q: no text summary */
  int max_errors;           /* --max-errors N (default 50; 0 = all) */
  int color;                /* --color=always|never|auto resolved */
  long max_ops;             /* --max-ops N: elaboration limit on generated ops (default 50M) */
  int argc; char **argv;    /* unparsed extra arguments (after --), for build */
  KeyOverride *keys; int nkeys; /* --cost / --memory, in order (a later one wins) */
  int grid;                 /* sim --grid: the text grid (grid.c) */
  int svg_arrows;           /* sim --svg-arrows: transfers in the SVG (svg.c) */
  int svg_window;           /* sim --svg-window T0..T1: only that time in the SVG */
  double svg_t0, svg_t1;
  int svg_devices;          /* sim --svg-devices LO..HI: only devices LO..HI-1 in the SVG */
  long svg_dlo, svg_dhi;
  const char *file2;        /* compare: the second file (compare.c) */
  int comms;                /* export-csv --comms: the compute-comms form */
  int drop;                 /* export-csv --drop: leave out what PyTorch's CSV cannot express (warned) */
  int p2p_buffered;         /* --p2p buffered: no rendezvous model (lower.c, verify.c) */
  int transport_nccl;       /* --transport nccl: posted recvs waited for where they stand (exec.c) */
  unsigned char *def_used;  /* compare: when set, a -D the compiled schedule has no parameter for is
                               left out (not an error) and def_used[k] says which were used */
  const char *src_text;     /* when set: front_compile reads this text (src_size bytes) instead of file */
  size_t src_size;
  SynthCheckFn synth_check; /* `synthesize`'s check of an order with offload or recomputation:
                               the later phases, which the driver hands in (analysis_candidate) */
} Options;

typedef struct Compilation {
  Arena arena;
  Diag diag;
  const Options *opt;
} Compilation;

/* Reads, parses and elaborates opt->file into the IR (no lowering). Reports every
 * error through c->diag; returns NULL when the input could not be elaborated, or an
 * IR (possibly with errors counted) that later phases may still look at. Sets
 * *io_error to 1 when the failure was reading a file (exit 2, not 1). */
IrSchedule *front_compile(Compilation *c, int *io_error);
/* Compiles one of `synthesize`'s seeds into IR in *a (synth.h: SynthSeedReq). */
struct SynthSeedReq;
IrSchedule *front_seed(Arena *a, const struct SynthSeedReq *rq);

int cmd_check(Compilation *c);
int cmd_sim(Compilation *c);
int cmd_expand(Compilation *c);
int cmd_emit_c(Compilation *c);
int cmd_build(Compilation *c);
int cmd_import_csv(Compilation *c);
int cmd_export_csv(Compilation *c);
int cmd_synth(Compilation *c);   /* cmd_synth.c: `ppsc synth` (synth.c behind it) */
int cmd_compare(Compilation *c);
/* torch_csv.c: the PyTorch schedule CSV formats behind import-csv / export-csv.
 * torch_csv_import parses text (registered as diagnostics file fid), verifies the
 * imported schedule and writes c->opt->out; the caller frees text afterwards. */
int torch_csv_import(Compilation *c, uint32_t fid, const char *text, size_t size);
int torch_csv_export(Compilation *c);

/* Writes `size` bytes to `path` atomically (temporary file + rename), so an error
 * never leaves a partial output. "-" writes stdout. Returns 0, or -1 with a message
 * printed. */
int write_file_atomic(const char *path, const char *data, size_t size);
/* The same with the permission bits a new file gets (before the umask; 0666 for
 * data, 0777 for programs). A path naming something other than a regular file (a
 * device, a FIFO, /dev/stdout) is written in place, never replaced; an existing
 * file keeps its mode. Implemented in fileio.c. */
int write_output(const char *path, const char *data, size_t size, unsigned mode);
/* Reads a whole input file, NUL-terminated, at most cap bytes ("-" = stdin). With
 * regular_only, anything but a regular file is refused; else a pipe or FIFO is read
 * too. Devices, directories and sockets are always refused. Returns NULL with errno
 * set (EPERM: not a regular file, EFBIG: over the cap); read_input_error(errno) says
 * it in words. */
char *read_input(const char *path, int regular_only, size_t cap, size_t *size);
const char *read_input_error(int err);

/* An in-memory output buffer for the writers above. */
typedef struct StrBuf { char *data; size_t len, cap; } StrBuf;
void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_puts(StrBuf *b, const char *s);
void sb_json_string(StrBuf *b, const char *s);
/* A number the way reports print it: shortest of %.6g..%.17g that reads back close;
 * integers whole, non-finite as null. */
void sb_num(StrBuf *b, double x);
void sb_free(StrBuf *b);
/* front.c: the elaborated schedule as a literal PPS file (what `ppsc expand` prints). */
void expand_write(const IrSchedule *s, StrBuf *b);
#endif
