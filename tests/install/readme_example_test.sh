#!/usr/bin/env bash
# README.md's first example is examples/hello_mrcache.c, verbatim, near the
# top of the page; and that file, built as the README says against an
# installed mrcache (pkg-config with an rpath, and CMake's find_package with
# examples/CMakeLists.txt), runs and prints one miss then one hit on the uring
# registrar, without LD_LIBRARY_PATH.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
# Sanitizer builds: the example is not instrumented, so the ASan runtime the
# library brings comes after libc (harmless for this short run).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
example=examples/hello_mrcache.c
expected="hits=1 misses=1"

# The README's first ```c block is the file, and it opens within the first
# screen (24 lines) of the page.
fence=$(grep -n -m1 '^```c$' README.md | cut -d: -f1)
[ -n "$fence" ] || fail "README.md has no \`\`\`c block"
[ "$fence" -le 24 ] || fail "README.md's example starts on line $fence, below the first screen"
awk -v from="$fence" 'NR > from && /^```$/ {exit} NR > from {print}' README.md >"$TEST_TMPDIR/readme_example.c"
diff -u "$example" "$TEST_TMPDIR/readme_example.c" ||
  fail "README.md's first example differs from $example (above: - the file, + README.md)"

prefix="$TEST_TMPDIR/prefix"
scripts/install_tree . . "$prefix" >/dev/null
# Sanitizer builds: the library needs its sanitizer runtime loaded first,
# which the uninstrumented example does not do (TSan cannot start later).
runtime=$(ldd "$prefix/lib/libmrcache.so.0" | awk '/lib(asan|tsan)\.so/ {print $3}')
run_example() {  # run_example BINARY: runs it with no LD_LIBRARY_PATH
  local out
  out=$(env -u LD_LIBRARY_PATH ${runtime:+LD_PRELOAD="$runtime"} "$1") || fail "$1 exited $?"
  [ "$out" = "$expected" ] || fail "$1 printed '$out', expected '$expected'"
}

# pkg-config, with the rpath the install note gives for a prefix the loader
# does not search.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config's flags are words
cc -std=c11 -Wall -Wextra -Werror -o "$TEST_TMPDIR/hello_pkgconfig" "$example" \
  $(pkg-config --cflags --libs mrcache) -Wl,-rpath,"$(pkg-config --variable=libdir mrcache)"
run_example "$TEST_TMPDIR/hello_pkgconfig"

# CMake: examples/CMakeLists.txt, find_package(mrcache); the build RPATH
# names the installed library.
build="$TEST_TMPDIR/cmake-build"
cmake -S examples -B "$build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-std=c11 -Wall -Wextra -Werror" >"$TEST_TMPDIR/cmake.log" 2>&1 ||
  { cat "$TEST_TMPDIR/cmake.log"; fail "cmake configure"; }
cmake --build "$build" >>"$TEST_TMPDIR/cmake.log" 2>&1 || { cat "$TEST_TMPDIR/cmake.log"; fail "cmake build"; }
run_example "$build/hello_mrcache"
echo "PASS: README.md's example is $example; built with pkg-config and CMake, it printed '$expected'"
