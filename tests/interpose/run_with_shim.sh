#!/bin/bash
# Runs a test binary with libmrcache_preload.so preloaded (an absolute path,
# so it survives any change of directory) and softverbs as libibverbs.
set -euo pipefail
bin="$1"
shift
export LD_PRELOAD="$PWD/interpose/libmrcache_preload.so${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$bin" "$@"
