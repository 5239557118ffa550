#!/bin/bash
# UCX's memory hooks (UCM) and mrcache's patch monitor installed in one
# process (two_patchers.cc) over softverbs: the process neither crashes nor
# loses an invalidation. After UCX's buffer is unmapped and mapped again,
# the new mapping gets a device registration of its own and the old pages'
# MR is gone, and mrcache counted the invalidation. The same run with
# --monitor none must serve the stale MR (the check can fail).
set -uo pipefail
run="$PWD/interpose/mrcache-run"
node="$PWD/tests/softverbs/uverbs_node.sh"
prog="$PWD/tests/softverbs/two_patchers"
out="${TEST_TMPDIR:-$(mktemp -d)}"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh
preload_sanitizer_runtime
skip_ucx_under_tsan
export LD_LIBRARY_PATH="$PWD/tests/softverbs"
export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=softverbs0:1

timeout 60 "$node" "$run" --monitor patch --remote-keys shared --stats="json:$out/stats.json" -- \
  "$prog" >"$out/patch.log" 2>&1
rc=$?
cat "$out/patch.log"
[ "$rc" = 0 ] || fail "with UCX's hooks and mrcache's patch monitor: exit $rc"
grep -qx ok "$out/patch.log" || fail "two_patchers did not report ok"
invalidations=$(grep -o '"invalidations": *[0-9]*' "$out/stats.json" | grep -o '[0-9]*$')
[ "${invalidations:-0}" -ge 1 ] || fail "mrcache counted no invalidation: $(cat "$out/stats.json")"
echo "ok: both patchers installed, mrcache invalidated $invalidations registration(s)"

timeout 60 "$node" "$run" --monitor none --remote-keys shared -- "$prog" >"$out/none.log" 2>&1
rc=$?
{ [ "$rc" = 1 ] && grep -q "served without a device registration" "$out/none.log"; } ||
  fail "with --monitor none the stale MR was not detected (exit $rc): $(cat "$out/none.log")"
echo "ok: with --monitor none the check sees the stale registration"
echo PASS
