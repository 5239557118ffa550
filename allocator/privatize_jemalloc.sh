#!/bin/sh
# privatize_jemalloc.sh IN.a OUT.a
#
# Turns Debian's libjemalloc_pic.a into a private copy for the pool allocator:
# every global symbol it defines (malloc, free, mallocx, operator new, its
# internal je_* functions, ...) is renamed with the prefix mrcache_je_ (not
# mrc_, which libmrcache.so's version script exports as the C API). Linking the
# result therefore never interposes the application's malloc/free/new/delete,
# and cannot clash with a jemalloc the application links itself; the pool calls
# mrcache_je_mallocx, mrcache_je_mallctl, ... explicitly.
set -eu
in="$1"
out="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# One relocatable object, so that the rename rewrites definitions and every
# internal reference together.
ld -r --whole-archive "$in" -o "$tmp/all.o"
# DW.ref.* are the C++ personality/typeinfo indirections that the toolchain
# shares across objects on purpose; they stay as they are.
nm -g --defined-only "$tmp/all.o" | awk '$3 !~ /^DW\.ref\./ { print $3 " mrcache_je_" $3 }' >"$tmp/rename"
objcopy --redefine-syms="$tmp/rename" "$tmp/all.o" "$tmp/mrc_jemalloc.o"
# Fail the build if anything allocator-shaped is still exported unprefixed.
if nm -g --defined-only "$tmp/mrc_jemalloc.o" | awk '{ print $3 }' | grep -v -e '^mrcache_je_' -e '^DW\.ref\.' >"$tmp/left"; then
  echo "privatize_jemalloc.sh: symbols left unprefixed:" >&2
  cat "$tmp/left" >&2
  exit 1
fi
rm -f "$out"
ar rcs "$out" "$tmp/mrc_jemalloc.o"
