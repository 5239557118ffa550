#!/bin/bash
# Runs a test binary with libmrcache_preload.so preloaded (an absolute path,
# so it survives any change of directory) and softverbs as libibverbs.
set -euo pipefail
bin="$1"
shift
export LD_PRELOAD="$PWD/interpose/libmrcache_preload.so${LD_PRELOAD:+:$LD_PRELOAD}"
# Under --config=asan the shim carries the ASan runtime as a dependency but is
# preloaded ahead of it; the order is harmless here (the test binary is
# instrumented and links the runtime itself).
if [ -n "${ASAN_OPTIONS:-}" ]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
fi
# Under ASan and TSan their allocators unmap with raw system calls that only
# uffd sees (free of a large block included): the shim's default monitor
# (auto) adds uffd there by itself.
exec "$bin" "$@"
