#!/bin/sh
# Debian's ibv_devinfo (ibverbs-utils), run against softverbs, lists its
# device and reports the ODP capabilities SOFTVERBS_ODP asks for.
set -eu
out="$TEST_TMPDIR/devinfo.txt"

# Under --config=asan/tsan softverbs needs its sanitizer runtime, which an
# uninstrumented ibv_devinfo does not load: preload it.
runtime=$(ldd tests/softverbs/libibverbs.so.1 | awk '/lib(asan|tsan)\.so/ {print $3}')
if [ -n "$runtime" ]; then
  export LD_PRELOAD="$runtime"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fi

ibv_devinfo > "$out"
cat "$out"
grep -q "hca_id:[[:space:]]*softverbs0" "$out"
grep -q "state:[[:space:]]*PORT_ACTIVE" "$out"

# has NAME: does the -v output list general ODP capability NAME?
has() { grep -qw "$1" "$out"; }

SOFTVERBS_ODP=none ibv_devinfo -v > "$out"
if has ODP_SUPPORT || has ODP_SUPPORT_IMPLICIT; then exit 1; fi

SOFTVERBS_ODP=explicit ibv_devinfo -v > "$out"
has ODP_SUPPORT
if has ODP_SUPPORT_IMPLICIT; then exit 1; fi

SOFTVERBS_ODP=implicit ibv_devinfo -v > "$out"
has ODP_SUPPORT
has ODP_SUPPORT_IMPLICIT
echo PASS
