#!/bin/bash
# Live statistics of a rails cache: rails_app (one cache over four softverbs
# devices, a known number of registrations per rail, one deregistration done
# by the background thread) is read by mrcache-info --pid while it runs. The
# text, --json and --prometheus show each rail's registrations and the
# deregistration queue; the Prometheus output passes a strict format check and
# `promtool check metrics`; the app ends with every rail's registrations
# deregistered.
set -uo pipefail
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
app=tests/stats/rails_app
info=interpose/mrcache-info
check_prometheus=tests/interpose/prometheus_format_check
out="${TEST_TMPDIR:-$(mktemp -d)}"
uid=$(id -u)
pid=""
cleanup() {
  exec 3>&- 2>/dev/null
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && rm -f "/dev/shm/mrcache-$uid-$pid"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The app runs until its stdin (the fifo, held open on fd 3) closes; it gives
# up by itself after 60 s, and timeout kills it after 90 s.
mkfifo "$out/stdin"
timeout -s KILL 90 "$app" <"$out/stdin" >"$out/app.out" 2>"$out/app.err" &
pid=$!
exec 3>"$out/stdin"
for _ in $(seq 300); do
  grep -q '^ready$' "$out/app.out" && break
  kill -0 "$pid" 2>/dev/null || fail "rails_app ended early: $(cat "$out/app.err")"
  sleep 0.1
done
grep -q '^ready$' "$out/app.out" || fail "rails_app never got ready: $(cat "$out/app.err")"
# timeout execs nothing itself: the app is its child.
app_pid=$(pgrep -P "$pid" || echo "$pid")

timeout 10 "$info" --pid "$app_pid" >"$out/text" || fail "--pid: $(cat "$out/text")"
cat "$out/text"
grep -q "^cache 1: rail softverbs0+softverbs1+softverbs2+softverbs3, registrar verbs" "$out/text" ||
  fail "the cache's rails are not named whole"
grep -q "^  rails: *4$" "$out/text" || fail "no rails line"
for r in 0 1 2; do
  n=$((r + 1))
  grep -q "^    rail $r softverbs$r: regions $n (registrations $n, deregistrations 0), registered " \
    "$out/text" || fail "rail $r"
done
grep -q "^    rail 3 softverbs3: regions 3 (registrations 5, deregistrations 2), registered " \
  "$out/text" || fail "rail 3 (one of its buffers unmapped, one page invalidated)"
grep -Eq "^  dereg queue: +depth 0, callers waited [^,]+, background thread deregistered for [1-9]" \
  "$out/text" || fail "the deregistration queue line"

timeout 10 "$info" --pid "$app_pid" --json >"$out/json" || fail "--json"
python3 - "$out/json" <<'PY' || fail "--json: $(cat "$out/json")"
import json, sys
cache = json.load(open(sys.argv[1]))["caches"][0]
rails = cache["rails"]
assert [r["rail"] for r in rails] == [0, 1, 2, 3], rails
assert [r["name"] for r in rails] == ["softverbs%d" % i for i in range(4)], rails
assert [r["registrations"] for r in rails] == [1, 2, 3, 5], rails
assert [r["deregistrations"] for r in rails] == [0, 0, 0, 2], rails
assert [r["regions"] for r in rails] == [1, 2, 3, 3], rails
assert all(r["registered_bytes"] > 0 and r["registrar_ns"] > 0 for r in rails), rails
assert cache["dereg_queue_depth"] == 0 and cache["background_dereg_ns"] > 0, cache
assert "dereg_wait_ns" in cache, cache
PY

timeout 10 "$info" --pid "$app_pid" --prometheus >"$out/prom" || fail "--prometheus"
"$check_prometheus" <"$out/prom" || fail "--prometheus output is not the exposition format"
labels="pid=\"$app_pid\",cache=\"1\""
grep -q "^mrcache_rail_registrations_total{$labels,rail=\"softverbs2\",rail_index=\"2\"} 3$" \
  "$out/prom" || fail "rail 2's registrations: $(grep rail_registrations "$out/prom")"
grep -q "^mrcache_rail_regions{$labels,rail=\"softverbs3\",rail_index=\"3\"} 3$" "$out/prom" ||
  fail "rail 3's regions"
grep -Eq "^mrcache_background_dereg_seconds_total\{$labels,rail=\"[^\"]+\"\} [0-9.e-]+$" \
  "$out/prom" || fail "mrcache_background_dereg_seconds_total"
grep -q "^mrcache_dereg_queue_depth{$labels,rail=\"softverbs0+softverbs1+softverbs2+softverbs3\"} 0$" \
  "$out/prom" || fail "mrcache_dereg_queue_depth"
command -v promtool >/dev/null ||
  fail "promtool not found: run scripts/setup (it installs Debian's prometheus package)"
promtool check metrics <"$out/prom" || fail "promtool check metrics"

exec 3>&-  # the app flushes, destroys its cache and checks every rail is deregistered
wait "$pid" || fail "rails_app: $(cat "$out/app.err")"
[ -e "/dev/shm/mrcache-$uid-$app_pid" ] && fail "the page outlived the app"
pid=""
echo PASS
