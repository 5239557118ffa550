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

# memlock_limited: true when RLIMIT_MEMLOCK binds this process (a finite
# limit and no CAP_IPC_LOCK, bit 14 of CapEff).
memlock_limited() {
  local cap_eff
  cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  [ "$(ulimit -l)" != unlimited ] && ((((0x$cap_eff >> 14) & 1) == 0))
}

# fit_ucx_in_small_memlock: when memlock_limited, exports the UCX settings a
# user with a small RLIMIT_MEMLOCK would choose, says so, and waits (4 min
# at most) until no other memlock-limited UCX test of this user runs.
#
# UCX 1.13's defaults register pools in chunks far above 8 MiB (measured
# here: rc_verbs' receive pool 38 MiB, ud_verbs' 20 MiB, each transmit pool
# 6 MiB: 4095/4096-entry receive queues, 1024-buffer growth steps, chunks
# rounded up to 2 MiB huge pages); every one fails with ENOMEM, UCX keeps
# retrying and the pair hangs. With 32/64-entry queues, 16..64-buffer
# growth, plain mmap'ed chunks and a 1 MiB registration cache (UCX's cache
# otherwise keeps freed heap buffers registered) a ucx_perftest process pins
# 1.6 MiB plus its messages (softverbs' peak_bytes_pinned: 2.8 MiB with
# 256 KiB messages, 5.7 MiB with 1 MiB ones). The kernel charges each process's MRs to that
# process's RLIMIT_MEMLOCK, so on an HCA 1 MiB messages fit 8 MiB; softverbs
# pins through io_uring, which charges all of a user's unprivileged pins to
# one RLIMIT_MEMLOCK-sized budget (tests/softverbs/README.md), so both
# processes of a pair share 8 MiB here: large messages shrink to
# UCX_LARGE_MESSAGE = 256 KiB, still far above the rendezvous threshold,
# and a second pair running at the same time (another test) would push the
# sum past 8 MiB: the tests take turns through a per-user lock file.
UCX_LARGE_MESSAGE=1048576
fit_ucx_in_small_memlock() {
  memlock_limited || return 0
  exec {memlock_turn_fd}>"/tmp/softverbs-memlock-turn.$(id -u)"
  flock -w 240 "$memlock_turn_fd" || fail "another memlock-limited UCX test held the turn for 4 minutes"
  UCX_LARGE_MESSAGE=262144
  export UCX_RC_VERBS_ALLOC=md,mmap,heap UCX_UD_VERBS_ALLOC=md,mmap,heap UCX_SELF_ALLOC=md,mmap,heap
  export UCX_RC_VERBS_RX_QUEUE_LEN=32 UCX_RC_VERBS_RX_BUFS_GROW=32 UCX_RC_VERBS_FC_WND_SIZE=16
  export UCX_RC_VERBS_TX_QUEUE_LEN=32 UCX_RC_VERBS_TX_BUFS_GROW=16
  export UCX_UD_VERBS_RX_QUEUE_LEN=64 UCX_UD_VERBS_RX_QUEUE_LEN_INIT=64 UCX_UD_VERBS_RX_BUFS_GROW=64
  # ud_verbs needs a send queue longer than its 64-entry window.
  export UCX_UD_VERBS_TX_QUEUE_LEN=128 UCX_UD_VERBS_TX_BUFS_GROW=16
  # UCX's registration cache keeps freed but still mapped buffers (malloc's
  # heap) registered: bound what it holds.
  export UCX_IB_RCACHE_MAX_SIZE=1m
  echo "RLIMIT_MEMLOCK $(ulimit -l) KiB without CAP_IPC_LOCK: small UCX queues and pools, large messages $UCX_LARGE_MESSAGE B"
}
