#!/bin/sh
# ckpt.sh: checkpoints, validation and the learning-rate schedule as a Megatron user
# trains (docs/training.md): a 4-rank MPI run of 1F1B saves (--save-every) and
# validates; its checkpoint loads under GPipe at P=2 with 2 layers per stage and the
# losses go on exactly as an uninterrupted run's; a run killed while saving leaves the
# previous checkpoint loadable and the next save removes what it left; the old
# single-file format still loads; metadata that does not hold together is refused,
# naming the file and the field; --lr-schedule/--warmup/--min-lr give the rates of
# the formula and are restored by --load; --clip-grad clips by the norm over every rank
# (P=4 and P=2, threads and MPI, agree); --check after --load; vocabulary-parallel
# shards load into GPipe. Without MPI the MPI runs use threads (said so).
. "$(dirname "$0")/lib.sh"
GPT0="--model gpt --vocab 256 --seq 16 --hidden 16 --heads 2 --optimizer adam"
GPT="$GPT0 --lr 0.01"
cat "$top_srcdir"/docs/*.md >"$WORK/text.txt"
head -c 30000 "$WORK/text.txt" >"$WORK/train.txt"; tail -c 6000 "$WORK/text.txt" >"$WORK/val.txt"
D="--data $WORK/train.txt"
build p4 "$top_srcdir/stdlib/1f1b.pps" -D P=4 -D m=8 || { fail "build 1f1b P=4"; finish; }
build g2 "$top_srcdir/stdlib/gpipe.pps" -D P=2 -D m=8 || { fail "build gpipe P=2"; finish; }
P4=$WORK/p4; G2=$WORK/g2
# loss of iteration N (as printed: "iter N/M  loss X") in file F
loss() { sed -n "s/^iter $1\/[0-9]*  loss \([-0-9.]*\).*/\1/p" "$2"; }
field() { sed -n "s/^iter $1\/[0-9]*  .*  $2 \([-0-9.e+]*\).*/\1/p" "$3"; }

# ---- the reference: 6 uninterrupted iterations ----
"$P4" $GPT $D --layers-per-stage 1 --iterations 6 >"$WORK/ref" 2>&1 || { fail "reference run"; cat "$WORK/ref" >&2; }
ref() { loss "$1" "$WORK/ref"; }

# ---- 4 ranks save and validate; GPipe P=2 (2 layers per stage) goes on ----
if have_mpi; then
  MPI="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=$MPI_ASAN $MPIRUN --oversubscribe"
  RUN4="timeout 120 $MPI -np 4"; RUN2="timeout 120 $MPI -np 2"; how="mpirun -np 4"
else
  skip "MPI transport (libppsrt without MPI, or no mpirun): the save/load runs use threads"
  RUN4="timeout 120"; RUN2="timeout 120"; how=threads
fi
expect_exit 0 "$how 1F1B P=4: --save --save-every 2 --val-data" $RUN4 "$P4" $GPT $D --layers-per-stage 1 \
  --iterations 4 --save "$WORK/ck" --save-every 2 --val-data "$WORK/val.txt" --val-every 2
expect_grep "^saved $WORK/ck (step 2, 4 shards)" "checkpoint at step 2"
expect_grep "^saved $WORK/ck (step 4, 4 shards)" "checkpoint at step 4"
[ "$(grep -c '^val  [24]/4  loss [0-9]' "$WORK/out")" = 2 ] && pass "validation after steps 2 and 4" || fail "validation lines"
ok=1; for i in 1 2 3 4; do [ -n "$(ref $i)" ] && [ "$(loss $i "$WORK/out")" = "$(ref $i)" ] || ok=0; done
[ $ok = 1 ] && pass "$how losses = threads losses: $(ref 1) .. $(ref 4)" || fail "$how losses differ from threads"
[ "$(ls "$WORK" | grep -c '^ck\.4-.*-of-4\.safetensors$')" = 4 ] && [ "$(ls "$WORK" | grep -c '^ck\.')" = 4 ] \
  && pass "4 shards of step 4, those of step 2 removed" || fail "shards: $(ls "$WORK" | grep '^ck' | tr '\n' ' ')"
