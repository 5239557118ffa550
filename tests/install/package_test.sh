#!/usr/bin/env bash
# Builds the Debian package with scripts/package_deb (what scripts/package
# does after building) from the test's runfiles, then checks it as apt and a
# user would see it, without installing it on this machine:
#  - dpkg-deb --contents lists the tree scripts/install installs, under /usr;
#  - dpkg-deb --info has the package's name, VERSION's version, dpkg's
#    architecture, a Maintainer and Depends on the runtime packages;
#  - extracted with dpkg-deb -x, the .pc file names /usr, and the extracted
#    mrcache-info and mrcache-run (with its shim) run.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed (dpkg-dev), scripts/package needs it"
    exit 0
  fi
done
# Sanitizer builds: the preloaded shim precedes the ASan runtime (harmless here).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
# Their allocators unmap with raw system calls that only uffd sees: the
# default monitor (auto) adds uffd where a sanitizer runtime is loaded.

out="$TEST_TMPDIR/out"
deb=$(scripts/package_deb . . "$out") || fail "scripts/package_deb exited $?"
version=$(cat VERSION)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
[ "$deb" = "$out/mrcache_${version}_${arch}.deb" ] || fail "package named '$deb'"
[ -f "$deb" ] || fail "no $deb"

dpkg-deb --contents "$deb" | awk '{print $6}' >"$TEST_TMPDIR/contents"
for f in usr/bin/mrcache-run usr/bin/mrcache-info usr/bin/mrbench usr/lib/libmrcache.so.0 \
    usr/lib/libmrcache.so usr/lib/libmrcache_pool.so.0 usr/lib/libmrcache_pool.so \
    usr/lib/libmrcache_preload.so usr/include/mrcache/mrcache.h usr/lib/pkgconfig/mrcache.pc \
    usr/lib/pkgconfig/mrcache-pool.pc usr/lib/cmake/mrcache/mrcacheConfig.cmake \
    usr/lib/cmake/mrcache/mrcacheConfigVersion.cmake usr/share/man/man1/mrcache-run.1.gz \
    usr/share/man/man1/mrcache-info.1.gz usr/share/man/man1/mrbench.1.gz \
    usr/share/man/man3/mrcache.3.gz usr/share/man/man7/mrcache.7.gz \
    usr/share/doc/mrcache/copyright; do
  grep -qx "\./$f" "$TEST_TMPDIR/contents" || grep -qx "\./$f" <(sed 's/ ->.*//' "$TEST_TMPDIR/contents") ||
    fail "not in the package: $f"
done
# Everything is under /usr and owned by root.
if dpkg-deb --contents "$deb" | awk '$6 != "./" && $6 !~ /^\.\/usr\// {print; bad=1} END {exit !bad}'; then
  fail "files outside /usr"
fi
if dpkg-deb --contents "$deb" | awk '$2 != "root/root" {print; bad=1} END {exit !bad}'; then
  fail "files not owned by root"
fi

field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = mrcache ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), VERSION says $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture)"
[[ $(field Maintainer) =~ ^.+\ \<.+@.+\>$ ]] || fail "Maintainer: $(field Maintainer)"
[[ $(field Installed-Size) =~ ^[1-9][0-9]*$ ]] || fail "Installed-Size: $(field Installed-Size)"
[ -n "$(field Description)" ] || fail "no Description"
depends=$(field Depends)
echo "Depends: $depends"
# The packages that hold the libraries the binaries link: the C and C++
# runtimes, libibverbs, liburing and Abseil, each with a minimum version.
for p in libc6 libstdc++6 libibverbs1 liburing2 libabsl; do
  echo "$depends" | tr ',' '\n' | sed 's/^ *//' |
    awk -v p="$p" 'index($0, p) == 1 && / \(>= [^)]+\)$/ {found = 1} END {exit !found}' ||
    fail "Depends lacks a versioned $p: $depends"
done
dpkg-deb --info "$deb" triggers | grep -qx "activate-noawait ldconfig" || fail "no ldconfig trigger"

# Extracted, it is a working tree: the .pc files name /usr, the tools run.
root="$TEST_TMPDIR/root"
dpkg-deb -x "$deb" "$root"
grep -qx "prefix=/usr" "$root/usr/lib/pkgconfig/mrcache.pc" || fail "mrcache.pc: $(head -1 "$root/usr/lib/pkgconfig/mrcache.pc")"
zcat "$root/usr/share/man/man1/mrcache-run.1.gz" | head -1 | grep -q "\"mrcache $version\"" ||
  fail "mrcache-run(1) does not name version $version"
"$root/usr/bin/mrcache-info" --help >"$TEST_TMPDIR/info.txt" || fail "extracted mrcache-info --help"
grep -q "usage: mrcache-info" "$TEST_TMPDIR/info.txt" || fail "mrcache-info --help: $(cat "$TEST_TMPDIR/info.txt")"
# The extracted mrcache-run preloads the extracted shim into a verbs program
# (LD_LIBRARY_PATH, set by the test rule, gives softverbs for libibverbs).
preload=$("$root/usr/bin/mrcache-run" -- sh -c 'echo "$LD_PRELOAD"' 2>/dev/null)
[ "${preload%%:*}" = "$root/usr/lib/libmrcache_preload.so" ] || fail "mrcache-run preloads '$preload'"
"$root/usr/bin/mrcache-run" --stats -- tests/legacy/legacy_app 3 100 >/dev/null 2>"$TEST_TMPDIR/shim.err" ||
  fail "legacy_app under the extracted mrcache-run: $(cat "$TEST_TMPDIR/shim.err")"
grep -q "hit rate" "$TEST_TMPDIR/shim.err" || fail "no summary: $(cat "$TEST_TMPDIR/shim.err")"
echo "package test: $deb checked"
