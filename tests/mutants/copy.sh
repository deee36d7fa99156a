#!/bin/sh
# tests/mutants/copy.sh DEST: the scratch tree that mutants are planted in (run.sh, for
# `make mutants`, and sweep.py, for `make mutants-sweep`): a copy of the source tree and
# of the build directory in DEST/tree, the build directory at the same place relative to
# the source, configured again for its new place and built incrementally. Prints the
# copy's build directory on its last line. Needs top_srcdir and top_builddir (absolute).
# DEST may lie inside the build directory (it is left out of the copy). MAKE_JOBS: make
# -j (default 2). Exit 1 with the reason on any failure.
set -u
: "${top_srcdir:?}" "${top_builddir:?}"
T=${1:?usage: copy.sh DEST}
jobs=${MAKE_JOBS:-2}
die() { printf 'mutants: error: %s\n' "$*" >&2; exit 1; }
src=$(cd "$top_srcdir" && pwd -P) bld=$(cd "$top_builddir" && pwd -P)
mkdir -p "$T" && T=$(cd "$T" && pwd -P) || die "mkdir $T"
case "$bld" in
  "$src"/*) rel=${bld#"$src"/} ;;
  *) die "the build directory $bld is not inside the source tree $src (build in a subdirectory, as ./setup does)" ;;
esac
[ ! -e "$T/tree" ] || die "$T/tree exists already"
mkdir -p "$T/tree/$rel" || die "mkdir"
# the source tree without build directories, version control or caches (plain copies:
# mutants edit them, so never links to the originals)
for e in "$src"/* "$src"/.[!.]*; do
  [ -e "$e" ] || continue
  case ${e##*/} in .git|autom4te.cache) continue ;; esac
  [ -f "$e/config.status" ] && continue   # a build directory (this one is copied below)
  cp -a "$e" "$T/tree/" || die "copying the source tree"
done
# the build directory, without test results, without sweep.py's scratch tree and
# without DEST when DEST is inside it
excl=
case "$T" in "$bld"/*) excl="--exclude=./${T#"$bld"/}" ;; esac
(cd "$bld" && tar cf - --exclude='./tests/*.log' --exclude='./tests/*.trs' --exclude=./mutants-sweep $excl .) | (cd "$T/tree/$rel" && tar xf -) ||
  die "copying the build directory"
B=$T/tree/$rel
# configure again for the new paths (config.h stays the same, so objects stay valid);
# the objects that embed the tree's paths are rebuilt. A tree configured by an absolute
# path (run-tests runs "$top"/configure) names the original sources in config.status
# and in the dependency files: point them at the copy, or make would rebuild from the
# unpatched original and no mutant would ever be compiled in.
t=$T/tree
sed -i "s|$src/|$t/|g; s|$src'|$t'|g; s|$src\"|$t\"|g; s|$src\$|$t|" "$B/config.status" || die "rewriting config.status"
find "$B" \( -name '*.Po' -o -name '*.Plo' \) -exec sed -i "s|$src/|$t/|g" {} + || die "rewriting dependency files"
(cd "$B" && ./config.status --recheck > "$T/recheck.log" 2>&1 && ./config.status > "$T/status.log" 2>&1) ||
  { tail -20 "$T/recheck.log" >&2; die "reconfiguring the copy"; }
touch "$T/tree/compiler/cmd_build.c" "$T/tree/compiler/front.c"
(cd "$B" && nice make -j"$jobs" > "$T/build.log" 2>&1) || { tail -30 "$T/build.log" >&2; die "building the copy"; }
echo "$B"
