#!/bin/sh
# data.sh: --data with Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin, runtime/
# data.c, docs/training.md). The datasets are written here by an independent writer
# (python3's struct, from the format's description): every integer dtype gives the
# very same losses as the same tokens in an llm.c file (bitwise: --json prints float32
# with 9 digits), so do sequences lying out of order in the .bin and a multimodal
# index; PREFIX, PREFIX.bin, PREFIX.idx and --data-format indexed find it; token ids
# above 65535 with --vocab 70000 (int32, int64); --arch llama; blends ("0.7 A 0.3 B",
# Megatron-LM's blending order, computed here independently); --data-shuffle (the documented
# permutation, reimplemented here, over 3 epochs, and resumed); python/pps_data.py both ways;
# a resumed run goes on at the same
# sequence; and every malformed input (magic, version, dtype, truncation, a size or
# pointer past the .bin, document indices, trailing bytes, a token >= --vocab at load
# and as read, a FIFO or /dev/zero as the .bin, a missing file) is a clear error, exit 2.
. "$(dirname "$0")/lib.sh"
T=$RT_TABLES
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3 to write the datasets"; exit 77; }
G="--model gpt --seq 16 --hidden 16 --heads 2 --layers-per-stage 1 --iterations 3 --optimizer adam --lr 0.01"
V="$G --vocab 128"
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | tr '\n' ' '; }
python3 - "$WORK" <<'PY' || fail "python3 writer"
import os, struct, sys
w = sys.argv[1]
FMT = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}   # Megatron-LM's dtype codes
toks = [(i * 7 + i // 13) % 120 for i in range(600)]
cuts = [0, 50, 50, 147, 148, 348, 421, 600]          # the index's sequences (one of them empty)
seqs = [toks[a:b] for a, b in zip(cuts, cuts[1:])]

def tokfile(path, tokens):   # llm.c: 256 int32 header (magic, version, count), uint16 tokens
    hdr = [20240520, 1, len(tokens)] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(tokens), *tokens))

def indexed(name, seqs=seqs, code=4, magic=b"MMIDIDX\x00\x00", version=1, code_byte=None, order=None, docs=None,
            nseq=None, ndoc=None, size=None, ptr=None, extra=b"", cut=None, bin_cut=None):
    """PREFIX.idx: magic, <Q version, <B dtype, <Q sequences, <Q document indices; int32
    sizes, int64 byte pointers, int64 document indices (0 .. sequences); PREFIX.bin."""
    f = "<%d" + FMT[code]
    order = order or list(range(len(seqs)))          # where the sequences lie in the .bin
    blob, ptrs = b"", [0] * len(seqs)
    for i in order:
        ptrs[i] = len(blob)
        blob += struct.pack(f % len(seqs[i]), *seqs[i])
    sizes = [len(s) for s in seqs]
    for k, v in (size or {}).items(): sizes[k] = v
    for k, v in (ptr or {}).items(): ptrs[k] = v(len(blob), ptrs[k]) if callable(v) else v
    docs = [0, 2, 5, len(seqs)] if docs is None else docs
    idx = magic + struct.pack("<QBQQ", version, code if code_byte is None else code_byte,
                              len(seqs) if nseq is None else nseq, len(docs) if ndoc is None else ndoc)
    idx += struct.pack("<%di" % len(sizes), *sizes) + struct.pack("<%dq" % len(ptrs), *ptrs)
    idx += struct.pack("<%dq" % len(docs), *docs) + extra
    open(w + "/" + name + ".idx", "wb").write(idx[:cut])
    open(w + "/" + name + ".bin", "wb").write(blob[:bin_cut])

tokfile(w + "/ref.bin", toks)
for code in (1, 2, 3, 4, 5, 8):
    indexed("d%d" % code, code=code)
