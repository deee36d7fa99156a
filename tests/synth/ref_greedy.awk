# tests/synth/ref_greedy.awk: independent reference generators that `synthesize` must
# match or beat (tests/synth/reference.sh, docs/synth.md "Against published
# generators"). Written from the papers' descriptions, not from their code; each
# prints a literal PPS file (per-device pass orders), which `ppsc sim` then times and
# checks, so the reference's own bookkeeping is never trusted for the figures.
#
#   awk -v mode=zb  -v P=.. -v m=.. -v TF=.. -v TB=.. -v TW=.. -v TC=.. -v MEM=.. -v h1=0|1 -v h2=0|1 -f ref_greedy.awk
#     Zero Bubble's heuristic (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
#     2024, section 3.1), linear placement, activation memory F +1, W -1 (B keeps
#     it), limit MEM activations (ZB-1p: MEM = P, ZB-2p: MEM = 2P):
#     1. warm-up: as many F as the memory allows before the first B arrives; the
#        last one may delay that B only with h1 = 1;
#     2. then one F and one B in turn; a W fills a wait of at least TW, or a shorter
#        one when that wait would make this stage's cumulative idle time the
#        largest of all stages; a W recycles memory when the limit stops an F;
#     3. stage i keeps at least one F ahead of stage i+1 until its F run out; with
#        h2 = 1 it skips an F (runs the ready B) when it is two or more ahead;
#     4. when F and B run out, the remaining W one by one.
#     The paper grid-searches the hyperparameters: reference.sh runs all four
#     (h1, h2) and keeps the fastest by `ppsc sim`.
#   awk -v mode=vlow -v P=.. -v m=.. -v TF=.. -v TB=.. -v TW=.. -v TC=.. -v MEM=.. -f ref_greedy.awk
#     A low-memory V-shape greedy (stages s and 2P-1-s on device s; per stage half of
#     TF, TB, TW and half an activation): a free device runs a ready B (latest stage
#     first), else a ready F (latest stage first) under the limit, where its first
#     stage keeps one activation of room (cap MEM - 1/2) for the second leg of the
#     microbatches it admitted, else a pending W; else it waits.
# Output: the PPS file on stdout; the reference's own estimate of the makespan on
# stderr ("reference makespan X peak Y").
function rF(j, s) {                        # ready time of F(j, s); -1 when unknown
  if (s == 0) return 0
  if (!((j, s - 1) in endF)) return -1
  return endF[j, s - 1] + hop(s - 1)
}
function rB(j, s,   f, b) {                # ready time of B(j, s); -1 when unknown
  if (!((j, s) in endF)) return -1
  f = endF[j, s]
  if (s == S - 1) return f
  if (!((j, s + 1) in endB)) return -1
  b = endB[j, s + 1] + hop(s)
  return b > f ? b : f
}
function hop(s) { return dev[s] == dev[s + 1] ? 0 : TC }
function run(d, k, j, s,   c) {            # device d runs kind k of (j, s) at cur[d]
  c = k == "F" ? tf : k == "B" ? tb : tw
  if (k == "F") { endF[j, s] = cur[d] + c; nF[s]++; held[d] += act; if (held[d] > peak[d]) peak[d] = held[d] }
  else if (k == "B") { endB[j, s] = cur[d] + c; nB[s]++; Bdone[d]++ }
  else { nW[s]++; held[d] -= act }
  ord[d] = ord[d] (ord[d] == "" ? "" : " ") k "(" (j + 0) ", " (s + 0) ")"
  last[d] = k
  cur[d] += c
  left[d]--
}
BEGIN {
  if (mode == "") mode = "zb"
  if (TF == "") TF = 1; if (TB == "") TB = 1; if (TW == "") TW = 1; if (TC == "") TC = 0
  P += 0; m += 0; MEM += 0; h1 += 0; h2 += 0
  if (mode == "zb") { S = P; for (s = 0; s < S; s++) dev[s] = s; tf = TF; tb = TB; tw = TW; act = 1; placement = "linear" }
  else { S = 2 * P; for (s = 0; s < S; s++) dev[s] = s < P ? s : 2 * P - 1 - s; tf = TF / 2; tb = TB / 2; tw = TW / 2; act = 0.5; placement = "vshape" }
  for (d = 0; d < P; d++) { cur[d] = 0; held[d] = 0; peak[d] = 0; bub[d] = 0; Bdone[d] = 0; left[d] = 3 * m * (S / P); ord[d] = ""; last[d] = "" }
  active = P
  while (active > 0) {
    T = -1
    for (d = 0; d < P; d++) if (left[d] > 0 && (T < 0 || cur[d] < T)) T = cur[d]
    progress = 0; next_t = -1
    for (d = 0; d < P; d++) {
      if (left[d] == 0) continue
      if (cur[d] > T) { if (next_t < 0 || cur[d] < next_t) next_t = cur[d]; continue }
      t = cur[d]
      k = ""; fut = -1
      if (mode == "zb") {
        s = d
        jf = nF[s]; jb = nB[s]; jw = nW[s]
        canF = jf < m && held[d] + act <= MEM + 1e-9
        rf = canF ? rF(jf, s) : -1
        rb = jb < jf ? rB(jb, s) : -1
        fready = canF && rf >= 0 && rf <= t + 1e-9
        bready = rb >= 0 && rb <= t + 1e-9
        wok = jw < jb
        ahead = s < S - 1 ? jf - nF[s + 1] : 99           # F's ahead of the next stage
        if (jf >= m && jb >= m) { if (wok) k = "W" }       # 4. only W left
        else if (Bdone[d] == 0 && !bready) {                # 1. warm-up
          if (fready) {
            # the B this F might delay: known only once it is on its way
            if (rb < 0 || t + tf <= rb + 1e-9 || h1) k = "F"
          }
        } else {
          pref = last[d] == "F" ? "B" : "F"                 # 2. one F, one B in turn
          if (jf >= m) pref = "B"
          if (jb >= jf) pref = "F"
          if (pref == "B" && s < S - 1 && canF && ahead < 1) pref = "F"   # 3. stay ahead
          else if (pref == "F" && h2 && ahead >= 2 && bready) pref = "B" # 3. skip one F
          if (pref == "F" && fready) k = "F"
          else if (pref == "B" && bready) k = "B"
          else if (pref == "F" && jf < m && !canF && wok) k = "W"   # memory: recycle
          else {
            # the preferred pass waits: fill with W when worth it, else the other kind
            r = pref == "F" ? rf : rb
            gap = r >= 0 ? r - t : -1                       # -1: arrives later, unknown
            worst = 0; for (q = 0; q < P; q++) if (bub[q] > worst) worst = bub[q]
            if (wok && (gap < 0 || gap >= tw - 1e-9 || bub[d] + gap > worst + 1e-9)) k = "W"
            else if (pref == "F" && bready) k = "B"
            else if (pref == "B" && fready) k = "F"
          }
        }
        if (k == "F") j = jf; else if (k == "B") j = jb; else if (k == "W") j = jw
        if (k == "") {
          if (canF && rf > t) fut = rf
          if (rb > t && (fut < 0 || rb < fut)) fut = rb
        }
      } else {
        s0 = d; s1 = 2 * P - 1 - d
        for (q = 0; q < 2 && k == ""; q++) {               # B, latest stage first
          s = q == 0 ? s1 : s0
          j = nB[s]
          if (j < nF[s]) { r = rB(j, s); if (r >= 0 && r <= t + 1e-9) k = "B"; else if (r > t && (fut < 0 || r < fut)) fut = r }
        }
        for (q = 0; q < 2 && k == ""; q++) {               # F, latest stage first, capped
          s = q == 0 ? s1 : s0
          j = nF[s]
          cap = s == s1 ? MEM : MEM - 0.5
          if (j < m && held[d] + act <= cap + 1e-9) { r = rF(j, s); if (r >= 0 && r <= t + 1e-9) k = "F"; else if (r > t && (fut < 0 || r < fut)) fut = r }
        }
        for (q = 0; q < 2 && k == ""; q++) {               # a pending W
          s = q == 0 ? s0 : s1
          if (nW[s] < nB[s]) { k = "W"; j = nW[s] }
        }
      }
      if (k == "") { if (fut >= 0 && (next_t < 0 || fut < next_t)) next_t = fut; continue }
      run(d, k, j, s)
      if (left[d] == 0) active--
      progress = 1
    }
    if (progress) continue
    if (next_t < 0) { print "ref_greedy: deadlock" > "/dev/stderr"; exit 1 }
    for (d = 0; d < P; d++) if (left[d] > 0 && cur[d] <= T) { bub[d] += next_t - cur[d]; cur[d] = next_t }
  }
  mk = 0; pk = 0
  for (d = 0; d < P; d++) { if (cur[d] > mk) mk = cur[d]; if (peak[d] > pk) pk = peak[d] }
  printf "reference makespan %g peak %g\n", mk, pk > "/dev/stderr"
  printf "// written by tests/synth/ref_greedy.awk (mode %s, MEM %g, h1 %d, h2 %d)\n", mode, MEM, h1, h2
  printf "schedule ref(P = %d, m = %d) {\n  devices P;\n  microbatches m;\n  placement %s;\n", P, m, placement
  printf "  cost TF = %s, TB = %s, TW = %s, TC = %s;\n", TF, TB, TW, TC
  for (d = 0; d < P; d++) printf "  device %d { %s }\n", d, ord[d]
  print "}"
}
