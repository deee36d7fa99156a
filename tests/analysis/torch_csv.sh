#!/bin/sh
# tests/analysis/torch_csv.sh: the PyTorch schedule CSV formats without PyTorch
# (tests/torch/ checks them against PyTorch itself): compute-comms import keeps and
# verifies the written send/receive order (a misordered send is located in the CSV),
# legacy letters, OVERLAP_F_B, FSDP and WAIT_SEND actions, stray indices as one error,
# names from any file name; export-csv --comms round trip, export refusing an invalid
# schedule in both forms, overlapped pairs exported as OVERLAP_F_B (dualpipe_v round
# trips to the same makespan with an overlap gain), and export refusing (or with
# --drop naming) what the CSV cannot express. Fixtures are written here.
set -u
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL $*"; fail=1; }
has() { grep -q -- "$2" "$1" || { die "$1 lacks $2"; sed -n 1,12p "$1"; }; }
imp() { "$PPSC" import-csv "$tmp/$1.csv" -o "$tmp/$1.pps" --color=never 2>"$tmp/$1.err"; }
ms() { "$PPSC" sim "$@" --json 2>/dev/null | sed -n 's/.*"makespan":\([0-9.]*\).*/\1/p'; }
export PPS_STDLIB="$top_srcdir/stdlib"

# compute-comms 1F1B on 2 ranks: sends/receives kept, valid, same makespan as compute-only
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1\n' >"$tmp/c.csv"
imp c || { die "comms import exit $?"; cat "$tmp/c.err"; }
has "$tmp/c.pps" 'device 0 { F(0,0) send F(0,0) F(1,0) send F(1,0) recv B(0,1) BW(0,0) recv B(1,1) BW(1,0) }'
has "$tmp/c.pps" 'device 1 { recv F(0,0) F(0,1) BW(0,1) send B(0,1) recv F(1,0) F(1,1) BW(1,1) send B(1,1) }'
# PyTorch's isend never blocks its rank: the imported order is proven with buffered sends
has "$tmp/c.pps" '  p2p buffered;'
printf '0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n' >"$tmp/k.csv"
imp k || die "compute-only import"
a=$(ms "$tmp/c.pps"); b=$(ms "$tmp/k.pps")
[ -n "$a" ] && [ "$a" = "$b" ] || die "comms makespan '$a' != compute-only '$b'"
# a receive written early is posted there and waited for at its consumer
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0RECV_B1,0B0,0B1\n1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n' >"$tmp/e.csv"
imp e || { die "early receives"; cat "$tmp/e.err"; }
has "$tmp/e.pps" 'device 1 { recv F(0,0) F(0,1) BW(0,1) send B(0,1) recv F(1,0) F(1,1)'

# a misordered send: located at the receive and the send, exit 1, nothing written
printf '0F0,0F1,0SEND_F1,0SEND_F0,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n' >"$tmp/mis.csv"
imp mis; [ $? -eq 1 ] || die "misordered send: expected exit 1"
[ ! -e "$tmp/mis.pps" ] || die "output written for an invalid schedule"
has "$tmp/mis.err" 'mis.csv:2:1: error: recv F(0,0) would receive the message of send F(1,0)'
has "$tmp/mis.err" 'mis.csv:1:9: note: send F(1,0) is sent here'
# a send with no receive: a located error too
printf '0F0,0SEND_F0,0B0\n1F0,1B0,1SEND_B0\n' >"$tmp/norecv.csv"
imp norecv; [ $? -eq 1 ] || die "send without receive: expected exit 1"
grep -q 'norecv.csv:[0-9]*:[0-9]*: error' "$tmp/norecv.err" || { die "send without receive not located"; cat "$tmp/norecv.err"; }