v4=$(sed -n 's/^val  4\/4  loss \([0-9.]*\).*/\1/p' "$WORK/out")
expect_exit 0 "GPipe P=2, 2 layers per stage, loads the P=4 checkpoint" $RUN2 "$G2" $GPT $D \
  --layers-per-stage 2 --iterations 2 --load "$WORK/ck" --val-data "$WORK/val.txt" --val-every 100
expect_grep "^loaded $WORK/ck: step 4, data position 32 sequences (.*train.txt: sequence 32 of [0-9]*); iterations 5 to 6" \
  "the load names the file, the step and the data position"
if [ -n "$(ref 5)" ] && [ "$(loss 5 "$WORK/out")" = "$(ref 5)" ] && [ "$(loss 6 "$WORK/out")" = "$(ref 6)" ]; then
  pass "the loss continues: iterations 5, 6 = $(ref 5), $(ref 6) as uninterrupted"
else fail "resumed losses '$(loss 5 "$WORK/out") $(loss 6 "$WORK/out")', uninterrupted '$(ref 5) $(ref 6)'"; fi
# the validation loss of the loaded weights (no step yet taken: lr 0) is the saved run's
expect_exit 0 "the loaded weights validate as saved" "$G2" $GPT $D --layers-per-stage 2 --iterations 1 --lr 0 \
  --load "$WORK/ck" --val-data "$WORK/val.txt"
[ -n "$v4" ] && grep -q "^val  5/5  loss $v4 " "$WORK/out" && pass "validation loss $v4 after loading" \
  || fail "validation after loading: $(grep '^val' "$WORK/out"), saved $v4"
expect_exit 0 "--check after --load: the reference starts from the checkpoint too" "$G2" $GPT $D --layers-per-stage 2 \
  --iterations 1 --load "$WORK/ck" --check -q
# vocabulary-parallel shards (slices of vocab.tok / vocab.out, one per process) load
# into a schedule without vocabulary parallelism
if build v2 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=8; then
  "$WORK/v2" $GPT $D --layers-per-stage 2 --iterations 3 >"$WORK/vref" 2>&1 || fail "Vocab-1 reference"
  expect_exit 0 "${how%-np 4}-np 2 (or threads): Vocab-1 P=2 saves its slices" $RUN2 "$WORK/v2" $GPT $D --layers-per-stage 2 --iterations 2 --save "$WORK/vck"
  expect_exit 0 "GPipe P=2 loads the Vocab-1 checkpoint" "$G2" $GPT $D --layers-per-stage 2 --iterations 1 --load "$WORK/vck" --check
  a=$(loss 3 "$WORK/vref"); b=$(loss 3 "$WORK/out")
  [ -n "$a" ] && [ -n "$b" ] && awk "BEGIN { d = $a - $b; exit !(d < 1e-5 && d > -1e-5) }" && grep -q "^check: passed" "$WORK/out" \
    && pass "Vocab-1 -> GPipe: iteration 3 loss $b (Vocab-1 uninterrupted $a), --check passes" || fail "Vocab-1 -> GPipe: '$b' vs '$a'"
else fail "build vocab_1f1b"; fi
expect_exit 1 "a model of hidden 8 refuses it" "$P4" $GPT $D --layers-per-stage 1 --iterations 1 --load "$WORK/ck" --hidden 8
expect_grep "tensor 'layer0.ln1.g' has shape \[16\], this model's has shape \[8\]" "the tensor and both shapes named"

# ---- killed while saving: the previous checkpoint still loads ----
"$P4" $GPT $D --layers-per-stage 1 --iterations 4 --save "$WORK/k" --save-every 2 --die-in-save 4 -q >"$WORK/out" 2>&1
rc=$?
[ $rc -ne 0 ] && pass "killed during the save of step 4 (exit $rc)" || fail "--die-in-save: exit 0"
ls -A "$WORK" | grep -q '^\.k\.pps-out\.' && pass "a half-written index left behind" || fail "no temporary index left: $(ls "$WORK" | tr '\n' ' ')"
expect_exit 0 "the step-2 checkpoint loads" "$P4" $GPT $D --layers-per-stage 1 --iterations 1 --load "$WORK/k" --save "$WORK/k"
expect_grep "^loaded $WORK/k: step 2" "step 2 loaded"
[ "$(loss 3 "$WORK/out")" = "$(ref 3)" ] && pass "iteration 3 after the kill = uninterrupted $(ref 3)" || fail "iteration 3: $(loss 3 "$WORK/out")"
left=$(ls -A "$WORK" | grep '^\.\?k\.' | grep -v '^k\.3-.*-of-4\.safetensors$')
[ -z "$left" ] && [ "$(ls "$WORK" | grep -c '^k\.3-')" = 4 ] && pass "the next save removed the stale index and shards" \
  || fail "left behind: $left"

