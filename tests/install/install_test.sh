#!/usr/bin/env bash
# Installs libmrcache.so, its header and mrcache.pc into a temporary prefix,
# then builds and runs a tiny C runtime against it with
# `pkg-config --cflags --libs mrcache`, the way an autotools runtime would.
set -euo pipefail
prefix="$TEST_TMPDIR/prefix"
scripts/install_tree libmrcache.so mrcache/mrcache.h "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs mrcache)
echo "pkg-config --cflags --libs mrcache: $flags"
cc -std=c11 -Wall -Werror -o "$TEST_TMPDIR/tiny_runtime" tests/install/tiny_runtime.c $flags
out=$(LD_LIBRARY_PATH="$prefix/lib" "$TEST_TMPDIR/tiny_runtime")
echo "$out"
[ "$out" = "hits=9 misses=1 registrations=1 deregistrations=1" ]
# Only the C API and the symbols monitor's libc interposers are exported.
interposers='^(munmap|mremap|madvise|posix_madvise|brk|sbrk|shmdt|mmap|mmap64)$'
if nm -D --defined-only "$prefix/lib/libmrcache.so.0" | awk '{print $3}' | 
    grep -v '^mrc_' | grep -qvE "$interposers"; then
  echo "unexpected exported symbols:"; nm -D --defined-only "$prefix/lib/libmrcache.so.0"; exit 1
fi
echo "install test: 1 passed, 0 failed"
