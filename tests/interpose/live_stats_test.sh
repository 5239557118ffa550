#!/bin/bash
# Live statistics of an unmodified program: the legacy app under mrcache-run
# publishes its cache in /dev/shm/mrcache-<uid>-<pid>; mrcache-info --pid
# read twice while it runs sees hits grow; --json parses; --prometheus
# passes a strict exposition-format check and `promtool check metrics`
# (required: scripts/setup installs Debian's prometheus package for it);
# --watch prints rates; a normal exit removes the page; a SIGKILLed process's
# page is removed by --list; stats_shm=off publishes nothing.
set -uo pipefail
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
run=interpose/mrcache-run
info=interpose/mrcache-info
app=tests/legacy/legacy_app
check_prometheus=tests/interpose/prometheus_format_check
out="${TEST_TMPDIR:-$(mktemp -d)}"
uid=$(id -u)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; rm -f "/dev/shm/mrcache-$uid-$p"; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# wait_for_page PID: until the process's page exists (at most 20 s).
wait_for_page() {
  for _ in $(seq 200); do
    [ -f "/dev/shm/mrcache-$uid-$1" ] && return 0
    kill -0 "$1" 2>/dev/null || fail "process $1 ended before publishing"
    sleep 0.1
  done
  fail "process $1 never published /dev/shm/mrcache-$uid-$1"
}
hits() { sed -n 's/^  hits \/ misses: *\([0-9]*\) .*/\1/p' "$1"; }

# start_app ARGS...: the legacy app under mrcache-run in the background,
# killed after 120 s at the latest; $pid is the app (mrcache-run execs it,
# as the child of timeout, $watchdog).
start_app() {
  timeout -s KILL 120 "$run" -- "$app" "$@" >/dev/null 2>>"$out/app.err" &
  watchdog=$!
  pid=""
  for _ in $(seq 250); do
    pid=$(pgrep -P "$watchdog")
    [ -n "$pid" ] && break
    sleep 0.02
  done
  [ -n "$pid" ] || fail "the app did not start: $(cat "$out/app.err")"
  pids+=("$pid")
}

# A long run (killed at the end): rounds enough for several seconds anywhere.
# Its invalidated regions are not handed to the deregistration thread either
# (async_dereg_invalidated_bytes above them all), so that the queue's line
# below says why it is empty.
MRCACHE_ASYNC_DEREG_INVALIDATED_BYTES=1G start_app 1000000 400
wait_for_page "$pid"
stat -c '%a %U' "/dev/shm/mrcache-$uid-$pid" | grep -q "^600 " || fail "page mode: $(stat -c '%a' "/dev/shm/mrcache-$uid-$pid")"

timeout 10 "$info" --pid "$pid" >"$out/first" || fail "--pid: $(cat "$out/first")"
sleep 1  # the program keeps getting meanwhile
timeout 10 "$info" --pid "$pid" >"$out/second" || fail "--pid again"
cat "$out/second"
first=$(hits "$out/first")
second=$(hits "$out/second")
[ -n "$first" ] && [ -n "$second" ] || fail "no hits line: $(cat "$out/first")"
[ "$second" -gt "$first" ] || fail "hits did not grow while the program ran: $first then $second"
grep -Eq "^cache 1: rail softverbs0, registrar verbs" "$out/second" || fail "cache line"
grep -q "published, refreshed for this reading" "$out/second" ||
  fail "the process did not refresh its page when asked: $(head -1 "$out/second")"
# The legacy app's deregistration batches are all under both thresholds:
# the queue's figures are zero, and the output says why.
grep -Eq "^  dereg queue: +depth 0, callers waited [^,]+, background thread deregistered for 0ns +\(nothing handed to it yet: async_dereg off, or every batch under async_dereg_bytes and async_dereg_invalidated_bytes or from mrc_invalidate\)$" \
  "$out/second" || fail "dereg queue line: $(grep 'dereg queue' "$out/second")"
for h in region_bytes miss_ns register_ns deregister_ns get_bytes; do
  grep -Eq "^  $h: +<=" "$out/second" || fail "histogram $h empty or missing"
done

timeout 10 "$info" --pid "$pid" --json >"$out/json" || fail "--json"
python3 - "$out/json" "$pid" <<'PY' || fail "--json: $(cat "$out/json")"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["pid"] == int(sys.argv[2]), doc["pid"]
cache = doc["caches"][0]
assert cache["rail"] == "softverbs0" and cache["hits"] > 0, cache
for name in ("region_bytes", "miss_ns", "register_ns", "deregister_ns", "get_bytes"):
    h = cache["histograms"][name]
    assert len(h["buckets"]) == 48 and sum(h["buckets"]) > 0 and h["sum"] > 0, name
PY

timeout 10 "$info" --pid "$pid" --prometheus >"$out/prom" || fail "--prometheus"
"$check_prometheus" <"$out/prom" || fail "--prometheus output is not the exposition format"
grep -Eq "^mrcache_hits_total\{pid=\"$pid\",cache=\"1\",rail=\"softverbs0\"\} [1-9]" "$out/prom" ||
  fail "mrcache_hits_total: $(grep hits_total "$out/prom")"
command -v promtool >/dev/null ||
  fail "promtool not found: run scripts/setup (it installs Debian's prometheus package)"
promtool check metrics <"$out/prom" || fail "promtool check metrics"
timeout 10 "$info" --prometheus >"$out/prom_all" || fail "--prometheus of every process"
grep -q "pid=\"$pid\"" "$out/prom_all" || fail "--prometheus without --pid misses $pid"
"$check_prometheus" <"$out/prom_all" || fail "--prometheus (all) format"

timeout 10 "$info" --pid "$pid" --watch 0.3 --count 2 >"$out/watch" || fail "--watch"
[ "$(grep -Ec "^cache 1 \(softverbs0\): hits/s [0-9.]+, misses/s [0-9.]+, registrations/s [0-9.]+" "$out/watch")" = 2 ] ||
  fail "--watch: $(cat "$out/watch")"

timeout 10 "$info" --list >"$out/list" || fail "--list"
grep -Eq "^$pid +legacy_app +1 " "$out/list" || fail "--list misses $pid: $(cat "$out/list")"

# SIGKILL leaves the page; --list removes it and says so.
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
[ -f "/dev/shm/mrcache-$uid-$pid" ] || fail "SIGKILL removed the page (it cannot)"
timeout 10 "$info" --list >"$out/list2" || fail "--list after kill"
grep -q "removed the page of process $pid" "$out/list2" || fail "--list: $(cat "$out/list2")"
[ -f "/dev/shm/mrcache-$uid-$pid" ] && fail "--list left the dead process's page"
timeout 10 "$info" --pid "$pid" >"$out/gone" 2>&1
[ $? = 1 ] || fail "--pid of a dead process must exit 1"
grep -q "publishes no mrcache statistics" "$out/gone" || fail "dead pid: $(cat "$out/gone")"

# A normal exit removes the page. The run lasts long enough (0.4 s plain)
# for start_app to see its pid before it ends.
start_app 20 400
wait "$watchdog" || fail "short run: $(cat "$out/app.err")"
[ -f "/dev/shm/mrcache-$uid-$pid" ] && fail "normal exit left /dev/shm/mrcache-$uid-$pid"

# stats_shm=off publishes nothing.
export MRCACHE_STATS_SHM=off
start_app 1000000 400
sleep 1.5
kill -0 "$pid" 2>/dev/null || fail "the stats_shm=off run ended early"
[ -e "/dev/shm/mrcache-$uid-$pid" ] && fail "stats_shm=off created a page"
echo PASS