if have_mpi; then
  # the same under mpirun: device 0's process dies writing the index, mpirun stops the rest
  $RUN4 "$P4" $GPT $D --layers-per-stage 1 --iterations 4 --save "$WORK/km" --save-every 2 --die-in-save 4 -q >"$WORK/out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && pass "mpirun -np 4: killed during the save of step 4 (exit $rc)" || fail "mpirun --die-in-save: exit 0"
  expect_exit 0 "mpirun -np 4: the step-2 checkpoint loads" $RUN4 "$P4" $GPT $D --layers-per-stage 1 --iterations 1 --load "$WORK/km"
  [ "$(loss 3 "$WORK/out")" = "$(ref 3)" ] && pass "MPI: iteration 3 after the kill = uninterrupted" || fail "MPI iteration 3: $(loss 3 "$WORK/out")"
fi

# ---- the old single-file format, and metadata that does not hold together ----
if command -v python3 >/dev/null 2>&1; then
  build t2 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=8 || fail "build 1f1b P=2"
  "$WORK/t2" $GPT $D --layers-per-stage 1 --iterations 4 -q --json >"$WORK/ref2.json" 2>&1 || fail "P=2 reference"
  "$WORK/t2" $GPT $D --layers-per-stage 1 --iterations 2 --save "$WORK/c2" -q 2>&1 || fail "P=2 save"
  python3 - "$WORK" <<'PY' || fail "writing the test checkpoints"
import json, os, re, struct, sys
w = sys.argv[1]
def read_st(path):
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    return json.loads(d[8:8 + n]), d[8 + n:]
def write_st(path, header_text, data):
    h = header_text.encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
