#!/bin/sh
# tests/analysis/costmodel.sh: seconds and bytes from model { } and hardware { }
# (compiler/costmodel.c): the derived costs against the formulas computed here with
# awk, explicit costs winning, the bytes per device, and hardware.memory as an error.
set -u
: "${PPSC:?}" "${top_srcdir:?}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b; exit !(d <= 1e-9 * (s > 1 ? s : 1)) }'; }
cat > "$tmp/m.pps" <<'PPS'
schedule m7b(P = 8, m = 16, seq = 2048, TF: real = -1) {
  devices P;
  microbatches m;
  placement linear;
  if TF >= 0 { cost TF = TF; }
  model { layers = 32; hidden = 4096; ffn_hidden = 16512; heads = 32; query_groups = 32;
          seq = seq; micro_batch = 1; vocab = 32000; dtype_bytes = 2; }
  hardware { memory = 80e9; flops = 312e12; efficiency = 0.5;
             peer_bandwidth = 300e9; host_bandwidth = 25e9; }
  for d in 0..P {
    device d {
      let warm = min(P - d - 1, m);
      for i in 0..warm     { F(i) }
      for i in 0..m - warm { F(i + warm) BW(i) }
      for i in m - warm..m { BW(i) }
    }
  }
}
PPS
# model.awk: the expected figures of one model, from the formulas of docs/language.md
# ("Model and hardware"), written buffer by buffer and matrix by matrix here
# (awk -v L h f a g s b V d sw rms rope bias P rate peer; f < 0: ffn_hidden not given).
# Prints TF TB TW TC, stage P-1's TF (the output layer's added), one activation unit,
# the static bytes of device 0 and of device P-1 (one stage a device).
cat > "$tmp/model.awk" <<'AWK'
BEGIN {
  if (f < 0 && !sw) f = 4 * h
  if (f < 0) {   # Megatron-LM's SwiGLU default, int(8h/3 / 64) x 64; tiny h: 8 x max(1, int(8h/3 / 8))
    f = int(8 * h / 3 / 64) * 64
    if (f == 0) { f = int(8 * h / 3 / 8); if (f < 1) f = 1; f *= 8 }
  }
  share = L / P; N = s * b; kv = g / a
  # FLOPs of a layer: 2 a weight a token (QKV h x h(1 + 2g/a), projection h x h, FC1
  # h x f or h x 2f, FC2 f x h), attention 4bs^2h; F = M + A, B = M + 2A, W = M
  M = 2 * N * (h * h * (1 + 2 * kv) + h * h + h * f * (sw ? 3 : 2) )
  A = 4 * b * s * s * h
  TF = share * (M + A) / rate; TB = share * (M + 2 * A) / rate; TW = share * M / rate
  TC = N * h * d / peer; TFL = TF + 2 * N * h * V / rate
  # a layer's buffers: ln1, the norms' F32 mean and rstd (rstd alone with RMSNorm) of
  # both norms, qkv, the attention's F32 statistics (4 bytes a head), att, x1, ln2,
  # hpre (gate and up with SwiGLU), hact, y and the two residual gradients
  act = N * h * d + (rms ? 2 : 4) * N * 4 + N * h * (1 + 2 * kv) * d + 4 * a * N + N * h * d \
      + 2 * N * h * d + N * f * (sw ? 2 : 1) * d + N * f * d + N * h * d + 2 * N * h * d
  unit = share * act
  # a layer's parameters: the matrices, their biases (with bias), two norms of gamma
  # and beta (gamma alone with RMSNorm)
  norm = rms ? h : 2 * h
  lay = h * h * (1 + 2 * kv) + h * h + h * f * (sw ? 3 : 2) \
      + bias * (h * (1 + 2 * kv) + h + f * (sw ? 2 : 1) + h) + 2 * norm
  per = d + 4 + (d < 4 ? 4 : 0) + 8
  st0 = (share * lay + h * V + (rope ? 0 : s * h)) * per   # embedding, position table
  stl = (share * lay + h * V + norm) * per                 # output layer, final norm
  printf "%.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", TF, TB, TW, TC, TFL, unit, st0, stl
}
AWK
M7B='L=32 h=4096 f=16512 a=32 g=32 s=2048 b=1 V=32000 d=2 sw=0 rms=0 rope=0 bias=1 P=8 rate=156e12 peer=300e9'
# model NAME=VALUE...: model.awk's figures for m7b's model with those changed
# shellcheck disable=SC2046
model() { awk $(for v in $M7B "$@"; do printf ' -v %s' "$v"; done) -f "$tmp/model.awk"; }   # (split: one -v each)
# figures NAME FILE 'AWK VARS' ARGS...: expand's costs and sim --json's bytes of FILE
# at ARGS against model.awk's
figures() {
  name=$1 file=$2 vars=$3; shift 3
  "$PPSC" expand "$file" "$@" > "$tmp/x.pps" 2>"$tmp/err" || { bad "$name: expand: $(cat "$tmp/err")"; return; }
  "$PPSC" sim "$file" --json "$@" > "$tmp/j" 2>"$tmp/err" || { bad "$name: sim: $(cat "$tmp/err")"; return; }
  # shellcheck disable=SC2086
  want=$(model $vars)
  got="$(sed -n 's/^  cost TF = \(.*\), TB = \(.*\), TW = \(.*\), TC = \(.*\);$/\1 \2 \3 \4/p' "$tmp/x.pps") \
$(sed -n 's/^  cost stage 7: TF = \([^,]*\),.*/\1/p' "$tmp/x.pps") \
$(sed 's/.*"unit_bytes":\([^,]*\),.*/\1/' "$tmp/j") \
$(sed 's/.*"device":0,[^}]*"static_bytes":\([^,}]*\).*/\1/' "$tmp/j") \
$(sed 's/.*"device":7,[^}]*"static_bytes":\([^,}]*\).*/\1/' "$tmp/j")"
  # shellcheck disable=SC2086
  printf '%s\n%s\n' "$(echo $got)" "$want" | awk -v name="$name" '
    NR == 1 { n = split($0, g) } NR == 2 { m = split($0, w) }
    END {
      split("TF TB TW TC stage-7-TF unit_bytes device-0-static_bytes device-7-static_bytes", k)
      if (n != 8 || m != 8) { print "FAIL: " name ": " n " figures from ppsc, " m " from model.awk, not 8"; exit 1 }
      for (i = 1; i <= 8; i++) {
        d = g[i] - w[i]; if (d < 0) d = -d; s = w[i] < 0 ? -w[i] : w[i]
        if (!(d <= 1e-9 * (s > 1 ? s : 1))) { print "FAIL: " name ": " k[i] " " g[i] ", want " w[i]; bad = 1 }
      }
      exit bad
    }' || fail=1
}
figures m7b "$tmp/m.pps" ''
# (model.awk at a = g, f = 4h: bsh(24h + 4s), bsh(24h + 8s), 24bsh^2 a layer, and
# sbh(16 + 2g/a) d + sb(16 + 4a) bytes: the formulas before ffn_hidden counted)
model f=16384 | awk '{ b = 1; s = 2048; h = 4096; r = 312e12 * 0.5; bsh = b * s * h
  w[1] = 4 * bsh * (24 * h + 4 * s) / r; w[2] = 4 * bsh * (24 * h + 8 * s) / r; w[3] = 4 * 24 * bsh * h / r
  w[6] = 4 * (s * h * (16 + 2) * 2 + s * (16 + 4 * 32))
  for (i in w) { d = $i - w[i]; if (d < 0) d = -d; if (d > 1e-9 * w[i]) { print "FAIL: model.awk at f = 4h: " $i ", want " w[i] " (the 24h formulas)"; bad = 1 } }
  exit bad }' || fail=1
