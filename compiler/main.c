/* main.c: the `ppsc` command line. Parses options common to every command and
 * dispatches to the command's function (see driver.h for who implements which). */
#include "config.h"
#include "driver.h"
#include "analysis.h"
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
  "usage: ppsc COMMAND FILE [options]\n"
  "\n"
  "Pipeline-parallel schedules: check them, simulate them, compile them.\n"
  "\n"
  "commands:\n"
  "  check FILE        parse, elaborate, lower and verify; evaluate `expect` (exit 0 valid, 1 invalid)\n"
  "  sim FILE          check, then simulate: makespan, bubble, memory per device\n"
  "  expand FILE       print the elaborated schedule as PPS, one literal line per device\n"
  "  emit-c FILE -o OUT.c   write C host code for libppsrt\n"
  "  build FILE -o PROG     emit C, compile and link it with libppsrt (honours CC, CFLAGS)\n"
  "  import-csv CSV -o OUT.pps   read a torch.distributed.pipelining schedule CSV\n"
  "  export-csv FILE -o OUT.csv  write one (--comms: with sends and receives)\n"
  "  synth FILE -o OUT.pps  write the order `synthesize;` chose, with its bound (--json: the figures)\n"
  "  compare A B       check and simulate two schedules: figures side by side, where orders differ\n"
  "\n"
  "options:\n"
  "  -D NAME=VALUE     override a schedule parameter (repeatable)\n"
  "  --cost KEY=V      set a schedule-wide cost (TF, TB, TW, TC, TBW, TOFF, ...) of any file\n"
  "  --memory KEY=V    set a memory setting (act, b_free, limit, host_limit, act_s, input) of any file\n"
  "  --policy KEY=V    set a policy of any file: offload=none|all|RATIO, offload_stages=LO..HI,\n"
  "                    offload_microbatches=LO..HI, recompute=none|all|RATIO, recompute_stages=LO..HI,\n"
  "                    vocab=0|1|2, vocab_async=true|false\n"
  "  --hardware KEY=V  set a hardware key (memory, flops, data_parallel, tensor_parallel, context_parallel, ...) of any file\n"
  "  --model KEY=V     set a model key (layers, hidden, heads, seq, micro_batch, vocab, ...) of any file\n"
  "  --schedule NAME   which schedule of FILE to use (default: the last one)\n"
  "  --json            one JSON object on stdout (check, sim)\n"
  "  --trace OUT.json  Chrome trace of the simulation (sim)\n"
  "  --svg OUT.svg     timeline and memory plot (sim)\n"
  "  --svg-arrows      draw the transfers in the --svg picture\n"
  "  --svg-window T0..T1   draw only that time in the --svg picture\n"
  "  --svg-devices LO..HI  draw only devices LO to HI-1 in the --svg picture\n"
  "  --grid            a text grid: a column per device, a row per instant a pass starts (sim)\n"
  "  -o FILE           output file (expand, emit-c, build, import-csv, export-csv)\n"
  "  --stdlib DIR      where `import` finds the standard schedules\n"
  "  --comms           export-csv: the compute-comms form (_PipelineScheduleRuntime)\n"
  "  --drop            export-csv: leave out offload/vocabulary (warned) instead of refusing\n"
  "  --p2p MODEL       point-to-point model to prove: both (default: buffered and rendezvous\n"
  "                    within groups) or buffered (threads/MPI only; no rendezvous placement)\n"
  "  --transport nccl  time the receives the rendezvous repair posted where they stand, as\n"
  "                    the nccl transport does by default (check, sim, compare)\n"
  "  --max-errors N    print at most N errors (default 50, 0 = all)\n"
  "  --max-ops N       limit on ops a file may generate (default 50000000, less on a small machine)\n"
  "  --color[=WHEN]    colour diagnostics: always, never, auto (default)\n"
  "  -q, --quiet       no text summary\n"
  "  -h, --help        this text;  --version  the version\n"
  "\n"
  "exit status: 0 valid, 1 invalid input (errors printed), 2 usage or I/O error.\n"
  "See ppsc(1) and docs/language.md.\n";

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ppsc: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'ppsc --help'.\n", stderr);
  return PPSC_USAGE;
}

