#!/bin/sh
# flags.sh: runtime test (being written)
exit 77
