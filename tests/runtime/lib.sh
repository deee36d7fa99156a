# lib.sh: helpers for the runtime tests
