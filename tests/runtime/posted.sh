#!/bin/sh
# posted.sh: posted receives (op flag PPSRT_FLAG_POSTED, runtime/ppsrt_ops.h: a recv issued where it stands, its data
# waited for only before its consumer) on the CPU backend. Until ppsc sets the flag, the
# programs are made by hand: `ppsc emit-c` output whose op tables posted.awk edits (each
# recv moved up to 6 ops earlier and flagged 8), compiled as `ppsc build` does. For
# 1f1b, zb_v, interleaved_1f1b, dualpipe_v (overlapped pairs: a consumer's pair starts
# after the wait) at P = 4, m = 8 with the mlp, and vocab_1f1b with the gpt (vocabulary
# passes read the data): on the threads transport the posted program passes --check with
# the losses of the program as emitted (identical: the data is the same), and under
# mpirun -np 4 on the MPI transport too (skipped without MPI); its --trace has every recv
# once per iteration (where it completes); rt_tables posted (a plain recv after a
# pending posted recv of its channel, before the posted one's consumer: FIFO) passes
# --check on both transports; and the same moved table without flag 8
# (recvs that block where they stand) stops with a timeout on 1f1b: the flag is what
# makes it run. The emulated NCCL runs are tests/gpu/posted_emu.sh.
. "$(dirname "$0")/lib.sh"
GPT="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32"
MLP="--hidden 8 --seq 4"

# cc_prog NAME: $WORK/NAME.c -> $WORK/NAME, linked to this build's libppsrt as ppsc build does
cc_prog() {
  ${CC:-cc} ${CFLAGS:--O2} "$WORK/$1.c" -o "$WORK/$1" -I"$top_srcdir/runtime" -L"$top_builddir/.libs" \
    -Wl,-rpath,"$top_builddir/.libs" -lppsrt $LDFLAGS 2> "$WORK/$1.cc.err" || { cat "$WORK/$1.cc.err" >&2; return 1; }
}
# make_pair NAME [awk -v ...]: $WORK/NAME.x as emitted, $WORK/NAME.y with posted recvs
make_pair() {
  name=$1; shift
  "$PPSC" emit-c "$top_srcdir/stdlib/$name.pps" -D P=4 -D m=8 -o "$WORK/$name.x.c" &&
    awk -v LIMIT=6 "$@" -f "$top_srcdir/tests/runtime/posted.awk" "$WORK/$name.x.c" > "$WORK/$name.y.c" &&
    cc_prog "$name.x" && cc_prog "$name.y"
}
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }

for s in 1f1b zb_v interleaved_1f1b dualpipe_v vocab_1f1b; do
  sizes=$MLP
  [ "$s" = vocab_1f1b ] && sizes=$GPT
  make_pair "$s" || { fail "$s: making the posted program"; continue; }
  n=$(grep -c 'RECV([A-Z]*,[0-9]*,[0-9-]*,[0-9]*,1[2-5],' "$WORK/$s.y.c")
  [ "$n" -gt 0 ] || fail "$s: no recv flagged posted and grouped"
  "$WORK/$s.x" --check --iterations 2 --json $sizes > "$WORK/$s.x.json" 2>&1 || fail "$s as emitted, threads"
  expect_exit 0 "$s posted recvs, threads --check" "$WORK/$s.y" --check --iterations 2 --json --timeout 20 $sizes
  cp "$WORK/out" "$WORK/$s.y.json"
  a=$(losses "$WORK/$s.x.json") b=$(losses "$WORK/$s.y.json")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$s threads: losses equal the unflagged program's ($b)"
  else fail "$s threads: losses '$b', as emitted '$a'"; fi
  if have_mpi; then
    expect_exit 0 "$s posted recvs, mpirun -np 4 --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 \
      OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="$MPI_ASAN" "$MPIRUN" --oversubscribe -np 4 "$WORK/$s.y" --check \
      --iterations 2 --json --timeout 20 $sizes
    b=$(losses "$WORK/out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$s MPI: losses equal the unflagged program's"
    else fail "$s MPI: losses '$b', as emitted on threads '$a'"; fi
  else skip "$s under MPI (libppsrt built without it, or no mpirun)"
  fi
done

# FIFO: rt_tables posted (each device's first activation recv posted, the second plain
# right after it, before the first's consumer) must match the second message second
"$RT_TABLES" 1f1b 4 8 --check --json -q $MLP > "$WORK/t1.json" 2>&1 || fail "rt_tables 1f1b"
expect_exit 0 "rt_tables posted (a plain recv after a pending posted one), threads --check" \
  "$RT_TABLES" posted 4 8 --check --json -q $MLP
a=$(losses "$WORK/t1.json") b=$(losses "$WORK/out")
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "rt_tables posted: loss equals 1f1b's"; else fail "rt_tables posted: '$b' vs '$a'"; fi
if have_mpi; then
  expect_exit 0 "rt_tables posted, mpirun -np 4 --check" timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS="$MPI_ASAN" "$MPIRUN" --oversubscribe -np 4 "$RT_TABLES" posted 4 8 \
    --check -q $MLP
  expect_grep "check: passed" "rt_tables posted under MPI: check passed"
fi

# --trace: every recv shows once per iteration, the posted ones where they complete
if [ -x "$WORK/zb_v.y" ]; then
  expect_exit 0 "zb_v posted --trace" "$WORK/zb_v.y" --iterations 2 -q --trace "$WORK/t.json" $MLP
  want=$(( 2 * $(grep -o 'RECV([A-Z]' "$WORK/zb_v.y.c" | wc -l) ))
  got=$(grep -c '"cat":"recv"' "$WORK/t.json")
  if [ "$got" -eq "$want" ]; then pass "trace has every recv ($got)"; else fail "trace has $got recvs, expected $want"; fi
fi

# the moved table without flag 8 blocks where its recvs stand: a deadlock, stopped by --timeout
if make_pair 1f1b -v NOPOST=1 && ! grep -q 'RECV([A-Z]*,[0-9]*,[0-9-]*,[0-9]*,\(9\|1[0-5]\),' "$WORK/1f1b.y.c"; then
  expect_exit 1 "1f1b moved recvs NOT posted: timeout" "$WORK/1f1b.y" --iterations 1 -q --timeout 2 $MLP
  expect_grep "waited" "the unposted table's timeout names the wait"
else fail "making the unposted 1f1b table"
fi
finish
