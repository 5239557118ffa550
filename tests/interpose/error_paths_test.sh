#!/bin/bash
# Every error path of the interposed verbs fails the same way with the shim as
# without it (same return values and errno, old MRs still valid after a failed
# ibv_rereg_mr, EBUSY from ibv_dealloc_pd while MRs are held).
set -euo pipefail
# Sanitizer builds: the preloaded shim precedes the ASan runtime (harmless here).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
prog=tests/interpose/error_paths
shim="$PWD/interpose/libmrcache_preload.so"
out="${TEST_TMPDIR:-$(mktemp -d)}"

"$prog" >"$out/plain.out"
LD_PRELOAD="$shim" MRCACHE_STATS="json:$out/stats.json" \
  SOFTVERBS_COUNTERS_FILE="$out/shim.counters" "$prog" >"$out/shim.out"
cat "$out/plain.out"
if ! diff -u "$out/plain.out" "$out/shim.out"; then
  echo "FAIL: the shim changes an error path" >&2
  exit 1
fi
# The shim was in the path (not disabled) and really cached some requests.
grep -q '"disabled": ""' "$out/stats.json" || { echo "FAIL: shim disabled" >&2; exit 1; }
grep -Eq '"cache_lookups": [1-9]' "$out/stats.json" || { echo "FAIL: no cache lookup" >&2; exit 1; }
grep -Eq '"rereg_conversions": [1-9]' "$out/stats.json" || { echo "FAIL: rereg never hit an alias" >&2; exit 1; }
echo PASS