typedef struct Command { const char *name; int (*fn)(Compilation *); int needs_file; } Command;
static const Command commands[] = {
  {"check", cmd_check, 1},       {"sim", cmd_sim, 1},
  {"expand", cmd_expand, 1},     {"emit-c", cmd_emit_c, 1},
  {"build", cmd_build, 1},       {"import-csv", cmd_import_csv, 1},
  {"export-csv", cmd_export_csv, 1},
  {"synth", cmd_synth, 1},
  {"compare", cmd_compare, 1},
};

/* Takes the value of an option written "--opt VALUE" or "--opt=VALUE". */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (*i + 1 >= argc) return NULL;
  return argv[++*i];
}

static int parse_long(const char *s, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0) return -1;
  *out = v;
  return 0;
}

/* Reads the options after the command into *o; returns -1 to go on, or the
   exit code when the command line ends here (--help, a usage error). */
static int parse_options(int argc, char **argv, Options *o, Define *defs, int *color) {
  for (int i = 2; i < argc; i++) {
    char *a = argv[i];
    const char *v;
    if (!strcmp(a, "--")) { o->argc = argc - i - 1; o->argv = argv + i + 1; break; }
    if (!strncmp(a, "-D", 2)) {
      v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) return usage_error("-D needs NAME=VALUE");
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return usage_error("-D needs NAME=VALUE, got '%s'", v);
      defs[o->ndefs].name = strndup(v, (size_t)(eq - v));
      defs[o->ndefs].value = eq + 1;
      o->ndefs++;
    } else if ((!strncmp(a, "--cost", 6) && (a[6] == 0 || a[6] == '=')) ||
               (!strncmp(a, "--memory", 8) && (a[8] == 0 || a[8] == '=')) ||
               (!strncmp(a, "--policy", 8) && (a[8] == 0 || a[8] == '=')) ||
               (!strncmp(a, "--hardware", 10) && (a[10] == 0 || a[10] == '=')) ||
               (!strncmp(a, "--model", 7) && (a[7] == 0 || a[7] == '='))) {
      int mem = !strncmp(a, "--memory", 8) ? 1 : a[2] == 'p' ? 2 : a[2] == 'h' ? 3 : !strncmp(a, "--model", 7) ? 4 : 0;
      static const char *const opts[] = {"--cost", "--memory", "--policy", "--hardware", "--model"};
      const char *opt = opts[mem];
      if (!(v = opt_value(argc, argv, &i, opt))) return usage_error("%s needs KEY=VALUE", opt);
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return usage_error("%s needs KEY=VALUE, got '%s'", opt, v);
      KeyOverride *k = &o->keys[o->nkeys++];
      k->memory = mem;
      k->key = strndup(v, (size_t)(eq - v));
      k->value = eq + 1;
    } else if (!strcmp(a, "-o")) {
      if (i + 1 >= argc) return usage_error("-o needs a file name");
      o->out = argv[++i];
    } else if (!strcmp(a, "--grid")) {
      o->grid = 1;
    } else if (!strcmp(a, "--svg-arrows")) {
      o->svg_arrows = 1;
    } else if (!strncmp(a, "--svg-window", 12) && (a[12] == 0 || a[12] == '=')) {
      /* T0..T1: two reals, 0 <= T0 < T1 */
      const char *dots;
      char *end;
      if (!(v = opt_value(argc, argv, &i, "--svg-window")) || !(dots = strstr(v, "..")))
        return usage_error("--svg-window needs T0..T1 (a time window, e.g. 10..40)");
      char b0[64];
      if ((size_t)(dots - v) >= sizeof b0) return usage_error("--svg-window %s: T0 is not a number", v);
      memcpy(b0, v, (size_t)(dots - v));
      b0[dots - v] = 0;
      double t0 = strtod(b0, &end), t1;
      if (*end || end == b0) return usage_error("--svg-window %s: T0 is not a number", v);
      t1 = strtod(dots + 2, &end);
      if (*end || end == dots + 2) return usage_error("--svg-window %s: T1 is not a number", v);
      if (!(t0 >= 0) || !(t1 > t0) || !isfinite(t1)) return usage_error("--svg-window %s: needs 0 <= T0 < T1", v);
      o->svg_window = 1; o->svg_t0 = t0; o->svg_t1 = t1;
    } else if (!strncmp(a, "--svg-devices", 13) && (a[13] == 0 || a[13] == '=')) {
      /* LO..HI: devices LO to HI - 1, as a PPS range */
      const char *dots;
      if (!(v = opt_value(argc, argv, &i, "--svg-devices")) || !(dots = strstr(v, "..")))
        return usage_error("--svg-devices needs LO..HI (devices LO to HI - 1, e.g. 0..4)");
      char lo[32];
      if ((size_t)(dots - v) >= sizeof lo) return usage_error("--svg-devices %s: LO is not a count", v);
      memcpy(lo, v, (size_t)(dots - v));
      lo[dots - v] = 0;
      if (parse_long(lo, &o->svg_dlo) || parse_long(dots + 2, &o->svg_dhi) || o->svg_dlo < 0 || o->svg_dhi <= o->svg_dlo)
        return usage_error("--svg-devices %s: needs 0 <= LO < HI (devices LO to HI - 1)", v);
      o->svg_devices = 1;
    } else if (!strcmp(a, "--comms")) {
      o->comms = 1;
    } else if (!strcmp(a, "--drop")) {
      o->drop = 1;
    } else if (!strncmp(a, "--p2p", 5) && (a[5] == 0 || a[5] == '=')) {
      if (!(v = opt_value(argc, argv, &i, "--p2p"))) return usage_error("--p2p needs buffered or both");
      if (!strcmp(v, "buffered")) o->p2p_buffered = 1;
      else if (!strcmp(v, "both")) o->p2p_buffered = 0;
      else return usage_error("--p2p: unknown model '%s' (buffered or both)", v);
    } else if (!strncmp(a, "--transport", 11) && (a[11] == 0 || a[11] == '=')) {
      if (!(v = opt_value(argc, argv, &i, "--transport"))) return usage_error("--transport needs nccl or any");
      if (!strcmp(v, "nccl")) o->transport_nccl = 1;
      else if (!strcmp(v, "any")) o->transport_nccl = 0;
      else return usage_error("--transport: unknown transport '%s' (nccl, or any for the others)", v);
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else if (!strncmp(a, "--trace", 7) && (a[7] == 0 || a[7] == '=')) {
      if (!(o->trace = opt_value(argc, argv, &i, "--trace"))) return usage_error("--trace needs a file name");
    } else if (!strncmp(a, "--svg", 5) && (a[5] == 0 || a[5] == '=')) {
      if (!(o->svg = opt_value(argc, argv, &i, "--svg"))) return usage_error("--svg needs a file name");
    } else if (!strncmp(a, "--schedule", 10) && (a[10] == 0 || a[10] == '=')) {
      if (!(o->schedule = opt_value(argc, argv, &i, "--schedule"))) return usage_error("--schedule needs a name");
    } else if (!strncmp(a, "--stdlib", 8) && (a[8] == 0 || a[8] == '=')) {
      if (!(o->stdlib_dir = opt_value(argc, argv, &i, "--stdlib"))) return usage_error("--stdlib needs a directory");
    } else if (!strncmp(a, "--max-errors", 12) && (a[12] == 0 || a[12] == '=')) {
      long n;
      if (!(v = opt_value(argc, argv, &i, "--max-errors")) || parse_long(v, &n) || n > 1000000)
        return usage_error("--max-errors needs a count");
      o->max_errors = (int)n;
    } else if (!strncmp(a, "--max-ops", 9) && (a[9] == 0 || a[9] == '=')) {
      long n;
      if (!(v = opt_value(argc, argv, &i, "--max-ops")) || parse_long(v, &n) || n == 0)
        return usage_error("--max-ops needs a positive count");
      o->max_ops = n;
    } else if (!strcmp(a, "--color") || !strcmp(a, "--color=always")) {
      *color = 1;
    } else if (!strcmp(a, "--color=never")) {
      *color = 0;
    } else if (!strcmp(a, "--color=auto")) {
      *color = -1;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage_text, stdout);
      return PPSC_OK;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!o->file) {
      o->file = a;
    } else if (!o->file2 && !strcmp(o->cmd, "compare")) {
      o->file2 = a;
    } else {
      return usage_error("more than one input file ('%s' and '%s')", o->file, a);
    }
  }
  return -1;
}

