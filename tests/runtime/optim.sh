#!/bin/sh
# optim.sh: the optimizer's settings a Megatron-LM user sets (docs/runtime.md, the flags
# of "Running a program"), each checked against what it must do to the weights, read
# from checkpoints (python3), not against another run of the same code:
# - --weight-decay X (decoupled, SGD and Adam): after one step from the same weights,
#   the run without decay minus the run with it is lr X w0 on every matrix and
#   embedding (names *.w and vocab.*), and exactly 0 on every bias and norm;
# - --adam-beta1 0 --adam-beta2 0 --adam-eps 1e-30: every element's second step moves
#   by exactly lr (or not at all), sign descent; with the default betas most do not;
# - --lr-schedule linear and inverse-square-root: the printed rates are the formula's;
# - a run of N steps, --save, --load and N more gives the losses of 2N in one run with
#   all of these set (the checkpoint restores them, and the optimizer: a resumed Adam
#   run without --optimizer adam once ran SGD), and the index records them;
# - bad values: exit 2 (flags) or 1 (checkpoint metadata), naming the field.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3 (needed to read the checkpoints)"; exit 77; }
GPT="--model gpt --vocab 64 --seq 8 --hidden 16 --heads 2 --layers-per-stage 1 --json -q"
build p2 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b P=2"; finish; }
T=$WORK/p2

