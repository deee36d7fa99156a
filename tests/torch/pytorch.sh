#!/bin/sh
# tests/torch/pytorch.sh: ppsc against PyTorch itself (torch.distributed.pipelining).
# Skipped (exit 77) when `import torch` fails in $PPS_TORCH_PYTHON (default python3);
# docs/pytorch.md says how to install torch for it.
#  1. every stdlib schedule exported (compute-only and --comms; --drop where it has
#     offload or vocabulary passes) is loaded by PyTorch's CSV loader and accepted by
#     its validator and its simulator;
#  2. PyTorch's built-in schedules, dumped by PyTorch (both forms), imported by ppsc
#     with the same verdict as PyTorch's validator gives, and the makespan of the
#     stdlib schedule of the same kind (or, without one, the same makespan from both
#     forms);
#  3. a small model trained for a few steps on 2 gloo CPU processes under an exported
#     PPS schedule (python/pps_torch.py) gives the same losses as PyTorch's own
#     ScheduleInterleaved1F1B.
set -u
py=${PPS_TORCH_PYTHON:-python3}
"$py" -c 'import torch.distributed.pipelining' >/dev/null 2>&1 || { echo "skip: no torch in $py"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL $*"; fail=1; }
ts="$top_srcdir/tests/torch/torchsched.py"
export PPS_STDLIB="$top_srcdir/stdlib"
ms() { "$PPSC" sim "$@" --json 2>/dev/null | sed -n 's/.*"makespan":\([0-9.]*\).*/\1/p'; }
batch() { "$py" "$ts" batch <"$1" >"$2" 2>"$tmp/batch.err" || { die "torchsched batch"; cat "$tmp/batch.err"; }; }

# 1. stdlib -> PyTorch: export here, then one PyTorch process loads them all
: >"$tmp/cmds1"
for f in "$PPS_STDLIB"/*.pps; do
  b=$(basename "$f" .pps)
  m=$("$PPSC" check "$f" --json 2>/dev/null | sed -n 's/.*"microbatches":\([0-9]*\).*/\1/p')
  drop=""
  "$PPSC" export-csv "$f" -o "$tmp/$b.csv" 2>/dev/null || drop=--drop
  for form in "" --comms; do
    "$PPSC" export-csv "$f" $form $drop -o "$tmp/$b$form.csv" 2>"$tmp/err" || { die "export $b $form $drop"; cat "$tmp/err"; continue; }
    echo "load $tmp/$b$form.csv $m $form" >>"$tmp/cmds1"
  done
done
batch "$tmp/cmds1" "$tmp/res1"
n=0
while read -r cmd; do
  read -r res <&3 || res="(no answer)"
  case $res in
    "0 valid | ok "*) n=$((n + 1)) ;;
    *) die "PyTorch on ${cmd#load $tmp/}: $res" ;;
  esac
done <"$tmp/cmds1" 3<"$tmp/res1"
echo "$n stdlib exports loaded, validated and simulated by PyTorch"
[ $n -ge 20 ] || die "only $n exports accepted"

# 2. PyTorch -> ppsc: PyTorch dumps and judges its schedules in one process
specs="1F1B:1f1b Interleaved1F1B:interleaved_1f1b LoopedBFS: InterleavedZeroBubble: ZBVZeroBubble:zb_v DualPipeV:dualpipe_v"
: >"$tmp/cmds2"
for spec in $specs; do
  for pm in 4_8 2_4; do
    t="$tmp/${spec%%:*}_$pm"
    echo "dump ${spec%%:*} ${pm%_*} ${pm#*_} $t.csv" >>"$tmp/cmds2"
    echo "dump ${spec%%:*} ${pm%_*} ${pm#*_} $t.comms.csv --comms" >>"$tmp/cmds2"
    echo "load $t.csv ${pm#*_}" >>"$tmp/cmds2"
  done
done
batch "$tmp/cmds2" "$tmp/res2"
k=0
for spec in $specs; do
  name=${spec%%:*} ours=${spec#*:}
  for pm in 4_8 2_4; do
    P=${pm%_*} m=${pm#*_} t="$tmp/${name}_$pm"
    d1=$(sed -n "$((k + 1))p" "$tmp/res2"); d2=$(sed -n "$((k + 2))p" "$tmp/res2"); verdict=$(sed -n "$((k + 3))p" "$tmp/res2")
    k=$((k + 3))
    case $d1 in "0"*) ;; *) die "PyTorch cannot dump $name P=$P m=$m: $d1"; continue ;; esac
    case $verdict in "0 valid"*) tv=0 ;; *) tv=1 ;; esac
    "$PPSC" import-csv "$t.csv" -o "$t.pps" 2>"$t.err"; pv=$?
    [ $pv = $tv ] || { die "$name P=$P m=$m: PyTorch's validator: $verdict; ppsc import exit $pv"; sed -n 1,6p "$t.err"; continue; }
    if [ $pv != 0 ]; then
      echo "$name P=$P m=$m: invalid for PyTorch ($(echo "$verdict" | cut -c1-90)...) and for ppsc ($(grep -m1 -o 'error: .*' "$t.err" | cut -c1-60)...)"
      continue
    fi
    a=$(ms "$t.pps")
    case $d2 in
      "0"*) "$PPSC" import-csv "$t.comms.csv" -o "$t.comms.pps" 2>"$t.err" || { die "$name P=$P m=$m: compute-comms import"; sed -n 1,6p "$t.err"; }
            c=$(ms "$t.comms.pps") ;;
      *) c="" ;;
    esac
    if [ -n "$ours" ]; then
      v=""; [ "$ours" = interleaved_1f1b ] && v="-D v=2"
      s=$(ms "$PPS_STDLIB/$ours.pps" -D P=$P -D m=$m $v)
      [ -n "$a" ] && [ "$a" = "$s" ] || die "$name P=$P m=$m: makespan $a, stdlib $ours $s"
      echo "$name P=$P m=$m: valid for both, makespan $a = stdlib $ours; compute-comms form: $c"
    else
      [ -n "$c" ] && [ "$a" = "$c" ] || die "$name P=$P m=$m: makespan $a compute-only, '$c' compute-comms"
      echo "$name P=$P m=$m: valid for both, makespan $a (compute-only) = $c (compute-comms)"
    fi
  done
done

# 3. training under an exported schedule vs PyTorch's own
PPSC="$PPSC" "$py" "$top_srcdir/python/example_pps_torch.py" --steps 3 --compare >"$tmp/train" 2>&1 || { die "training comparison"; tail -20 "$tmp/train"; }
grep -v '^$' "$tmp/train" | tail -3
exit $fail
