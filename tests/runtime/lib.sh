# lib.sh: helpers sourced by the runtime tests (tests/runtime/*.sh).
# Environment from make check: top_srcdir, top_builddir, PPSC, MPIRUN, CC.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$(pwd)}"
: "${PPSC:=$top_builddir/ppsc}"
PPS_BUILD_TREE=$top_builddir
export PPS_BUILD_TREE
RT_TABLES=$top_builddir/tests/runtime/rt_tables
# programs built by ppsc link the library of this build: give them its sanitizers
SAN_CFLAGS=$(sed -n 's/^SAN_CFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null)
if [ -n "$SAN_CFLAGS" ]; then
  CFLAGS="-O1 -g $SAN_CFLAGS"; LDFLAGS="$SAN_CFLAGS"; export CFLAGS LDFLAGS
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pps-rt-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILS=0

# PPS_FAIL_FAST=1 (make mutants sets it for a test with a planted bug): the first failure
# ends the test (exit 1), since one is all a mutant needs (inside a $(...) or a pipeline
# it ends that subshell alone, as the count does not reach the test there either)
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); [ -z "${PPS_FAIL_FAST:-}" ] || exit 1; }
pass() { echo "ok: $*"; }
# skip DESC: a check that could not run here, said so in the log (never counted as passed)
skip() { echo "skip: $*"; }

# build NAME FILE [-D ...]: ppsc build into $WORK/NAME; returns ppsc's status.
build() {
  name=$1; shift
  "$PPSC" build "$@" -o "$WORK/$name" 2> "$WORK/$name.build.err"
  st=$?
  if [ $st -ne 0 ]; then cat "$WORK/$name.build.err" >&2; fi
  return $st
}

# expect_exit CODE DESC CMD...: runs CMD, checks its exit status; output in $WORK/out.
expect_exit() {
  want=$1; desc=$2; shift 2
  "$@" > "$WORK/out" 2>&1
  got=$?
  if [ "$got" -eq "$want" ]; then pass "$desc (exit $got)"
  else fail "$desc: exit $got, expected $want"; sed 's/^/    /' "$WORK/out" | tail -20 >&2; fi
}

# expect_grep PATTERN DESC: the last command's output ($WORK/out) matches PATTERN.
expect_grep() {
  if grep -q -- "$1" "$WORK/out"; then pass "$2"
  else fail "$2: no '$1' in the output"; sed 's/^/    /' "$WORK/out" | tail -20 >&2; fi
}

finish() {
  if [ "$FAILS" -ne 0 ]; then echo "$FAILS failure(s)" >&2; exit 1; fi
  exit 0
}

# Does libppsrt have MPI, and is there an mpirun?
have_mpi() {
  [ -n "$MPIRUN" ] || return 1
  grep -q "HAVE_MPI 1" "$top_builddir/config.h" 2>/dev/null
}
# MPI_ASAN: Open MPI leaks small allocations inside components it dlopens and unloads
# (LeakSanitizer reports them as "<unknown module>"); they are not ours. Under
# --enable-asan the MPI processes keep every memory-error check but no leak detection;
# the threads-transport tests keep leak detection on for the runtime.
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# mpirun_np N PROGRAM ...: mpirun as these tests start it (after have_mpi): as root
# allowed, oversubscribed, stopped after 180 s
mpirun_np() {
  np=$1; shift
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 180 "$MPIRUN" --oversubscribe -np "$np" "$@"
}   # (ASAN_OPTIONS as it is at the call: a test that adds to it after sourcing this keeps it)

# The CUDA emulator (tests/gpu/emu/libppsrt_emu.so, LD_PRELOADed by the tests that run
# the CUDA backend on the host). need_emu: exit 77 when it is not built, else export
# what its runs need: under ASan it is preloaded ahead of the sanitizer's runtime, and
# a stuck emulated wait ends the run after PPS_EMU_TIMEOUT seconds.
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
EMU_GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"   # a tiny gpt
need_emu() {
  [ -f "$EMU" ] || { echo "skip: $EMU not built"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  export PPS_EMU_TIMEOUT=30
}
