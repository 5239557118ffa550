#!/bin/bash
# Open MPI 4.1 (Debian's openmpi-bin) runs a naive MPI program
# (mpi_sendrecv.c: fresh malloc'ed buffers of many sizes, every byte
# checked, then an allreduce) as two ranks on UCX's pml over softverbs:
# UCX_TLS=rc_verbs,ud_verbs:aux,self, so the ranks can only talk through
# softverbs' device. Plain, then with every rank under mrcache-run. Both
# ranks must report ok, the traffic must have crossed softverbs, nothing may
# leak, and under the shim the registrations must go through the cache.
#
# Open MPI 4.1's UCX pml selects itself only for mlx* devices by default:
# --mca pml_ucx_devices any --mca pml_ucx_tls any lifts that.
set -uo pipefail
run="$PWD/interpose/mrcache-run"
node="$PWD/tests/softverbs/uverbs_node.sh"
prog="$PWD/tests/softverbs/mpi_sendrecv"
out="${TEST_TMPDIR:-$(mktemp -d)}"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh
command -v mpirun >/dev/null || fail "mpirun is not installed (Debian package openmpi-bin, scripts/setup)"
preload_sanitizer_runtime
skip_ucx_under_tsan
export LD_LIBRARY_PATH="$PWD/tests/softverbs"
export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=softverbs0:1
fit_ucx_in_small_memlock
# Under a small RLIMIT_MEMLOCK the two ranks share softverbs' 8 MiB
# (fit_ucx_in_small_memlock): messages stop at UCX_LARGE_MESSAGE there, since
# 3 MiB and 4 MiB ones need that much pinned in each rank at once.
max_bytes=""
memlock_limited && max_bytes=$UCX_LARGE_MESSAGE
# ASan's allocator maps and unmaps large blocks by raw system calls, which
# UCX's memory hooks cannot see: UCX's own registration cache then hands out
# registrations of unmapped pages and the ranks receive into the old pages
# (seen here as buffers still holding ASan's 0xbe malloc fill). Under ASan
# UCX registers directly instead, so what runs is softverbs and mrcache.
if [[ "${SANITIZER_RUNTIME:-}" == *libasan* ]]; then
  export UCX_IB_REG_METHODS=direct
  echo "under ASan: UCX_IB_REG_METHODS=direct (UCX's cache misses ASan's raw munmaps)"
fi
# Open MPI's session directory holds unix sockets: keep its path short.
export TMPDIR="$SOFTVERBS_FABRIC_DIR"

# ranks NAME WRAPPER: one mpirun of two ranks, each rank as WRAPPER PROG
# [max_bytes] and its softverbs counters in $out/NAME.rank<R>.counters.
ranks() {
  local name=$1 wrap=$2
  # Every UCX_* setting goes to the ranks.
  local ucx_vars=() var
  for var in $(compgen -e | grep '^UCX_'); do ucx_vars+=(-x "$var"); done
  # Each rank names its own counters file after its rank.
  # shellcheck disable=SC2016  # expanded by each rank's shell
  local rank_cmd='SOFTVERBS_COUNTERS_FILE="$0.rank$OMPI_COMM_WORLD_RANK.counters" exec "$@"'
  # shellcheck disable=SC2086  # $wrap is a word list on purpose
  timeout 120 "$node" mpirun --allow-run-as-root --oversubscribe -np 2 \
    --mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any --mca btl self \
    -x LD_LIBRARY_PATH -x SOFTVERBS_FABRIC_DIR "${ucx_vars[@]}" \
    ${LD_PRELOAD:+-x LD_PRELOAD} ${ASAN_OPTIONS:+-x ASAN_OPTIONS} \
    bash -c "$rank_cmd" "$out/$name" $wrap "$prog" $max_bytes >"$out/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || fail "$name: mpirun exited $rc: $(cat "$out/$name.log")"
  local r total_packets=0
  for r in 0 1; do
    grep -q "^rank $r: ok" "$out/$name.log" || fail "$name: rank $r did not report ok: $(cat "$out/$name.log")"
    local cnt="$out/$name.rank$r.counters"
    [ -s "$cnt" ] || fail "$name: rank $r wrote no softverbs counters (was softverbs loaded?)"
    [ "$(counter "$cnt" live_mrs)" = 0 ] || fail "$name: rank $r left MRs registered: $(cat "$cnt")"
    [ "$(counter "$cnt" registrations)" = "$(counter "$cnt" deregistrations)" ] ||
      fail "$name: rank $r's registrations and deregistrations differ: $(cat "$cnt")"
    [ "$(counter "$cnt" remote_access_errors)" = 0 ] || fail "$name: rank $r refused remote accesses"
    total_packets=$((total_packets + $(counter "$cnt" packets_sent)))
  done
  [ "$total_packets" -ge 96 ] || fail "$name: only $total_packets packets crossed softverbs"
  grep '^rank' "$out/$name.log"
  echo "ok: $name ($total_packets packets over softverbs)"
}

ranks plain ""
ranks shim "$run --stats --"
# Each rank's summary says so.
through=$(grep -Ec "registration calls: +[1-9][0-9]* \(through the cache [1-9]" "$out/shim.log")
[ "$through" -ge 2 ] ||
  fail "shim: under mrcache-run the ranks' registrations did not go through the cache: $(cat "$out/shim.log")"
grep -E "registration calls|hits / misses|invalidations" "$out/shim.log"
echo "PASS: Open MPI over UCX over softverbs, plain and under mrcache-run"
