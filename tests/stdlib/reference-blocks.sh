#!/bin/sh
# tests/stdlib/reference-blocks.sh: V-Half 26.5/3 at P = 4, m = 8 (reference table).
# Expected to fail (XFAIL_TESTS) until the compiler's building block expansion
# compacts the warm-up and cool-down as the paper does; the plain slot order gives 30/3.
exec sh "${top_srcdir:?}/tests/stdlib/reference.sh" blocks
