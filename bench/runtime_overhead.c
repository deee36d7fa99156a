/* runtime_overhead.c: runtime overhead benchmark (being written). */
#include "ppsrt.h"
int main(void) { return 0; }