figures "m7b, ffn_hidden 4h" "$tmp/m.pps" 'f=16384' --model ffn_hidden=16384
# a Llama-style block: SwiGLU, RMSNorm, RoPE, no biases, grouped-query attention, ffn_hidden given
sed 's/ffn_hidden = 16512; heads = 32; query_groups = 32;/ffn_hidden = 11008; heads = 32; query_groups = 8; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0;/' \
  "$tmp/m.pps" > "$tmp/llama.pps" && grep -q swiglu "$tmp/llama.pps" || exit 99
figures "Llama block" "$tmp/llama.pps" 'f=11008 g=8 sw=1 rms=1 rope=1 bias=0'
# SwiGLU with the default ffn_hidden (4096: 10880), and at a tiny h (16: 8 x 5 = 40)
sed 's/ffn_hidden = 16512; //' "$tmp/m.pps" > "$tmp/nof.pps" || exit 99
figures "swiglu, default ffn_hidden" "$tmp/nof.pps" 'f=-1 sw=1' --model swiglu=1
[ "$(model f=-1 sw=1 | cut -d' ' -f1)" = "$(model f=10880 sw=1 | cut -d' ' -f1)" ] || bad "model.awk: swiglu's default at h = 4096 is not 10880"
figures "swiglu, default ffn_hidden, h = 16" "$tmp/nof.pps" 'f=-1 sw=1 h=16 a=2 g=2' --model swiglu=1 --model hidden=16 --model heads=2 --model query_groups=2
[ "$(model f=-1 sw=1 h=16 a=2 g=2 | cut -d' ' -f1)" = "$(model f=40 sw=1 h=16 a=2 g=2 | cut -d' ' -f1)" ] || bad "model.awk: swiglu's default at h = 16 is not 40"
# each switch alone, and grouped-query attention alone
figures "swiglu" "$tmp/m.pps" 'sw=1' --model swiglu=1
figures "rmsnorm" "$tmp/m.pps" 'rms=1' --model rmsnorm=1
figures "rope" "$tmp/m.pps" 'rope=1' --model rope=1
figures "bias = 0" "$tmp/m.pps" 'bias=0' --model bias=0
figures "query_groups 8" "$tmp/m.pps" 'g=8' --model query_groups=8
# the switches at their defaults are the keys absent
"$PPSC" sim --json "$tmp/m.pps" > "$tmp/j0" && "$PPSC" sim --json "$tmp/m.pps" --model swiglu=0 --model rmsnorm=0 --model rope=0 --model bias=1 > "$tmp/j1" &&
  cmp -s "$tmp/j0" "$tmp/j1" || bad "swiglu = 0, rmsnorm = 0, rope = 0, bias = 1 change sim --json"