/* Which commands use which options: an option the command would ignore is a usage
 * error (issue 12: nothing silently does nothing). One bit per command, in the order
 * of commands[] below; docs/ppsc.1 (OPTIONS) has the same table in words. */
enum {
  C_CHECK = 1 << 0, C_SIM = 1 << 1, C_EXPAND = 1 << 2, C_EMITC = 1 << 3, C_BUILD = 1 << 4,
  C_IMPORT = 1 << 5, C_EXPORT = 1 << 6, C_SYNTH = 1 << 7, C_COMPARE = 1 << 8,
  C_PPS = C_CHECK | C_SIM | C_EXPAND | C_EMITC | C_BUILD | C_EXPORT | C_SYNTH | C_COMPARE /* read a .pps */
};
static const struct { const char *name; int cmd; } command_bits[] = {
  {"check", C_CHECK}, {"sim", C_SIM}, {"expand", C_EXPAND}, {"emit-c", C_EMITC}, {"build", C_BUILD},
  {"import-csv", C_IMPORT}, {"export-csv", C_EXPORT}, {"synth", C_SYNTH}, {"compare", C_COMPARE}};

static int has_key(const Options *o, int memory) {
  for (int k = 0; k < o->nkeys; k++) if (o->keys[k].memory == memory) return 1;
  return 0;
}

