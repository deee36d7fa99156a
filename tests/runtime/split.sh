#!/bin/sh
# split.sh: --split A,B,C (Megatron-LM's): --data's documents cut into training,
# validation and test parts. The expected parts are computed here (Megatron's rule,
# get_split_indices: each boundary the previous plus round(w N) with Python's round,
# ties to even, then all shifted so the last is N; N the index's documents, or a plain
# file's tokens), written as files of their own, and run without --split: the training
# losses and validation losses (--val-every 1, JSON val_loss) at --lr 0 must be those of
# the --split run, to the last printed digit:
#  - an indexed dataset of 10 documents of 2 sequences each, --split 25,50,25 (2.5
#    rounds to 2: documents 0-2, 3-7, 8-9; rounding half up would give 0-1, 2-6);
#  - a bytes file, --split 10,90 (by tokens);
#  - a blend of both, each dataset split;
#  - checkpoints record the split (a malformed record is refused, naming the field):
#    resuming with another (or none) is refused naming
#    both, with the same it goes on;
#  - usage errors: malformed weights, no --data, a training weight of 0, a part shorter
#    than one sequence (the part and its documents named).
. "$(dirname "$0")/lib.sh"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=2 || { fail "build 1f1b"; finish; }
G="--model gpt --hidden 16 --heads 2 --query-groups 2 --seq 8 --vocab 256 --layers-per-stage 1"

# mk.py: the datasets, and their expected parts as files of their own
cat > "$WORK/mk.py" <<'PY'
import random, struct, sys
w = sys.argv[1]
def idx(prefix, docs):   # Megatron-LM's MMIDIDX v1, uint16; each document [sequences]
    seqs = [s for d in docs for s in d]
    with open(prefix + ".bin", "wb") as f:
        for s in seqs: f.write(struct.pack("<%dH" % len(s), *s))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(seqs), len(docs) + 1))
        f.write(struct.pack("<%di" % len(seqs), *[len(s) for s in seqs]))
        ptr, ps = 0, []
        for s in seqs: ps.append(ptr); ptr += 2 * len(s)
        f.write(struct.pack("<%dq" % len(seqs), *ps))
        di, k = [0], 0
        for d in docs: k += len(d); di.append(k)
        f.write(struct.pack("<%dq" % len(di), *di))
def bounds(weights, n):   # Megatron-LM's get_split_indices
    ws = [float(x) for x in weights.split(",")] + [0.0] * 3
    ws = ws[:3]; t = sum(ws); ws = [x / t for x in ws]
    b = [0]
    for x in ws: b.append(b[-1] + int(round(x * float(n))))
    return [b[0]] + [v - (b[-1] - n) for v in b[1:]]
r = random.Random(7)
docs = [[[r.randrange(256) for _ in range(r.randrange(9, 30))] for _ in range(2)] for _ in range(10)]
idx(w + "/A", docs)
b = bounds("25,50,25", len(docs))
print("A bounds", b)
assert b == [0, 3, 8, 10], b
idx(w + "/A_train", docs[b[0]:b[1]]); idx(w + "/A_val", docs[b[1]:b[2]])
raw = bytes(r.randrange(256) for _ in range(523))
open(w + "/B", "wb").write(raw)
c = bounds("10,90", len(raw))
print("B bounds", c)
open(w + "/B_train", "wb").write(raw[c[0]:c[1]]); open(w + "/B_val", "wb").write(raw[c[1]:c[2]])
cb = bounds("25,50,25", len(raw))
open(w + "/B_train2", "wb").write(raw[cb[0]:cb[1]]); open(w + "/B_val2", "wb").write(raw[cb[1]:cb[2]])
# a dataset whose validation part is too short: 10 documents of 3 tokens
idx(w + "/tiny", [[[1, 2, 3]] for _ in range(40)])
PY
python3 "$WORK/mk.py" "$WORK" > "$WORK/mk.out" || { fail "mk.py"; cat "$WORK/mk.out"; finish; }
pass "datasets ($(tr '\n' ' ' < "$WORK/mk.out"))"