indexed("ooo", order=[6, 3, 0, 5, 1, 4, 2])          # sequences out of order in the .bin
indexed("mm", extra=bytes(len(seqs)))                # multimodal: int8 modes after the document indices
big = [(i * 7919) % 70000 for i in range(600)]
assert max(big) > 65535
bseqs = [big[a:b] for a, b in zip(cuts, cuts[1:])]
indexed("big32", seqs=bseqs, code=4)
indexed("big64", seqs=bseqs, code=5)
bad = [s[:] for s in bseqs]; bad[3][0] = 70000     # sequence 3's token 0: position 147
indexed("bigbad", seqs=bad)
for code, name in ((2, "neg8"), (3, "neg16"), (4, "neg32"), (5, "neg64")):   # token -1: signed types read signed
    neg = [s[:] for s in seqs]; neg[2][3] = -1
    indexed(name, seqs=neg, code=code)
last = [s[:] for s in seqs]; last[6][-1] = 200       # the stream's last token, position 599
indexed("last", seqs=last)
late = [s[:] for s in seqs]; late[6][170] = 200      # position 591: never read by 3 short iterations
indexed("late", seqs=late)
# blends: datasets of one window each, repeated (period --seq 16, all starting with token 5),
# so that a blend's sample k is dataset d(k)'s window whatever its place in that dataset,
# and the llm.c file of the windows in Megatron-LM's blending order trains the same
pat = {"A": [5] + list(range(10, 25)), "B": [5] + list(range(30, 45)), "C": [5] + list(range(60, 75))}
rep = {k: v * 5 + [5] for k, v in pat.items()}
indexed("blA", seqs=[rep["A"][:30], rep["A"][30:]], code=4, docs=[0, 1, 2])
tokfile(w + "/blB.bin", rep["B"])
indexed("blC", seqs=[rep["C"]], code=1, docs=[0, 1])
def blend_order(weights, count):   # Megatron-LM's build_blending_indices, from its description
    total = 0.0
    for x in weights: total += x
    norm = [x / total for x in weights]
    had, order = [0] * len(weights), []
    for i in range(count):
        err = [norm[d] * max(float(i), 1.0) - had[d] for d in range(len(weights))]
        d = err.index(max(err))    # the first of equal errors
        order.append(d)
        had[d] += 1
    return order
for name, weights, names, count in (("b2", [0.7, 0.3], "AB", 1536), ("b3", [1, 1, 2], "ABC", 24)):
    order = blend_order(weights, count)
    open(w + "/" + name + ".order", "w").write("".join(names[d] for d in order[:24]))
    tokfile(w + "/" + name + ".bin", sum((pat[names[d]] for d in order), []) + [5])
# --data-shuffle: the permutation as docs/models.md gives it, on a dataset of W = 37 windows
# that all start with token 5 (so the llm.c file of its windows in shuffled order trains the
# same); each epoch's order must be a permutation
M = (1 << 64) - 1
def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
def shuffled(seed, epoch, i, W):
    h = 1
    while (1 << (2 * h)) < W: h += 1
    mask, key, x = (1 << h) - 1, mix(seed ^ mix(epoch)), i
    while True:
        L, R = x >> h, x & mask
        for r in range(4):
            L, R = R, L ^ (mix(key ^ (r << 56) ^ R) & mask)
        x = (L << h) | R
        if x < W: return x
W, rnd = 37, 12345
wins = []
for k in range(W):
    win = [5]
    for j in range(15):
        rnd = (rnd * 1103515245 + 12345) % 2 ** 31
        win.append(6 + rnd % 120)
    wins.append(win)
flat = sum(wins, []) + [5]
indexed("sh", seqs=[flat[:100], flat[100:]], code=3, docs=[0, 2])
for e in range(3):
    assert sorted(shuffled(1234, e, i, W) for i in range(W)) == list(range(W)), e
