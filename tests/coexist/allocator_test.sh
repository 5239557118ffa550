#!/bin/bash
# mrcache (libmrcache.so, default monitor) in a process whose allocator is
# glibc's, or tcmalloc, mimalloc or jemalloc preloaded (Debian's packages):
# malloc / register / free / give memory back to the system / malloc again,
# with a device write through the new block's registration
# (tests/coexist/allocator_probe.cc). With the default monitor nothing is
# stale; with monitor=none the same rounds are (so they did release memory).
set -uo pipefail
if [ -n "${ASAN_OPTIONS:-}" ] || [ -n "${TSAN_OPTIONS:-}" ]; then
  # The sanitizer's malloc is linked into the probe and comes before any
  # preloaded one, and its quarantine never hands a freed block back at its
  # old address: no row can be exercised.
  echo "SKIPPED: a sanitizer's allocator replaces glibc's, tcmalloc's, mimalloc's and jemalloc's"
  exit 0
fi
rounds="${COEXIST_ROUNDS:-400}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$tmp/lib"
ln -sf "$PWD/libmrcache.so" "$tmp/lib/libmrcache.so.0"
libdir=/usr/lib/x86_64-linux-gnu
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# allocator NAME LIBRARY [ENV...]: LIBRARY "" is glibc's malloc.
check() {
  local name="$1" library="$2"
  shift 2
  if [ -n "$library" ] && [ ! -e "$library" ]; then
    fail "$name: $library missing (scripts/setup installs it)"
    return
  fi
  for monitor in auto none; do
    local line
    line=$(env "$@" MRCACHE_MONITOR=$monitor LD_PRELOAD="$library" LD_LIBRARY_PATH="$tmp/lib" \
      timeout 120 tests/coexist/allocator_probe "$rounds" 2>"$tmp/err")
    local rc=$?
    if [ $rc -ne 0 ]; then
      fail "$name monitor=$monitor: exit $rc: $(tail -3 "$tmp/err")"
      continue
    fi
    echo "$name monitor=$monitor: $line"
    [ -z "$library" ] || grep -q "allocator $library:" <<<"$line" ||
      fail "$name: malloc is not $library's: $line"
    [ "$(field "$line" exercised)" -gt 0 ] || fail "$name: no block came back at its old address"
    local stale
    stale=$(field "$line" stale)
    if [ "$monitor" = auto ]; then
      [ "$stale" = 0 ] || fail "$name: stale registrations with the default monitor: $line"
    else
      [ "$stale" -gt 0 ] || fail "$name: monitor=none saw no stale round; nothing was released"
    fi
  done
}

check glibc ""
check tcmalloc "$libdir/libtcmalloc_minimal.so.4"
# mimalloc keeps freed pages for a while unless told to return them at once.
check mimalloc "$libdir/libmimalloc.so.2" MIMALLOC_RESET_DELAY=0
check jemalloc "$libdir/libjemalloc.so.2"
[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo PASS
