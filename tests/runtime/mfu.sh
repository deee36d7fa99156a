#!/bin/sh
# mfu.sh: FLOPs, achieved FLOP/s and MFU. The hardware { } block reaches the program
# (ppsc emit-c's table, the JSON's "hardware"); the FLOPs of one iteration equal the
# closed form EXACTLY (gpt: m (layers 3M + 12bs^2h + 3bsh + 6bshV), M = 2bs(h^2(1 + 2g/a)
# + h^2 + c h f) the products of a layer (c = 2, or 3 with SwiGLU; bsh(72h+12s) for g = a,
# f = 4h, GeLU), without and with vocabulary parallelism, and with --arch llama, where the vocabulary passes count on the devices that run
# them; mlp: 3 passes x 2Nh^2 per linear); MFU = achieved / (P x peak) with
# --peak-flops, n/a without it on the CPU (the hardware block's flops is the GPU's);
# an ABI mismatch is refused with a clear message. No wall-clock assertions: the
# times are whatever they are, only the arithmetic between printed figures is checked.
. "$(dirname "$0")/lib.sh"
P=2; m=3; L=1; h=16; s=4; b=2; V=32; heads=2; N=$((s * b))
GPT="--model gpt --hidden $h --heads $heads --query-groups 1 --seq $s --micro-batch $b --vocab $V --layers-per-stage $L"

# P = 2 stages (linear), all forwards then B/W pairs; optionally vocabulary parallel
sched() {   # sched VOCAB_LINE > file
  printf 'schedule mfu(P = 2, m = 3) {\n  devices P; microbatches m; placement linear;\n'
  printf '  cost TF = 1, TB = 1, TW = 1, TC = 0;\n  %s\n' "$1"
  printf '  hardware { flops = 1e9; memory = 8e10; }\n'
  printf '  for d in 0..P { device d { for i in 0..m { F(i) } for i in 0..m { B(i) W(i) } } }\n}\n'
}
sched "" > "$WORK/mfu.pps"
sched "vocab parallel 1;" > "$WORK/mfu_v1.pps"
sched "vocab parallel 2;" > "$WORK/mfu_v2.pps"

# ---- the compiler emits the hardware block ----
expect_exit 0 "emit-c with a hardware block" "$PPSC" emit-c "$WORK/mfu.pps" -o "$WORK/mfu.c"
cp "$WORK/mfu.c" "$WORK/out"
expect_grep "static const ppsrt_kv hardware\[\]" "emit-c writes the hardware table"
expect_grep '{"flops", 1000000000},' "emit-c: hardware flops"
expect_grep "hardware, 2," "emit-c: the program points at it"
expect_exit 0 "emit-c output compiles with -Wall -Wextra -Werror" ${CC:-cc} -Wall -Wextra -Werror \
  -I"$top_srcdir/runtime" -c "$WORK/mfu.c" -o "$WORK/mfu.o"

# json_num KEY FILE: the number after the LAST "KEY": in FILE (top level keys follow
# the per-iteration and per-device ones); json_it KEY: the first (iteration 1)
json_num() { tr ',{}[' '\n\n\n\n' < "$2" | sed -n "s/^\"$1\":\(.*\)$/\1/p" | tail -1; }
json_it() { tr ',{}[' '\n\n\n\n' < "$2" | sed -n "s/^\"$1\":\(.*\)$/\1/p" | head -1; }
# same A B RELTOL: |A - B| <= RELTOL * |B| (awk, double)
same() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'; }

# closed form of one iteration's FLOPs (Vocabulary Parallelism paper's counts, with the
# layer's products counted for its query groups g, MLP width f and c matrices)
gpt_flops() {   # gpt_flops F C: MLP width F, C matrices
  awk -v m=$m -v P=$P -v L=$L -v h=$h -v s=$s -v b=$b -v V=$V -v a=$heads -v g=1 -v f="$1" -v c="$2" 'BEGIN {
    bsh = b * s * h; M = 2 * b * s * (h * h * (1 + 2 * g / a) + h * h + c * h * f)
    printf "%.17g\n", m * (P * L * (3 * M + 12 * bsh * s) + 3 * bsh + 6 * bsh * V) }'
}
gpt_expect=$(gpt_flops $((4 * h)) 2)
llama_expect=$(gpt_flops 24 3)
mlp_expect=$(awk -v m=$m -v P=$P -v L=$L -v h=$h -v N=$N 'BEGIN { printf "%.17g\n", m * P * L * 3 * 2 * N * h * h }')
echo "closed form: gpt $gpt_expect FLOPs per iteration, mlp $mlp_expect"

