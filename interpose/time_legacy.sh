#!/bin/bash
# Wall time (and process CPU time) of tests/legacy/legacy_app without and
# with libmrcache_preload.so, measured in the same run: REPS alternating
# pairs (plain, shim), the median of each side, and their ratios. softverbs
# pins for real (io_uring fixed buffers), so registration costs are the
# kernel's; so are the device writes (io_uring reads), which every transfer
# does with or without the shim.
#
#   bazel build //tests/legacy:legacy_app //interpose:libmrcache_preload.so //tests/softverbs:libibverbs.so.1
#   interpose/time_legacy.sh [REPS [ROUNDS TRANSFERS BUFFERS]]
#
# MRCACHE_* variables in the environment apply to the shim runs.
set -euo pipefail
reps=${1:-7}
shift || true
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(10 400 8)
bin=${BAZEL_BIN:-bazel-bin}
app="$bin/tests/legacy/legacy_app"
shim="$(realpath "$bin/interpose/libmrcache_preload.so")"
export LD_LIBRARY_PATH="$bin/tests/softverbs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

run() {  # prints "WALL_NS CPU_NS" as the program reports them on stderr
  "$@" 2>&1 >/dev/null | sed -n 's/^legacy_app: wall_ns=\([0-9]*\) cpu_ns=\([0-9]*\)$/\1 \2/p'
}

: >"${TMPDIR:-/tmp}/time_legacy.$$"
for ((r = 0; r < reps; ++r)); do
  echo "plain $(run "$app" "${args[@]}")" >>"${TMPDIR:-/tmp}/time_legacy.$$"
  echo "shim $(LD_PRELOAD="$shim" run "$app" "${args[@]}")" >>"${TMPDIR:-/tmp}/time_legacy.$$"
done
echo "legacy_app ${args[*]}: $reps alternating runs each (median; min..max)"
awk '
  function median(v, n,   i, j, t) {
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((n + 1) / 2)]
  }
  { n[$1]++; wall[$1, n[$1]] = $2; cpu[$1, n[$1]] = $3 }
  END {
    for (side in n) {
      delete w; delete c
      for (i = 1; i <= n[side]; ++i) { w[i] = wall[side, i]; c[i] = cpu[side, i] }
      mw[side] = median(w, n[side]); lo[side] = w[1]; hi[side] = w[n[side]]
      mc[side] = median(c, n[side])
    }
    printf "  without shim: wall %.1f ms (%.1f..%.1f)  cpu %.1f ms\n", mw["plain"]/1e6, lo["plain"]/1e6, hi["plain"]/1e6, mc["plain"]/1e6
    printf "  with shim:    wall %.1f ms (%.1f..%.1f)  cpu %.1f ms\n", mw["shim"]/1e6, lo["shim"]/1e6, hi["shim"]/1e6, mc["shim"]/1e6
    printf "  ratio without/with: wall %.2fx  cpu %.2fx\n", mw["plain"]/mw["shim"], mc["plain"]/mc["shim"]
  }' "${TMPDIR:-/tmp}/time_legacy.$$"
rm -f "${TMPDIR:-/tmp}/time_legacy.$$"