# tensors.py CK: prints nothing; used as a module below (name -> list of floats)
cat >"$WORK/ck.py" <<'PY'
import json, os, struct
def load(index):
    idx = json.load(open(index))
    out = {}
    for sh in idx["shards"]:
        d = open(os.path.join(os.path.dirname(index), sh), "rb").read()
        n = struct.unpack("<Q", d[:8])[0]
        h = json.loads(d[8:8 + n]); h.pop("__metadata__")
        for name, t in h.items():
            a, b = t["data_offsets"]
            out[name] = struct.unpack("<%df" % ((b - a) // 4), d[8 + n + a:8 + n + b])
    return idx["__metadata__"], out
def decays(name):   # Megatron-LM's rule, written independently of the runtime: matrices and embeddings
    return name.endswith(".w") or name.startswith("vocab.")
PY

# ---- weight decay ----
decay() {   # DESC OPT RUNNER...: one step with and without --weight-decay 0.5 from the weights w0
  desc=$1 opt=$2; shift 2
  "$@" $GPT --optimizer $opt --lr 0.1 --iterations 1 --save "$WORK/a" >/dev/null 2>"$WORK/err" || { fail "$desc: no decay"; cat "$WORK/err" >&2; }
  "$@" $GPT --optimizer $opt --lr 0.1 --weight-decay 0.5 --iterations 1 --save "$WORK/b" >/dev/null 2>"$WORK/err" || fail "$desc: --weight-decay 0.5"
  if python3 - "$WORK" 0.1 0.5 >"$WORK/wd.out" 2>&1 <<'PY'
import sys; sys.path.insert(0, sys.argv[1]); import ck
w, lr, wd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
_, w0 = ck.load(w + "/w0"); _, a = ck.load(w + "/a"); mb, b = ck.load(w + "/b")
assert float(mb["weight_decay"]) == wd, mb
nd = nn = 0; bad = []
for name in sorted(w0):
    if name.startswith("optim."): continue
    for x0, xa, xb in zip(w0[name], a[name], b[name]):
        want = lr * wd * x0 if ck.decays(name) else 0.0
        d = xa - xb
        if (ck.decays(name) and abs(d - want) > 2e-6) or (not ck.decays(name) and d != 0.0):
            bad.append("%s: %.9g, want %.9g" % (name, d, want)); break
    if ck.decays(name): nd += 1
    else: nn += 1
if bad: print("\n".join(bad)); sys.exit(1)
assert nd >= 8 and nn >= 8, (nd, nn)
print("%d tensors decayed by lr wd w0, %d left (biases, norms)" % (nd, nn))
PY
  then pass "$desc --weight-decay: $(cat "$WORK/wd.out")"; else fail "$desc --weight-decay:"; sed 's/^/    /' "$WORK/wd.out" | head >&2; fi
}
"$T" $GPT --lr 0 --iterations 1 --save "$WORK/w0" >/dev/null 2>"$WORK/err" || { fail "save the initial weights"; cat "$WORK/err" >&2; }
decay "sgd" sgd "$T"
decay "adam" adam "$T"
# the CUDA backend's kernel (F32 master weights) under the emulator, when it is built
if [ -f "$EMU" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" PPS_EMU_TIMEOUT=30
  decay "emulated cuda adam" adam env LD_PRELOAD="$EMU" "$T" --backend cuda
else skip "the CUDA backend's weight decay ($EMU not built)"; fi

# ---- Adam's betas and epsilon: with both betas 0, the second step is sign descent ----
B0="--optimizer adam --lr 0.01 --adam-beta1 0 --adam-beta2 0 --adam-eps 1e-30"
signs() {   # DESC FLAGS...: share of elements whose step 2 moved by lr or 0
  desc=$1; shift
  "$T" $GPT "$@" --iterations 1 --save "$WORK/s1" >/dev/null 2>"$WORK/err" && "$T" $GPT "$@" --iterations 2 --save "$WORK/s2" >/dev/null 2>>"$WORK/err" \
    || { fail "$desc: runs"; cat "$WORK/err" >&2; return; }
  python3 - "$WORK" 0.01 <<'PY'
import sys; sys.path.insert(0, sys.argv[1]); import ck
w, lr = sys.argv[1], float(sys.argv[2])
_, s1 = ck.load(w + "/s1"); _, s2 = ck.load(w + "/s2")
n = k = 0
for name in s1:
    if name.startswith("optim."): continue
    for x1, x2 in zip(s1[name], s2[name]):
        d = abs(x2 - x1); n += 1
        k += d == 0.0 or abs(d - lr) <= 1e-6
print("%d %d" % (k, n))
PY
}
set -- $(signs "betas 0" $B0); if [ "${1:-x}" = "${2:-y}" ]; then pass "betas 0, eps 1e-30: all $2 elements moved by lr or 0 at step 2"
else fail "betas 0: $1 of $2 elements moved by lr or 0"; fi
set -- $(signs "default betas" --optimizer adam --lr 0.01); if [ -n "${2:-}" ] && [ "$1" -lt $(($2 / 2)) ]; then pass "default betas: $1 of $2 elements (the check tells them apart)"
else fail "default betas: $1 of $2 elements moved by lr or 0 (expected a minority)"; fi

# ---- learning-rate schedules ----
rates() { grep -o '"lr":[0-9.e+-]*' "$WORK/out" | sed 's/"lr"://' | tr '\n' ' '; }
schedule() {   # NAME AWKFORMULA FLAGS...
  name=$1 f=$2; shift 2
  expect_exit 0 "--lr-schedule $name" "$T" $GPT --iterations 8 "$@"
  got=$(rates)
  want=$(awk "BEGIN { for (s = 1; s <= 8; s++) { $f; printf \"%.9g \", r } }")
  ok=1; i=0
  for g in $got; do i=$((i + 1)); w=$(echo "$want" | cut -d' ' -f$i)
    awk "BEGIN { d = $g - $w; exit !(d < 1e-7 * $w + 1e-12 && d > -1e-7 * $w - 1e-12) }" || ok=0; done
  [ $ok = 1 ] && [ $i = 8 ] && pass "$name rates: $got" || fail "$name rates: '$got', formula '$want'"
}
schedule linear 'if (s <= 2) r = 0.1 * s / 2; else { t = (s - 2) / 4; if (t > 1) t = 1; r = 0.01 + 0.09 * (1 - t) }' \
  --lr 0.1 --warmup 2 --lr-schedule linear --min-lr 0.01 --lr-decay-steps 6
schedule inverse-square-root 'if (s <= 3) r = 0.1 * s / 3; else { r = 0.1 * sqrt(3 / s); if (r < 0.07) r = 0.07 }' \
  --lr 0.1 --warmup 3 --lr-schedule inverse-square-root --min-lr 0.07
schedule "inverse-square-root without warm-up" 'r = 0.1 / sqrt(s)' --lr 0.1 --lr-schedule inverse-square-root

# ---- everything set, saved and resumed: the uninterrupted run's losses ----
A="--optimizer adam --lr 0.02 --weight-decay 0.1 --adam-beta1 0.8 --adam-beta2 0.95 --adam-eps 1e-6 --lr-schedule linear --warmup 1 --min-lr 0.002 --lr-decay-steps 6"
losses() { grep -o '"loss":[-0-9.e+]*,"time_s"' "$1" | sed 's/"loss":\(.*\),"time_s"/\1/' | tr '\n' ' '; }
"$T" $GPT $A --iterations 6 >"$WORK/full.json" 2>"$WORK/err" || fail "6 iterations with every setting"
"$T" $GPT $A --iterations 3 --save "$WORK/r" >"$WORK/r1.json" 2>"$WORK/err" || fail "3 iterations, saved"
"$T" $GPT --iterations 3 --load "$WORK/r" >"$WORK/r2.json" 2>"$WORK/err" || { fail "resumed with no settings given"; cat "$WORK/err" >&2; }
want=$(losses "$WORK/full.json"); got="$(losses "$WORK/r1.json")$(losses "$WORK/r2.json")"
if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "3 + save + load (no flags) + 3 = 6 iterations: $got"
else fail "resumed losses '$got' differ from '$want'"; fi
python3 - "$WORK/r" <<'PY' && pass "the index records weight_decay, adam_beta1/2, adam_eps, lr_schedule" || fail "the index's optimizer fields"
import json, sys
m = json.load(open(sys.argv[1]))["__metadata__"]
assert (float(m["weight_decay"]), float(m["adam_beta1"]), float(m["adam_beta2"]), float(m["adam_eps"])) == (0.1, 0.8, 0.95, 1e-6), m
assert m["lr_schedule"] == "linear", m
PY
# the --weight-decay given on the command line wins over the checkpoint's
"$T" $GPT --iterations 3 --load "$WORK/r" --weight-decay 0 >"$WORK/r3.json" 2>"$WORK/err" || fail "resumed with --weight-decay 0"
[ "$(losses "$WORK/r3.json")" != "$(losses "$WORK/r2.json")" ] && pass "--weight-decay on the command line overrides the checkpoint's" \
  || fail "--weight-decay 0 after --load changed nothing"

# the optimizer is the checkpoint's: asking for another one is refused (Adam's moments
# would be dropped, or start at zero in mid-run), as are Adam's flags on an SGD run
expect_exit 1 "--load an Adam checkpoint with --optimizer sgd" "$T" $GPT --iterations 1 --load "$WORK/r" --optimizer sgd
expect_grep "was saved with --optimizer adam, this run asks for sgd (leave --optimizer out to continue with adam)" "the optimizer switch named"
expect_exit 1 "--load an SGD checkpoint with --adam-beta1" "$T" $GPT --iterations 1 --load "$WORK/w0" --adam-beta1 0.5
expect_grep "continues an SGD run: --adam-beta1" "Adam's flags on an SGD checkpoint named"

# ---- bad values ----
expect_exit 2 "--lr-schedule exponential" "$T" --lr-schedule exponential
expect_grep "constant, cosine, linear or inverse-square-root, got 'exponential'" "--lr-schedule names the choices"
expect_exit 2 "--adam-beta1 1" "$T" --optimizer adam --adam-beta1 1
expect_grep "adam-beta1 needs a number from 0 to below 1, got '1'" "--adam-beta1 1 named"
expect_exit 2 "--adam-beta2 -0.5" "$T" --optimizer adam --adam-beta2 -0.5
expect_exit 2 "--adam-eps 0" "$T" --optimizer adam --adam-eps 0
expect_exit 2 "--weight-decay nan" "$T" --weight-decay nan
expect_exit 2 "--adam-beta1 with SGD" "$T" --adam-beta1 0.5
expect_grep "add --optimizer adam" "Adam's flags under SGD named"
expect_exit 2 "--lr-decay-steps with inverse-square-root" "$T" --lr-schedule inverse-square-root --lr-decay-steps 4
# ... and when the schedule comes from the checkpoint, the same flags are refused there
"$T" $GPT --iterations 1 --lr-schedule inverse-square-root --save "$WORK/isq" >/dev/null 2>"$WORK/err" || fail "saving an inverse-square-root run"
expect_exit 1 "--lr-decay-steps on an inverse-square-root checkpoint" "$T" $GPT --iterations 1 --load "$WORK/isq" --lr-decay-steps 4
expect_grep "continues an inverse-square-root schedule, which decays without an end step" "the restored schedule named"
expect_exit 1 "--min-lr on a constant-schedule checkpoint" "$T" $GPT --iterations 1 --load "$WORK/w0" --min-lr 0.001
expect_grep "continues a constant one: add --lr-schedule" "the restored constant schedule named"
expect_exit 0 "--min-lr on an inverse-square-root checkpoint (its floor)" "$T" $GPT --iterations 1 --load "$WORK/isq" --min-lr 0.001
python3 - "$WORK/r" "$WORK" <<'PY' || fail "writing bad indexes"
import json, os, sys
idx = json.load(open(sys.argv[1]))
for name, k, v in (("ix_beta", "adam_beta2", "1.5"), ("ix_eps", "adam_eps", "0"), ("ix_wd", "weight_decay", "-1"),
                   ("ix_sched", "lr_schedule", "step")):
    j = json.loads(json.dumps(idx)); j["__metadata__"][k] = v
    json.dump(j, open(os.path.join(sys.argv[2], name), "w"))
PY
for c in "ix_beta:metadata field 'adam_beta2' is 1.5: out of range" "ix_eps:metadata field 'adam_eps' is 0: out of range" \
         "ix_wd:metadata field 'weight_decay' is '-1': not a number" "ix_sched:metadata field 'lr_schedule' is 'step'"; do
  f=${c%%:*}; msg=${c#*:}
  expect_exit 1 "checkpoint $f" "$T" $GPT --iterations 1 --load "$WORK/$f"
  expect_grep "$msg" "checkpoint $f named"
done
finish