# losses FILE: the iterations' losses and validation losses, one line
losses() { python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(" ".join("%s/%s" % (i["loss"], i.get("val_loss")) for i in j["iterations"]))' "$1"; }
# run_to OUT ARGS: 10 iterations at --lr 0 (20 sequences: the training parts wrap around), validation
# every one, JSON in OUT
run_to() {
  out=$1; shift
  "$WORK/a" $G --lr 0 --iterations 10 --val-every 1 --json "$@" > "$out" 2> "$WORK/err" || fail "run: $(cat "$WORK/err")"
}
# same DESC: the runs in $WORK/s1 (--split) and $WORK/s2 (the parts' files) give the same losses
same() {
  l1=$(losses "$WORK/s1"); l2=$(losses "$WORK/s2")
  case "$l1" in *None*|"") fail "$1: no val_loss in the JSON: $l1"; return;; esac
  if [ "$l1" = "$l2" ]; then pass "$1: $l1"; else fail "$1: --split gives $l1, the parts' files $l2"; fi
}
W=$WORK
run_to "$W/s1" --data "$W/A" --split 25,50,25; run_to "$W/s2" --data "$W/A_train" --val-data "$W/A_val"
same "indexed, 25,50,25 (documents 0-2 | 3-7 | 8-9)"
run_to "$W/s1" --data "$W/B" --split 10,90; run_to "$W/s2" --data "$W/B_train" --val-data "$W/B_val"
same "bytes, 10,90 (by tokens)"
run_to "$W/s1" --data "0.6 $W/A 0.4 $W/B" --split 25,50,25
run_to "$W/s2" --data "0.6 $W/A_train 0.4 $W/B_train2" --val-data "0.6 $W/A_val 0.4 $W/B_val2"
same "a blend, each dataset split"
run_to "$W/s1" --data "$W/A" --split 25,50,25
# the split is not the whole file: a run without it differs
run_to "$WORK/s3" --data "$W/A" --val-data "$W/A_val"
[ "$(losses "$WORK/s3")" != "$(losses "$WORK/s1")" ] && pass "without --split the training losses differ" ||
  fail "the whole dataset trains as its training part"
# the text output names the validation part
"$WORK/a" $G --lr 0 --iterations 1 --data "$W/A" --split 25,50,25 > "$WORK/out" 2>&1
expect_grep "val  1/1  loss .* (--split's validation part of --data)" "text: the validation line names --split's part"
# no validation part: no validation
"$WORK/a" $G --lr 0 --iterations 1 --json --data "$W/A" --split 1,0,1 > "$WORK/s4" 2> "$WORK/err" && ! grep -q val_loss "$WORK/s4" &&
  pass "--split 1,0,1: no validation" || fail "--split 1,0,1: $(cat "$WORK/err" "$WORK/s4")"

# checkpoints: the split recorded; another one (or none) refused on --load
"$WORK/a" $G --lr 0.1 --iterations 2 --data "$W/A" --split 25,50,25 --save "$WORK/ck" > /dev/null 2> "$WORK/err" ||
  fail "save with --split: $(cat "$WORK/err")"
expect_exit 1 "--load without the checkpoint's --split" "$WORK/a" $G --iterations 1 --data "$W/A" --load "$WORK/ck"
expect_grep "trained on --split 0.25,0.5,0.25 of its --data, this run on all" "the refusal names both splits"
expect_exit 1 "--load with another --split" "$WORK/a" $G --iterations 1 --data "$W/A" --split 90,10 --load "$WORK/ck"
expect_exit 0 "--load with the same --split (as 1/2/1)" "$WORK/a" $G --iterations 1 --data "$W/A" --split 1/2/1 --load "$WORK/ck"
# a malformed field: refused naming it (exit 1), not read as another split
for bad in "0.25,0.5" "0.25,,0.75" "a,b,c" "0.25,0.5,0.25,0" "0.25,-0.5,1.25" "0.25,0.5,inf"; do
  python3 - "$WORK/ck" "$WORK/ckbad" "$bad" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["__metadata__"]["data_split"] = sys.argv[3]
json.dump(j, open(sys.argv[2], "w"))
PY
  expect_exit 1 "a checkpoint whose data_split is '$bad'" "$WORK/a" $G --iterations 1 --data "$W/A" --split 1/2/1 --load "$WORK/ckbad"
  expect_grep "metadata field 'data_split' is '$bad': not three weights" "  the field named"
done
"$WORK/a" $G --lr 0.1 --iterations 2 --data "$W/A" --save "$WORK/ck2" > /dev/null 2>&1
expect_exit 1 "--split on a checkpoint trained on all of its data" "$WORK/a" $G --iterations 1 --data "$W/A" --split 9,1 --load "$WORK/ck2"

# usage errors
for bad in "a,b" "1,2,3,4" "-1,2" "0,0" "1,,2" "1;2" ""; do
  expect_exit 2 "--split '$bad'" "$WORK/a" $G --data "$W/A" --split "$bad"
done
expect_grep "separated by commas" "the message shows the form"
expect_exit 2 "--split without --data" "$WORK/a" $G --split 9,1
expect_exit 2 "--split 0,1: no training part" "$WORK/a" $G --data "$W/A" --split 0,1
expect_exit 2 "a validation part shorter than one sequence" "$WORK/a" $G --data "$W/tiny" --split 95,5
expect_grep "the validation part of '.*tiny.bin' is its documents 38..39 of 40: 6 tokens, fewer than one sequence" \
  "the message names the part, its documents and tokens"
finish
