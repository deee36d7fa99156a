#!/bin/sh
# bench/identity.sh: byte-identity of the compiler's outputs across a refactor.
# Runs `ppsc sim --json`, `ppsc check --json`, `ppsc expand` and `ppsc emit-c` (stdout,
# stderr and exit status; emit-c's file too) of two ppsc builds on every stdlib/*.pps
# and examples/*.pps at 13 size / cost / policy sets (the last two: P = 16, m = 64 and
# P = 64, m = 1024), and lists every case whose output differs. Exit 0 when all are
# byte-identical.
#   sh bench/identity.sh REF_PPSC [NEW_PPSC]      (NEW_PPSC: default build/ppsc)
# REF_PPSC: a build of the commit the change started from (bench/sim_vs_ref.sh
# KEEP_REF=1 REF builds one). Both run this tree's schedules. Not part of make check:
# about 2,000 runs, several minutes on the development machine.
# Environment: KEEP=1 keeps the outputs (printed path), SETS="1 2 ..." runs some sets.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
REF=${1:?usage: identity.sh REF_PPSC [NEW_PPSC]}
NEW=${2:-$src/build/ppsc}
for x in "$REF" "$NEW"; do [ -x "$x" ] || { echo "identity.sh: no ppsc at $x" >&2; exit 2; }; done
out=$(mktemp -d "${TMPDIR:-/tmp}/identity.XXXXXX")
[ "${KEEP:-0}" = 1 ] && echo "# outputs in $out" >&2 || trap 'rm -rf "$out"' EXIT INT TERM

# Size, cost and policy sets. KEY=V for P, m, v, TF, TB, TW, TC, TOFF: -D where the
# file has that parameter, else --cost for a cost (a size the file lacks is left out);
# anything starting with -- is passed as it is.
set_args() {
  case $1 in
  1) echo "" ;;
  2) echo "P=2 m=4 TC=1" ;;
  3) echo "P=4 m=12 TC=0.3" ;;
  4) echo "P=8 m=16 TB=2 TC=1" ;;
  5) echo "P=8 m=32 TW=0.5 TC=0.1" ;;
  6) echo "P=3 m=9 TB=1.5 TC=0.2" ;;
  7) echo "P=16 m=32 TC=0.5" ;;
  8) echo "P=6 m=12 TF=2 TC=0.3 --p2p buffered" ;;
  9) echo "P=4 m=8 TC=0.3 TOFF=0.5 --policy offload=0.5" ;;
  10) echo "P=4 m=8 TC=0.3 --policy vocab=1" ;;
  11) echo "P=8 m=16 TC=0.3 --policy vocab=2 --policy vocab_async=true" ;;
  12) echo "P=16 m=64 TC=0.2" ;;
  13) echo "P=64 m=1024" ;;
  esac
}
SETS=${SETS:-"1 2 3 4 5 6 7 8 9 10 11 12 13"}

# args FILE SET: the command-line options of a set for a file
args() {
  # the header of the file's last schedule (the one ppsc runs), up to its '{'
  hdr=$(awk '/^schedule/ { h = ""; on = 1 } on { h = h " " $0; if (index($0, "{")) on = 0 } END { print h }' "$1")
  opt=0
  for kv in $(set_args "$2"); do
    [ $opt = 1 ] && { printf '%s ' "$kv"; opt=0; continue; }
    case $kv in
    --*) printf '%s ' "$kv"; opt=1; continue ;;
    esac
    k=${kv%%=*}
    if echo "$hdr" | grep -q "[(, ]$k[ :=]"; then printf -- '-D %s ' "$kv"
    else case $k in TF|TB|TW|TC|TOFF) printf -- '--cost %s ' "$kv" ;; esac
    fi
  done
}
run() { # PPSC TAG FILE SET: writes TAG.sim / .check / .expand / .emit under $out/case
  exe=$1 tag=$2 f=$3 set=$4
  a=$(args "$f" "$set")
  # shellcheck disable=SC2086
  { "$exe" sim "$f" --json $a; echo "rc=$?"; } >"$tag.sim" 2>&1 || true
  # shellcheck disable=SC2086
  { "$exe" check "$f" --json $a; echo "rc=$?"; } >"$tag.check" 2>&1 || true
  # shellcheck disable=SC2086
  { "$exe" expand "$f" $a; echo "rc=$?"; } >"$tag.expand" 2>&1 || true
  # (one output path for both builds: the file may name it)
  rm -f "$out/emit.c"
  # shellcheck disable=SC2086
  { "$exe" emit-c "$f" -o "$out/emit.c" $a; echo "rc=$?"; [ ! -f "$out/emit.c" ] || cat "$out/emit.c"; } >"$tag.emit" 2>&1 || true
}

n=0 bad=0
for f in "$src"/stdlib/*.pps "$src"/examples/*.pps; do
  for set in $SETS; do
    c=$out/$(basename "$(dirname "$f")")_$(basename "$f" .pps)_$set
    run "$REF" "$c.ref" "$f" "$set"
    run "$NEW" "$c.new" "$f" "$set"
    for k in sim check expand emit; do
      n=$((n + 1))
      if ! cmp -s "$c.ref.$k" "$c.new.$k"; then
        bad=$((bad + 1))
        echo "DIFFERS: $k $(basename "$f") set $set: $(args "$f" "$set")"
      fi
    done
    [ "${KEEP:-0}" = 1 ] || rm -f "$c".*   # (emit-c of the large sets is tens of MB)
  done
done
echo "# identity.sh: $n outputs compared, $bad differ"
[ "$bad" = 0 ]
