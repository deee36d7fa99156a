# stdlib/stdlib.mk: the standard schedules, installed under $(pkgdatadir)/stdlib, and their tests.
