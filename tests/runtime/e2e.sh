#!/bin/sh
# e2e.sh: runtime test (being written)
exit 77