"$PPSC" expand "$tmp/m.pps" > "$tmp/x.pps" || bad "expand m7b"   # (for the flags' tests below)
# explicit costs win
"$PPSC" expand "$tmp/m.pps" -D TF=1 > "$tmp/xt.pps" || bad "expand -D TF=1"
tb=$(sed -n 's/^  cost TF = 1, TB = \([^,]*\),.*/\1/p' "$tmp/xt.pps")
near "${tb:-none}" "$(model | cut -d' ' -f2)" || bad "an explicit TF is not kept (or TB not derived): $(grep '^  cost TF' "$tmp/xt.pps")"
# bytes: unit, static, peak per device (JSON)
"$PPSC" sim "$tmp/m.pps" --json > "$tmp/j" || bad "sim m7b failed"
grep -q '"time_unit":"s"' "$tmp/j" || bad "time_unit is not s"
ub=$(sed 's/.*"unit_bytes":\([^,]*\),.*/\1/' "$tmp/j")
st=$(sed 's/.*"device":0,[^}]*"static_bytes":\([^,}]*\).*/\1/' "$tmp/j")
pb=$(sed 's/.*"device":0,[^}]*"peak_bytes":\([^,}]*\).*/\1/' "$tmp/j")
w=$(awk -v s="$st" -v u="$ub" 'BEGIN { printf "%.17g", s + 8 * u }')
near "$pb" "$w" || bad "peak bytes of device 0: $pb, want $w"
# over hardware.memory at seq 16384 (activations linear in s): an error at the key, exit 1
"$PPSC" check "$tmp/m.pps" -D seq=16384 --color=never > /dev/null 2> "$tmp/err"; rc=$?
need=$(model s=16384 | awk '{ printf "%.3g", ($7 + 8 * $6) / 1e9 }')
[ $rc -eq 1 ] && grep -q "m.pps:8:14: error: device 0 needs $need GB, over hardware.memory = 80 GB" "$tmp/err" \
  || bad "seq=16384: exit $rc, $(head -1 "$tmp/err")"
