#!/bin/bash
# MRCACHE_STATS reports each device (rail) on its own: a shimmed program
# registering a different number of buffers on each of four softverbs devices
# (registrations_per_device.c: device d, d + 1 buffers, each registered three
# times) finds, on each device's line of the summary and in its entry of the
# JSON's `rails` array, that device's own hits, misses, registrations and
# deregistrations; the rails add up to the run's totals, and every
# registration the device saw was deregistered.
set -uo pipefail
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
prog=tests/interpose/registrations_per_device
shim="$PWD/interpose/libmrcache_preload.so"
out="${TEST_TMPDIR:-$(mktemp -d)}"
devices=4
buffer_kib=64
fail() { echo "FAIL: $*" >&2; exit 1; }
counter() { sed -n "s/^$1=//p" "$2"; }

[ "${SOFTVERBS_DEVICES:-}" = "$devices" ] || fail "SOFTVERBS_DEVICES=$devices expected"
# `timeout` outside the environment: a preloaded timeout would report too.
# No bridging: each buffer is a region of its own (the buffers are 64 KiB apart).
export MRCACHE_BRIDGE_BYTES=0
timeout 60 env LD_PRELOAD="$shim" MRCACHE_STATS=1 SOFTVERBS_COUNTERS_FILE="$out/text.counters" \
  "$prog" >"$out/text.out" 2>"$out/summary" || fail "summary run: $(cat "$out/summary")"
timeout 60 env LD_PRELOAD="$shim" MRCACHE_STATS="json:$out/stats.json" \
  SOFTVERBS_COUNTERS_FILE="$out/json.counters" "$prog" >"$out/json.out" ||
  fail "JSON run"
cat "$out/text.out" "$out/summary" "$out/stats.json"

for run in text json; do
  regs=$(counter registrations "$out/$run.counters")
  deregs=$(counter deregistrations "$out/$run.counters")
  [ -n "$regs" ] && [ "$regs" = "$deregs" ] ||
    fail "$run run: the device saw $regs registrations and $deregs deregistrations"
done

# The summary: one count line, then device d's own line.
grep -Eq "^  rails \(devices\): +$devices " "$out/summary" || fail "summary: no rails count line"
for ((d = 0; d < devices; ++d)); do
  n=$((d + 1))
  grep -q "^softverbs$d: buffers $n, registrations $((3 * n))$" "$out/text.out" ||
    fail "the program's line for softverbs$d: $(cat "$out/text.out")"
  line="    rail $d softverbs$d: hits / misses $((2 * n)) / $n, regions 0 (registrations $n, deregistrations $n), registered 0 B (peak $((n * buffer_kib)).0 KiB), registrar time "
  grep -F "$line" "$out/summary" | grep -Eq " [0-9]+\.[0-9]{3} ms, PD caches 1$" ||
    fail "summary: softverbs$d's line is not \"$line... ms, PD caches 1\""
done

# The JSON: the same figures per rail, adding up to the top-level ones.
python3 - "$out/stats.json" "$devices" "$buffer_kib" <<'PY' || fail "JSON rails"
import json, sys
stats = json.load(open(sys.argv[1]))
devices, kib = int(sys.argv[2]), int(sys.argv[3])
rails = stats["rails"]
assert len(rails) == devices, rails
for d, rail in enumerate(rails):
    n = d + 1
    want = {"rail": d, "name": "softverbs%d" % d, "pd_caches": 1, "hits": 2 * n, "misses": n,
            "registrations": n, "deregistrations": n, "regions": 0, "registered_bytes": 0,
            "peak_registered_bytes": n * kib * 1024}
    got = {k: rail[k] for k in want}
    assert got == want, "rail %d: %s, expected %s" % (d, got, want)
    assert rail["registrar_ns"] > 0, rail
for rail_key, total_key in [("hits", "hits"), ("misses", "misses"),
                            ("registrations", "cache_registrations"),
                            ("deregistrations", "deregistrations"),
                            ("registrar_ns", "registrar_ns"),
                            ("peak_registered_bytes", "peak_pinned_bytes")]:
    assert sum(r[rail_key] for r in rails) == stats[total_key], (rail_key, stats[total_key])
PY
echo PASS
