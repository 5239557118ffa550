#!/bin/bash
# time_runtimes.sh ROUNDS: wall time of the unmodified runtimes over
# softverbs, plain and under mrcache-run (private and shared remote keys):
# each perftest pair, two ucx_perftest pairs and the Open MPI program. One
# measurement is a whole server+client run (or mpirun), from the server's
# start to both processes' exit, so it includes start-up and the TCP
# exchange; the modes alternate within each round and the median of ROUNDS
# is printed with its ratio to plain. Run from the workspace root after
#   bazel build -c opt //interpose:libmrcache_preload.so //interpose:mrcache-run \
#     //tests/softverbs:libibverbs.so.1 //tests/softverbs:mpi_sendrecv
# (uses bazel-bin, or $BIN). Not a test: it checks nothing beyond exit statuses.
set -uo pipefail
rounds="${1:-5}"
bin="$PWD/${BIN:-bazel-bin}"  # BIN: another output tree, e.g. bazel-out/k8-opt/bin
run="$bin/interpose/mrcache-run"
node="$PWD/tests/softverbs/uverbs_node.sh"
export LD_LIBRARY_PATH="$bin/tests/softverbs"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh

# now_ms: a monotonic-enough wall clock in milliseconds.
now_ms() { date +%s%3N; }

# pair_ms WRAP SERVER_CMD... -- CLIENT_ARGS...: wall ms of one pair; the
# client runs SERVER_CMD plus CLIENT_ARGS (its extra arguments).
pair_ms() {
  local wrap=$1 taken=$2
  shift 2
  local server=() client_extra=()
  while [ "$1" != -- ]; do server+=("$1"); shift; done
  shift
  client_extra=("$@")
  local port start spid
  port=$(free_port 1)
  start=$(now_ms)
  # shellcheck disable=SC2086
  $wrap "${server[@]}" -p "$port" >/dev/null 2>&1 &
  spid=$!
  await_server "$spid" "$port" /dev/null "$taken" || return 1
  # shellcheck disable=SC2086
  $wrap "${server[@]}" -p "$port" "${client_extra[@]}" >/dev/null 2>&1 || fail "client failed: ${server[*]} ${client_extra[*]}"
  wait "$spid" || fail "server failed: ${server[*]}"
  echo $(($(now_ms) - start))
}

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# measure LABEL FN ARGS...: runs FN WRAP ARGS for the three modes, ROUNDS
# times alternating, and prints the medians and ratios to plain.
measure() {
  local label=$1 fn=$2
  shift 2
  local -a plain=() priv=() shared=()
  for _ in $(seq "$rounds"); do
    plain+=("$("$fn" "" "$@")")
    priv+=("$("$fn" "$run --" "$@")")
    shared+=("$("$fn" "$run --remote-keys shared --" "$@")")
  done
  local p q s
  p=$(printf '%s\n' "${plain[@]}" | median)
  q=$(printf '%s\n' "${priv[@]}" | median)
  s=$(printf '%s\n' "${shared[@]}" | median)
  printf '%-44s plain %6d ms  shim %6d ms (%.2fx)  shim shared %6d ms (%.2fx)\n' "$label" "$p" \
    "$q" "$(echo "$q / $p" | bc -l)" "$s" "$(echo "$s / $p" | bc -l)"
}

perftest_pair() {
  local wrap=$1 prog=$2 conn=$3 iters=$4
  pair_ms "$wrap" "Couldn't listen" "$prog" -n "$iters" -c "$conn" -- localhost
}

ucx_pair() {
  local wrap=$1 tls=$2 test=$3 size=$4 iters=$5
  UCX_TLS=$tls UCX_NET_DEVICES=softverbs0:1 pair_ms "$node $wrap" "Address already in use" \
    ucx_perftest -- localhost -t "$test" -s "$size" -n "$iters"
}

mpi_run() {
  local wrap=$1 start
  start=$(now_ms)
  # shellcheck disable=SC2086
  TMPDIR="$SOFTVERBS_FABRIC_DIR" "$node" mpirun --allow-run-as-root -np 2 --mca pml ucx \
    --mca pml_ucx_devices any --mca pml_ucx_tls any --mca btl self \
    -x LD_LIBRARY_PATH -x SOFTVERBS_FABRIC_DIR -x UCX_TLS=rc_verbs,ud_verbs:aux,self \
    -x UCX_NET_DEVICES=softverbs0:1 $wrap "$bin/tests/softverbs/mpi_sendrecv" >/dev/null 2>&1 ||
    fail "mpirun failed"
  echo $(($(now_ms) - start))
}

echo "$rounds rounds, medians of whole-run wall time; load $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in "ib_write_bw RC" "ib_read_bw RC" "ib_send_bw RC" "ib_write_lat RC" "ib_read_lat RC" \
  "ib_send_lat RC" "ib_write_bw UC" "ib_send_bw UC" "ib_send_bw UD"; do
  read -r prog conn <<<"$spec"
  iters=1000
  [[ "$prog" == *_lat ]] && iters=200  # a round trip each: seconds on a loaded machine
  measure "$prog -c $conn -n $iters" perftest_pair "$prog" "$conn" "$iters"
done
measure "ucx_perftest rc_verbs tag_bw 1 MiB -n 100" ucx_pair rc_verbs,ud_verbs:aux,self tag_bw 1048576 100
measure "ucx_perftest rc_verbs tag_lat 8 B -n 200" ucx_pair rc_verbs,ud_verbs:aux,self tag_lat 8 200
measure "ucx_perftest ud_verbs tag_lat 8 B -n 200" ucx_pair ud_verbs,self tag_lat 8 200
measure "mpirun -np 2 mpi_sendrecv (UCX pml, rc_verbs)" mpi_run
