#!/usr/bin/env bash
# Installs libmrcache.so, its header and mrcache.pc into a temporary prefix,
# then builds and runs a tiny C runtime against it with
# `pkg-config --cflags --libs mrcache`, the way an autotools runtime would.
set -euo pipefail
prefix="$TEST_TMPDIR/prefix"
scripts/install_tree libmrcache.so libmrcache_pool.so mrcache/mrcache.h "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs mrcache)
echo "pkg-config --cflags --libs mrcache: $flags"
cc -std=c11 -Wall -Werror -o "$TEST_TMPDIR/tiny_runtime" tests/install/tiny_runtime.c $flags
out=$(LD_LIBRARY_PATH="$prefix/lib" "$TEST_TMPDIR/tiny_runtime")
echo "$out"
[ "$out" = "hits=9 misses=1 registrations=1 deregistrations=1" ]
# Only the C API and the symbols monitor's libc interposers are exported
# (plus the thread directory's and the release fences' initial-exec TLS variables, internal names that
# GNU ld keeps in the dynamic table for their TLS relocations; the directory
# itself lives in mrcache::thread_cache_internal so the hit path can inline it).
interposers='^(munmap|mremap|madvise|posix_madvise|brk|sbrk|shmdt|mmap|mmap64|shmat|ftruncate|ftruncate64|truncate|truncate64|fallocate|fallocate64|_ZN7mrcache(12_GLOBAL__N_1|21thread_cache_internal|22memory_events_internal)[0-9]+tl_[a-z_]+E)$'
if nm -D --defined-only "$prefix/lib/libmrcache.so.0" | awk '{print $3}' | 
    grep -v '^mrc_' | grep -qvE "$interposers"; then
  echo "unexpected exported symbols:"; nm -D --defined-only "$prefix/lib/libmrcache.so.0"; exit 1
fi
# The pool library: the same API plus mrc_pool_*, and none of the private
# jemalloc's symbols (the application's malloc stays its own).
pool_syms=$(nm -D --defined-only "$prefix/lib/libmrcache_pool.so.0" | awk '{print $3}')
echo "$pool_syms" | grep -qx mrc_pool_create
echo "$pool_syms" | grep -qx mrc_get
if echo "$pool_syms" | grep -qE '^(mrcache_je_)?(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|mallocx|rallocx|xallocx|dallocx|sdallocx|nallocx|mallctl|mallctlbymib|mallctlnametomib|malloc_usable_size)$'; then
  echo "the pool library exports allocator symbols"; exit 1
fi
pkg-config --libs mrcache-pool | grep -q -- -lmrcache_pool
echo "install test: 1 passed, 0 failed"