# legacy letters: BW full backward, B input backward; W without I means legacy too
printf '0F0,0F1,0B0,0W0,0BW1\n,1F0,1BW0,1F1,1B1,1W1\n' >"$tmp/leg.csv"
imp leg || die "legacy import"
has "$tmp/leg.pps" 'device 0 { F(0,0) F(1,0) B(0,0) W(0,0) BW(1,0) }'
printf '0F0,0B0,0W0\n,1F0,1B0,1W0\n' >"$tmp/legw.csv"
imp legw || die "legacy import (W)"
has "$tmp/legw.pps" 'device 1 { F(0,1) B(0,1) W(0,1) }'
printf '0F0,0F1,0I0,0W0,0BW1\n,1F0,1B0,1F1,1B1\n' >"$tmp/mix.csv"
imp mix; [ $? -eq 1 ] || die "mixed letters: expected exit 1"
has "$tmp/mix.err" "mix.csv:1:17: error: legacy 'BW'"

# OVERLAP_F_B of an F and a backward: an overlapped pair (`overlap { }`), no warning;
# the sim treats the pair as one unit (without TFB it costs the sum of its passes)
printf '0F0,1F0,(0F1;1B0)OVERLAP_F_B,1F1,0B0,1B1,0B1\n' >"$tmp/ov.csv"
imp ov || { die "overlap import"; cat "$tmp/ov.err"; }
has "$tmp/ov.pps" 'device 0 { F(0,0) F(0,1) overlap { F(1,0) BW(0,1) } F(1,1) BW(0,0) BW(1,1) BW(1,0) }'
grep -q warning "$tmp/ov.err" && die "overlap pair: unexpected warning: $(cat "$tmp/ov.err")"
"$PPSC" check "$tmp/ov.pps" >/dev/null 2>&1 || die "imported overlap pair does not check"
# any other group (two forwards): its passes in order, with a warning at the group
printf '0F0,(0F1;0F2)OVERLAP_F_B,1F0,1F1,1F2,1B2,1B1,0B2,1B0,0B1,0B0\n' >"$tmp/ov2.csv"
imp ov2 || { die "overlap (two forwards) import"; cat "$tmp/ov2.err"; }
has "$tmp/ov2.err" 'ov2.csv:1:6: warning: OVERLAP_F_B imported as its passes'
printf '0F0,(0F1;1B3,0B0\n' >"$tmp/ovbad.csv"
imp ovbad; [ $? -eq 1 ] || die "bad group: expected exit 1"
has "$tmp/ovbad.err" 'ovbad.csv:1:5: error: malformed action'

# FSDP actions: UNSHARD/RESHARD reported and left out, REDUCE_GRAD accepted silently
printf '0UNSHARD,0F0,0F1,0B0,0B1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\n' >"$tmp/fsdp.csv"
imp fsdp || die "FSDP actions"
has "$tmp/fsdp.err" 'fsdp.csv:1:1: warning: 1 UNSHARD actions left out'
has "$tmp/fsdp.err" 'fsdp.csv:1:57: warning: 1 RESHARD actions left out'
grep -q "warning: .*REDUCE_GRAD actions" "$tmp/fsdp.err" && die "REDUCE_GRAD reported (it is accepted silently)"
# a wait for a send not written before it
printf '0F0,0F1,0SEND_F0,0WAIT_SEND_F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n' >"$tmp/w.csv"
imp w; [ $? -eq 1 ] || die "wait before send: expected exit 1"
has "$tmp/w.err" 'w.csv:1:18: error: 0WAIT_SEND_F1 waits for a send not written before it'
# an unknown type; a send off the last stage
printf '0F0,0XYZ1\n' >"$tmp/unk.csv"
imp unk; [ $? -eq 1 ] || die "unknown type: expected exit 1"
has "$tmp/unk.err" "unk.csv:1:5: error: unsupported action '0XYZ1': unknown type 'XYZ'"
printf '0F0,0SEND_F0,0B0\n' >"$tmp/last.csv"
imp last; [ $? -eq 1 ] || die "send off the last stage"
has "$tmp/last.err" 'last.csv:1:5: error: SEND_F on stage 0: the last stage has no next stage'

