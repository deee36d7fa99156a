#!/bin/sh
# train.sh: real training in the gpt model: --data (plain bytes of the repository's own
# docs, and llm.c uint16 token files), the loss falls; --save/--load (an index and
# safetensors shards, docs/training.md):
# N + save + load + N iterations give the very same losses as 2N (SGD and Adam; the
# JSON's losses are float32 printed with 9 digits, so equal text is bitwise equal);
# --check still passes on real data; clear errors for bad data files and checkpoints.
. "$(dirname "$0")/lib.sh"
GPT="--model gpt --vocab 256 --seq 16 --hidden 16 --heads 2 --layers-per-stage 1"
cat "$top_srcdir"/docs/*.md >"$WORK/text.txt"
if build t1f1b "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4; then
  T=$WORK/t1f1b
  losses() { grep -o '"loss":[-0-9.e+]*,"time_s"' "$1" | sed 's/"loss":\(.*\),"time_s"/\1/' | tr '\n' ' '; }
  # the loss falls on real text
  expect_exit 0 "8 iterations on the docs' bytes" "$T" $GPT --data "$WORK/text.txt" --iterations 8 --optimizer adam --lr 0.01
  first=$(sed -n 's/^iter 1\/8  loss \([0-9.]*\).*/\1/p' "$WORK/out"); last=$(sed -n 's/^iter 8\/8  loss \([0-9.]*\).*/\1/p' "$WORK/out")
  if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($last < $first - 0.5) }"; then pass "loss falls: $first -> $last"
  else fail "loss does not fall: '$first' -> '$last'"; fi
  # resume continues the loss curve exactly
  for opt in sgd adam; do
    A="$GPT --data $WORK/text.txt --optimizer $opt --lr 0.01 --json"
    "$T" $A --iterations 6 >"$WORK/full.json" 2>"$WORK/err" || fail "$opt: 6 iterations"
    "$T" $A --iterations 3 --save "$WORK/ck.safetensors" >"$WORK/a.json" 2>"$WORK/err" || { fail "$opt: --save"; cat "$WORK/err" >&2; }
    "$T" $A --iterations 3 --load "$WORK/ck.safetensors" >"$WORK/b.json" 2>"$WORK/err" || { fail "$opt: --load"; cat "$WORK/err" >&2; }
    want=$(losses "$WORK/full.json"); got="$(losses "$WORK/a.json")$(losses "$WORK/b.json")"
    if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "$opt: 3 + save + load + 3 = 6 iterations: $got"
    else fail "$opt: resumed losses '$got' differ from '$want'"; fi
  done
  grep -q "note: checkpoint" "$WORK/err" && fail "a note on a resume with --data: $(cat "$WORK/err")" || pass "no note when --data is given again"
  # resumed without --data: said, with how many sequences the file had given
  expect_exit 0 "--load without --data" "$T" $GPT --iterations 1 --load "$WORK/ck.safetensors" -q
  expect_grep "note: checkpoint '$WORK/ck.safetensors' was trained on a --data file (.* sequences read); this run has no --data" \
    "a resume without --data is noted"
  ls "$WORK" | grep -q 'pps-out' && fail "temporary checkpoint file left behind"
  # a checkpoint does not depend on the schedule: vocabulary shards saved under
  # Vocab-1 are whole tensors that a plain 1F1B run continues from
  if build tvocab "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4; then
    A="$GPT --data $WORK/text.txt --optimizer adam --lr 0.01 --json"
    "$WORK/tvocab" $A --iterations 2 --save "$WORK/v.safetensors" >/dev/null 2>"$WORK/err" || { fail "vocab --save"; cat "$WORK/err" >&2; }
    "$T" $A --iterations 2 --load "$WORK/v.safetensors" >"$WORK/b.json" 2>"$WORK/err" || { fail "load into 1f1b"; cat "$WORK/err" >&2; }
    want=$(losses "$WORK/full.json" | cut -d' ' -f3-4); got=$(losses "$WORK/b.json" | cut -d' ' -f1-2)
    if [ -n "$got" ] && [ "$want" = "$got" ]; then pass "Vocab-1 checkpoint continued by 1F1B: $got"
    else fail "Vocab-1 -> 1F1B: '$got', expected '$want'"; fi
  else fail "build vocab_1f1b"; fi
  # the checkpoint is an index and one safetensors shard per device (checked with
  # python3 when it is here)
  if command -v python3 >/dev/null 2>&1; then
    if python3 - "$WORK/ck.safetensors" <<'PY'
