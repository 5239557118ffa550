#!/bin/bash
# Wall time (and process CPU time) of tests/legacy/legacy_rpc's client --
# a naive RPC system registering a fresh REMOTE_WRITE response buffer per
# request -- without and with mrcache-run on both sides, measured in the same
# run: REPS rounds of (plain, shim with remote_keys=shared, shim with the
# default remote_keys=private), the median of each, and the ratios. The
# server and client are two processes over softverbs, which pins for real
# (io_uring fixed buffers) and moves every response through those pages.
#
#   bazel build -c opt //tests/legacy:legacy_rpc //interpose:libmrcache_preload.so \
#     //interpose:mrcache-run //tests/softverbs:libibverbs.so.1
#   interpose/time_legacy_rpc.sh [REPS [REQUESTS]]        (defaults 7 400)
#
# MRCACHE_* variables in the environment apply to the shim runs.
set -euo pipefail
reps=${1:-7}
requests=${2:-400}
bin=${BAZEL_BIN:-bazel-bin}
rpc="$bin/tests/legacy/legacy_rpc"
run="$(realpath "$bin/interpose/mrcache-run")"
export LD_LIBRARY_PATH="$bin/tests/softverbs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT
times="$SOFTVERBS_FABRIC_DIR/times"

# session SIDE WRAPPER...: one server/client run; appends "SIDE WALL_NS CPU_NS REGS"
# (REGS: the client's softverbs registrations) to $times.
session() {
  local side=$1 sock="$SOFTVERBS_FABRIC_DIR/rpc.sock" counters="$SOFTVERBS_FABRIC_DIR/client.counters"
  shift
  "$@" "$rpc" server "$sock" >/dev/null &
  local spid=$! line
  line=$(SOFTVERBS_COUNTERS_FILE="$counters" "$@" "$rpc" client "$sock" -n "$requests" 2>&1 >/dev/null |
    sed -n 's/^legacy_rpc: wall_ns=\([0-9]*\) cpu_ns=\([0-9]*\)$/\1 \2/p')
  wait "$spid"
  echo "$side $line $(sed -n 's/^registrations=//p' "$counters")" >>"$times"
}

for ((r = 0; r < reps; ++r)); do
  session plain env
  session shared "$run" --remote-keys shared --
  session private "$run" --
done

# median SIDE COLUMN: the median of COLUMN over SIDE's runs.
median() {
  awk -v s="$1" -v c="$2" '$1 == s {print $c}' "$times" | sort -n |
    awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
echo "legacy_rpc client -n $requests: $reps runs of each, alternating (median)"
pw=$(median plain 2) pc=$(median plain 3)
for side in plain shared private; do
  w=$(median "$side" 2) c=$(median "$side" 3) g=$(median "$side" 4)
  awk -v s="$side" -v w="$w" -v c="$c" -v g="$g" -v pw="$pw" -v pc="$pc" 'BEGIN {
    printf "  %-8s wall %8.1f ms  cpu %8.1f ms  registrations %5d  plain/this: wall %.2fx cpu %.2fx\n",
      s, w / 1e6, c / 1e6, g, pw / w, pc / c }'
done
