# runtime/core.mk: libppsrt: public header, interpreter, transports, CPU backend, mlp model.
pkgconfig_DATA += runtime/ppsrt.pc
