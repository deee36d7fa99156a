/* rt.h: internal declarations shared by the runtime core's files (not installed). */
#ifndef PPSRT_RT_H
#define PPSRT_RT_H
#include "ppsrt.h"
#include "backend.h"
#include "transport.h"
#include "model.h"
#endif
