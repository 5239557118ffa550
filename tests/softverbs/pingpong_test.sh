#!/bin/bash
# Debian's unmodified ibv_<kind>_pingpong (ibverbs-utils) runs end to end over
# softverbs: a server and a client, two processes, each its own port on the
# fabric, exchanging messages through QPs. Every variant runs plain and under
# mrcache-run (the shim preloaded in both processes); both must succeed, with
# -c validating the received buffers, and under the shim the registrations
# must have gone through the cache.
#
# Usage: pingpong_test.sh rc|uc|ud|srq
#
# With MRCACHE_TEST_DEVICE=<ibv device> (scripts/test; README "Verifying on
# your hardware") the programs run on that device through the system
# libibverbs instead, with -d DEVICE -g 0 (RoCE needs a GRH); the ODP
# variants, which need SOFTVERBS_ODP, are skipped there.
#
# Debian's -c checks the first byte of every page of the received buffer
# ("invalid data in page N" on stdout, exit status unchanged); this test fails
# on that line. softverbs' own transport_test checks every byte.
set -uo pipefail
kind="$1"
prog="ibv_${kind}_pingpong"
run="$PWD/interpose/mrcache-run"
out="${TEST_TMPDIR:-$(mktemp -d)}"
# Socket paths are limited to 108 bytes: the fabric lives in a short /tmp dir.
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh
preload_sanitizer_runtime
device_args=()
if [ -n "${MRCACHE_TEST_DEVICE:-}" ]; then
  unset LD_LIBRARY_PATH
  device_args=(-d "$MRCACHE_TEST_DEVICE" -g 0)
  echo "on device $MRCACHE_TEST_DEVICE (not softverbs)"
else
  # Tests run in the runfiles root; the programs may change directory.
  export LD_LIBRARY_PATH="$PWD/tests/softverbs"
fi


# pingpong NAME WRAPPER ARGS...: one server/client run (WRAPPER is "" or the
# mrcache-run prefix). Leaves the outputs in $out/NAME.{server,client}.
pingpong() {
  local name=$1 wrap=$2
  shift 2
  local attempt port spid
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$attempt")
    # shellcheck disable=SC2086  # $wrap is a word list on purpose
    timeout 60 $wrap "$prog" -p "$port" "${device_args[@]}" "$@" >"$out/$name.server" 2>&1 &
    spid=$!
    await_server "$spid" "$port" "$out/$name.server" "Couldn't listen" || continue
    # shellcheck disable=SC2086
    timeout 60 $wrap "$prog" -p "$port" "${device_args[@]}" "$@" localhost >"$out/$name.client" 2>&1
    local crc=$? src=0
    wait "$spid" || src=$?
    [ "$crc" = 0 ] || fail "$name: client exit $crc: $(cat "$out/$name.client")"
    [ "$src" = 0 ] || fail "$name: server exit $src: $(cat "$out/$name.server")"
    local side
    for side in server client; do
      grep -q "iters in" "$out/$name.$side" || fail "$name: $side did not finish: $(cat "$out/$name.$side")"
      if grep -q "invalid data" "$out/$name.$side"; then
        fail "$name: $side received corrupted data: $(cat "$out/$name.$side")"
      fi
    done
    return 0
  done
  fail "$name: no free TCP port found"
}

# both NAME ARGS...: plain, then under mrcache-run; both must succeed, and
# the shim saw the registrations: through the cache, or (VIA=direct, for the
# implicit ODP MR, which the shim's rules pass through) directly.
both() {
  local name=$1
  shift
  if [ -n "${MRCACHE_TEST_DEVICE:-}" ] && [ -n "${SOFTVERBS_ODP:-}" ]; then
    echo "skipped on $MRCACHE_TEST_DEVICE: $prog $* (an ODP variant, for softverbs)"
    return 0
  fi
  pingpong "$name" "" "$@"
  pingpong "$name.shim" "$run --stats --" "$@"
  local side pattern="through the cache [1-9]"
  [ "${VIA:-cache}" = direct ] && pattern="direct [1-9][0-9]* by rule"
  for side in server client; do
    grep -Eq "registration calls: +[1-9][0-9]* \(.*$pattern" "$out/$name.shim.$side" ||
      fail "$name: under mrcache-run the $side's registrations were not '$pattern': $(cat "$out/$name.shim.$side")"
    # Only a hit saves registrar time: a run without one reports none saved.
    if grep -Eq "hits / misses: +0 /" "$out/$name.shim.$side"; then
      grep -Eq "registrar time saved: +0 ms \(no hits" "$out/$name.shim.$side" ||
        fail "$name: $side reports time saved without a hit: $(cat "$out/$name.shim.$side")"
    fi
  done
  echo "ok: $prog $* (plain and under mrcache-run)"
}

n=(-n 100)
case "$kind" in
  rc)
    both rc "${n[@]}" -c
    both rc_events "${n[@]}" -c -e
    both rc_gid "${n[@]}" -c -g 0  # a GRH in the address vector
    both rc_wr_api "${n[@]}" -c -N
    both rc_multipacket -n 20 -c -s 200000  # 4 packets per message
    SOFTVERBS_ODP=explicit both rc_odp "${n[@]}" -c -o
    SOFTVERBS_ODP=explicit both rc_odp_prefetch "${n[@]}" -c -o -P
    SOFTVERBS_ODP=implicit VIA=direct both rc_implicit_odp "${n[@]}" -c -O
    SOFTVERBS_ODP=implicit VIA=direct both rc_implicit_odp_prefetch "${n[@]}" -c -O -P
    ;;
  uc)
    both uc "${n[@]}" -c
    both uc_events "${n[@]}" -c -e
    ;;
  ud)
    both ud "${n[@]}" -c
    both ud_events "${n[@]}" -c -e
    both ud_gid "${n[@]}" -c -g 0  # global AHs: receives flagged IBV_WC_GRH
    ;;
  srq)
    both srq "${n[@]}" -c
    both srq_events "${n[@]}" -c -e
    SOFTVERBS_ODP=explicit both srq_odp "${n[@]}" -c -o
    ;;
  *) fail "unknown pingpong kind '$kind'" ;;
esac

echo PASS