import json, os, struct, sys
idx = json.load(open(sys.argv[1]))
meta = idx["__metadata__"]
assert meta["format"] == "pps-ppsrt-index" and meta["step"] == "3" and meta["model"] == "gpt", meta
assert meta["optimizer"] == "adam" and meta["layers"] == "2" and meta["data_position"] == "12", meta
names = set()
assert len(idx["shards"]) == 2, idx["shards"]
for sh in idx["shards"]:
    d = open(os.path.join(os.path.dirname(sys.argv[1]), sh), "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    sm = h.pop("__metadata__")
    assert sm["format"] == "pps-ppsrt-shard" and sm["step"] == "3", sm
    end = 0
    for name, t in h.items():
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32" and b - a == 4 * t["shape"][0], name
        end = max(end, b)
        names.add(name)
    assert len(d) == 8 + n + end and (8 + n) % 8 == 0
for k in ("vocab.tok", "optim.m.vocab.tok", "layer1.qkv.w", "layer0.ln1.g", "lnf.g"):
    assert k in names, k
PY
    then pass "checkpoint is an index and valid safetensors shards keyed by layer"; else fail "checkpoint is not valid safetensors shards"; fi
  else skip "safetensors layout (no python3)"; fi
  # --val-data: with --lr 0 and the training file as validation data, the validation
  # loss is the first iteration's training loss (the same sequences, the same weights)
  expect_exit 0 "--val-data" "$T" $GPT --data "$WORK/text.txt" --val-data "$WORK/text.txt" --lr 0 --iterations 2 --val-every 1
  tl=$(sed -n 's/^iter 1\/2  loss \([0-9.]*\).*/\1/p' "$WORK/out"); vl=$(sed -n 's/^val  2\/2  loss \([0-9.]*\).*/\1/p' "$WORK/out")
  if [ -n "$tl" ] && [ -n "$vl" ] && awk "BEGIN { d = $tl - $vl; if (d < 0) d = -d; exit !(d <= 1e-5 * $tl) }"; then
    pass "validation loss $vl = training loss $tl on the same sequences"
  else fail "validation loss '$vl' vs training loss '$tl'"; fi
  [ "$(grep -c '^val ' "$WORK/out")" = 2 ] || fail "--val-every 1: expected 2 validation lines"
  head -c 20000 "$WORK/text.txt" >"$WORK/train.txt"; tail -c 8000 "$WORK/text.txt" >"$WORK/val.txt"
  expect_exit 0 "--val-data every 5" "$T" $GPT --data "$WORK/train.txt" --val-data "$WORK/val.txt" --iterations 12 --val-every 5 --optimizer adam --lr 0.01
  [ "$(grep -c '^val ' "$WORK/out")" = 3 ] && pass "validation after iterations 5, 10 and the last" || fail "validation lines: $(grep -c '^val ' "$WORK/out")"
  v1=$(sed -n 's/^val  5\/12  loss \([0-9.]*\).*/\1/p' "$WORK/out"); v3=$(sed -n 's/^val  12\/12  loss \([0-9.]*\).*/\1/p' "$WORK/out")
  if [ -n "$v1" ] && [ -n "$v3" ] && awk "BEGIN { exit !($v3 < $v1) }"; then pass "validation loss falls: $v1 -> $v3"
  else fail "validation loss does not fall: '$v1' -> '$v3'"; fi
  expect_exit 2 "--val-data without --data" "$T" $GPT --val-data "$WORK/val.txt"
  # --check on real data
  expect_exit 0 "--check with --data" "$T" $GPT --data "$WORK/text.txt" --check -q
  expect_grep "check: passed" "--check passes on real data"
  # llm.c token files (written with python3)
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$WORK" <<'PY'
import struct, sys
w = sys.argv[1]
toks = [(i * 7) % 200 for i in range(300)]
def tokfile(path, magic=20240520, version=1, count=None, tokens=toks):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(tokens) if count is None else count
    open(path, "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(tokens), *tokens))
tokfile(w + "/good.bin")
tokfile(w + "/magic.bin", magic=1234)
tokfile(w + "/version.bin", version=3)
tokfile(w + "/trunc.bin", count=500)
tokfile(w + "/range.bin", tokens=toks[:100] + [300] + toks[100:])
open(w + "/short.bin", "wb").write(b"\x01\x02")
PY
    expect_exit 0 "llm.c token file" "$T" $GPT --data "$WORK/good.bin" --iterations 2 -q
    expect_exit 2 "wrong magic" "$T" $GPT --data "$WORK/magic.bin"
    expect_grep "magic.bin': not a token file (magic 1234, expected 20240520)" "wrong magic named"
    expect_exit 2 "unsupported version" "$T" $GPT --data "$WORK/version.bin"
    expect_grep "token file version 3 is not supported" "version named"
    expect_exit 2 "truncated token file" "$T" $GPT --data "$WORK/trunc.bin"
    expect_grep "truncated: the header promises 500 tokens, the file holds 300" "truncation named"
    expect_exit 2 "header cut short" "$T" $GPT --data "$WORK/short.bin"
    expect_grep "truncated: 2 bytes, shorter than the 1024-byte header" "short header named"
    expect_exit 2 "token out of range" "$T" $GPT --data "$WORK/range.bin"
    expect_grep "token 300 at position 100 is out of range for --vocab 256" "token out of range named"
    expect_exit 2 "--data-format bytes reads a .bin as bytes" "$T" $GPT --vocab 64 --data "$WORK/good.bin" --data-format bytes
    expect_grep "out of range for --vocab 64 (hint: a file read as bytes needs --vocab 256)" "bytes hint"
  else skip "llm.c token files (no python3 to write them)"; fi
  expect_exit 2 "bytes need --vocab 256" "$T" --model gpt --data "$WORK/text.txt"
  expect_grep "out of range for --vocab 32 (hint: a file read as bytes needs --vocab 256)" "vocab hint"
  expect_exit 2 "missing data file" "$T" $GPT --data "$WORK/nope.txt"
  expect_grep "data file '$WORK/nope.txt': No such file" "missing file named"
  expect_exit 2 "--data with mlp" "$T" --data "$WORK/text.txt"
  expect_grep "add --model gpt" "mlp refused"
  # bad checkpoints
  expect_exit 1 "checkpoint of other sizes" "$T" --model gpt --vocab 256 --seq 16 --hidden 32 --heads 2 --load "$WORK/ck.safetensors"
  expect_grep "tensor 'layer0.ln1.g' has shape \[16\], this model's has shape \[32\]" "size mismatch: the tensor and both shapes named"
  expect_exit 1 "not a checkpoint" "$T" $GPT --load "$WORK/text.txt"
  expect_grep "text.txt': not a safetensors file" "garbage checkpoint named"
  printf '\016\000\000\000\000\000\000\000{"a":{"dtype":' >"$WORK/cut.safetensors"
  expect_exit 1 "cut header" "$T" $GPT --load "$WORK/cut.safetensors"
  expect_grep "cut.safetensors': malformed header" "cut header named"
else fail "build 1f1b"; fi
finish
