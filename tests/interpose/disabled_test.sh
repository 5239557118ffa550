#!/bin/bash
# When the shim cannot keep registrations correct -- no memory monitor can be
# installed, or the MRCACHE_* environment is invalid -- it says so once and
# passes every call through: same output, same registrations as without it.
set -uo pipefail
# Sanitizer builds: the preloaded shim precedes the ASan runtime (harmless here).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
app=tests/legacy/legacy_app
shim="$PWD/interpose/libmrcache_preload.so"
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
count() { sed -n 's/^registrations=//p' "$1"; }

SOFTVERBS_COUNTERS_FILE="$out/plain.c" "$app" 3 50 >"$out/plain.out" 2>/dev/null || fail "plain run"
# jemalloc is not this program's allocator: that monitor cannot be installed.
for env in MRCACHE_MONITOR=jemalloc MRCACHE_MAX_BYTES=lots; do
  env "$env" LD_PRELOAD="$shim" SOFTVERBS_COUNTERS_FILE="$out/shim.c" "$app" 3 50 \
    >"$out/shim.out" 2>"$out/shim.err" || fail "$env: run failed: $(cat "$out/shim.err")"
  diff -u "$out/plain.out" "$out/shim.out" || fail "$env: output differs"
  grep -q "passes every registration through" "$out/shim.err" || fail "$env: no warning: $(cat "$out/shim.err")"
  [ "$(grep -c "passes every registration through" "$out/shim.err")" = 1 ] || fail "$env: warned more than once"
  [ "$(count "$out/plain.c")" = "$(count "$out/shim.c")" ] ||
    fail "$env: $(count "$out/shim.c") registrations, expected $(count "$out/plain.c") (pass-through)"
done
echo PASS
