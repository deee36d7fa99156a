#!/bin/sh
# tables.sh: runtime test (being written)
exit 77