# a stray microbatch index is one located error, not one per missing pass
printf '0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1F1,1F9,1B0,1B1,1B2\n' >"$tmp/stray.csv"
imp stray; [ $? -eq 1 ] || die "stray index: expected exit 1"
has "$tmp/stray.err" 'stray.csv:2:9: error: stray microbatch index 9: the schedule.s microbatches are 0..2'
[ "$(grep -c 'error:' "$tmp/stray.err")" = 1 ] || { die "stray index: more than one error"; cat "$tmp/stray.err"; }
printf '0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n5F0\n' >"$tmp/straystage.csv"
imp straystage; [ $? -eq 1 ] || die "stray stage: expected exit 1"
has "$tmp/straystage.err" 'straystage.csv:3:1: error: stray stage index 5'
# indices far past what the actions cover are one error, found before any table of them is
# made (this input, from fuzz_inputs, took 2.3 s and 1.7 GB to reject before)
printf '444444444I1,0W05444\n' >"$tmp/huge.csv"
imp huge; [ $? -eq 1 ] || die "huge indices: expected exit 1"
has "$tmp/huge.err" 'huge.csv:1:1: error: the actions use microbatches 0..5444 and stages 0..444444444: 2420000003025 forward passes at least, but the CSV has 2 compute actions'

# schedule names from any file name
printf '0F0,0B0\n' >"$tmp/1F1B_P4_m8.csv"
imp 1F1B_P4_m8 || die "digit name"
has "$tmp/1F1B_P4_m8.pps" '^schedule s_1F1B_P4_m8()'
printf '0F0,0B0\n' >"$tmp/schedule.csv"
imp schedule || die "keyword name"
has "$tmp/schedule.pps" '^schedule schedule_csv()'
"$PPSC" check "$tmp/schedule.pps" >/dev/null 2>&1 || die "keyword-named import does not check"
# every keyword of the scanner (grammar/pps.l's rules "word" { return TOKEN; })
kws=$(sed -n 's/^"\([A-Za-z_][A-Za-z0-9_]*\)" *{ *return [A-Z_0-9]*; *}$/\1/p' "${top_srcdir:?}/grammar/pps.l")
[ "$(echo $kws | wc -w)" -ge 50 ] || die "keywords not found in grammar/pps.l: $kws"
for kw in $kws; do
  printf '0F0,0B0\n' >"$tmp/$kw.csv"
  imp "$kw" || { die "keyword name $kw"; continue; }
  has "$tmp/$kw.pps" "^schedule ${kw}_csv()"
  "$PPSC" check "$tmp/$kw.pps" >/dev/null 2>&1 || die "keyword-named import $kw does not check"
done
for nk in steps Fx BWx deviceS; do   # near keywords stay as they are
  printf '0F0,0B0\n' >"$tmp/$nk.csv"
  imp "$nk" || die "name $nk"
  has "$tmp/$nk.pps" "^schedule ${nk}()"
done

# export --comms: the exact form for 1F1B P=2 m=2; round trip gives the same makespan
"$PPSC" export-csv "$PPS_STDLIB/1f1b.pps" -D P=2 -D m=2 --comms -o "$tmp/x.csv" 2>"$tmp/x.err" || { die "export --comms"; cat "$tmp/x.err"; }
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0WAIT_SEND_F1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1\n' >"$tmp/xwant.csv"
cmp -s "$tmp/x.csv" "$tmp/xwant.csv" || { die "export --comms differs"; diff "$tmp/xwant.csv" "$tmp/x.csv"; }
for s in 1f1b interleaved_1f1b zb_v dualpipe_v v_half zb_h2; do
  "$PPSC" export-csv "$PPS_STDLIB/$s.pps" --comms -o "$tmp/$s.csv" 2>/dev/null || { die "export --comms $s"; continue; }
  imp "$s" || { die "re-import of $s"; sed -n 1,5p "$tmp/$s.err"; continue; }
  a=$(ms "$PPS_STDLIB/$s.pps"); b=$(ms "$tmp/$s.pps")
  [ -n "$a" ] && [ "$a" = "$b" ] || die "$s: makespan $a, after export --comms and import $b"
done
# an invalid schedule is not exported with comms
printf 'schedule bad { devices 2; microbatches 1; device 0 { BW(0) F(0) } device 1 { F(0) BW(0) } }\n' >"$tmp/bad.pps"
"$PPSC" export-csv "$tmp/bad.pps" --comms -o "$tmp/bad.csv" 2>/dev/null; [ $? -eq 1 ] || die "invalid schedule exported with --comms"
[ ! -e "$tmp/bad.csv" ] || die "output written for an invalid schedule"

