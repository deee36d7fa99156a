#!/bin/sh
# bench/rows_vs_ref.sh: the compiler rows of bench/README.md's tables, two ppsc builds
# side by side: wall time, CPU time (user + system) and peak RSS (/usr/bin/time) of each
# row's ppsc command, RUNS runs of each build in turn (reference first), both on this
# tree's stdlib and inputs.
#   sh bench/rows_vs_ref.sh REF_PPSC [NEW_PPSC]     (NEW_PPSC: default build/ppsc)
# Prints one line per row and build: the runs' wall times (s), the smallest and median
# CPU time (s) and the largest peak RSS (MB). Environment: RUNS (3), ROWS="name ..." runs some rows (the names printed).
# Not part of make check: about 2 minutes with RUNS=3 on the development machine.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
REF=${1:?usage: rows_vs_ref.sh REF_PPSC [NEW_PPSC]}
NEW=${2:-$src/build/ppsc}
RUNS=${RUNS:-3}
for x in "$REF" "$NEW"; do [ -x "$x" ] || { echo "rows_vs_ref.sh: no ppsc at $x" >&2; exit 2; }; done
[ -x /usr/bin/time ] || { echo "rows_vs_ref.sh: needs /usr/bin/time" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rows.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# the inputs of bench/elab_1m.sh (bench/elab_inputs.sh)
sh "$src/bench/elab_inputs.sh" "$tmp"
"$REF" expand "$tmp/gen.pps" >"$tmp/literal.pps"

S=$src/stdlib
ANY=$src/tests/synth/synth_any.pps
# name|ppsc arguments (word-split; no spaces inside an argument)
rows() {
  cat <<EOF
v_half|sim $S/v_half.pps -D P=16 -D m=4096
vocab_v_half_async|sim $S/vocab_v_half.pps -D P=16 -D m=4096 -D async=true
interleaved_1f1b|sim $S/interleaved_1f1b.pps -D P=64 -D m=1024 -D v=2
zb_v|sim $S/zb_v.pps -D P=64 -D m=1024
dualpipe_v|sim $S/dualpipe_v.pps -D P=64 -D m=1024
check_interleaved_1f1b|check $S/interleaved_1f1b.pps -D P=64 -D m=1024 -D v=2
check_zb_v|check $S/zb_v.pps -D P=64 -D m=1024
check_dualpipe_v|check $S/dualpipe_v.pps -D P=64 -D m=1024
sim_interleaved_m128|sim --json $src/bench/sim_interleaved.pps -D m=128
sim_interleaved_m256|sim --json $src/bench/sim_interleaved.pps -D m=256
sim_interleaved_m512|sim --json $src/bench/sim_interleaved.pps -D m=512
sim_interleaved_m1024|sim --json $src/bench/sim_interleaved.pps -D m=1024
sim_interleaved_m2048|sim --json $src/bench/sim_interleaved.pps -D m=2048
elab_gen|expand $tmp/gen.pps
elab_literal|expand $tmp/literal.pps
elab_block|expand $tmp/block.pps
emit_m550|emit-c $src/examples/1f1b.pps -D P=8 -D m=550 -o $tmp/g.c
emit_m4400|emit-c $src/examples/1f1b.pps -D P=8 -D m=4400 -o $tmp/g.c
synth_P8_L5|synth --stdlib $S --json $ANY -D P=8 -D m=32 -D pl=1 -D L=5 -D TB=1.5 -D TC=0.1
synth_P8_L3|synth --stdlib $S --json $ANY -D P=8 -D m=32 -D pl=1 -D L=3
synth_P32_L32|synth --stdlib $S --json $ANY -D P=32 -D m=128 -D pl=1 -D L=32
synth_P32_L8|synth --stdlib $S --json $ANY -D P=32 -D m=128 -D pl=1 -D L=8
synth_P32_L17|synth --stdlib $S --json $ANY -D P=32 -D m=128 -D pl=1 -D L=17 -D TW=0.5 -D TC=0.1
EOF
}

printf '# %s  load: %s\n# ref %s\n# new %s\n# runs %s: wall s (each run), CPU s (min/median), peak RSS MB (largest)\n' \
  "$(date -u '+%F %T UTC')" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" "$REF" "$NEW" "$RUNS"
printf '%-24s | %-24s %-11s %7s | %-24s %-11s %7s\n' row ref_wall ref_cpu ref_MB new_wall new_cpu new_MB
rows | while IFS='|' read -r name args; do
  if [ -n "${ROWS:-}" ]; then case " $ROWS " in *" $name "*) ;; *) continue ;; esac; fi
  : >"$tmp/REF"; : >"$tmp/NEW"
  i=0
  while [ $i -lt "$RUNS" ]; do
    for b in REF NEW; do
      [ $b = REF ] && exe=$REF || exe=$NEW
      # shellcheck disable=SC2086
      /usr/bin/time -f '%e %M %U %S' -o "$tmp/t" "$exe" $args >/dev/null 2>"$tmp/err" || { echo "$name: $b failed:" >&2; cat "$tmp/err" >&2; exit 1; }
      cat "$tmp/t" >>"$tmp/$b"
    done
    i=$((i + 1))
  done
  fmt() {
    c=$(awk '{ print $3 + $4 }' "$1" | sort -n | awk '{ v[NR] = $1 } END { printf "%.2f/%.2f", v[1], v[int((NR + 1) / 2)] }')
    awk -v c="$c" '{ w = w (NR > 1 ? " " : "") sprintf("%.2f", $1); if ($2 > m) m = $2 } END { printf "%-24s %-11s %7.1f", w, c, m / 1024 }' "$1"
  }
  printf '%-24s | %s | %s\n' "$name" "$(fmt "$tmp/REF")" "$(fmt "$tmp/NEW")"
done
