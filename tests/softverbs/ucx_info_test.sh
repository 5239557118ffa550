#!/bin/bash
# Debian's unmodified ucx_info (UCX 1.13) finds softverbs' device and opens
# UCX's verbs transports on it: `ucx_info -d` lists softverbs0:1 under both
# rc_verbs and ud_verbs.
set -uo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v ucx_info >/dev/null || fail "ucx_info is not installed (Debian package ucx-utils, scripts/setup)"
# shellcheck source=tests/softverbs/foreign_programs.sh
source tests/softverbs/foreign_programs.sh
preload_sanitizer_runtime
skip_ucx_under_tsan
export LD_LIBRARY_PATH="$PWD/tests/softverbs"
SOFTVERBS_FABRIC_DIR=$(mktemp -d /tmp/svfabric.XXXXXX)
export SOFTVERBS_FABRIC_DIR
trap 'rm -rf "$SOFTVERBS_FABRIC_DIR"' EXIT

out=$(timeout 60 tests/softverbs/uverbs_node.sh ucx_info -d 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "ucx_info -d exited $rc: $out"
# transport_devices TL: the devices ucx_info lists under transport TL.
transport_devices() {
  awk -v tl="$1" '/# *Transport:/ {cur = $3} /# *Device:/ && cur == tl {print $3}' <<<"$out"
}
echo "$out" | grep -E '# +(Memory domain|Transport|Device):'
for tl in rc_verbs ud_verbs; do
  transport_devices "$tl" | grep -qx 'softverbs0:1' ||
    fail "ucx_info -d lists no $tl on softverbs0:1: $out"
  echo "ok: $tl on softverbs0:1"
done
echo PASS