static int option_misuse(const Options *o, const char *cmd) {
  int me = 0;
  for (size_t k = 0; k < sizeof command_bits / sizeof *command_bits; k++)
    if (!strcmp(cmd, command_bits[k].name)) me = command_bits[k].cmd;
  const struct { const char *opt; int given, applies; const char *why; } table[] = {
    {"-D", o->ndefs > 0, C_PPS, "it sets a parameter of a .pps schedule; import-csv reads a CSV"},
    {"--cost", has_key(o, 0), C_PPS, "it sets a cost of a .pps schedule; import-csv reads a CSV: add a cost statement to what it writes"},
    {"--memory", has_key(o, 1), C_PPS, "it sets a memory setting of a .pps schedule; import-csv reads a CSV"},
    {"--policy", has_key(o, 2), C_PPS, "it sets a policy of a .pps schedule; import-csv reads a CSV"},
    {"--hardware", has_key(o, 3), C_PPS, "it sets a hardware key of a .pps schedule; import-csv reads a CSV"},
    {"--model", has_key(o, 4), C_PPS, "it sets a model key of a .pps schedule; import-csv reads a CSV"},
    {"--schedule", o->schedule != NULL, C_PPS, "it picks a schedule of a .pps file; import-csv reads a CSV"},
    {"--stdlib", o->stdlib_dir != NULL, C_PPS, "it is where a .pps file's imports are found; import-csv reads a CSV"},
    {"--json", o->json, C_CHECK | C_SIM | C_SYNTH, "--json is for check, sim and synth"},
    {"--trace", o->trace != NULL, C_SIM, "--trace, --svg and --grid are for sim"},
    {"--svg", o->svg != NULL, C_SIM, "--trace, --svg and --grid are for sim"},
    {"--grid", o->grid, C_SIM, "--trace, --svg and --grid are for sim"},
    {"--svg-arrows", o->svg_arrows, o->svg ? C_SIM : 0, "it adds to the picture of sim --svg"},
    {"--svg-window", o->svg_window, o->svg ? C_SIM : 0, "it chooses the part of the picture of sim --svg"},
    {"--svg-devices", o->svg_devices, o->svg ? C_SIM : 0, "it chooses the part of the picture of sim --svg"},
    {"-o", o->out != NULL, C_EXPAND | C_EMITC | C_BUILD | C_IMPORT | C_EXPORT | C_SYNTH,
     "check, sim and compare print to standard output; --trace/--svg write files from sim"},
    {"--comms", o->comms, C_EXPORT, "--comms and --drop are for export-csv"},
    {"--drop", o->drop, C_EXPORT, "--comms and --drop are for export-csv"},
    {"--p2p buffered", o->p2p_buffered, C_PPS, "it sets how a .pps schedule's communication is checked; import-csv reads a CSV"},
    {"--transport nccl", o->transport_nccl, C_CHECK | C_SIM | C_COMPARE, "it sets how check, sim and compare time the receives"},
    {"arguments after --", o->argc > 0, C_BUILD, "they go to the C compiler of build"},
  };
  for (size_t k = 0; k < sizeof table / sizeof *table; k++)
    if (table[k].given && !(table[k].applies & me)) {
      usage_error("%s %s not apply to '%s' (%s)", table[k].opt, strncmp(table[k].opt, "arguments", 9) ? "does" : "do", cmd,
                  table[k].why);
      return 1;
    }
  /* --grid is printed after the text summary: -q and --json leave no place for it */
  if (o->grid && (o->quiet || o->json)) {
    usage_error("--grid cannot go with %s: the grid follows the text summary on standard output", o->json ? "--json" : "-q");
    return 1;
  }
  /* at most one output on standard output */
  const char *outs[5];
  int n = 0;
  if (o->json) outs[n++] = "--json";
  if ((me & (C_CHECK | C_SIM)) && !o->json && !o->quiet) outs[n++] = "the text summary (-q leaves it out)";
  if (o->trace && !strcmp(o->trace, "-")) outs[n++] = "--trace -";
  if (o->svg && !strcmp(o->svg, "-")) outs[n++] = "--svg -";
  if (o->out && !strcmp(o->out, "-")) outs[n++] = "-o -";
  if (n > 1) {
    usage_error("%s and %s both write to standard output: give all but one a file name", outs[0], outs[1]);
    return 1;
  }
  return 0;
}

