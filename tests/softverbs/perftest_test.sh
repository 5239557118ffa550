#!/bin/bash
# Debian's unmodified perftest runs over softverbs: a server and a client of
# one program, two processes, exchanging their QP details over TCP on this
# machine (no -R), then measuring. Each runs plain and under mrcache-run in
# both remote-key modes; every run must exit 0 on both sides and print its
# result table, the traffic must really have crossed softverbs (packets sent;
# for RDMA WRITE/READ, the peers' remote accesses, none refused), nothing may
# leak (every MR deregistered at exit), and under the shim the registrations
# must have gone through the cache.
#
# Usage: perftest_test.sh PROGRAM CONNECTION   e.g. ib_write_bw RC
set -uo pipefail
prog="$1"
conn="$2"
run="$PWD/interpose/mrcache-run"
out="${TEST_TMPDIR:-$(mktemp -d)}"
iters=100
# Socket paths are limited to 108 bytes: the fabric lives in a short /tmp dir.
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  rm -rf "$SOFTVERBS_FABRIC_DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v "$prog" >/dev/null || fail "$prog is not installed (Debian package perftest, scripts/setup)"
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh
preload_sanitizer_runtime
# Tests run in the runfiles root; the programs may change directory.
export LD_LIBRARY_PATH="$PWD/tests/softverbs"


# counter FILE NAME: a softverbs counter written at exit.

# check NAME: the outputs and counters of one finished pair. The client
# always prints the table (perftest's servers do only for some tests).
check() {
  local name=$1 side total_remote=0 total_errors=0 total_packets=0
  local log="$out/$name.client"
  grep -q '#bytes' "$log" || fail "$name: the client printed no result table: $(cat "$log")"
  awk '/#bytes/ {getline; if ($1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/) ok=1} END {exit !ok}' "$log" ||
    fail "$name: the client's table has no result row: $(cat "$log")"
  for side in server client; do
    local cnt="$out/$name.$side.counters"
    [ -s "$cnt" ] || fail "$name: the $side wrote no softverbs counters (was softverbs loaded?)"
    [ "$(counter "$cnt" live_mrs)" = 0 ] || fail "$name: the $side left MRs registered: $(cat "$cnt")"
    [ "$(counter "$cnt" registrations)" = "$(counter "$cnt" deregistrations)" ] ||
      fail "$name: the $side's registrations and deregistrations differ: $(cat "$cnt")"
    total_packets=$((total_packets + $(counter "$cnt" packets_sent)))
    total_remote=$((total_remote + $(counter "$cnt" remote_accesses)))
    total_errors=$((total_errors + $(counter "$cnt" remote_access_errors)))
  done
  [ "$total_packets" -ge "$iters" ] || fail "$name: only $total_packets packets for $iters iterations"
  [ "$total_errors" = 0 ] || fail "$name: $total_errors remote accesses were refused"
  case "$prog" in
    ib_write_* | ib_read_*)
      [ "$total_remote" -ge "$iters" ] ||
        fail "$name: only $total_remote remote accesses for $iters iterations"
      ;;
  esac
}

# pair NAME WRAPPER: one server/client run (WRAPPER is "" or the mrcache-run
# prefix). Leaves the outputs in $out/NAME.{server,client}[.counters].
pair() {
  local name=$1 wrap=$2
  local args=(-n "$iters" -c "$conn")
  local attempt port
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$attempt")
    # shellcheck disable=SC2086  # $wrap is a word list on purpose
    SOFTVERBS_COUNTERS_FILE="$out/$name.server.counters" \
      timeout 60 $wrap "$prog" "${args[@]}" -p "$port" >"$out/$name.server" 2>&1 &
    spid=$!
    if ! await_server "$spid" "$port" "$out/$name.server" "Couldn't listen"; then
      spid=""
      continue
    fi
    # shellcheck disable=SC2086
    SOFTVERBS_COUNTERS_FILE="$out/$name.client.counters" \
      timeout 60 $wrap "$prog" "${args[@]}" -p "$port" localhost >"$out/$name.client" 2>&1
    local crc=$? src=0
    wait "$spid" || src=$?
    spid=""
    [ "$crc" = 0 ] || fail "$name: client exit $crc: $(cat "$out/$name.client")"
    [ "$src" = 0 ] || fail "$name: server exit $src: $(cat "$out/$name.server")"
    check "$name"
    echo "== $name ($prog -c $conn${wrap:+ under ${wrap#"$PWD/"}}): client's table"
    sed -n '/#bytes/,$p' "$out/$name.client"
    return 0
  done
  fail "$name: no free TCP port found"
}

pair plain ""
pair shim "$run --stats --"
through_cache "$out/shim"
pair shim_shared "$run --stats --remote-keys shared --"
through_cache "$out/shim_shared"
echo "PASS: $prog -c $conn, plain and under mrcache-run (private and shared remote keys)"
