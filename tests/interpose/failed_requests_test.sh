#!/bin/bash
# A shimmed program making one good 16 MiB registration and then 2,000 that
# fail with EFAULT: each failure reaches the device once (softverbs counts as
# many failed registrations as without the shim), is counted once as a failed
# request and never as a device registration, and saves nothing: without a
# hit the summary says no time was saved.
set -uo pipefail
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
prog=tests/interpose/failed_requests
shim="$PWD/interpose/libmrcache_preload.so"
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
counter() { sed -n "s/^$1=//p" "$2"; }
# The top-level key's value: it comes before the same key in the `rails` entries.
json() { grep -Eo "\"$1\": [0-9.]+" "$2" | head -n 1 | sed 's/.*: //'; }

# `timeout` outside the environment: a preloaded timeout would write the counters too.
timeout 60 env SOFTVERBS_COUNTERS_FILE="$out/plain.c" "$prog" >"$out/plain.out" || fail "plain run"
timeout 60 env SOFTVERBS_COUNTERS_FILE="$out/shim.c" LD_PRELOAD="$shim" \
  MRCACHE_STATS="json:$out/stats.json" "$prog" >"$out/shim.out" || fail "shim run"
diff -u "$out/plain.out" "$out/shim.out" || fail "the shim changes what the program sees"
grep -q "failed: 2000 EFAULT" "$out/plain.out" || fail "plain: $(cat "$out/plain.out")"

plain_failed=$(counter failed_registrations "$out/plain.c")
shim_failed=$(counter failed_registrations "$out/shim.c")
[ "$plain_failed" = 2000 ] || fail "softverbs counted $plain_failed failures without the shim"
[ "$shim_failed" = "$plain_failed" ] ||
  fail "under the shim the device saw $shim_failed failures, $plain_failed without: a request was tried twice"

cat "$out/stats.json"
[ "$(json failed "$out/stats.json")" = 2000 ] || fail "failed requests not counted once each"
[ "$(json hits "$out/stats.json")" = 0 ] || fail "hits"
[ "$(json device_registrations "$out/stats.json")" = 1 ] ||
  fail "a failed request counted as a device registration"
[ "$(json registrations_avoided "$out/stats.json")" = 0 ] || fail "failures counted as avoided"
[ "$(json registrar_ns_saved_estimate "$out/stats.json")" = 0 ] || fail "time saved without a hit"

timeout 60 env LD_PRELOAD="$shim" MRCACHE_STATS=1 "$prog" >/dev/null 2>"$out/summary" ||
  fail "summary run"
cat "$out/summary"
grep -Eq "failed requests: +2000 " "$out/summary" || fail "summary: failed requests"
grep -Eq "registrar time saved: +0 ms \(no hits" "$out/summary" || fail "summary: time saved"
grep -Eq "avoided 0$" "$out/summary" || fail "summary: avoided"
echo PASS
