#!/bin/bash
# mrcache-info against softverbs: every configuration key, the device and its
# ODP capabilities, the monitors; exit 1 for a bad MRCACHE_* value, 2 for a
# bad argument.
set -uo pipefail
info=interpose/mrcache-info
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

MRCACHE_MAX_BYTES=512M "$info" >"$out/info" 2>&1 || fail "exit $?: $(cat "$out/info")"
for key in registrar max_regions max_bytes max_merge_bytes bridge_bytes alignment remote_keys monitor odp \
    odp_prefetch_bytes sim_base_ns sim_page_ns sim_mlock sim_odp_page_ns pool_max_bytes \
    pool_chunk_bytes pool_hugepages pool_retain_bytes pool_access uring_slots max_region_bytes MRCACHE_STATS; do
  grep -Eq "^  $key +=" "$out/info" || fail "key $key missing"
done
grep -Eq "max_bytes += 512M +\(from MRCACHE_MAX_BYTES\)" "$out/info" || fail "environment not applied"
# Sizes as the key table writes them; an empty value says what it means.
grep -Eq "^  max_merge_bytes += 1G " "$out/info" || fail "sizes not as the key table: $(cat "$out/info")"
grep -Eq "^  pool_chunk_bytes += 2M " "$out/info" || fail "sizes not as the key table"
grep -Eq '^  registrar += "" +\(empty: verbs with a PD, else uring where io_uring works, else sim\)' \
  "$out/info" || fail "empty registrar unexplained: $(grep registrar "$out/info")"
grep -Eq "^  (RLIMIT_MEMLOCK|pin_budget_bytes) += [0-9]{5,}[ (]" "$out/info" &&
  fail "budget in raw bytes: $(cat "$out/info")"

# Without softverbs, on a machine without an RDMA device: a plain statement,
# never "Function not implemented".
if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
  echo "skipped: the no-device message (this machine has RDMA devices: $(ls /sys/class/infiniband))"
else
  env -u LD_LIBRARY_PATH "$info" >"$out/nodev" 2>&1 || fail "no-device run: $(cat "$out/nodev")"
  grep -q "none: no RDMA device on this machine" "$out/nodev" || fail "no device: $(cat "$out/nodev")"
  grep -q "Function not implemented" "$out/nodev" && fail "ENOSYS shown as such: $(cat "$out/nodev")"
fi
grep -Eq "^  remote_keys += shared " "$out/info" || fail "library default of remote_keys"
grep -Eq "^  remote_keys += private +\(the shim's default" "$out/info" || fail "shim's remote_keys: $(cat "$out/info")"
MRCACHE_REMOTE_KEYS=shared "$info" >"$out/shared" 2>&1 || fail "shared run"
[ "$(grep -Ec "^  remote_keys += shared +\(from MRCACHE_REMOTE_KEYS\)" "$out/shared")" = 2 ] ||
  fail "MRCACHE_REMOTE_KEYS not applied: $(cat "$out/shared")"
# What a pool buffer's rkey reaches: nothing by default, its whole chunk with a remote right.
grep -Eq "^  rkey scope += none " "$out/info" || fail "pool rkey scope (default): $(cat "$out/info")"
MRCACHE_POOL_ACCESS=local_write+remote_read "$info" >"$out/pool" 2>&1 || fail "pool_access run"
grep -Eq "^  rkey scope += whole chunk: .* 2M chunk" "$out/pool" ||
  fail "pool rkey scope (remote_read): $(cat "$out/pool")"
grep -q "softverbs0" "$out/info" || fail "device missing"
# The longest region a cache registers on the device: its max_mr_size, or
# max_region_bytes when lower.
grep -q "longest region: no limit" "$out/info" || fail "longest region (no limit): $(cat "$out/info")"
SOFTVERBS_MAX_MR_SIZE=1M "$info" >"$out/limit" 2>&1 || fail "max_mr_size run"
grep -q "longest region: 1M (the device's max_mr_size)" "$out/limit" ||
  fail "longest region (max_mr_size): $(cat "$out/limit")"