for v in "" _v1 _v2; do
  name=mfu$v
  if ! build "$name" "$WORK/$name.pps"; then fail "build $name"; continue; fi
  expect_exit 0 "$name gpt --json --peak-flops" "$WORK/$name" $GPT --iterations 2 --json --peak-flops 2.5e9
  cp "$WORK/out" "$WORK/$name.json"
  for key in flops_per_iteration achieved_flops_per_s achieved_flops_per_s_per_device mfu mfu_per_device \
             peak_flops peak_flops_source hardware; do
    grep -q "\"$key\":" "$WORK/$name.json" && pass "$name: JSON has $key" || fail "$name: JSON lacks $key"
  done
  got=$(json_num flops_per_iteration "$WORK/$name.json")
  [ "$got" = "$gpt_expect" ] && pass "$name: FLOPs per iteration $got = closed form" ||
    fail "$name: FLOPs per iteration $got, closed form $gpt_expect"
  # per device figures sum to the total (the vocabulary shares are halves: exact)
  dsum=$(tr ',{}[' '\n\n\n\n' < "$WORK/$name.json" | sed -n 's/^"flops_per_iteration":\(.*\)$/\1/p' |
         sed '$d' | awk '{ t += $1 } END { printf "%.17g\n", t }')
  [ "$dsum" = "$gpt_expect" ] && pass "$name: per-device FLOPs sum to the total" ||
    fail "$name: per-device FLOPs sum $dsum, total $gpt_expect"
  t=$(json_it time_s "$WORK/$name.json"); a=$(json_it achieved_flops_per_s "$WORK/$name.json")
  u=$(json_it mfu "$WORK/$name.json")
  want_a=$(awk -v f="$got" -v t="$t" 'BEGIN { printf "%.17g\n", f / t }')
  want_u=$(awk -v a="$a" -v P=$P 'BEGIN { printf "%.17g\n", a / (P * 2.5e9) }')
  same "$a" "$want_a" 1e-6 && pass "$name: achieved = FLOPs / time" || fail "$name: achieved $a, FLOPs/time $want_a"
  same "$u" "$want_u" 1e-6 && pass "$name: MFU $u = achieved / (P x peak)" || fail "$name: MFU $u, expected $want_u"
  grep -q '"peak_flops":2500000000,"peak_flops_source":"--peak-flops","hardware":{"flops":1000000000,"memory":80000000000}' \
    "$WORK/$name.json" && pass "$name: peak from the flag, hardware block in the JSON" ||
    fail "$name: peak/hardware fields"
  expect_exit 0 "$name gpt --arch llama --ffn-hidden 24 --json" "$WORK/$name" $GPT --arch llama --ffn-hidden 24 --json
  got=$(json_num flops_per_iteration "$WORK/out")
  [ "$got" = "$llama_expect" ] && pass "$name: Llama's layer: FLOPs per iteration $got = closed form" ||
    fail "$name: Llama's layer: FLOPs per iteration $got, closed form $llama_expect"
done
if [ -n "$(command -v python3)" ] && [ -f "$WORK/mfu_v2.json" ]; then
  python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert len(o['iterations'][0]['mfu_per_device'])==2" \
    "$WORK/mfu_v2.json" && pass "the JSON with the new keys is valid" || fail "JSON invalid"
elif [ -z "$(command -v python3)" ]; then skip "JSON validity (no python3)"
fi

