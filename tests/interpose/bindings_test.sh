#!/bin/bash
# With the shim preloaded, the dynamic loader binds an unmodified program's
# versioned libibverbs references (ibv_reg_mr@IBVERBS_1.1,
# ibv_reg_mr_iova@IBVERBS_1.7, ibv_reg_mr_iova2@IBVERBS_1.8, ...) to the
# shim, not to libibverbs (LD_DEBUG=bindings).
set -uo pipefail
# Sanitizer builds: the preloaded shim precedes the ASan runtime (harmless here).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
app=tests/legacy/legacy_app
shim="$PWD/interpose/libmrcache_preload.so"
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

LD_DEBUG=bindings LD_DEBUG_OUTPUT="$out/bindings" LD_PRELOAD="$shim" "$app" 1 8 2 >/dev/null 2>&1 ||
  fail "legacy_app failed under the shim"
cat "$out"/bindings.* >"$out/all"
for sym in "ibv_reg_mr' \[IBVERBS_1.1\]" "ibv_reg_mr_iova' \[IBVERBS_1.7\]" \
    "ibv_reg_mr_iova2' \[IBVERBS_1.8\]" "ibv_dereg_mr' \[IBVERBS_1.1\]" \
    "ibv_alloc_pd' \[IBVERBS_1.1\]" "ibv_dealloc_pd' \[IBVERBS_1.1\]" "ibv_close_device' \[IBVERBS_1.1\]"; do
  grep -E "binding file [^ ]*legacy_app \[0\] to [^ ]*libmrcache_preload.so \[0\]: normal symbol \`$sym" \
    "$out/all" >/dev/null || fail "legacy_app's $sym is not bound to the shim: $(grep -E "legacy_app.*${sym%%\'*}" "$out/all")"
done
echo PASS
