#!/bin/bash
# Debian's unmodified ucx_perftest (UCX 1.13) runs over softverbs: a server
# and a client, two processes, UCX's own memory hooks left on (its default),
# on one verbs transport; 8 B and large messages (1 MiB; 256 KiB under a
# small RLIMIT_MEMLOCK, see fit_ucx_in_small_memlock), which take the
# rendezvous/zero-copy path that registers the user's buffer, plain and
# under mrcache-run. Each run must exit 0 on both sides with the client's
# "Final:" line, the traffic must have crossed softverbs (packets sent; on
# RC with large messages, the peers' RDMA accesses, none refused), nothing may leak
# (every MR deregistered at exit), and under the shim the registrations must
# have gone through the cache.
#
# Usage: ucx_perftest_test.sh rc|ud TEST   (TEST: tag_lat, tag_bw, ucp_put_bw, ucp_get)
#
# rc runs UCX_TLS=rc_verbs,ud_verbs:aux,self: rc_verbs connects endpoint to
# endpoint and needs an auxiliary transport for UCX's wireup, ud_verbs (what
# UCX's own "rc_v" alias means); with rc_verbs,self alone UCX reports "no
# auxiliary transport" on any device. ud runs UCX_TLS=ud_verbs,self.
set -uo pipefail
kind="$1"
test_name="$2"
run="$PWD/interpose/mrcache-run"
node="$PWD/tests/softverbs/uverbs_node.sh"
out="${TEST_TMPDIR:-$(mktemp -d)}"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  rm -rf "$SOFTVERBS_FABRIC_DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh

command -v ucx_perftest >/dev/null || fail "ucx_perftest is not installed (Debian package ucx-utils, scripts/setup)"
case "$kind" in
  rc) export UCX_TLS=rc_verbs,ud_verbs:aux,self ;;
  ud) export UCX_TLS=ud_verbs,self ;;
  *) fail "unknown transport kind '$kind'" ;;
esac
export UCX_NET_DEVICES=softverbs0:1
preload_sanitizer_runtime
skip_ucx_under_tsan
export LD_LIBRARY_PATH="$PWD/tests/softverbs"
fit_ucx_in_small_memlock

# check NAME SIZE ITERS: the outputs and counters of one finished pair.
check() {
  local name=$1 size=$2 iters=$3 side total_remote=0 total_packets=0
  grep -Eq "^Final: +$iters " "$out/$name.client" ||
    fail "$name: the client printed no final result for $iters iterations: $(cat "$out/$name.client")"
  for side in server client; do
    local cnt="$out/$name.$side.counters"
    [ -s "$cnt" ] || fail "$name: the $side wrote no softverbs counters (was softverbs loaded?)"
    [ "$(counter "$cnt" live_mrs)" = 0 ] || fail "$name: the $side left MRs registered: $(cat "$cnt")"
    [ "$(counter "$cnt" registrations)" = "$(counter "$cnt" deregistrations)" ] ||
      fail "$name: the $side's registrations and deregistrations differ: $(cat "$cnt")"
    [ "$(counter "$cnt" remote_access_errors)" = 0 ] ||
      fail "$name: the $side refused remote accesses: $(cat "$cnt")"
    total_packets=$((total_packets + $(counter "$cnt" packets_sent)))
    total_remote=$((total_remote + $(counter "$cnt" remote_accesses)))
  done
  [ "$total_packets" -ge "$iters" ] || fail "$name: only $total_packets packets for $iters iterations"
  if [ "$kind" = rc ] && [ "$size" -ge "$UCX_LARGE_MESSAGE" ] && [ "$total_remote" -lt 1 ]; then
    fail "$name: $size B messages over rc_verbs made no RDMA access"
  fi
}

# pair NAME SIZE ITERS WRAPPER: one server/client run (WRAPPER is "" or the
# mrcache-run prefix); outputs in $out/NAME.{server,client}[.counters].
pair() {
  local name=$1 size=$2 iters=$3 wrap=$4
  local attempt port
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$attempt")
    # shellcheck disable=SC2086  # $wrap is a word list on purpose
    SOFTVERBS_COUNTERS_FILE="$out/$name.server.counters" \
      timeout 60 "$node" $wrap ucx_perftest -p "$port" >"$out/$name.server" 2>&1 &
    spid=$!
    if ! await_server "$spid" "$port" "$out/$name.server" "Address already in use"; then
      spid=""
      continue
    fi
    # shellcheck disable=SC2086
    SOFTVERBS_COUNTERS_FILE="$out/$name.client.counters" \
      timeout 60 "$node" $wrap ucx_perftest localhost -p "$port" -t "$test_name" -s "$size" \
      -n "$iters" >"$out/$name.client" 2>&1
    local crc=$? src=0
    wait "$spid" || src=$?
    spid=""
    [ "$crc" = 0 ] || fail "$name: client exit $crc: $(cat "$out/$name.client")"
    [ "$src" = 0 ] || fail "$name: server exit $src: $(cat "$out/$name.server")"
    check "$name" "$size" "$iters"
    echo "== $name (UCX_TLS=$UCX_TLS ucx_perftest -t $test_name -s $size -n $iters${wrap:+ under mrcache-run})"
    grep -E '^(Final:|\+|\|)' "$out/$name.client"
    return 0
  done
  fail "$name: no free TCP port found"
}

for size in 8 "$UCX_LARGE_MESSAGE"; do
  iters=100
  [ "$size" -ge "$UCX_LARGE_MESSAGE" ] && iters=10
  pair "plain_$size" "$size" "$iters" ""
  pair "shim_$size" "$size" "$iters" "$run --stats --"
  through_cache "$out/shim_$size"
done
echo "PASS: ucx_perftest -t $test_name over $UCX_TLS, 8 B and $UCX_LARGE_MESSAGE B, plain and under mrcache-run"