def st_text(meta, tensors):   # tensors: [(name, bytes)]; returns header text, data
    parts, data, off = ['"__metadata__":' + json.dumps(meta)], b"", 0
    for name, b in tensors:
        parts.append('"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}' % (name, len(b) // 4, off, off + len(b)))
        data += b; off += len(b)
    return "{" + ",".join(parts) + "}", data
idx = json.load(open(w + "/c2"))
meta = idx["__metadata__"]
tensors = []
for sh in idx["shards"]:
    h, data = read_st(os.path.join(w, sh))
    h.pop("__metadata__")
    for name, t in h.items():
        a, b = t["data_offsets"]
        tensors.append((name, data[a:b]))
# the old format: one file, runtime names (1 layer per stage: layerN = sN.l0)
def old_name(n):
    pre = re.match(r"(optim\.[mv]\.)?(.*)", n)
    p, rest = pre.group(1) or "", pre.group(2)
    m = re.match(r"layer(\d+)\.(.*)", rest)
    if m: return p + "s%s.l0.%s" % (m.group(1), m.group(2))
    if rest.startswith("lnf."): return p + "s1." + rest
    return p + rest
old = [(old_name(n), b) for n, b in tensors]
om = {k: meta[k] for k in ("model", "optimizer", "step", "hidden", "heads", "query_groups", "seq", "vocab",
                           "micro_batch", "layers_per_stage", "stages")}
om["format"] = "pps-ppsrt"
def legacy(name, **kw):
    m = dict(om); m.update(kw)
    t, d = st_text(m, old)
    write_st(os.path.join(w, name), t, d)
legacy("old.st")
legacy("old_neg.st", step="-1")
legacy("old_big.st", step="12345678901234567890123")
legacy("old_stages.st", stages="3")
legacy("old_hidden.st", hidden="8")
legacy("old_opt.st", optimizer="sgd")
t, d = st_text(om, old)
n0, b0 = old[0]
dup = t[:-1] + ',"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}}' % (n0, len(b0) // 4, len(d), len(d) + len(b0))
write_st(os.path.join(w, "old_dup.st"), dup, d + b0)
n1, b1 = old[1]
ov = t.replace('"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}' % (n1, len(b1) // 4, len(b0), len(b0) + len(b1)),
               '"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}' % (n1, len(b1) // 4, 4, 4 + len(b1)))
assert ov != t
write_st(os.path.join(w, "old_overlap.st"), ov, d)
# the same overlap with an empty tensor between the two in offset order
ov2 = ov[:-1] + ',"empty":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}}'
write_st(os.path.join(w, "old_overlap2.st"), ov2, d)
# the index: fields changed one at a time
for name, k, v in (("ix_neg", "step", "-1"), ("ix_big", "step", "99999999999999999999999"), ("ix_layers", "layers", "3"),
                   ("ix_hidden", "hidden", "8"), ("ix_opt", "optimizer", "sgd"), ("ix_atol", "step", "2abc")):
    j = json.loads(json.dumps(idx)); j["__metadata__"][k] = v
    json.dump(j, open(os.path.join(w, name), "w"))
PY
  want3=$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/ref2.json" | sed -n '3p;4p' | tr '\n' ' ')
  "$WORK/t2" $GPT $D --layers-per-stage 1 --iterations 2 --load "$WORK/old.st" -q --json >"$WORK/old.json" 2>"$WORK/err" || { fail "old format load"; cat "$WORK/err" >&2; }
  got3=$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/old.json" | tr '\n' ' ')
  [ -n "$want3" ] && [ "$got3" = "$want3" ] && pass "the old single-file format loads and continues" || fail "old format: '$got3' vs '$want3'"
  bad() {   # FILE PATTERN DESC
    expect_exit 1 "$3" "$WORK/t2" $GPT $D --layers-per-stage 1 --iterations 1 --load "$WORK/$1"
    expect_grep "$2" "$3: named"
  }
  bad old_neg.st "old_neg.st': metadata field 'step' is '-1': not an integer from 0" "step -1 (old format)"
  bad old_big.st "old_big.st': metadata field 'step' is '12345678901234567890123'" "a 23-digit step (old format)"
  bad old_stages.st "old_stages.st': metadata field 'stages' is 3, its tensors are of 2 stages" "stages contradicting the tensors"
  bad old_hidden.st "old_hidden.st': metadata field 'hidden' is 8, which contradicts its tensors" "hidden contradicting the tensors"
  bad old_opt.st "old_opt.st': metadata field 'optimizer' is 'sgd' but the tensors hold" "optimizer contradicting the tensors"
  bad old_dup.st "old_dup.st': tensor key '.*' given twice" "a duplicate tensor key"
  bad old_overlap.st "old_overlap.st': data_offsets of tensors .* overlap" "overlapping data_offsets"
  bad old_overlap2.st "old_overlap2.st': data_offsets of tensors .* overlap" "overlapping data_offsets around an empty tensor"
  bad ix_neg "ix_neg': metadata field 'step' is '-1'" "step -1 (index)"
  bad ix_big "ix_big': metadata field 'step' is '99999999999999999999999'" "an overflowing step (index)"
  bad ix_atol "ix_atol': metadata field 'step' is '2abc'" "a step atol would read as 2"
  bad ix_layers "ix_layers': metadata field 'layers' is 3, its tensors are of 2 layers" "layers contradicting the tensors"
  bad ix_hidden "ix_hidden': metadata field 'hidden' is 8, which contradicts its tensors" "hidden contradicting the tensors (index)"
  bad ix_opt "ix_opt': metadata field 'optimizer' is 'sgd'" "optimizer contradicting the tensors (index)"
else skip "old format and metadata checks (no python3 to write them)"; fi

# ---- learning-rate schedule: the rates of the formula, restored by --load ----
S="--lr 0.1 --lr-schedule cosine --warmup 2 --min-lr 0.01"
expect_exit 0 "cosine with warm-up" "$P4" $GPT $D --layers-per-stage 1 --iterations 6 $S
cp "$WORK/out" "$WORK/cos"
ok=1
for s in 1 2 3 4 5 6; do
  want=$(awk -v s=$s 'BEGIN { lr = 0.1; mn = 0.01; w = 2; T = 6
    if (s <= w) r = lr * s / w; else r = mn + (lr - mn) * 0.5 * (1 + cos(3.14159265358979 * (s - w) / (T - w)))
    printf "%.6g", r }')
  got=$(field $s lr "$WORK/cos")
  [ "$got" = "$want" ] || { ok=0; fail "step $s: lr $got, formula $want"; }
done
[ $ok = 1 ] && pass "lr per step = warm-up then cosine to --min-lr: $(for s in 1 2 3 4 5 6; do field $s lr "$WORK/cos"; done | tr '\n' ' ')"
"$P4" $GPT $D --layers-per-stage 1 --iterations 3 $S --lr-decay-steps 6 --save "$WORK/s" -q >/dev/null 2>&1 || fail "schedule: save"
expect_exit 0 "resumed without the schedule flags" "$P4" $GPT0 $D --layers-per-stage 1 --iterations 3 --load "$WORK/s"
ok=1; for s in 4 5 6; do [ "$(field $s lr "$WORK/out")" = "$(field $s lr "$WORK/cos")" ] && [ "$(loss $s "$WORK/out")" = "$(loss $s "$WORK/cos")" ] || ok=0; done
[ $ok = 1 ] && pass "schedule restored: steps 4-6 have the uninterrupted rates and losses" || fail "restored schedule: $(grep '^iter' "$WORK/out" | sed 's/time.*lr/lr/')"
expect_exit 0 "constant after warm-up" "$P4" $GPT $D --layers-per-stage 1 --iterations 4 --lr 0.2 --warmup 4 -q --json
grep -o '"lr":[0-9.e+-]*' "$WORK/out" | tr '\n' ' ' | grep -q '"lr":0.05 "lr":0.1 "lr":0.15 "lr":0.2 ' && pass "warm-up 0.05 0.1 0.15 0.2" \
  || fail "warm-up rates: $(grep -o '"lr":[0-9.e+-]*' "$WORK/out" | tr '\n' ' ')"
expect_exit 2 "--min-lr without a cosine schedule" "$P4" $GPT --min-lr 0.1
expect_exit 2 "--save-every without --save" "$P4" $GPT --save-every 2

# ---- gradient clipping: the norm over every rank ----
# from the same weights (the step-4 checkpoint, loaded at P=4 and at P=2 with 2
# layers per stage), the norms and losses agree; a norm taken per rank would not
C="--clip-grad 0.3 --iterations 3 --load $WORK/ck"
expect_exit 0 "--clip-grad at P=4" "$P4" $GPT $D --layers-per-stage 1 $C; cp "$WORK/out" "$WORK/c4"
expect_exit 0 "--clip-grad at P=2, 2 layers per stage" "$G2" $GPT $D --layers-per-stage 2 $C; cp "$WORK/out" "$WORK/c2"
n1=$(field 5 "grad norm" "$WORK/c4")
if [ -n "$n1" ] && awk "BEGIN { exit !($n1 > 0.3) }"; then pass "clipping is active (norm $n1 > 0.3)"; else fail "grad norm '$n1'"; fi
ok=1
for s in 5 6 7; do
  a=$(loss $s "$WORK/c4"); b=$(loss $s "$WORK/c2"); na=$(field $s "grad norm" "$WORK/c4"); nb=$(field $s "grad norm" "$WORK/c2")
  awk "BEGIN { d = $a - $b; e = $na - $nb; exit !(d < 1e-5 && d > -1e-5 && e < 1e-4 * $na && e > -1e-4 * $na) }" 2>/dev/null || ok=0
done
[ $ok = 1 ] && pass "P=4 and P=2 agree on norms and losses: norms $(for s in 5 6 7; do field $s "grad norm" "$WORK/c4"; done | tr '\n' ' ')" \
  || fail "P=4 vs P=2 with --clip-grad: $(grep -o 'loss [0-9.]*\|grad norm [0-9.e+-]*' "$WORK/c4" | tr '\n' ' ') / $(grep -o 'loss [0-9.]*\|grad norm [0-9.e+-]*' "$WORK/c2" | tr '\n' ' ')"
[ "$(loss 6 "$WORK/c4")" != "$(ref 6)" ] && pass "clipping changes the losses" || fail "--clip-grad changed nothing"
if have_mpi; then
  expect_exit 0 "mpirun -np 4 --clip-grad" $RUN4 "$P4" $GPT $D --layers-per-stage 1 $C
  ok=1; for s in 5 6 7; do [ "$(loss $s "$WORK/out")" = "$(loss $s "$WORK/c4")" ] && [ "$(field $s "grad norm" "$WORK/out")" = "$(field $s "grad norm" "$WORK/c4")" ] || ok=0; done
  [ $ok = 1 ] && pass "MPI clips as threads do" || fail "MPI --clip-grad differs from threads"
fi
finish