# bad values
printf 'schedule e {\n  devices 1; microbatches 1;\n  hardware { efficiency = 1.5; }\n  model { layers = 0; }\n  device 0 { F(0) BW(0) }\n}\n' > "$tmp/e.pps"
"$PPSC" check "$tmp/e.pps" --color=never > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'e.pps:3:14: error: hardware efficiency must be in (0, 1], got 1.5' "$tmp/err" \
  && grep -q 'e.pps:4:11: error: model layers must be positive, got 0' "$tmp/err" || bad "bad values: exit $rc, $(cat "$tmp/err")"
# copy engines: D2H and H2D bandwidths sharing a host link of 25e9 (in proportion)
sed 's/host_bandwidth = 25e9;/host_bandwidth = 25e9; d2h_bandwidth = 20e9; h2d_bandwidth = 30e9;/' "$tmp/m.pps" > "$tmp/c.pps"
"$PPSC" expand "$tmp/c.pps" > "$tmp/cx.pps" || bad "expand copy engines"
toff=$(sed -n 's/^  cost TOFF = \(.*\);$/\1/p' "$tmp/cx.pps"); trl=$(sed -n 's/^  cost TRELOAD = \(.*\);$/\1/p' "$tmp/cx.pps")
near "$toff" "$(awk -v u="$ub" 'BEGIN { printf "%.17g", u / (20e9 * 25 / 50) }')" || bad "TOFF $toff"
near "$trl" "$(awk -v u="$ub" 'BEGIN { printf "%.17g", u / (30e9 * 25 / 50) }')" || bad "TRELOAD $trl"
# host links (sim.c): the hand-timed cases at their other settings, and bad values
c=$top_srcdir/tests/analysis/cases
"$PPSC" check "$c/host_link.pps" -D k=1 > /dev/null 2>&1 || bad "host_link.pps at k = 1 (a link per device): makespan 11"
"$PPSC" check "$c/duplex.pps" -D half=false > /dev/null 2>&1 || bad "duplex.pps at full duplex: makespan 10"
printf 'schedule e {\n  devices 1; microbatches 1;\n  hardware { devices_per_host_link = 1.5; duplex_bandwidth = 2; }\n  device 0 { F(0) BW(0) }\n}\n' > "$tmp/e.pps"
"$PPSC" check "$tmp/e.pps" --color=never > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'e.pps:3:14: error: hardware devices_per_host_link must be a whole number, got 1.5' "$tmp/err" \
  && grep -q 'e.pps:3:43: error: hardware duplex_bandwidth needs host_bandwidth' "$tmp/err" || bad "host link bad values: exit $rc, $(cat "$tmp/err")"
printf 'schedule e {\n  devices 1; microbatches 1;\n  hardware { host_bandwidth = 1; duplex_bandwidth = 2; }\n  device 0 { F(0) BW(0) }\n}\n' > "$tmp/e.pps"
"$PPSC" check "$tmp/e.pps" --color=never > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'e.pps:3:34: error: hardware duplex_bandwidth (2, each way while both run) must not exceed host_bandwidth (1)' "$tmp/err" \
  || bad "duplex over host: exit $rc, $(cat "$tmp/err")"
