/* diag.h: diagnostics in GNU form, shared by every phase of the compiler.
 *
 *   file:line:col: error: message
 *    12 |   device 0 { F(0) F(9) }
 *       |                   ^~~~
 *
 * Every error is also recorded (file, line, col, message) for `--json`. Phases keep
 * going after an error; the driver ends with "ppsc: N errors". Messages are short,
 * lowercase and say what was expected. A Span with file == 0 has no location. */
#ifndef PPS_DIAG_H
#define PPS_DIAG_H
#include <stdint.h>
#include <stdio.h>
#include "arena.h"

typedef struct Span {
  uint32_t file;  /* index into Diag.files; 0 = no location */
  uint32_t line;  /* 1-based */
  uint32_t col;   /* 1-based, in bytes */
  uint32_t len;   /* width of the caret run, >= 1 */
} Span;

typedef struct SourceFile {
  const char *path;   /* as the user named it (or as resolved for imports) */
  const char *text;   /* whole contents, NUL-terminated copy */
  size_t size;
} SourceFile;

typedef enum {
  DIAG_ERROR,   /* makes the input invalid (exit 1) */
  DIAG_WARNING, /* printed, counted apart, never changes the exit code */
  DIAG_NOTE     /* attached to the previous error or warning */
} DiagLevel;

typedef struct DiagRecord {
  DiagLevel level;
  Span span;
  const char *message;
} DiagRecord;

typedef struct Diag {
  Arena *arena;
  SourceFile *files;  /* files[0] is a placeholder for "no location" */
  int nfiles, capfiles;
  DiagRecord *recs;
  int nrecs, caprecs;
  int errors, warnings;
  int max_errors;     /* stop printing (still counting) after this many; 0 = no limit */
  FILE *out;          /* stderr unless changed; NULL = record only */
  int color;          /* 1 = ANSI colours */
} Diag;

void diag_init(Diag *d, Arena *a);
/* Registers a file's text (copied) and returns its index for Span.file. */
uint32_t diag_add_file(Diag *d, const char *path, const char *text, size_t size);
const char *diag_file_path(const Diag *d, uint32_t file);

void diag_error(Diag *d, Span at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Span at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Span at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_emit(Diag *d, DiagLevel level, Span at, const char *msg);

/* Prints "ppsc: N errors" (or warnings) to d->out when there were any. */
void diag_summary(Diag *d);

/* Writes s as a JSON string literal (quotes included, control bytes escaped). */
void json_string(FILE *f, const char *s);
#endif