if [ -x "$WORK/mfu" ]; then
  # the text line: MFU = FLOP/s / (P x peak) to the printed precision (4 digits)
  expect_exit 0 "text lines with --peak-flops" "$WORK/mfu" $GPT --iterations 2 --peak-flops 3e9
  line=$(grep '^iter 1/2' "$WORK/out")
  fs=$(echo "$line" | sed -n 's/.*  FLOP\/s \([^ ]*\) (.*/\1/p'); pct=$(echo "$line" | sed -n 's/.*  MFU \([^%]*\)%.*/\1/p')
  want=$(awk -v a="$fs" -v P=$P 'BEGIN { printf "%.17g\n", 100 * a / (P * 3e9) }')
  [ -n "$pct" ] && same "$pct" "$want" 2e-3 && pass "printed MFU $pct% = FLOP/s $fs / (P x peak)" ||
    fail "printed MFU '$pct', FLOP/s '$fs': expected $want"
  expect_grep "^flops: $gpt_expect per iteration (d0 .* d1 .*); MFU against a peak of 3e+09 FLOP/s per device (--peak-flops)" \
    "the FLOPs summary line"
  # the CPU without --peak-flops: the hardware block is the GPU's, MFU n/a
  expect_exit 0 "text lines without a peak" "$WORK/mfu" $GPT
  expect_grep "  FLOP/s [0-9.e+]* (d0 [0-9.e+]* d1 [0-9.e+]*)  MFU n/a" "no peak on the CPU: achieved FLOP/s, MFU n/a"
  expect_grep "MFU n/a: no peak FLOP/s (give --peak-flops" "the summary says why"
  expect_exit 0 "--json without a peak" "$WORK/mfu" $GPT --json
  expect_grep '"mfu":null,"mfu_per_device":null' "no peak: mfu null"
  expect_grep '"peak_flops":null,"peak_flops_source":null' "no peak: peak_flops null"
  # mlp: 3 passes of 2 N h^2 per linear
  expect_exit 0 "mlp --json" "$WORK/mfu" --hidden $h --seq $s --micro-batch $b --layers-per-stage $L --json
  got=$(json_num flops_per_iteration "$WORK/out")
  [ "$got" = "$mlp_expect" ] && pass "mlp: FLOPs per iteration $got = closed form" ||
    fail "mlp: FLOPs per iteration $got, closed form $mlp_expect"
  expect_exit 0 "--no-compute --json" "$WORK/mfu" --no-compute --json --peak-flops 1e9
  expect_grep '"achieved_flops_per_s":null' "--no-compute: no achieved FLOP/s"
  for bad in "--peak-flops" "--peak-flops 0" "--peak-flops -1" "--peak-flops x"; do
    expect_exit 2 "bad flag: $bad" "$WORK/mfu" $bad
  done
fi

# one process per device (MPI): rank 0 counts every device's passes from the tables
if have_mpi && [ -x "$WORK/mfu_v1" ]; then
  expect_exit 0 "mpirun -np 2 Vocab-1 --json" mpirun_np 2 "$WORK/mfu_v1" $GPT --json --peak-flops 1e9
  got=$(json_num flops_per_iteration "$WORK/out")
  [ "$got" = "$gpt_expect" ] && pass "MPI: FLOPs per iteration $got = closed form" ||
    fail "MPI: FLOPs per iteration $got, closed form $gpt_expect"
else echo "skip: MPI (not built or no mpirun)"; fi

# a program built for another ABI is refused, clearly (ppsrt.h included first, its
# version replaced, then the generated file's own include is a no-op)
printf '#include <ppsrt.h>\n#undef PPSRT_ABI_VERSION\n#define PPSRT_ABI_VERSION 1\n' > "$WORK/abi1.h"
if env CC="${CC:-cc} -include $WORK/abi1.h" "$PPSC" build "$WORK/mfu.pps" -o "$WORK/abi1" 2> "$WORK/abi1.err"; then
  expect_exit 1 "an ABI 1 program is refused" "$WORK/abi1"
  expect_grep "program built for runtime ABI 1, this libppsrt is ABI 4" "ABI mismatch message"
  expect_grep "hint: rebuild it" "ABI mismatch hint"
else fail "build the ABI 1 program"; cat "$WORK/abi1.err" >&2; fi
finish
