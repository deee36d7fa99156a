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
# derived costs, printed by expand (which writes the costs it uses)
"$PPSC" expand "$tmp/m.pps" > "$tmp/x.pps" 2>"$tmp/err" || { bad "expand: $(cat "$tmp/err")"; }
costs=$(sed -n 's/^  cost TF = \(.*\), TB = \(.*\), TW = \(.*\), TC = \(.*\);$/\1 \2 \3 \4/p' "$tmp/x.pps")
set -- $costs
want=$(awk 'BEGIN { b = 1; s = 2048; h = 4096; r = 312e12 * 0.5; bsh = b * s * h
  printf "%.17g %.17g %.17g %.17g", 4 * bsh * (24 * h + 4 * s) / r, 4 * bsh * (24 * h + 8 * s) / r, 4 * 24 * bsh * h / r, bsh * 2 / 300e9 }')
i=0
for w in $want; do
  i=$((i + 1)); eval got=\${$i}
  near "$got" "$w" || bad "derived cost $i: $got, want $w"
done
# the output layer on the last stage: TF + 2bshV / rate
got=$(sed -n 's/^  cost stage 7: TF = \([^,]*\),.*/\1/p' "$tmp/x.pps")
w=$(awk -v tf="$1" 'BEGIN { printf "%.17g", tf + 2 * 2048 * 4096 * 32000 / (312e12 * 0.5) }')
near "$got" "$w" || bad "stage 7 TF: $got, want $w"
# explicit costs win
"$PPSC" expand "$tmp/m.pps" -D TF=1 | grep -q '^  cost TF = 1, TB = 0.0246' || bad "an explicit TF is not kept (or TB not derived)"
# bytes: unit, static, peak per device (JSON)
"$PPSC" sim "$tmp/m.pps" --json > "$tmp/j" || bad "sim m7b failed"
grep -q '"time_unit":"s"' "$tmp/j" || bad "time_unit is not s"
ub=$(sed 's/.*"unit_bytes":\([^,]*\),.*/\1/' "$tmp/j")
# (fused attention: sbh(16 + 2g/a) d + sb(16 + 4a) a layer, g = a = 32, d = 2)
w=$(awk 'BEGIN { printf "%.17g", 4 * (2048 * 4096 * (16 + 2) * 2 + 2048 * (16 + 4 * 32)) }')
near "$ub" "$w" || bad "unit_bytes $ub, want $w"
st=$(sed 's/.*"device":0,[^}]*"static_bytes":\([^,}]*\).*/\1/' "$tmp/j")
# (per layer: weights, biases, layer norms; stage 0: embedding and positions; 18 B each)
w=$(awk 'BEGIN { h = 4096; f = 16512; p = 4 * (4 * h * h + 2 * h * f + 9 * h + f) + h * 32000 + 2048 * h; printf "%.17g", p * 18 }')
near "$st" "$w" || bad "static bytes of device 0: $st, want $w"
pb=$(sed 's/.*"device":0,[^}]*"peak_bytes":\([^,}]*\).*/\1/' "$tmp/j")
w=$(awk -v s="$st" -v u="$ub" 'BEGIN { printf "%.17g", s + 8 * u }')
near "$pb" "$w" || bad "peak bytes of device 0: $pb, want $w"
# over hardware.memory at seq 16384 (activations linear in s): an error at the key, exit 1
"$PPSC" check "$tmp/m.pps" -D seq=16384 --color=never > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'm.pps:8:14: error: device 0 needs 95.5 GB, over hardware.memory = 80 GB' "$tmp/err" \
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
# no model: nothing changes (unit costs, no bytes)
"$PPSC" sim --json "$top_srcdir/stdlib/1f1b.pps" | grep -q '"time_unit":"unit","unit_bytes":null,"hardware_memory":null}' || bad "1f1b without a model"
exit $fail
