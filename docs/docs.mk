# docs/docs.mk: the man page and documents installed with PPS.
