# shellcheck shell=bash
# foreign_programs.sh: sourced by the tests that run unmodified Debian
# programs over softverbs (pingpong, perftest, UCX), often as a TCP server
# and client of one program.

# preload_sanitizer_runtime: under --config=asan/tsan softverbs (and the
# shim) need their sanitizer runtime, which the uninstrumented Debian
# binaries do not load: preload it (its path is then in SANITIZER_RUNTIME).
preload_sanitizer_runtime() {
  local runtime
  runtime=$(ldd tests/softverbs/libibverbs.so.1 | awk '/lib(asan|tsan)\.so/ {print $3}')
  if [ -n "$runtime" ]; then
    SANITIZER_RUNTIME="$runtime"
    export LD_PRELOAD="$runtime"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0:verify_asan_link_order=0"
  fi
}

# listening PORT: is a TCP socket listening on PORT (IPv4 or IPv6)?
listening() {
  local hex
  hex=$(printf ':%04X$' "$1")
  awk -v p="$hex" '$2 ~ p && $4 == "0A" {found=1} END {exit !found}' /proc/net/tcp /proc/net/tcp6
}

# free_port ATTEMPT: a port number from 20000..59999 that nothing listens on
# now, varied by the attempt and this shell's pid.
free_port() {
  local port
  while :; do
    port=$((20000 + (RANDOM * 7 + $$ + $1) % 40000))
    listening "$port" || break
  done
  echo "$port"
}

# await_server PID PORT LOG TAKEN: waits (15 s at most) until the server PID
# listens on PORT. 0: it listens. 1: it exited with TAKEN (a regex) in LOG,
# i.e. the port was taken meanwhile: try another. Any other outcome fails the
# test with the server's output.
await_server() {
  local pid=$1 port=$2 log=$3 taken=$4
  for _ in $(seq 300); do
    listening "$port" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  listening "$port" && return 0
  kill "$pid" 2>/dev/null
  wait "$pid"
  grep -Eq "$taken" "$log" && return 1
  fail "the server never listened on port $port: $(cat "$log")"
}

# skip_ucx_under_tsan: UCX 1.13's ucx_info -d and ucx_perftest die with
# SIGSEGV when the TSan runtime is preloaded, with the real libibverbs too
# (UCX's memory hooks and TSan's interceptors both rewrite mmap/munmap):
# under --config=tsan a UCX test stops here with that reason.
skip_ucx_under_tsan() {
  if [[ "${SANITIZER_RUNTIME:-}" == *libtsan* ]]; then
    echo "SKIPPED: UCX crashes (SIGSEGV) under a preloaded TSan runtime, with or without softverbs"
    exit 0
  fi
}

# counter FILE NAME: a softverbs counter from a SOFTVERBS_COUNTERS_FILE.
counter() { awk -F= -v n="$2" '$1 == n {print $2}' "$1"; }

# through_cache PREFIX: the mrcache-run --stats summaries in PREFIX.server
# and PREFIX.client both show registrations served through the cache.
through_cache() {
  local side
  for side in server client; do
    grep -Eq "registration calls: +[1-9][0-9]* \(through the cache [1-9]" "$1.$side" ||
      fail "${1##*/}: under mrcache-run the $side's registrations did not go through the cache: $(cat "$1.$side")"
  done
}

# skip_ucx_without_memlock: UCX's default pools pin tens of MiB per process
# and UCX itself asks for an unlimited RLIMIT_MEMLOCK ("Please set max locked
# memory (ulimit -l) to 'unlimited'"); softverbs pins through io_uring, which
# charges the pins of all of a user's processes to one RLIMIT_MEMLOCK-sized
# budget. Without CAP_IPC_LOCK under a limited RLIMIT_MEMLOCK a UCX test
# stops here with that reason.
skip_ucx_without_memlock() {
  local cap_eff
  cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  if [ "$(ulimit -l)" != unlimited ] && ((((0x$cap_eff >> 14) & 1) == 0)); then  # bit 14: CAP_IPC_LOCK
    echo "SKIPPED: UCX needs an unlimited RLIMIT_MEMLOCK or CAP_IPC_LOCK (now $(ulimit -l) KiB, no CAP_IPC_LOCK): its pools pin tens of MiB per process"
    exit 0
  fi
}
