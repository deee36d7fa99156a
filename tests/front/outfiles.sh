#!/bin/sh
# tests/front/outfiles.sh: how ppsc writes and reads files (compiler/fileio.c).
# Outputs (-o, --trace, --svg, build -o): a symlink keeps pointing at its target (the
# target is replaced), an existing file keeps its mode, a FIFO or a device is written
# in place and never replaced (a FIFO nobody reads is an error, not a hang), nothing
# is left behind on failure; build -o into a missing directory is exit 2. Inputs: an
# import, import-csv or `cost profile` of a FIFO or a device is refused at once (no
# blocking, no endless read). Every FIFO and symlink lives in this test's own
# mktemp -d directory; the only device written is /dev/null, through a symlink here.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
ex=$top_srcdir/examples/1f1b.pps
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
cd "$tmp" || exit 99

# a symlink to a regular file: the file is replaced, the link stays a link
echo keep > victim
ln -s victim link.json
"$PPSC" sim "$ex" -q --trace link.json || bad "sim --trace link.json failed"
[ -L link.json ] && ok "symlink still a symlink" || bad "symlink replaced"
grep -q displayTimeUnit victim && ok "symlink target written" || bad "symlink target not written"

# an existing file keeps its mode; a new one gets 0666 less the umask
echo old > m.pps
chmod 640 m.pps
"$PPSC" expand "$ex" -o m.pps || bad "expand -o m.pps failed"
[ "$(stat -c %a m.pps)" = 640 ] && ok "mode 640 kept" || bad "mode changed to $(stat -c %a m.pps)"
( umask 022; "$PPSC" expand "$ex" -o new.pps ) || bad "expand -o new.pps failed"
[ "$(stat -c %a new.pps)" = 644 ] && ok "new file 644 under umask 022" || bad "new file mode $(stat -c %a new.pps)"

# a FIFO is written through, not replaced
mkfifo fifo
timeout 10 cat fifo > from-fifo &
reader=$!
timeout 10 "$PPSC" expand "$ex" -o fifo || bad "expand -o fifo failed"
wait $reader
[ -p fifo ] && ok "FIFO still a FIFO" || bad "FIFO replaced"
cmp -s from-fifo new.pps && ok "FIFO reader got the output" || bad "FIFO reader got something else"

# a FIFO nobody reads: an error after a short wait for a reader, not a hang (it blocked
# in open() before); the FIFO stays
timeout 60 "$PPSC" sim "$ex" -q --trace fifo 2>err; rc=$?
[ $rc = 2 ] && grep -q "cannot write 'fifo': nothing is reading it" err && [ -p fifo ] &&
  ok "--trace to a FIFO with no reader: exit 2" || { bad "--trace to a FIFO with no reader: exit $rc"; cat err; }

# a character device is written in place. Reached through symlinks made here, so that
# even a ppsc that wrongly renamed over its -o path would replace only the symlink,
# never /dev/null or /dev/stdout themselves. Skipped when /dev/null is not a device
# (something else on this machine replaced it: writing there would only add to it).
if [ -c /dev/null ]; then
  ln -s /dev/null devnull
  "$PPSC" expand "$ex" -o devnull || bad "expand -o devnull failed"
  [ -L devnull ] && [ -c devnull ] && ok "/dev/null written in place" || bad "-o devnull replaced the link"
else
  echo "skip: /dev/null is not a character device on this machine"
fi
ln -s /proc/self/fd/1 stdout-link
"$PPSC" expand "$ex" -o stdout-link > via-stdout || bad "expand -o stdout-link failed"
cmp -s via-stdout new.pps && ok "-o /proc/self/fd/1 writes stdout" || bad "-o /proc/self/fd/1 differs"

# a write that fails half-way (the file size limit: EFBIG) leaves the old file as it was
echo old > keep.json
(trap '' XFSZ; ulimit -f 2; "$PPSC" sim "$ex" -q --trace keep.json) 2>err; rc=$?
[ $rc = 2 ] && echo old | cmp -s - keep.json && ok "--trace failing half-way: exit 2, old file untouched" ||
  { bad "--trace under ulimit -f: exit $rc"; cat err; }
# nothing left behind: only the files this test made
ls -A > list
if grep -q 'pps-out\|ppsc' list; then bad "temporary files left: $(cat list)"; else ok "no temporary files left"; fi

# a directory as output, a missing directory
"$PPSC" expand "$ex" -o . 2>err; rc=$?
[ $rc = 2 ] && grep -q "Is a directory" err && ok "-o . is exit 2" || { bad "-o .: exit $rc"; cat err; }
"$PPSC" build "$ex" -o "$tmp/absent/prog" 2>err; rc=$?
[ $rc = 2 ] && grep -q "No such file" err && ok "build -o absent/prog is exit 2" || { bad "build -o absent/prog: exit $rc"; cat err; }

# inputs: FIFOs and devices are refused without blocking
timeout 10 "$PPSC" import-csv fifo -o x.pps 2>err; rc=$?
[ $rc = 2 ] && grep -q "not a regular file" err && ok "import-csv FIFO refused" || { bad "import-csv FIFO: exit $rc"; cat err; }
if [ -c /dev/null ]; then
  timeout 10 "$PPSC" import-csv /dev/null -o x.pps 2>err; rc=$?
  [ $rc = 2 ] && grep -q "not a regular file" err && ok "import-csv device refused" || { bad "import-csv /dev/null: exit $rc"; cat err; }
fi
[ -e x.pps ] && bad "import-csv wrote x.pps"
printf 'import "fifo";\nschedule s { devices 1; microbatches 1; device 0 { F(0) BW(0) } }\n' > imp.pps
timeout 10 "$PPSC" check imp.pps 2>err; rc=$?
[ $rc = 1 ] && grep -q 'imp.pps:1:8: error: cannot read "fifo": not a regular file' err && ok "import of a FIFO refused" ||
  { bad "import of a FIFO: exit $rc"; cat err; }
# `cost profile "FILE";` reads a regular file only: a FIFO (it blocked) or /dev/zero (it
# read forever) is a located error at once
sed 's|cost TF = 1, TB = 1, TW = 1, TC = 0;|cost profile "PROF";|' "$ex" > prof.pps
for src in fifo /dev/zero; do
  [ -e "$src" ] || continue
  sed "s|PROF|$src|" prof.pps > prof1.pps
  timeout 20 "$PPSC" check prof1.pps 2>err; rc=$?
  [ $rc = 1 ] && grep -q "prof1.pps:[0-9]*:[0-9]*: error: cost profile: cannot read '.*$(basename "$src")': not a regular file" err &&
    ok "cost profile \"$src\" refused" || { bad "cost profile $src: exit $rc"; cat err; }
done
# the main file may be a pipe (process substitution, a FIFO with a writer)
timeout 10 sh -c 'cat "$1" > fifo' sh "$ex" &
timeout 10 "$PPSC" check fifo >/dev/null 2>err && ok "check reads a FIFO named on the command line" || { bad "check fifo"; cat err; }
wait
exit $fail
