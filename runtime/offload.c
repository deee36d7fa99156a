/* offload.c: (being written; see runtime/core.mk) */
#include "rt.h"
