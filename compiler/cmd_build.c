/* cmd_build.c: the `emit-c` and `build` commands.
 *
 * emit-c FILE -o OUT.c: front end, then the analysis pipeline (lower, verify,
 * simulate); an invalid schedule is refused (its errors printed, exit 1, nothing
 * written); a valid one becomes C (emit_c.c) written atomically.
 *
 * build FILE -o PROG: the same C in a temporary file, compiled and linked with
 * libppsrt by $CC (default cc) with $CFLAGS and $LDFLAGS, in a private temporary
 * directory; on success the program is written to PROG like every output (fileio.c:
 * whole or not at all, mode 0777 less the umask; the C compiler's errors are shown).
 * A PROG whose directory does not exist is a usage error (exit 2) before compiling. Where libppsrt is found, first match wins:
 *   1. $PPS_BUILD_TREE (a build directory): its .libs/ and the source tree's runtime/;
 *   2. this ppsc runs from the build tree it was configured in (PPS_BUILDDIR): same;
 *   3. `pkg-config --cflags --libs ppsrt`;
 *   4. the install prefix (PPS_INCLUDEDIR, PPS_LIBDIR).
 * An rpath to the library directory is added so PROG runs without LD_LIBRARY_PATH.
 * Arguments after `--` go to the C compiler at the end of its command line.
 * What it does not: no caching, no cross compiling, no CUDA compilation (the generated
 * file is plain C; the CUDA code lives in libppsrt). */
#include "config.h"
#include "emit_c.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PPS_BUILDDIR
#define PPS_BUILDDIR ""
#endif
#ifndef PPS_SRCDIR
#define PPS_SRCDIR ""
#endif
#ifndef PPS_LIBDIR
#define PPS_LIBDIR "/usr/local/lib"
#endif
#ifndef PPS_INCLUDEDIR
#define PPS_INCLUDEDIR "/usr/local/include"
#endif

/* Front end + analysis + code generation into out. Returns PPSC_*. */
static int generate(Compilation *c, StrBuf *out) {
  int io = 0;
  IrSchedule *s = front_compile(c, &io);
  if (io) { diag_summary(&c->diag); return PPSC_USAGE; }
  if (!s || c->diag.errors) { diag_summary(&c->diag); return PPSC_INVALID; }
  Analysis an;
  int valid = analysis_run(&c->arena, &c->diag, s, &an, 0);
  if (!valid || c->diag.errors || !an.simulated) {
    if (!c->diag.errors) diag_error(&c->diag, s->span, "schedule '%s' cannot be run: it did not simulate to the end", s->name);
    diag_summary(&c->diag);
    fprintf(stderr, "ppsc: %s: refusing to generate code for an invalid schedule\n", c->opt->cmd);
    return PPSC_INVALID;
  }
  diag_summary(&c->diag);   /* warnings */
  emit_c(s, &an, &c->diag, out);
  return PPSC_OK;
}

int cmd_emit_c(Compilation *c) {
  if (!c->opt->out) {
    fprintf(stderr, "ppsc: emit-c needs -o OUT.c\nTry 'ppsc --help'.\n");
    return PPSC_USAGE;
  }
  StrBuf out = {0};
  int rc = generate(c, &out);
  if (rc == PPSC_OK && write_file_atomic(c->opt->out, out.data, out.len)) rc = PPSC_USAGE;
  sb_free(&out);
  return rc;
}

/* Appends s to b quoted for sh. */
static void sh_quote(StrBuf *b, const char *s) {
  sb_puts(b, "'");
  for (; *s; s++) {
    if (*s == '\'') sb_puts(b, "'\\''");
    else { char ch[2] = {*s, 0}; sb_puts(b, ch); }
  }
  sb_puts(b, "'");
}

static int is_dir(const char *p) {
  struct stat st;
  return p && *p && !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISREG(st.st_mode);
}

/* Is this ppsc the one in the build tree it was configured for? */
static int running_from_build_tree(void) {
  char exe[PATH_MAX], bt[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || !*PPS_BUILDDIR || !realpath(PPS_BUILDDIR, bt)) return 0;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return 0;
  *slash = 0;
  size_t lb = strlen(bt);
  /* the binary itself, or libtool's .libs/ beside it */
  return !strcmp(exe, bt) || (!strncmp(exe, bt, lb) && !strcmp(exe + lb, "/.libs"));
}

/* Output of a command's first line (pkg-config); NULL when it fails. */
static char *run_capture(const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p) return NULL;
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = 0;
  int st = pclose(p);
  if (st != 0 || n == 0) return NULL;
  char *nl = strchr(buf, '\n');
  if (nl) *nl = 0;
  return buf;
}