# ... nor in the compute-only form: export verifies first, like `check` (a backward
# before its forward; a deadlocking order, located in the .pps)
"$PPSC" export-csv "$tmp/bad.pps" -o "$tmp/bad.csv" 2>/dev/null; [ $? -eq 1 ] || die "invalid schedule exported compute-only"
[ ! -e "$tmp/bad.csv" ] || die "compute-only output written for an invalid schedule"
printf 'schedule dl { devices 2; microbatches 2;\n device 0 { F(0) BW(0) F(1) BW(1) }\n device 1 { F(1) BW(1) F(0) BW(0) } }\n' >"$tmp/dl.pps"
for form in "" --comms; do
  "$PPSC" export-csv "$tmp/dl.pps" $form -o "$tmp/dl.csv" --color=never 2>"$tmp/dl.err"; [ $? -eq 1 ] || die "deadlocking schedule exported ($form)"
  [ ! -e "$tmp/dl.csv" ] || die "output written for a deadlocking schedule ($form)"
  has "$tmp/dl.err" 'dl.pps:2:[0-9]*: error: deadlock'
done

# overlapped pairs (`overlap { F BW }`) are PyTorch's (F;B)OVERLAP_F_B cells in both
# forms, and import back as pairs: with an overlap gain (TFB between max(TF, TB+TW)
# and TF+TB+TW) dualpipe_v keeps its makespan through export and import
"$PPSC" export-csv "$PPS_STDLIB/dualpipe_v.pps" -D P=2 -D m=4 -o "$tmp/ov.csv" 2>/dev/null || die "export dualpipe_v"
has "$tmp/ov.csv" '^0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,'
want=$(ms "$PPS_STDLIB/dualpipe_v.pps" -D TFB=2.5)
for form in "" --comms; do
  "$PPSC" export-csv "$PPS_STDLIB/dualpipe_v.pps" $form -o "$tmp/dpv.csv" 2>"$tmp/dpv.err" || { die "export dualpipe_v $form"; cat "$tmp/dpv.err"; }
  n=$(grep -o 'OVERLAP_F_B' "$tmp/dpv.csv" | wc -l)
  [ "$n" -gt 0 ] || die "dualpipe_v $form: no OVERLAP_F_B cell written"
  imp dpv || { die "re-import dualpipe_v $form"; sed -n 1,5p "$tmp/dpv.err"; continue; }
  grep -q warning "$tmp/dpv.err" && die "re-import dualpipe_v $form warned: $(head -3 "$tmp/dpv.err")"
  [ "$(grep -o 'overlap {' "$tmp/dpv.pps" | wc -l)" = "$n" ] || die "dualpipe_v $form: $n OVERLAP_F_B cells, other count of pairs imported"
  got=$(ms "$tmp/dpv.pps" --cost TFB=2.5)
  [ -n "$want" ] && [ "$want" = "$got" ] || die "dualpipe_v $form TFB=2.5: makespan $want, after export and import $got"
done

# offload and vocabulary: refused with a located error, or left out with --drop (named)
"$PPSC" export-csv "$PPS_STDLIB/pipeoffload.pps" -o "$tmp/o.csv" --color=never 2>"$tmp/o.err"; [ $? -eq 1 ] || die "offload export: expected exit 1"
[ ! -e "$tmp/o.csv" ] || die "offload: output written"
has "$tmp/o.err" 'pipeoffload.pps:[0-9]*:[0-9]*: error: activation offload'
"$PPSC" export-csv "$PPS_STDLIB/pipeoffload.pps" -o "$tmp/o.csv" --drop --color=never 2>"$tmp/o.err" || die "--drop: exit $?"
has "$tmp/o.err" 'warning: activation offload: .*left out (--drop)'
"$PPSC" export-csv "$PPS_STDLIB/vocab_1f1b.pps" -o "$tmp/v.csv" --comms --color=never 2>"$tmp/v.err"; [ $? -eq 1 ] || die "vocab export: expected exit 1"
has "$tmp/v.err" 'error: vocabulary parallelism'
exit $fail