# --model KEY=V and --hardware KEY=V (elab.c apply_block_key): a key of the block replaced
# or added, as if the file said it; the derived costs follow
"$PPSC" expand "$tmp/m.pps" --model seq=4096 > "$tmp/o1.pps" 2>"$tmp/err" || bad "--model seq=4096: $(cat "$tmp/err")"
"$PPSC" expand "$tmp/m.pps" -D seq=4096 > "$tmp/o2.pps" || bad "-D seq=4096"
# (but for the first line, which names the parameters: seq = 2048 there)
[ "$(sed 1d "$tmp/o1.pps")" = "$(sed 1d "$tmp/o2.pps")" ] && ! cmp -s "$tmp/o1.pps" "$tmp/x.pps" || bad "--model seq=4096 differs from -D seq=4096"
"$PPSC" expand "$tmp/m.pps" --hardware efficiency=0.25 > "$tmp/o3.pps" || bad "--hardware efficiency=0.25"
tf3=$(sed -n 's/^  cost TF = \([^,]*\),.*/\1/p' "$tmp/o3.pps"); tf1=$(sed -n 's/^  cost TF = \([^,]*\),.*/\1/p' "$tmp/x.pps")
near "$tf3" "$(awk -v t="$tf1" 'BEGIN { printf "%.17g", 2 * t }')" || bad "--hardware efficiency=0.25: TF $tf3, expected 2 x $tf1"
# a key the file does not have is added
"$PPSC" sim --json "$tmp/m.pps" --hardware tensor_parallel=8 --hardware tp_bandwidth=450e9 2>"$tmp/err" | grep -q '"tensor_parallel":{"size":8,' \
  || bad "--hardware tensor_parallel=8 (a key the file lacks): $(cat "$tmp/err")"
# a replaced memory: over the limit, reported as for the file's (no span: the value is the flag's)
"$PPSC" check "$tmp/m.pps" --hardware memory=20e9 --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q '^ppsc: error: device 0 needs 26.8 GB, over hardware.memory = 20 GB' "$tmp/err" \
  || bad "--hardware memory=20e9: exit $rc, $(head -1 "$tmp/err")"
"$PPSC" check "$top_srcdir/stdlib/1f1b.pps" --hardware memory=80e9 --hardware flops=1e15 --model layers=32 --model hidden=4096 \
  --model heads=32 --model seq=4096 --model micro_batch=1 --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "warning: the file's cost TF = 1 wins over the .* s that model { } and hardware { } give with --model/--hardware" "$tmp/err" \
  || bad "a file's explicit cost over the flags' derived one: exit $rc, $(cat "$tmp/err")"
"$PPSC" check "$tmp/m.pps" --hardware tensorparallel=2 --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'ppsc: error: --hardware tensorparallel: unknown key (expected memory, flops, ' "$tmp/err" || bad "--hardware unknown key: exit $rc"
"$PPSC" check "$tmp/m.pps" --model heads=many --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'ppsc: error: --model heads=many: expected a number' "$tmp/err" || bad "--model heads=many: exit $rc"
"$PPSC" check "$tmp/m.pps" --model heads=-2 --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q '^ppsc: error: model heads must be positive, got -2' "$tmp/err" || bad "--model heads=-2: exit $rc, $(cat "$tmp/err")"
"$PPSC" check "$tmp/m.pps" --model rope=2 --color=never >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q '^ppsc: error: model rope must be 0 or 1 (1: rotary position embedding on the queries and keys, no position table), got 2' "$tmp/err" ||
  bad "--model rope=2: exit $rc, $(cat "$tmp/err")"
# no model: nothing changes (unit costs, no bytes)
"$PPSC" sim --json "$top_srcdir/stdlib/1f1b.pps" | grep -q '"time_unit":"unit","unit_bytes":null,"hardware_memory":null}' || bad "1f1b without a model"
exit $fail