SOFTVERBS_MAX_MR_SIZE=1M MRCACHE_MAX_REGION_BYTES=256K "$info" >"$out/limit" 2>&1 || fail "max_region_bytes run"
grep -q "longest region: 256K (max_region_bytes)" "$out/limit" ||
  fail "longest region (max_region_bytes): $(cat "$out/limit")"
grep -q "odp general_caps: none" "$out/info" || fail "ODP caps (none)"
# Every monitor of the table (--monitors), with its availability; one that
# may not be used alone is never shown as available by itself, and is shown
# with auto.
"$info" --monitors >"$out/monitors" || fail "--monitors exit status"
while IFS=$'\t' read -r m reports use description; do
  [ -n "$description" ] || fail "monitor $m without a description"
  if [ "$use" = alone ]; then
    grep -Eq "^  $m +(available|unavailable)" "$out/info" || fail "monitor $m missing"
  else
    grep -Eq "^  $m +(installable, but $use|unavailable)" "$out/info" ||
      fail "monitor $m (usable $use): $(grep "^  $m " "$out/info")"
    grep -Eq "^  auto\+$m +(available|unavailable)" "$out/info" || fail "monitor auto+$m missing"
  fi
done <"$out/monitors"
grep -Eq "^  uffd +available" "$out/info" && fail "uffd shown as usable alone"
grep -Eq "^  auto +available: " "$out/info" || fail "auto not installable here"
# auto's coverage as a cache would report it (mrc_stats_t.monitor_incomplete):
# complete where auto installed patch, incomplete (with the cause) otherwise.
if grep -Eq "^  auto +available: patch" "$out/info"; then
  grep -Eq "^  monitor_incomplete: 0$" "$out/info" || fail "auto with patch: $(cat "$out/info")"
else
  grep -Eq "^  monitor_incomplete: 1 -- patch: " "$out/info" || fail "auto without patch: $(cat "$out/info")"
fi
# auto adds uffd exactly where a sanitizer runtime is loaded (this binary's build).
if [ -n "${ASAN_OPTIONS:-}" ] || [ -n "${TSAN_OPTIONS:-}" ]; then
  grep -Eq "^  sanitizer runtime: (Address|Thread)Sanitizer \(auto adds uffd" "$out/info" ||
    fail "sanitizer runtime not shown: $(cat "$out/info")"
  grep -Eq "^  auto +available: .*uffd" "$out/info" || fail "auto without uffd under a sanitizer"
else
  grep -Eq "^  sanitizer runtime: none " "$out/info" || fail "sanitizer line: $(cat "$out/info")"
  grep -Eq "^  auto +available: .*uffd" "$out/info" && fail "auto with uffd without a sanitizer"
fi
grep -q "uffd watch probe (an anonymous mapping): watched" "$out/info" || fail "uffd probe: $(cat "$out/info")"
grep -Eq "uffd registers whole mappings and adds none at or above [0-9]+ mappings" "$out/info" ||
  fail "uffd map-count limit missing"
grep -q "mrc_stats_t.watch_failures" "$out/info" || fail "where watch failures are reported"

SOFTVERBS_ODP=implicit MRCACHE_ODP=auto "$info" >"$out/odp" 2>&1 || fail "odp run"
grep -q "ODP_SUPPORT ODP_SUPPORT_IMPLICIT" "$out/odp" || fail "implicit ODP caps: $(cat "$out/odp")"
grep -q "explicit ODP yes, implicit ODP yes, prefetch yes" "$out/odp" || fail "mrcache's view of ODP"
grep -q "odp=auto runs as: implicit" "$out/odp" || fail "odp=auto resolution"

MRCACHE_ODP=sometimes "$info" >"$out/bad" 2>&1
[ $? = 1 ] || fail "bad MRCACHE_ODP must exit 1"
grep -q "MRCACHE_ODP" "$out/bad" || fail "bad value not named"
"$info" --verbose >/dev/null 2>&1
[ $? = 2 ] || fail "unknown argument must exit 2"
"$info" --help | grep -q "usage: mrcache-info" || fail "--help"
echo PASS
