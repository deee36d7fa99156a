# posted.awk: makes hand-made posted receives (ppsrt.h op flag 8) out of `ppsc emit-c`
# output, for the runtime tests (tests/runtime/posted.sh, tests/gpu/posted_emu.sh) until
# the compiler sets the flag itself: in every op table, each RECV moves up to LIMIT ops
# earlier (never past a RECV of its channel: the channel is FIFO; never into an
# overlapped pair), and gets flag 8 (posted; NOPOST=1: not) and flag 4 where the op
# before its new place is a send/recv (it joins that group). Its consumer stays where
# it was, so a posted recv waits there. Exits 1 when no recv moved.
function args(t, a) { return split(substr(t, index(t, "(") + 1, length(t) - index(t, "(") - 1), a, ",") }
function kind(t) { return substr(t, 1, index(t, "(") - 1) }
function peer(t,   a, m) { m = args(t, a); return a[4] }
function flagof(t,   a, m) { m = args(t, a); return a[m - 1] + 0 }
function setflag(t, f,   a, m, i, s) {
  m = args(t, a); a[m - 1] = f; s = kind(t) "("
  for (i = 1; i <= m; i++) s = s a[i] (i < m ? "," : ")")
  return s
}
function p2p(t) { return kind(t) == "SEND" || kind(t) == "RECV" }
/^static const ppsrt_op dev[0-9]+\[[0-9]+\] = \{$/ { intab = 1; n = 0; print; next }
intab && /^\};$/ {
  for (k = 1; k <= n; k++) {
    if (kind(op[k]) != "RECV") continue
    j = k
    while (j > 1 && k - j < LIMIT && !(kind(op[j - 1]) == "RECV" && peer(op[j - 1]) == peer(op[k]))) j--
    while (j < k && !p2p(op[j - 1]) && int(flagof(op[j - 1]) / 2) % 2) j++
    if (j == k) continue
    t = op[k]
    for (q = k; q > j; q--) op[q] = op[q - 1]
    f = flagof(t); f -= (int(f / 4) % 2) * 4
    if (!NOPOST && int(f / 8) % 2 == 0) f += 8
    if (j > 1 && p2p(op[j - 1])) f += 4
    op[j] = setflag(t, f); moved++
  }
  for (k = 1; k <= n; k++)
    printf "%s%s%s", (k % 8 == 1 ? "  " : " "), op[k], (k < n ? "," : "") (k % 8 == 0 || k == n ? "\n" : "")
  intab = 0; print; next
}
intab { s = $0; while (match(s, /[A-Z]+\([^)]*\)/)) { op[++n] = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH) } next }
{ print }
END { if (!moved) { print "posted.awk: no recv moved" > "/dev/stderr"; exit 1 } }