tokfile(w + "/shref.bin", sum((wins[shuffled(1234, k // W, k % W, W)] for k in range(96)), []) + [5])
# malformed
indexed("magic", magic=b"MMIDIDX\x00\x01")
indexed("version", version=2)
indexed("float", code=7)
indexed("code9", code_byte=9)
indexed("short", cut=30)
indexed("cutdocs", cut=34 + 12 * len(seqs) + 8 * 4 - 3)
indexed("hugecount", nseq=2 ** 62)
indexed("past", ptr={6: lambda n, p: p + 1})         # the last sequence ends 1 byte past the .bin
indexed("binshort", bin_cut=4 * 600 - 1)
indexed("negsize", size={1: -1})
indexed("bigsize", size={2: 2 ** 31 - 1})
indexed("negptr", ptr={2: -8})
indexed("hugeptr", ptr={2: 2 ** 63 - 1})
indexed("docorder", docs=[0, 5, 2, 7])
indexed("docend", docs=[0, 2, 6])
indexed("nodocs", docs=[])
indexed("trailing", extra=b"xx")
indexed("empty", seqs=[], docs=[0])                  # no sequences: no tokens
PY
# ---- every integer dtype: the same losses as the llm.c file ----
"$T" 1f1b 2 4 $V --data "$WORK/ref.bin" --json >"$WORK/ref.json" 2>"$WORK/err" || { fail "llm.c reference"; cat "$WORK/err" >&2; }
REF=$(losses "$WORK/ref.json")
same() {   # same DESC ARGS...: the run's losses are the llm.c file's
  desc=$1; shift
  "$T" 1f1b 2 4 "$@" --json >"$WORK/j" 2>"$WORK/err"
  rc=$?; got=$(losses "$WORK/j")
  if [ $rc -eq 0 ] && [ -n "$REF" ] && [ "$got" = "$REF" ]; then pass "$desc: $got"
  else fail "$desc: exit $rc, losses '$got', expected '$REF'"; cat "$WORK/err" >&2; fi
}
for c in 1:uint8 2:int8 3:int16 4:int32 5:int64 8:uint16; do
  same "${c#*:} dataset (PREFIX)" $V --data "$WORK/d${c%%:*}"
done
same "PREFIX.bin" $V --data "$WORK/d4.bin"
same "PREFIX.idx" $V --data "$WORK/d4.idx"
same "--data-format indexed" $V --data "$WORK/d8.bin" --data-format indexed
same "sequences out of order in the .bin" $V --data "$WORK/ooo"
same "a multimodal index (sequence modes after the document indices)" $V --data "$WORK/mm"
same "--val-data PREFIX" $V --data "$WORK/d4" --val-data "$WORK/d5" --val-every 2
# --arch llama (RMSNorm, SwiGLU, RoPE, no biases) on int32 data
"$T" 1f1b 2 4 $V --arch llama --data "$WORK/ref.bin" --json >"$WORK/ref.json" 2>"$WORK/err" || { fail "llama on llm.c"; cat "$WORK/err" >&2; }
REF0=$REF; REF=$(losses "$WORK/ref.json")
same "--arch llama, int32 dataset" $V --arch llama --data "$WORK/d4"
REF=$REF0
export PPSRT_DATA_SCAN=0   # tokens checked as training reads them, not at load
same "int16, checked as read" $V --data "$WORK/d3"
same "out of order, checked as read" $V --data "$WORK/ooo"
unset PPSRT_DATA_SCAN
# ---- python/pps_data.py: llm.c <-> indexed, streaming ----
PD="python3 $top_srcdir/python/pps_data.py"
expect_exit 0 "pps_data.py --help" $PD --help
expect_grep "to-indexed" "--help names the commands"
expect_exit 0 "pps_data.py to-indexed --dtype int32 --eot 0" $PD to-indexed "$WORK/ref.bin" "$WORK/conv" --dtype int32 --eot 0
expect_grep "ref.bin: 600 tokens, 9 sequences" "documents cut after each token 0"
same "the converted dataset" $V --data "$WORK/conv"
$PD to-llmc "$WORK/conv" "$WORK/round.bin" >/dev/null && cmp -s "$WORK/round.bin" "$WORK/ref.bin" \
  && pass "llm.c -> int32 documents -> llm.c: byte for byte" || fail "the round trip differs from ref.bin"
expect_exit 0 "pps_data.py to-llmc (int64)" $PD to-llmc "$WORK/d5" "$WORK/back.bin"
cmp -s "$WORK/back.bin" "$WORK/ref.bin" && pass "int64 dataset -> llm.c: the reference file byte for byte" || fail "to-llmc differs from ref.bin"
expect_exit 2 "to-llmc of ids over 65535" $PD to-llmc "$WORK/big32" "$WORK/nofit.bin"
expect_grep "sequence 0 holds a token outside 0..65535" "ids over 65535 named"
[ -e "$WORK/nofit.bin" ] && fail "a refused conversion left its output" || pass "no output left by a refused conversion"
expect_exit 2 "to-indexed of a non-token file" $PD to-indexed "$WORK/d4.bin" "$WORK/x"
expect_grep "d4.bin: not an llm.c token file (magic 0, version 7; expected 20240520, 1)" "non-token file named"
# ---- vocabularies over 65536 ----
expect_exit 0 "uint16 llm.c file with --vocab 70000" "$T" 1f1b 2 4 $G --vocab 70000 --hidden 8 --heads 1 --data "$WORK/ref.bin" -q
B="$G --vocab 70000 --hidden 8 --heads 1"
"$T" 1f1b 2 4 $B --data "$WORK/big32" --json >"$WORK/b32.json" 2>"$WORK/err" || { fail "int32 ids up to 69999"; cat "$WORK/err" >&2; }
"$T" 1f1b 2 4 $B --data "$WORK/big64" --json >"$WORK/b64.json" 2>"$WORK/err" || { fail "int64 ids up to 69999"; cat "$WORK/err" >&2; }
b32=$(losses "$WORK/b32.json")
if [ -n "$b32" ] && [ "$b32" = "$(losses "$WORK/b64.json")" ]; then pass "ids above 65535 (--vocab 70000): int32 = int64: $b32"
else fail "int32 '$b32' vs int64 '$(losses "$WORK/b64.json")'"; fi
expect_exit 2 "token 70000 with --vocab 70000" "$T" 1f1b 2 4 $B --data "$WORK/bigbad"
expect_grep "data file '$WORK/bigbad.bin': token 70000 at position 147 (sequence 3 of the index, its token 0) is out of range for --vocab 70000" \
  "the token, its position and the index sequence named"
expect_exit 2 "--data - (standard input)" "$T" 1f1b 2 4 $B --data -
expect_grep "not standard input" "  said: tokens come from a file"
export PPSRT_DATA_SCAN=0
expect_exit 1 "token 70000 found as read (a run that failed: exit 1)" "$T" 1f1b 2 4 $B --data "$WORK/bigbad"
expect_grep "token 70000 at position 147 (sequence 3 of the index, its token 0) is out of range for --vocab 70000, read for training sequence 9" \
  "as read: the training sequence named too"
expect_exit 0 "a bad token never read is not seen as read" "$T" 1f1b 2 4 $V --data "$WORK/late" -q
unset PPSRT_DATA_SCAN
expect_exit 2 "... but is at load" "$T" 1f1b 2 4 $V --data "$WORK/late"
expect_grep "token 200 at position 591 (sequence 6 of the index, its token 170) is out of range for --vocab 128" "late token named"
for n in 8 16 32 64; do
  expect_exit 2 "int$n token -1" "$T" 1f1b 2 4 $V --data "$WORK/neg$n"
  expect_grep "data file '$WORK/neg$n.bin': token -1 at position 53 (sequence 2 of the index, its token 3) is out of range" "int$n: token -1 named"
done
expect_exit 2 "the stream's last token is checked at load" "$T" 1f1b 2 4 $V --data "$WORK/last"
expect_grep "token 200 at position 599 (sequence 6 of the index, its token 178) is out of range" "last token named"
# ---- blends (Megatron-LM's --data-path weights) ----
# (b2: 64-sequence microbatches, 1536 samples: past the first 1024 that data.c keeps counts for)
B2="0.7 $WORK/blA 0.3 $WORK/blB.bin"; B3="1 $WORK/blA 1 $WORK/blB.bin 2 $WORK/blC"; M2="--micro-batch 64"
for b in b2 B2 b3 B3; do
  case $b in
    b2) "$T" 1f1b 2 4 $V $M2 --iterations 6 --data "$WORK/$b.bin" --json >"$WORK/$b.json" 2>"$WORK/err" || { fail "$b.bin"; cat "$WORK/err" >&2; } ;;
    b3) "$T" 1f1b 2 4 $V --iterations 6 --data "$WORK/$b.bin" --json >"$WORK/$b.json" 2>"$WORK/err" || { fail "$b.bin"; cat "$WORK/err" >&2; } ;;
    B2) REF=$(losses "$WORK/b2.json"); same "blend 0.7 A 0.3 B (order $(cat "$WORK/b2.order")...)" $V $M2 --iterations 6 --data "$B2" ;;
    B3) REF=$(losses "$WORK/b3.json"); same "blend 1 A 1 B 2 C (order $(cat "$WORK/b3.order")...)" $V --iterations 6 --data "$B3" ;;
  esac
done
REF=$(losses "$WORK/b2.json")
"$T" 1f1b 2 4 $V $M2 --data "$B2" --save "$WORK/bck.st" --json >"$WORK/a.json" 2>"$WORK/err" || { fail "blend --save"; cat "$WORK/err" >&2; }
"$T" 1f1b 2 4 $V $M2 --data "$B2" --load "$WORK/bck.st" --json >"$WORK/b.json" 2>"$WORK/err" || { fail "blend --load"; cat "$WORK/err" >&2; }
got="$(losses "$WORK/a.json")$(losses "$WORK/b.json")"
[ -n "$REF" ] && [ "$got" = "$REF" ] && pass "blend: 3 + save + load + 3 = 6 iterations" || fail "blend resumed: '$got', expected '$REF'"
REF=$REF0
# a bad token in a blend's dataset, as read: the blend's training sequence is named (late's
# window 36 is the blend's sample 2 x 36 + 1: equal weights alternate, the first first)
export PPSRT_DATA_SCAN=0
expect_exit 1 "a blend's bad token, as read" "$T" 1f1b 2 4 $V --iterations 20 --data "0.5 $WORK/d4 0.5 $WORK/late"
expect_grep "late.bin': token 200 at position 591 (sequence 6 of the index, its token 170) is out of range for --vocab 128, read for training sequence 73" \
  "the blend's training sequence named"
unset PPSRT_DATA_SCAN
expect_exit 2 "a blend with an odd number of words" "$T" 1f1b 2 4 $V --data "0.7 $WORK/blA 0.3"
expect_grep "a blend is WEIGHT PATH pairs (Megatron-LM's --data-path), got 3 words" "odd blend named"
expect_exit 2 "a blend weight that is no number" "$T" 1f1b 2 4 $V --data "0.7 $WORK/blA x $WORK/blB.bin"
expect_grep "weight 'x' of '$WORK/blB.bin' is not a number above 0" "bad weight named"
expect_exit 2 "a blend weight of 0" "$T" 1f1b 2 4 $V --data "0 $WORK/blA 1 $WORK/blB.bin"
expect_grep "weight '0' of '$WORK/blA' is not a number above 0" "zero weight named"
expect_exit 2 "a blend of a missing file" "$T" 1f1b 2 4 $V --data "0.5 $WORK/blA 0.5 $WORK/nope.bin"
expect_grep "data file '$WORK/nope.bin': No such file" "the blend's missing file named"
# ---- --data-shuffle: 96 sequences (2.6 epochs of 37 windows) ----
S="$V --micro-batch 4 --iterations 6"
"$T" 1f1b 2 4 $S --data "$WORK/shref.bin" --json >"$WORK/shref.json" 2>"$WORK/err" || { fail "shref.bin"; cat "$WORK/err" >&2; }
REF=$(losses "$WORK/shref.json")
same "--data-shuffle 1234: the windows in the documented order, 3 epochs" $S --data "$WORK/sh" --data-shuffle 1234
"$T" 1f1b 2 4 $S --data "$WORK/sh" --json >"$WORK/j" 2>"$WORK/err"
[ -n "$REF" ] && [ "$(losses "$WORK/j")" != "$REF" ] && pass "unshuffled differs" || fail "unshuffled = shuffled: '$REF'"
"$T" 1f1b 2 4 $S --iterations 3 --data "$WORK/sh" --data-shuffle 1234 --save "$WORK/sck.st" --json >"$WORK/a.json" 2>"$WORK/err" || { fail "shuffle --save"; cat "$WORK/err" >&2; }
"$T" 1f1b 2 4 $S --iterations 3 --data "$WORK/sh" --load "$WORK/sck.st" --json >"$WORK/b.json" 2>"$WORK/err" || { fail "shuffle --load"; cat "$WORK/err" >&2; }
got="$(losses "$WORK/a.json")$(losses "$WORK/b.json")"
[ -n "$REF" ] && [ "$got" = "$REF" ] && pass "shuffled: 3 + save + load (the seed restored) + 3 = 6" || fail "shuffled resume: '$got', expected '$REF'"
REF=$REF0
expect_exit 2 "--data-shuffle -1" "$T" 1f1b 2 4 $V --data "$WORK/d4" --data-shuffle -1
expect_grep "data-shuffle needs a seed, a whole number from 0 to 18446744073709551615, got '-1'" "bad seed named"
expect_exit 2 "--data-shuffle without --data" "$T" 1f1b 2 4 $V --data-shuffle 7
expect_grep "data-shuffle needs --data" "shuffle without data named"
# ---- checkpoints: a resumed run goes on at the same sequence ----
A="$V --data $WORK/ooo --iterations 3 --json"
"$T" 1f1b 2 4 $A --iterations 6 >"$WORK/full.json" 2>"$WORK/err" || fail "6 iterations"
"$T" 1f1b 2 4 $A --save "$WORK/ck.st" >"$WORK/a.json" 2>"$WORK/err" || { fail "--save"; cat "$WORK/err" >&2; }
"$T" 1f1b 2 4 $A --load "$WORK/ck.st" >"$WORK/b.json" 2>"$WORK/err" || { fail "--load"; cat "$WORK/err" >&2; }
full=$(losses "$WORK/full.json"); got="$(losses "$WORK/a.json")$(losses "$WORK/b.json")"
if [ -n "$full" ] && [ "$full" = "$got" ]; then pass "3 + save + load + 3 = 6 iterations on an indexed dataset: $got"
else fail "resumed losses '$got' differ from '$full'"; fi
expect_exit 0 "the resumed run says where it is" "$T" 1f1b 2 4 $V --data "$WORK/ooo" --iterations 1 --load "$WORK/ck.st"
expect_grep "data position 12 sequences ($WORK/ooo: sequence 12 of 37)" "data position named"
# ---- malformed datasets: exit 2 and a message naming the file ----
bad() {   # bad NAME PATTERN DESC
  expect_exit 2 "$3" "$T" 1f1b 2 4 $V --data "$WORK/$1"
  expect_grep "$2" "$3: named"
  grep -q "Sanitizer\|runtime error" "$WORK/out" && fail "$3: a sanitizer report"
}
I=$WORK
bad magic "data index '$I/magic.idx': not a Megatron-LM index" "bad magic"
bad version "data index '$I/version.idx': version 2 is not supported (expected 1)" "version 2"
bad float "data index '$I/float.idx': dtype float32 (code 7): token ids must be integers" "float32 tokens"
bad code9 "data index '$I/code9.idx': unknown dtype code 9" "dtype code 9"
bad short "data index '$I/short.idx': truncated: 30 bytes, shorter than the 34-byte header" "header cut short"
bad cutdocs "data index '$I/cutdocs.idx': truncated: its header promises 7 sequences (12 bytes each) and 4 document indices" "arrays cut short"
bad hugecount "data index '$I/hugecount.idx': truncated: its header promises 4611686018427387904 sequences" "a sequence count of 2^62"
bad past "data index '$I/past.idx': sequence 6 (179 tokens of 4 bytes at byte 1685) ends past the end of '$I/past.bin' (2400 bytes)" \
  "a pointer 1 byte too far"
bad binshort "sequence 6 (179 tokens of 4 bytes at byte 1684) ends past the end of '$I/binshort.bin' (2399 bytes)" ".bin cut short"
bad negsize "data index '$I/negsize.idx': sequence 1 has a negative size (-1)" "a negative size"
bad bigsize "data index '$I/bigsize.idx': sequence 2 (2147483647 tokens of 4 bytes at byte 200) ends past the end" "a size of 2^31 - 1"
bad negptr "data index '$I/negptr.idx': sequence 2 has a negative pointer (-8)" "a negative pointer"
bad hugeptr "sequence 2 (97 tokens of 4 bytes at byte 9223372036854775807) ends past the end" "a pointer of 2^63 - 1"
bad docorder "document index 2 (2) is below the one before it (5)" "document indices out of order"
bad docend "the document indices must run from 0 to the sequence count 7 (they do not)" "document indices short"
bad nodocs "the document indices must run from 0 to the sequence count 7 (there are none)" "no document indices"
bad trailing "data index '$I/trailing.idx': 2 bytes after its 7 sequences and 4 document indices, expected none (or 7" "trailing bytes"
bad empty "data file '$I/empty.bin': 0 tokens, fewer than one sequence of --seq 16 plus its next token" "an empty dataset"
cp "$WORK/d4.idx" "$WORK/nobin.idx"
bad nobin.idx "data file '$I/nobin.bin': No such file or directory (the tokens of the index '$I/nobin.idx')" "no .bin"
expect_exit 2 "--data-format indexed without an index" "$T" 1f1b 2 4 $V --data "$WORK/ref.bin" --data-format indexed
expect_grep "data index '$I/ref.idx': No such file" "missing index named"
expect_exit 2 "an unknown --data-format" "$T" 1f1b 2 4 $V --data "$WORK/ref.bin" --data-format megatron
expect_grep "data-format needs tokens, bytes or indexed, got 'megatron'" "the formats named"
# a FIFO or /dev/zero as the .bin (or the .idx) is refused at once, never waited on
mkfifo "$WORK/fifo.bin" "$WORK/fifoidx.idx" && cp "$WORK/d4.idx" "$WORK/fifo.idx" && cp "$WORK/d4.bin" "$WORK/fifoidx.bin" || fail "mkfifo"
ln -s /dev/zero "$WORK/zero.bin" && cp "$WORK/d4.idx" "$WORK/zero.idx" || fail "ln -s /dev/zero"
for p in fifo.bin fifoidx.idx zero.bin; do
  timeout 20 "$T" 1f1b 2 4 $V --data "$WORK/$p" -q >"$WORK/out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q "'$WORK/$p': not a regular file" "$WORK/out"; then pass "$p refused (exit $rc)"
  else fail "$p: exit $rc"; cat "$WORK/out" >&2; fi
done
finish
