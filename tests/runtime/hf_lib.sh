# tests/runtime/hf_lib.sh: what the Hugging Face conversion tests (hf.sh, hf_moe.sh,
# hf_qwen2.sh, hf_qwen3.sh) share, sourced after lib.sh: a skip without python3; 1F1B
# and ZB-V built at P = 2, m = 2 ($A, $ZV); the bytes of README.md as data ($DATA);
# pps_hf.py ($HF) as `hf ARGS` (its stderr shown and also kept in $WORK/all); loss1 FILE
# (the first iteration's loss of a --json output); near A B R (|A - B| <= R |B|); and
# the shared reference code (hf_ref.py, hf_rope.py) copied into $WORK beside the
# test's own reference; hf_edit SRC PYTHON (an edited copy of an HF directory for the
# refusal checks).
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
HF="$top_srcdir/python/pps_hf.py"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=2 || { fail "build 1f1b"; finish; }
build zv "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=2 || { fail "build zb_v"; finish; }
A=$WORK/a; ZV=$WORK/zv
DATA=$top_srcdir/README.md
hf() { python3 "$HF" "$@" 2> "$WORK/hf.err"; st=$?; cat "$WORK/hf.err" >&2; cat "$WORK/hf.err" >> "$WORK/all"; return $st; }
: > "$WORK/all"
loss1() { sed -n 's/.*"iterations":\[{"iteration":1,"loss":\([-0-9.e+]*\),.*/\1/p' "$1"; }
near() { python3 -c "import sys; a, b, r = map(float, sys.argv[1:4]); sys.exit(not abs(a - b) <= r * abs(b))" "$@" 2>/dev/null; }
cp "$top_srcdir/tests/runtime/hf_ref.py" "$top_srcdir/tests/runtime/hf_rope.py" "$WORK/"
# hf_edit SRC PYTHON: $WORK/hf_x, a copy of the HF directory $WORK/SRC edited by PYTHON
# (c: its config, t: its safetensors header, both written back); $WORK/x and its outputs removed
hf_edit() {
  rm -rf "$WORK/hf_x" "$WORK/x" "$WORK/x."* "$WORK/.x."*; cp -r "$WORK/$1" "$WORK/hf_x"
  python3 - "$WORK/hf_x" "$2" <<'PY'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])
exec(sys.argv[2])
json.dump(c, open(d + "/config.json", "w"))
h = json.dumps(t).encode()
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
}
