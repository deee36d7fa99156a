#!/bin/sh
# not-under-asan.sh: how `make check` runs a test script (SH_LOG_COMPILER): with the
# shell, unchanged, except that in a sanitizer build (SANITIZERS, configure's SAN_CFLAGS,
# not empty) a test listed in tests/not-under-asan.txt is not run: it says so ("not run
# under ASan: REASON") and exits 77, a skip, never a pass.
# Usage: not-under-asan.sh SANITIZERS SHELL TEST [ARGS...]
[ $# -ge 3 ] || { echo "not-under-asan.sh: usage: not-under-asan.sh SANITIZERS SHELL TEST [ARGS...]" >&2; exit 99; }
san=$1 sh=$2 test=$3
shift 3
if [ -n "$san" ]; then
  list=$(dirname "$0")/not-under-asan.txt
  [ -r "$list" ] || { echo "not-under-asan.sh: cannot read $list" >&2; exit 99; }
  while read -r name reason; do
    case $name in ''|'#'*) continue ;; esac
    case /$test in
      */"$name") echo "not run under ASan: $name: $reason (tests/not-under-asan.txt)"; exit 77 ;;
    esac
  done < "$list"
fi
exec $sh "$test" "$@"
