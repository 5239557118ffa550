# shellcheck shell=bash
# two_processes.sh: sourced by the tests that run a TCP server and client of
# one program over softverbs (pingpong_test.sh, perftest_test.sh).

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
