#!/bin/bash
# dlclose releases a library's segments under every monitor that claims
# munmap, linked and under the shim: dlclose_probe registers a library's
# 4 MiB .bss buffer, lets go of it, unloads the library and loads it again at
# the same address, registers again and writes through the registration as a
# device would; the write must show in the buffer. monitor=none is the
# negative control: it must go stale, so the oracle can see a stale
# registration here. Plain verbs (no shim) are never stale. A run whose
# library never lands at its first address again says SKIPPED (under
# ThreadSanitizer its runtime often maps into the hole the unload leaves);
# the test is SKIPPED only if every run did.
set -uo pipefail
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
lib=./tests/monitors/libdlclose_victim.so
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$tmp/lib"
ln -sf "$PWD/libmrcache.so" "$tmp/lib/libmrcache.so.0"
shim="$PWD/interpose/libmrcache_preload.so"
failures=0
skipped=0
runs=0

# check NAME EXPECTED CMD...: EXPECTED is visible or stale.
check() {
  local name=$1 expected=$2
  shift 2
  local out status=0
  out=$("$@" 2>"$tmp/err") || status=$?
  runs=$((runs + 1))
  case "$status:$out" in
    0:SKIPPED:*)
      echo "$name: $out"
      skipped=$((skipped + 1)) ;;
    "0:dlclose: visible"* | "3:dlclose: stale"*)
      echo "$name: $out"
      if [ "$(sed -n 's/^dlclose: \([a-z]*\).*/\1/p' <<<"$out")" != "$expected" ]; then
        echo "FAIL: $name: expected $expected" >&2
        failures=$((failures + 1))
      fi ;;
    *)
      echo "FAIL: $name: exit $status: $out $(tail -3 "$tmp/err")" >&2
      failures=$((failures + 1)) ;;
  esac
}

# Each run is bounded by timeout.
linked() { LD_LIBRARY_PATH="$tmp/lib" timeout 120 tests/monitors/dlclose_probe_linked "$lib" "$@"; }
symbols() { timeout 120 tests/monitors/dlclose_probe_symbols "$lib" symbols; }
plain_verbs() { timeout 120 tests/monitors/dlclose_probe_verbs "$lib"; }
mrcache_run() { timeout 120 interpose/mrcache-run -- tests/monitors/dlclose_probe_verbs "$lib"; }
under_shim() {  # under_shim MONITOR: the probe with the shim preloaded
  MRCACHE_MONITOR="$1" LD_PRELOAD="$shim" timeout 120 tests/monitors/dlclose_probe_verbs "$lib"
}

# patch refuses to install under ThreadSanitizer (patch_monitor.h): there
# `auto` is uffd in libmrcache.so and the shim, symbols+uffd where symbols is
# exported.
monitors=(patch auto auto+uffd)
[ -n "${TSAN_OPTIONS:-}" ] && monitors=(auto auto+uffd)

for m in "${monitors[@]}"; do
  check "libmrcache.so monitor=$m" visible linked "$m"
done
check "libmrcache.so monitor=none" stale linked none
check "symbols exported monitor=symbols" visible symbols
check "plain verbs" visible plain_verbs
check "mrcache-run (default monitor)" visible mrcache_run
for m in "${monitors[@]}"; do
  check "LD_PRELOAD shim monitor=$m" visible under_shim "$m"
done
check "LD_PRELOAD shim monitor=none" stale under_shim none

if [ "$failures" -gt 0 ]; then
  echo "$failures of $runs runs failed" >&2
  exit 1
fi
if [ "$skipped" -eq "$runs" ]; then
  echo "SKIPPED: the loader never mapped the library at its first address again"
  exit 0
fi
echo "PASS ($runs runs, $skipped without address reuse)"
