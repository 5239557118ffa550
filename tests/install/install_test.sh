#!/usr/bin/env bash
# Installs mrcache into a temporary prefix with scripts/install_tree (what
# scripts/install does after building) and uses the installed copy only:
#  - a tiny C runtime built with `pkg-config --cflags --libs mrcache`, the way
#    an autotools runtime would, and with CMake's find_package(mrcache);
#  - the exported symbols of both libraries;
#  - the man pages render;
#  - the installed mrcache-run finds the installed shim and runs an unmodified
#    verbs program over softverbs with the same output as without it.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
# Sanitizer builds: the programs built here and sh are not instrumented, so
# the ASan runtime the libraries and the preloaded shim bring comes after libc
# (harmless for these short runs).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
# Their allocators unmap with raw system calls that only uffd sees: the
# default monitor (auto) adds uffd where a sanitizer runtime is loaded.
prefix="$TEST_TMPDIR/prefix"
# The runfiles tree holds the build outputs and the sources at their paths.
scripts/install_tree . . "$prefix" >/dev/null

for f in lib/libmrcache.so.0 lib/libmrcache_pool.so.0 lib/libmrcache_preload.so bin/mrcache-run \
    bin/mrcache-info bin/mrbench include/mrcache/mrcache.h lib/pkgconfig/mrcache.pc \
    lib/pkgconfig/mrcache-pool.pc lib/cmake/mrcache/mrcacheConfig.cmake \
    lib/cmake/mrcache/mrcacheConfigVersion.cmake share/man/man1/mrcache-run.1 \
    share/man/man1/mrcache-info.1 share/man/man1/mrbench.1 share/man/man3/mrcache.3 \
    share/man/man7/mrcache.7 share/doc/mrcache/LICENSE; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done

expected="hits=9 misses=1 registrations=1 deregistrations=1"
# Sanitizer builds: the library needs its sanitizer runtime loaded first,
# which the uninstrumented runtimes do not do (TSan cannot start later).
runtime=$(ldd "$prefix/lib/libmrcache.so.0" | awk '/lib(asan|tsan)\.so/ {print $3}')
run_runtime() {  # run_runtime BINARY
  local out
  out=$(env LD_LIBRARY_PATH="$prefix/lib" ${runtime:+LD_PRELOAD="$runtime"} "$1") || fail "$1 exited $?"
  [ "$out" = "$expected" ] || fail "$1 printed '$out'"
}

# pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs mrcache)
echo "pkg-config --cflags --libs mrcache: $flags"
cc -std=c11 -Wall -Werror -o "$TEST_TMPDIR/tiny_runtime" tests/install/tiny_runtime.c $flags
run_runtime "$TEST_TMPDIR/tiny_runtime"
pkg-config --libs mrcache-pool | grep -q -- -lmrcache_pool || fail "mrcache-pool.pc"

# CMake: find_package(mrcache 0.1 REQUIRED), mrcache::mrcache and mrcache::pool.
build="$TEST_TMPDIR/cmake-build"
cmake -S tests/install/cmake_runtime -B "$build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-std=c11 -Wall -Werror" >"$TEST_TMPDIR/cmake.log" 2>&1 ||
  { cat "$TEST_TMPDIR/cmake.log"; fail "cmake configure"; }
cmake --build "$build" >>"$TEST_TMPDIR/cmake.log" 2>&1 || { cat "$TEST_TMPDIR/cmake.log"; fail "cmake build"; }
run_runtime "$build/tiny_runtime"
run_runtime "$build/tiny_runtime_pool"
readelf -d "$build/tiny_runtime" | grep -q 'NEEDED.*libmrcache.so.0' || fail "CMake runtime lacks libmrcache.so.0"
readelf -d "$build/tiny_runtime_pool" | grep -q 'NEEDED.*libmrcache_pool.so.0' ||
  fail "CMake pool runtime lacks libmrcache_pool.so.0"
# A version the package cannot satisfy is refused.
mkdir -p "$TEST_TMPDIR/cmake-v2"
printf 'cmake_minimum_required(VERSION 3.13)\nproject(p C)\nfind_package(mrcache 2 REQUIRED)\n' \
  >"$TEST_TMPDIR/cmake-v2/CMakeLists.txt"
