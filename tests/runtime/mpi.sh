#!/bin/sh
# mpi.sh: runtime test (being written)
exit 77
