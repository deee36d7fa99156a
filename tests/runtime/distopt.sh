#!/bin/sh
# distopt.sh: --distributed-optimizer (ZeRO stage 1: runtime/param.c shards the optimizer
# state over the --data-parallel replicas, replica.c reduce-scatters the gradients and
# all-gathers the weights). At P = 2, D = 2 and D = 3 (uneven shards):
# - the losses are bit for bit those of plain --data-parallel (the same sums, the same
#   element-wise updates), with Adam, weight decay and SGD; with --clip-grad within 1e-6
#   (the norm sums the shards in another order);
# - each device holds less: device_peak_bytes drops by what the shards save, computed
#   here from the tensors' sizes (read from a checkpoint): Adam's m and v keep one shard
#   (8 bytes an element of F32 weights) while weights and gradients are padded to D
#   blocks;
# - --check passes (each replica compares the shard it reduced); --val-data gives the
#   same validation losses; tied embeddings on two devices give plain's losses;
# - a checkpoint saved with it holds the same tensors as one saved without it (the
#   state gathered whole), and continues either way with the uninterrupted losses;
# - under mpirun (when built with MPI) the losses are the threads run's;
# - on the CUDA backend under the emulator (threads and NCCL transports): the same
#   losses as plain, --check, and the memory (BF16 weights: the master is sharded too);
# - without --data-parallel it is refused.
. "$(dirname "$0")/lib.sh"
build m4 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b m=4"; finish; }
M4=$WORK/m4
cat "$top_srcdir"/docs/*.md >"$WORK/text.txt"
GPT="--model gpt --seq 8 --hidden 24 --heads 2 --data $WORK/text.txt --data-format bytes --vocab 256 --json -q"
losses() { grep -o '"loss":[-0-9.e+]*,"time_s"' "$1" | sed 's/"loss":\(.*\),"time_s"/\1/' | tr '\n' ' '; }
# same LABEL A B: equal loss strings (float32 printed with 9 digits: bit for bit)
same() {
  a=$(losses "$2"); b=$(losses "$3")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$1: $a"; else fail "$1: '$a' vs '$b'"; sed 's/^/    /' "$WORK/err" | tail -5 >&2; fi
}
run() { out=$1; shift; "$M4" "$@" >"$WORK/$out" 2>"$WORK/err" || { fail "run $*: exit $?"; sed 's/^/    /' "$WORK/err" | tail -5 >&2; }; }

for D in 2 3; do
  for opt in "--optimizer adam --lr 0.01 --weight-decay 0.1" "--optimizer sgd --lr 0.05"; do
    run plain $GPT $opt --data-parallel $D --iterations 4
    # (D = 2 with Adam is also the uninterrupted run the resumptions below compare with)
    [ $D = 2 ] && [ "$opt" = "--optimizer adam --lr 0.01 --weight-decay 0.1" ] && cp "$WORK/plain" "$WORK/full"
    run dist $GPT $opt --data-parallel $D --iterations 4 --distributed-optimizer
    same "D=$D ${opt%% --lr*}: sharded = plain data-parallel" "$WORK/dist" "$WORK/plain"
  done
done
run plainc $GPT --optimizer adam --lr 0.01 --data-parallel 2 --iterations 4 --clip-grad 0.3
run distc $GPT --optimizer adam --lr 0.01 --data-parallel 2 --iterations 4 --clip-grad 0.3 --distributed-optimizer
a=$(losses "$WORK/distc"); b=$(losses "$WORK/plainc")
if [ -n "$a" ] && python3 -c "
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == len(b) == 4 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
then pass "--clip-grad: sharded within 1e-6 of plain: $a"; else fail "--clip-grad: '$a' vs '$b'"; fi
grep -q '"grad_norm":' "$WORK/distc" && pass "grad_norm printed" || fail "no grad_norm with --clip-grad"

# ---- memory: what the shards save, from the tensors' sizes ----
if command -v python3 >/dev/null 2>&1; then
  for D in 2 3; do
    run mplain $GPT --optimizer adam --lr 0.01 --data-parallel $D --iterations 1 --save "$WORK/ck$D"
    run mdist $GPT --optimizer adam --lr 0.01 --data-parallel $D --iterations 1 --distributed-optimizer --save "$WORK/cd$D"
    if python3 - "$WORK" $D >"$WORK/mem.out" 2>&1 <<'PY'
import json, os, struct, sys
w, D = sys.argv[1], int(sys.argv[2])
def tensors(index):   # device -> {name: numel} (weights only), and the data
    idx = json.load(open(index)); out = []; data = {}
    for sh in idx["shards"]:
        d = open(os.path.join(os.path.dirname(index), sh), "rb").read()
        n = struct.unpack("<Q", d[:8])[0]
        h = json.loads(d[8:8 + n]); h.pop("__metadata__")
        out.append({k: t["shape"][0] for k, t in h.items() if not k.startswith("optim.")})
        for k, t in h.items():
            a, b = t["data_offsets"]; data[(sh.split(".")[-2], k)] = d[8 + n + a:8 + n + b]
    return out, data
plain_t, plain_d = tensors(w + "/ck%d" % D)
dist_t, dist_d = tensors(w + "/cd%d" % D)
# the checkpoint is the same, byte for byte (weights and the gathered moments)
assert plain_d.keys() == dist_d.keys() and all(plain_d[k] == dist_d[k] for k in plain_d), "checkpoints differ"
peak = lambda f: json.load(open(f))["per_device"]
pp, pd = peak(w + "/mplain"), peak(w + "/mdist")
for dev, names in enumerate(plain_t):
    # replica 0 reports. Each stage's tensors (here one stage a device, in the
    # checkpoint's order, the parameters') at multiples of 128 elements of its buffers
    # (runtime/rt.h RT_DP_ALIGN): plain --data-parallel's gradient buffer of tp
    # elements; with the distributed optimizer the weights and the gradient (F32, 8
    # bytes) in buffers of td = tp rounded up to D, and each tensor's m and v (8 bytes)
    # only its elements in the replica's [0, C), C = td / D (at least one element: an
    # empty shard is allocated as one)
    ns = list(names.values()); offs = []; at = 0
    for n in ns: at = -(-at // 128) * 128; offs.append(at); at += n
    tp = at; td = -(-tp // D) * D; C = td // D
    sh = [max(0, min(C, o + n) - o) for o, n in zip(offs, ns)]
    save = 4 * sum(ns) + 4 * tp - 8 * td + sum(8 * (n - max(s, 1)) for n, s in zip(ns, sh))
    got = pp[dev]["device_peak_bytes"] - pd[dev]["device_peak_bytes"]
    assert got == save, "device %d: saved %d bytes, the shards account for %d" % (dev, got, save)
    print("device %d: %d of %d bytes saved" % (dev, got, pp[dev]["device_peak_bytes"]), end="; ")
PY
    then pass "D=$D: checkpoints equal; $(cat "$WORK/mem.out")"; else fail "D=$D memory/checkpoint:"; sed 's/^/    /' "$WORK/mem.out" >&2; fi
  done
else skip "memory and checkpoint comparison (no python3)"; fi

# ---- --check, and resuming ----
expect_exit 0 "--check with --distributed-optimizer" "$M4" $GPT --optimizer adam --data-parallel 2 --distributed-optimizer --check
grep -q '"check":{"match":true,"loss_match":true,"mismatches":0' "$WORK/out" && pass "--check: every shard matches" \
  || { fail "--check did not match"; tail -5 "$WORK/out" >&2; }
A="--optimizer adam --lr 0.01 --weight-decay 0.1 --data-parallel 2"
[ -s "$WORK/full" ] || fail "no uninterrupted run (\$GPT \$A --iterations 4) from the loop above"
run half $GPT $A --iterations 2 --distributed-optimizer --save "$WORK/r"
run rest $GPT $A --iterations 2 --load "$WORK/r"
run rest2 $GPT $A --iterations 2 --load "$WORK/r" --distributed-optimizer
cat "$WORK/half" "$WORK/rest" >"$WORK/cat1"; cat "$WORK/half" "$WORK/rest2" >"$WORK/cat2"
same "saved sharded, resumed plain = uninterrupted" "$WORK/cat1" "$WORK/full"
same "saved sharded, resumed sharded = uninterrupted" "$WORK/cat2" "$WORK/full"
run halfp $GPT $A --iterations 2 --save "$WORK/rp"
run rest3 $GPT $A --iterations 2 --load "$WORK/rp" --distributed-optimizer
cat "$WORK/halfp" "$WORK/rest3" >"$WORK/cat3"
same "saved plain, resumed sharded = uninterrupted" "$WORK/cat3" "$WORK/full"
# another D (another global batch, so other losses: plain --data-parallel 3 from the
# same checkpoint is the reference), and no data parallelism at all
B="--optimizer adam --lr 0.01 --weight-decay 0.1 --iterations 2 --load $WORK/r"
run d3p $GPT $B --data-parallel 3
run d3d $GPT $B --data-parallel 3 --distributed-optimizer
same "saved sharded with D = 2, resumed with D = 3: sharded = plain" "$WORK/d3d" "$WORK/d3p"
run d1s $GPT $B
run d1p $GPT --optimizer adam --lr 0.01 --weight-decay 0.1 --iterations 2 --load "$WORK/rp"
same "saved with D = 2, resumed without --data-parallel: sharded checkpoint = plain one" "$WORK/d1s" "$WORK/d1p"
run d3s $GPT $B --data-parallel 3 --distributed-optimizer --save "$WORK/r3"
run d3to2 $GPT --optimizer adam --lr 0.01 --weight-decay 0.1 --iterations 1 --load "$WORK/r3" --data-parallel 2 --distributed-optimizer
run d3to2p $GPT --optimizer adam --lr 0.01 --weight-decay 0.1 --iterations 1 --load "$WORK/r3" --data-parallel 2
same "saved sharded with D = 3 (uneven shards), resumed with D = 2: sharded = plain" "$WORK/d3to2" "$WORK/d3to2p"

# tied embeddings with stage 0 and the last stage on two devices (interleaved at P = 2):
# the matrix and its copy in buffers of their own, so that both shards are the same
# elements when the model sums the two gradients
if build il "$top_srcdir/stdlib/interleaved_1f1b.pps" -D P=2 -D m=4; then
  TG="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --embeddings tied --json -q $A --iterations 3"
  "$WORK/il" $TG >"$WORK/tplain" 2>"$WORK/err" || fail "tied plain: exit $?"
  "$WORK/il" $TG --distributed-optimizer >"$WORK/tdist" 2>"$WORK/err" || fail "tied sharded: exit $?"
  same "tied embeddings on two devices: sharded = plain" "$WORK/tdist" "$WORK/tplain"
else fail "build interleaved_1f1b"; fi

if have_mpi; then
  expect_exit 0 "mpirun -np 4: --data-parallel 2 --distributed-optimizer" mpirun_np 4 "$M4" $GPT $A --iterations 4 --distributed-optimizer
  same "MPI = threads" "$WORK/out" "$WORK/full"
else skip "--distributed-optimizer under MPI (libppsrt without MPI, or no mpirun)"; fi

# validation reads the gathered weights (on the GPU, where the master is sharded, the
# weights themselves): the same validation losses
vals() { grep '^val ' "$1" | tr '\n' ' '; }
V="$(echo "$GPT" | sed 's/ --json -q//') --optimizer adam --lr 0.01 --data-parallel 2 --iterations 4 --val-data $WORK/text.txt --val-every 2"
"$M4" $V >"$WORK/vplain" 2>"$WORK/err" && "$M4" $V --distributed-optimizer >"$WORK/vdist" 2>>"$WORK/err" || fail "--val-data runs"
[ -n "$(vals "$WORK/vplain")" ] && [ "$(vals "$WORK/vplain")" = "$(vals "$WORK/vdist")" ] && pass "--val-data: $(vals "$WORK/vdist")" \
  || fail "--val-data: '$(vals "$WORK/vdist")' vs '$(vals "$WORK/vplain")'"

# ---- the CUDA backend under the emulator: BF16 weights, so the F32 master is sharded too ----
EMU=$top_builddir/tests/gpu/emu/libppsrt_emu.so
if [ -f "$EMU" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" PPS_EMU_TIMEOUT=30
  CG="--model gpt --hidden 16 --heads 2 --query-groups 1 --seq 4 --vocab 32 --optimizer adam --lr 0.01 --weight-decay 0.1 --json -q --backend cuda --data-parallel 2"
  for tr in threads nccl; do
    E="env PPSRT_EMU_GPUS=4 LD_PRELOAD=$EMU"
    $E "$M4" $CG --transport $tr --iterations 3 --save "$WORK/cu" >"$WORK/cplain" 2>"$WORK/err" || { fail "cuda $tr plain"; sed 's/^/    /' "$WORK/err" | tail -3 >&2; continue; }
    $E "$M4" $CG --transport $tr --iterations 3 --distributed-optimizer >"$WORK/cdist" 2>"$WORK/err" || { fail "cuda $tr sharded"; sed 's/^/    /' "$WORK/err" | tail -3 >&2; continue; }
    same "emulated cuda, $tr: sharded = plain" "$WORK/cdist" "$WORK/cplain"
    CV="$(echo "$CG" | sed 's/ --json -q//') --transport $tr --iterations 2 --data $WORK/text.txt --val-data $WORK/text.txt --data-format bytes --vocab 256 --val-every 1"
    $E "$M4" $CV >"$WORK/vplain" 2>"$WORK/err" && $E "$M4" $CV --distributed-optimizer >"$WORK/vdist" 2>>"$WORK/err" || fail "cuda $tr --val-data runs"
    [ -n "$(vals "$WORK/vplain")" ] && [ "$(vals "$WORK/vplain")" = "$(vals "$WORK/vdist")" ] && pass "emulated cuda, $tr, --val-data (master sharded): $(vals "$WORK/vdist")" \
      || fail "emulated cuda, $tr, --val-data: '$(vals "$WORK/vdist")' vs '$(vals "$WORK/vplain")'"
    expect_exit 0 "emulated cuda, $tr: --check" $E "$M4" $CG --transport $tr --distributed-optimizer --check
    grep -q '"check":{"match":true,"loss_match":true,"mismatches":0' "$WORK/out" && pass "emulated cuda, $tr: every shard matches" || fail "emulated cuda, $tr: --check"
    # per parameter: master, m, v (12 bytes) keep one shard; BF16 weights (2) and F32
    # gradients (4) grow to D blocks. The peak also holds the messages in flight at its
    # moment (device buffers on the GPU, their number varies with timing): 0 or 1 of
    # the activation messages (seq x hidden x 2 bytes = 128) seen under seeds 1-6, and
    # 1F1B at P = 2 has at most 2 of device 0's in flight: 256 bytes either way.
    python3 - "$WORK" >"$WORK/mem.out" 2>&1 <<'PY' && pass "emulated cuda, $tr: $(cat "$WORK/mem.out")" || { fail "emulated cuda, $tr, memory:"; sed 's/^/    /' "$WORK/mem.out" >&2; }
import json, os, struct, sys
w, D = sys.argv[1], 2
idx = json.load(open(w + "/cu"))
pp, pd = json.load(open(w + "/cplain"))["per_device"], json.load(open(w + "/cdist"))["per_device"]
for dev, sh in enumerate(idx["shards"]):
    d = open(os.path.join(w, sh), "rb").read(); n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n]); h.pop("__metadata__")
    ns = [t["shape"][0] for k, t in h.items() if not k.startswith("optim.")]
    offs = []; at = 0   # (the buffers' layout, as in the CPU check above)
    for N in ns: at = -(-at // 128) * 128; offs.append(at); at += N
    tp = at; td = -(-tp // D) * D; C = td // D
    sh = [max(0, min(C, o + N) - o) for o, N in zip(offs, ns)]
    save = 14 * sum(ns) + 4 * tp - 6 * td - sum(12 * max(s, 1) for s in sh)
    got = pp[dev]["device_peak_bytes"] - pd[dev]["device_peak_bytes"]
    assert abs(got - save) <= 256, "device %d: saved %d bytes, the shards account for %d" % (dev, got, save)
    print("device %d: %d bytes saved (shards: %d)" % (dev, got, save), end="; ")
PY
  done
else skip "--distributed-optimizer on the CUDA backend ($EMU not built)"; fi

expect_exit 2 "--distributed-optimizer without --data-parallel" "$M4" --distributed-optimizer
expect_grep "add --data-parallel D" "the missing flag named"
finish
