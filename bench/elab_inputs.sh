#!/bin/sh
# bench/elab_inputs.sh DIR: writes the front end's benchmark inputs into DIR (shared by
# bench/elab_1m.sh and bench/rows_vs_ref.sh):
#   gen.pps    a 1F1B generator (loops, lets, min) that elaborates to 1,000,000 ops
#   block.pps  a building block repeated to 1,000,000 ops (sorting by slot)
# (the literal input is `ppsc expand gen.pps`, made by the caller with its ppsc)
dir=${1:?usage: elab_inputs.sh DIR}
cat >"$dir/gen.pps" <<'PPS'
schedule one_f_one_b(P = 8, m = 62500) {
  devices P;
  microbatches m;
  for d in 0..P {
    device d {
      let warm = min(P - d - 1, m);
      for i in 0..warm      { F(i) }
      for i in 0..m - warm  { F(i + warm) BW(i) }
      for i in m - warm..m  { BW(i) }
    }
  }
}
PPS
cat >"$dir/block.pps" <<'PPS'
schedule vblock(P = 8, m = 20834) {
  devices P;
  microbatches m;
  placement vshape;
  block { for s in 0..S { F(s) at s; B(s) at 2*S - 1 - s; } interval 2; w_rule eager; }
}
PPS