if cmake -S "$TEST_TMPDIR/cmake-v2" -B "$TEST_TMPDIR/cmake-v2/b" -DCMAKE_PREFIX_PATH="$prefix" \
    >/dev/null 2>&1; then
  fail "find_package(mrcache 2) accepted version 0.1.0"
fi

# Only the C API is exported (plus, where a linker keeps them in the dynamic
# table for their TLS relocations, the thread directory's and the release
# fences' initial-exec TLS variables; the directory itself lives in
# mrcache::thread_cache_internal so the hit path can inline it). Never a libc
# name: another tracker would patch mrcache's munmap instead of libc's
# (docs/ARCHITECTURE.md, "Other trackers in the process").
internal_tls='^_ZN7mrcache(12_GLOBAL__N_1|21thread_cache_internal|22memory_events_internal)[0-9]+tl_[a-z_]+E$'
if nm -D --defined-only "$prefix/lib/libmrcache.so.0" | awk '{print $3}' |
    grep -v '^mrc_' | grep -qvE "$internal_tls"; then
  echo "unexpected exported symbols:"; nm -D --defined-only "$prefix/lib/libmrcache.so.0"; exit 1
fi
# The pool library: the same API plus mrc_pool_*, and none of the private
# jemalloc's symbols (the application's malloc stays its own).
pool_syms=$(nm -D --defined-only "$prefix/lib/libmrcache_pool.so.0" | awk '{print $3}')
echo "$pool_syms" | grep -qx mrc_pool_create || fail "pool library lacks mrc_pool_create"
echo "$pool_syms" | grep -qx mrc_get || fail "pool library lacks mrc_get"
if echo "$pool_syms" | grep -qE '^(mrcache_je_)?(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|mallocx|rallocx|xallocx|dallocx|sdallocx|nallocx|mallctl|mallctlbymib|mallctlnametomib|malloc_usable_size)$'; then
  fail "the pool library exports allocator symbols"
fi

# Man pages: groff finds no problem and man renders them.
for page in "$prefix"/share/man/man*/*; do
  warnings=$(groff -z -ww -man "$page" 2>&1) || fail "groff $page"
  [ -z "$warnings" ] || fail "groff warns on $page: $warnings"
done
MANPAGER=cat MANWIDTH=80 man -l "$prefix/share/man/man1/mrcache-run.1" >"$TEST_TMPDIR/man.txt" 2>&1 ||
  fail "man -l mrcache-run.1"
grep -q "run an unmodified verbs application" "$TEST_TMPDIR/man.txt" ||
  fail "mrcache-run(1) did not render: $(head "$TEST_TMPDIR/man.txt")"
MANPATH="$prefix/share/man" man -w 7 mrcache | grep -q "$prefix/share/man/man7/mrcache.7" ||
  fail "man -w 7 mrcache does not find the installed page"

# The installed mrcache-run preloads the installed shim...
preload=$("$prefix/bin/mrcache-run" -- sh -c 'echo "$LD_PRELOAD"')
[ "$preload" = "$prefix/lib/libmrcache_preload.so" ] || fail "mrcache-run preloads '$preload'"
# ...and an unmodified verbs program (over softverbs: LD_LIBRARY_PATH is set
# by the test rule) prints the same under it, with the summary at exit.
app=tests/legacy/legacy_app
"$app" 3 100 >"$TEST_TMPDIR/plain.out" 2>/dev/null || fail "plain legacy_app"
"$prefix/bin/mrcache-run" --stats -- "$app" 3 100 >"$TEST_TMPDIR/shim.out" 2>"$TEST_TMPDIR/shim.err" ||
  fail "legacy_app under the installed mrcache-run: $(cat "$TEST_TMPDIR/shim.err")"
diff -u "$TEST_TMPDIR/plain.out" "$TEST_TMPDIR/shim.out" || fail "output differs under mrcache-run"
grep -q "hit rate" "$TEST_TMPDIR/shim.err" || fail "no summary: $(cat "$TEST_TMPDIR/shim.err")"
"$prefix/bin/mrcache-info" >"$TEST_TMPDIR/info.txt" || fail "installed mrcache-info"
grep -q "softverbs0" "$TEST_TMPDIR/info.txt" || fail "mrcache-info lists no device: $(cat "$TEST_TMPDIR/info.txt")"
"$prefix/bin/mrbench" --help | grep -q -- "--registrar" || fail "installed mrbench --help"
echo "install test: 1 passed, 0 failed"
