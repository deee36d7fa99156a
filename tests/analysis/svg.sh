#!/bin/sh
# tests/analysis/svg.sh: `ppsc sim --svg` pictures are valid SVG a real renderer
# draws (rsvg-convert from librsvg2-bin; skipped, exit 77, without it), for schedules
# with one chunk per device, two (interleaved, V), copies (offload), vocabulary
# passes, a dense one (one pixel column per bin), extreme cost scales, and with
# --svg-arrows. Also checks what the picture holds: a <title> tooltip per box, the
# critical path, a legend entry per chunk, a labelled memory scale; no number in any
# picture is inf or nan (subnormal costs included); the pass kinds get hues at least
# 60 degrees apart, the first 12 chunks distinct shades.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
command -v rsvg-convert >/dev/null 2>&1 || { echo "skip: rsvg-convert not found (apt-get install librsvg2-bin)"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
std=$top_srcdir/stdlib
fail=0
# render NAME FILE ARGS...: sim --svg, then rsvg-convert to PNG
render() {
  name=$1 file=$2; shift 2
  if ! "$PPSC" sim --stdlib "$std" -q "$file" "$@" --svg "$tmp/$name.svg" 2>"$tmp/$name.err"; then
    echo "FAIL $name: ppsc sim"; cat "$tmp/$name.err"; fail=1; return 1
  fi
  if rsvg-convert "$tmp/$name.svg" -o "$tmp/$name.png" 2>"$tmp/$name.rerr" && [ -s "$tmp/$name.png" ]; then
    echo "ok: $name renders"
  else echo "FAIL $name: rsvg-convert"; cat "$tmp/$name.rerr"; fail=1; return 1; fi
}
render 1f1b "$std/1f1b.pps" -D P=4 -D m=8
render interleaved "$std/interleaved_1f1b.pps" -D P=4 -D m=8 --svg-arrows
render zb_v "$std/zb_v.pps" -D P=4 -D m=8
render offload "$std/pipeoffload.pps" -D P=4 -D m=8
render vocab "$std/vocab_1f1b.pps" -D P=4 -D m=8
render dense "$std/1f1b.pps" -D P=8 -D m=4000
render wide "$std/1f1b.pps" -D P=4 -D m=400 --svg-arrows
render tiny "$std/1f1b.pps" -D P=4 -D m=8 --cost TF=1e-300 --cost TB=1e-300 --cost TW=1e-300
render huge "$std/1f1b.pps" -D P=4 -D m=8 --cost TF=1e290 --cost TB=1e290 --cost TW=1e290
# subnormal costs: W / makespan overflows; positions must still be finite
render subnormal "$std/1f1b.pps" -D P=4 -D m=8 --cost TF=1e-310 --cost TB=1e-310 --cost TW=1e-310 --cost TC=1e-310
# 16 chunks on one device (a stage each), for the hue check below
cat >"$tmp/c16.pps" <<'EOF16'
schedule chunks16 {
  devices 1;
  microbatches 1;
  stages 16;
  placement [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
  device 0 { for s in 0..16 { F(0, s) } for s in 0..16 { BW(0, 15 - s) } }
}
EOF16
render chunks16 "$tmp/c16.pps"

# no picture holds a non-finite number (inf, -nan: a renderer draws nothing or fails)
for f in "$tmp"/*.svg; do
  if grep -Eiq '(^|[^a-z])-?(nan|inf)([^a-z]|$)' "$f"; then
    echo "FAIL $(basename "$f"): non-finite number: $(grep -Eio '.{20}(^|[^a-z])-?(nan|inf)([^a-z]|$).{0,10}' "$f" | head -2)"; fail=1
  else echo "ok: $(basename "$f"): every number finite"; fi
done
# pass kinds in distinct hues (issue 22: F and BW were hard to tell apart): the legend's
# F, B, W, BW at least 60 degrees apart on the hue circle; chunks in shades of them:
# the first 12 legend entries pairwise distinct
grep -o 'fill="hsl([0-9]*,[^"]*"/><text[^>]*>\(F\|B\|W\|BW\)</text>' "$tmp/chunks16.svg" |
  sed 's/fill="hsl(\([0-9]*\),.*/\1/' >"$tmp/hues"
if [ "$(wc -l <"$tmp/hues")" = 4 ] && awk '{ h[NR] = $1 } END {
     for (i = 1; i <= NR; i++) for (j = 1; j < i; j++) { d = h[i] - h[j]; if (d < 0) d = -d; if (d > 180) d = 360 - d;
       if (d < 60) { printf "kinds %d and %d: hues %d and %d\n", j, i, h[j], h[i]; bad = 1 } }
     exit bad }' "$tmp/hues"; then echo "ok: F, B, W, BW hues at least 60 degrees apart"
else echo "FAIL: pass kind hues: $(tr '\n' ' ' <"$tmp/hues")"; fail=1; fi
grep -o 'fill="hsl([^"]*)"/><text[^>]*>chunk [0-9]*</text>' "$tmp/chunks16.svg" | sed 's/^fill="\([^"]*\)".*/\1/' | head -n 12 >"$tmp/shades"
if [ "$(wc -l <"$tmp/shades")" = 12 ] && [ "$(sort -u "$tmp/shades" | wc -l)" = 12 ]; then echo "ok: 12 chunk shades distinct"
else echo "FAIL: chunk shades: $(tr '\n' ' ' <"$tmp/shades")"; fail=1; fi

# content: a tooltip per compute box (1F1B, P=4, m=8: 64 passes), the critical path
n=$(grep -o '<title>' "$tmp/1f1b.svg" | wc -l)
[ "$n" = 64 ] && echo "ok: 64 tooltips" || { echo "FAIL: $n tooltips, expected 64"; fail=1; }
grep -q '<title>BW(7): microbatch 7, stage 3, device 3, 25 to 27 (critical path)</title>' "$tmp/1f1b.svg" &&
  echo "ok: tooltip text and critical path" || { echo "FAIL: tooltip of BW(7) on device 3"; fail=1; }
grep -q '>chunk 1</text>' "$tmp/interleaved.svg" && ! grep -q '>chunk 1</text>' "$tmp/1f1b.svg" &&
  echo "ok: one legend entry per chunk" || { echo "FAIL: chunk legend"; fail=1; }
grep -q 'marker-end="url(#arrow)"' "$tmp/interleaved.svg" && ! grep -q 'marker-end' "$tmp/1f1b.svg" &&
  echo "ok: arrows only with --svg-arrows" || { echo "FAIL: arrows"; fail=1; }
# the width grows with the schedule (14 px a pass of the busiest device, 1200..20000)
w=$(sed -n 's/^<svg [^>]*width="\([0-9]*\)".*/\1/p' "$tmp/wide.svg")
[ "$w" = 11300 ] && echo "ok: width 11300 for 800 passes a device" || { echo "FAIL: width $w"; fail=1; }
# at most ~100 axis ticks whatever the scale
for f in tiny huge; do
  t=$(grep -c 'text-anchor="middle">[-0-9.e+]*</text>$' "$tmp/$f.svg")
  [ "$t" -le 102 ] && echo "ok: $f: $t ticks" || { echo "FAIL $f: $t ticks"; fail=1; }
done
# --svg-window and --svg-devices (issue 22): only that time and those devices; beyond
# 8 devices the memory is a strip per device (zb_v P=16 m=64 was 1566 px high)
"$PPSC" sim "$std/zb_v.pps" -D P=16 -D m=64 --svg "$tmp/w.svg" --svg-window 100..200 --svg-devices 4..8 -q || { echo "FAIL: window"; fail=1; }
rsvg-convert "$tmp/w.svg" -o "$tmp/w.png" || { echo "FAIL: window picture does not render"; fail=1; }
if grep -q "time 100 to 200; devices 4 to 7" "$tmp/w.svg" && [ "$(grep -o '>device [0-9]*<' "$tmp/w.svg" | sort -u | tr -d '<>' | tr '\n' ' ')" = "device 4 device 5 device 6 device 7 " ] &&
   grep -o '<title>[^<]*</title>' "$tmp/w.svg" | sed 's/.*, \([0-9.e+-]*\) to \([0-9.e+-]*\).*/\1 \2/' |
     awk '$2 <= 100 || $1 >= 200 { bad = 1 } END { exit bad }'; then echo "ok: --svg-window 100..200 --svg-devices 4..8"
else echo "FAIL: window or devices"; grep -o '>device [0-9]*<' "$tmp/w.svg" | sort -u; fail=1; fi
"$PPSC" sim "$std/zb_v.pps" -D P=16 -D m=64 --svg "$tmp/p16.svg" -q
h=$(sed -n 's/^<svg [^>]* height="\([0-9]*\)".*/\1/p' "$tmp/p16.svg")
if [ -n "$h" ] && [ "$h" -lt 800 ] && grep -q "darker holds more" "$tmp/p16.svg"; then echo "ok: P=16 memory strips, $h px high"
else echo "FAIL: P=16 picture $h px high"; fail=1; fi
"$PPSC" sim "$std/zb_v.pps" --svg "$tmp/x.svg" --svg-window 5..1 >/dev/null 2>&1; [ $? = 2 ] && echo "ok: --svg-window 5..1 refused" || { echo "FAIL: 5..1"; fail=1; }
"$PPSC" sim "$std/zb_v.pps" --svg "$tmp/x.svg" --svg-devices 2..9 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "devices 0..4 (HI is at most 4); no svg written" "$tmp/err" && [ ! -e "$tmp/x.svg" ]; then echo "ok: --svg-devices 2..9 refused"
else echo "FAIL: --svg-devices 2..9: exit $rc"; cat "$tmp/err"; fail=1; fi
exit $fail