/* Compiler and linker flags for libppsrt into flags; says where through *where. */
static void ppsrt_flags(StrBuf *flags, const char **where) {
  const char *bt = getenv("PPS_BUILD_TREE");
  char lib[PATH_MAX + 16];
  if (bt && *bt) {
    snprintf(lib, sizeof lib, "%s/.libs", bt);
    *where = "PPS_BUILD_TREE";
  } else if (running_from_build_tree()) {
    bt = PPS_BUILDDIR;
    snprintf(lib, sizeof lib, "%s/.libs", bt);
    *where = "the build tree";
  } else {
    char *pc = run_capture("pkg-config --cflags --libs ppsrt 2>/dev/null");
    if (pc) {
      sb_puts(flags, pc);
      char *libs = run_capture("pkg-config --variable=libdir ppsrt 2>/dev/null");
      if (libs && *libs) { sb_puts(flags, " -Wl,-rpath,"); sh_quote(flags, libs); }
      *where = "pkg-config";
      return;
    }
    sb_puts(flags, "-I");
    sh_quote(flags, PPS_INCLUDEDIR);
    sb_puts(flags, " -L");
    sh_quote(flags, PPS_LIBDIR);
    sb_puts(flags, " -Wl,-rpath,");
    sh_quote(flags, PPS_LIBDIR);
    sb_puts(flags, " -lppsrt");
    *where = "the install prefix";
    return;
  }
  /* build tree: the public header is in the source tree's runtime/ */
  char inc[PATH_MAX + 16];
  snprintf(inc, sizeof inc, "%s/runtime", PPS_SRCDIR);
  char probe[PATH_MAX + 32];
  snprintf(probe, sizeof probe, "%s/ppsrt.h", inc);
  if (!is_file(probe)) snprintf(inc, sizeof inc, "%s/runtime", bt);
  sb_puts(flags, "-I");
  sh_quote(flags, inc);
  sb_puts(flags, " -L");
  sh_quote(flags, lib);
  sb_puts(flags, " -Wl,-rpath,");
  sh_quote(flags, lib);
  sb_puts(flags, " -lppsrt");
  (void)is_dir;
}

/* Whether the directory OUT would go in exists (checked before compiling anything). */
static int out_dir_ok(const char *out) {
  const char *slash = strrchr(out, '/');
  if (!slash) return 1;
  char dir[PATH_MAX];
  size_t n = slash == out ? 1 : (size_t)(slash - out);
  if (n >= sizeof dir) return 0;
  memcpy(dir, out, n);
  dir[n] = 0;
  struct stat st;
  if (stat(dir, &st)) return 0;
  if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return 0; }
  return 1;
}

int cmd_build(Compilation *c) {
  const char *out = c->opt->out;
  if (!out) {
    fprintf(stderr, "ppsc: build needs -o PROG\nTry 'ppsc --help'.\n");
    return PPSC_USAGE;
  }
  if (!strcmp(out, "-")) {
    fprintf(stderr, "ppsc: build: -o - is not a program file name\n");
    return PPSC_USAGE;
  }
  if (!out_dir_ok(out)) {
    fprintf(stderr, "ppsc: cannot write '%s': %s\n", out, strerror(errno ? errno : ENOENT));
    return PPSC_USAGE;
  }
  StrBuf code = {0};
  int rc = generate(c, &code);
  if (rc) { sb_free(&code); return rc; }

  /* the C file and the program go to a private temporary directory; the program is
     then written to OUT like every other output (fileio.c: whole or not at all) */
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir) tmpdir = "/tmp";
  char dir[PATH_MAX - 16], csrc[PATH_MAX], tmpout[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/ppsc-build-XXXXXX", tmpdir);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "ppsc: build: cannot create a temporary directory in %s: %s\n", tmpdir, strerror(errno));
    sb_free(&code);
    return PPSC_USAGE;
  }
  snprintf(csrc, sizeof csrc, "%s/prog.c", dir);
  snprintf(tmpout, sizeof tmpout, "%s/prog", dir);
  FILE *f = fopen(csrc, "wx");
  int werr = !f || fwrite(code.data, 1, code.len, f) != code.len;
  if (f && fclose(f)) werr = 1;
  sb_free(&code);
  if (werr) {
    fprintf(stderr, "ppsc: build: cannot write %s: %s\n", csrc, strerror(errno));
    unlink(csrc);
    rmdir(dir);
    return PPSC_USAGE;
  }

  const char *cc = getenv("CC"), *cflags = getenv("CFLAGS"), *ldflags = getenv("LDFLAGS");
  StrBuf cmd = {0};
  sb_puts(&cmd, cc && *cc ? cc : "cc");
  sb_puts(&cmd, " ");
  sb_puts(&cmd, cflags ? cflags : "-O2");
  sb_puts(&cmd, " ");
  sh_quote(&cmd, csrc);
  sb_puts(&cmd, " -o ");
  sh_quote(&cmd, tmpout);
  sb_puts(&cmd, " ");
  const char *where = "";
  ppsrt_flags(&cmd, &where);
  if (ldflags && *ldflags) { sb_puts(&cmd, " "); sb_puts(&cmd, ldflags); }
  for (int i = 0; i < c->opt->argc; i++) {   /* ppsc build FILE -o PROG -- ARGS: to the C compiler */
    sb_puts(&cmd, " ");
    sh_quote(&cmd, c->opt->argv[i]);
  }
  if (getenv("PPSC_VERBOSE")) fprintf(stderr, "ppsc: build (libppsrt from %s): %s\n", where, cmd.data);
  fflush(NULL);
  int st = system(cmd.data);
  int ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (ok) {
    size_t n = 0;
    char *prog = read_input(tmpout, 1, (size_t)1 << 30, &n);
    if (!prog) {
      fprintf(stderr, "ppsc: build: cannot read the linked program %s: %s\n", tmpout, read_input_error(errno));
      rc = PPSC_USAGE;
    } else if (write_output(out, prog, n, 0777)) {
      rc = PPSC_USAGE;
    }
    free(prog);
  } else {
    fprintf(stderr, "ppsc: build: the C compiler failed (libppsrt from %s); command:\n  %s\n", where, cmd.data);
    if (!strcmp(where, "the install prefix"))
      fprintf(stderr, "hint: install PPS (make install), make `pkg-config ppsrt` work (PKG_CONFIG_PATH), "
              "or set PPS_BUILD_TREE to a build directory\n");
    rc = PPSC_INVALID;
  }
  unlink(tmpout);
  unlink(csrc);
  rmdir(dir);
  sb_free(&cmd);
  return rc;
}
