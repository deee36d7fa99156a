# compiler/driver.mk: the compiler library's shared core and the ppsc program.
# Other compiler fragments (front.mk, analysis.mk) add their sources to libppsc.la.
noinst_LTLIBRARIES += libppsc.la
libppsc_la_SOURCES = compiler/arena.c compiler/arena.h compiler/diag.c compiler/diag.h \
  compiler/ir.c compiler/ir.h compiler/output.c compiler/fileio.c compiler/driver.h runtime/safeio.h runtime/ppsrt_ops.h
libppsc_la_CPPFLAGS = $(AM_CPPFLAGS) -DPPS_STDLIB_DIR='"$(pkgdatadir)/stdlib"' -DPPS_LIBDIR='"$(libdir)"' \
  -DPPS_INCLUDEDIR='"$(includedir)"' -DPPS_BUILDDIR='"$(abs_top_builddir)"' -DPPS_SRCDIR='"$(abs_top_srcdir)"'
libppsc_la_LIBADD =

bin_PROGRAMS += ppsc
ppsc_SOURCES = compiler/main.c
ppsc_CPPFLAGS = $(libppsc_la_CPPFLAGS)
ppsc_LDADD = libppsc.la -lm