/* Runs the command once the command line is read. */
static int run(Options *o, const Command *cmd, int color) {
  if (cmd->needs_file && !o->file) return usage_error("%s needs an input file", cmd->name);
  if (option_misuse(o, cmd->name)) return PPSC_USAGE;
  o->color = color >= 0 ? color : isatty(2) && getenv("TERM") && strcmp(getenv("TERM"), "dumb") != 0;
  if (!o->stdlib_dir) o->stdlib_dir = getenv("PPS_STDLIB");
  if (!o->stdlib_dir) o->stdlib_dir = PPS_STDLIB_DIR;

  Compilation c;
  memset(&c, 0, sizeof c);
  c.opt = o;
  diag_init(&c.diag, &c.arena);
  c.diag.max_errors = o->max_errors;
  c.diag.color = o->color;
  int rc = cmd->fn(&c);
  if (fflush(stdout) != 0 && rc == PPSC_OK) {
    fprintf(stderr, "ppsc: error writing output: %s\n", strerror(errno));
    rc = PPSC_USAGE;
  }
  arena_free(&c.arena);
  return rc;
}

int main(int argc, char **argv) {
  Options opt = {0};
  opt.synth_check = analysis_candidate;   /* the later phases, for `synthesize` (order.c) */
  opt.max_errors = 50;
  opt.max_ops = arena_default_max_ops();
  int color = -1;
  if (argc < 2) return usage_error("no command given");
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    fputs(usage_text, stdout);
    return PPSC_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ppsc (PPS) %s\n", PACKAGE_VERSION);
    return PPSC_OK;
  }
  const Command *cmd = NULL;
  for (size_t k = 0; k < sizeof commands / sizeof *commands; k++)
    if (!strcmp(argv[1], commands[k].name)) cmd = &commands[k];
  if (!cmd) return usage_error("unknown command '%s'", argv[1]);
  opt.cmd = cmd->name;

  Define *defs = calloc((size_t)argc, sizeof *defs);
  if (!defs) return usage_error("out of memory");
  opt.defs = defs;
  KeyOverride *keys = calloc((size_t)argc, sizeof *keys);
  if (!keys) { free(defs); return usage_error("out of memory"); }
  opt.keys = keys;
  int rc = parse_options(argc, argv, &opt, defs, &color);
  arena_set_oom_hint(opt.max_ops);
  if (rc < 0) rc = run(&opt, cmd, color);
  for (int k = 0; k < opt.ndefs; k++) free((char *)defs[k].name);
  free(defs);
  for (int k = 0; k < opt.nkeys; k++) free((char *)keys[k].key);
  free(keys);
  return rc;
}
