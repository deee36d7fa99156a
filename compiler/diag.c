/* diag.c: prints and records diagnostics; see diag.h for the format. */
#include "diag.h"
#include <stdarg.h>
#include <string.h>

void diag_init(Diag *d, Arena *a) {
  memset(d, 0, sizeof *d);
  d->arena = a;
  d->out = stderr;
  SourceFile *none = VEC_PUSH(a, d->files, d->nfiles, d->capfiles);
  none->path = "<none>";
  none->text = "";
}

uint32_t diag_add_file(Diag *d, const char *path, const char *text, size_t size) {
  SourceFile *f = VEC_PUSH(d->arena, d->files, d->nfiles, d->capfiles);
  f->path = arena_strdup(d->arena, path);
  f->text = arena_strndup(d->arena, text, size);
  f->size = size;
  return (uint32_t)(d->nfiles - 1);
}

const char *diag_file_path(const Diag *d, uint32_t file) {
  return file > 0 && (int)file < d->nfiles ? d->files[file].path : "<none>";
}

/* Prints the source line of `at` and a caret run under it. Bytes that would upset
 * a terminal (control characters, invalid UTF-8 is left alone) print as spaces. */
static void print_excerpt(Diag *d, Span at) {
  if (!at.file || (int)at.file >= d->nfiles || at.line == 0) return;
  const SourceFile *f = &d->files[at.file];
  const char *p = f->text, *end = f->text + f->size;
  for (uint32_t l = 1; l < at.line && p < end; p++)
    if (*p == '\n') l++;
  if (p > end) return;
  const char *e = p;
  while (e < end && *e != '\n') e++;
  size_t n = (size_t)(e - p);
  if (n > 400) n = 400; /* a 1 MB line is not worth printing whole */
  fprintf(d->out, "%5u | ", at.line);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    fputc(c == '\t' ? '\t' : (c < 0x20 || c == 0x7f) ? ' ' : c, d->out);
  }
  fputs("\n      | ", d->out);
  uint32_t col = at.col ? at.col : 1;
  for (uint32_t i = 1; i < col && i <= n; i++) fputc(p[i - 1] == '\t' ? '\t' : ' ', d->out);
  uint32_t len = at.len ? at.len : 1;
  if (col - 1 + len > n + 1) len = (uint32_t)(n + 1 >= col ? n + 2 - col : 1);
  if (d->color) fputs("\033[1;32m", d->out);
  fputc('^', d->out);
  for (uint32_t i = 1; i < len; i++) fputc('~', d->out);
  if (d->color) fputs("\033[0m", d->out);
  fputc('\n', d->out);
}

void diag_emit(Diag *d, DiagLevel level, Span at, const char *msg) {
  static const char *names[] = {"error", "warning", "note"};
  static const char *colors[] = {"\033[1;31m", "\033[1;35m", "\033[1;36m"};
  DiagRecord *r = VEC_PUSH(d->arena, d->recs, d->nrecs, d->caprecs);
  r->level = level;
  r->span = at;
  r->message = arena_strdup(d->arena, msg);
  if (level == DIAG_ERROR) d->errors++;
  if (level == DIAG_WARNING) d->warnings++;
  if (!d->out) return;
  if (d->max_errors && d->errors > d->max_errors) return;
  if (at.file && (int)at.file < d->nfiles)
    fprintf(d->out, "%s:%u:%u: ", d->files[at.file].path, at.line, at.col);
  else
    fputs("ppsc: ", d->out);
  fprintf(d->out, "%s%s:%s %s\n", d->color ? colors[level] : "", names[level], d->color ? "\033[0m" : "", msg);
  print_excerpt(d, at);
}

#define DIAG_FORMAT(LEVEL)                        \
  do {                                            \
    char buf[1024];                               \
    va_list ap;                                   \
    va_start(ap, fmt);                            \
    vsnprintf(buf, sizeof buf, fmt, ap);          \
    va_end(ap);                                   \
    diag_emit(d, LEVEL, at, buf);                 \
  } while (0)

void diag_error(Diag *d, Span at, const char *fmt, ...) { DIAG_FORMAT(DIAG_ERROR); }
void diag_warning(Diag *d, Span at, const char *fmt, ...) { DIAG_FORMAT(DIAG_WARNING); }
void diag_note(Diag *d, Span at, const char *fmt, ...) { DIAG_FORMAT(DIAG_NOTE); }

void diag_summary(Diag *d) {
  if (!d->out) return;
  if (d->max_errors && d->errors > d->max_errors)
    fprintf(d->out, "ppsc: %d more errors not shown\n", d->errors - d->max_errors);
  if (d->errors)
    fprintf(d->out, "ppsc: %d error%s\n", d->errors, d->errors == 1 ? "" : "s");
}

void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\t': fputs("\\t", f); break;
    case '\r': fputs("\\r", f); break;
    default:
      if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}
