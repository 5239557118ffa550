#!/bin/sh
# An unmodified C program linked with -libverbs loads softverbs (not the real
# libibverbs) through LD_LIBRARY_PATH, runs its verbs, and softverbs writes its
# counters to SOFTVERBS_COUNTERS_FILE at exit.
set -eu
client=tests/softverbs/verbs_client
counters="$TEST_TMPDIR/counters.txt"
trace="$TEST_TMPDIR/ld_debug.txt"

SOFTVERBS_COUNTERS_FILE="$counters" LD_DEBUG=libs LD_DEBUG_OUTPUT="$trace" \
  "$client" > "$TEST_TMPDIR/out.txt"
cat "$TEST_TMPDIR/out.txt"
grep -qx "device: softverbs0" "$TEST_TMPDIR/out.txt"
grep -qx "done" "$TEST_TMPDIR/out.txt"

# The loader initialised softverbs' libibverbs.so.1 and never the system one.
cat "$trace".* | grep "calling init" | grep -q "tests/softverbs/libibverbs.so.1"
if cat "$trace".* | grep "calling init" | grep -q "/lib/x86_64-linux-gnu/libibverbs"; then
  echo "FAIL: the system libibverbs was loaded" >&2
  exit 1
fi

cat "$counters"
grep -qx "registrations=2" "$counters"
grep -qx "deregistrations=2" "$counters"
grep -qx "live_mrs=0" "$counters"
grep -qx "live_pds=0" "$counters"
grep -qx "bytes_pinned=0" "$counters"
grep -q "^peak_bytes_pinned=" "$counters"

# A failing registration (REMOTE_WRITE without LOCAL_WRITE) is counted too.
if SOFTVERBS_COUNTERS_FILE="$counters" "$client" 2 > /dev/null 2>&1; then
  echo "FAIL: REMOTE_WRITE without LOCAL_WRITE was accepted" >&2
  exit 1
fi
grep -qx "failed_registrations=1" "$counters"
grep -qx "live_mrs=1" "$counters"
echo PASS
