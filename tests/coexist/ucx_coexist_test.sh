#!/bin/bash
# UCX's ucs_rcache (UCM memory events on) and mrcache in one process: after
# every way memory is released, neither cache may hand out the old
# registration (tests/coexist/ucx_coexist_probe.cc says how each view is
# asked). Usage: ucx_coexist_test.sh linked|shim
#   linked: the probe links libmrcache.so and creates a cache (uring registrar)
#   shim:   the probe uses plain verbs (softverbs) with libmrcache_preload.so
#           preloaded
# UCX is loaded either at start-up (preloaded, as in a program linked with
# -lucs: its hooks go in before main) or with dlopen when the probe asks for
# it. For each UCX hook mode that works on this machine (bistro, reloc), each
# way and each order (mrcache loaded but idle; mrcache's cache first; UCX's
# rcache first): UCX misses nothing (it misses none of these ways without
# mrcache), and mrcache misses nothing. (UCX loaded with dlopen after mrcache
# patched libc writes its hooks over mrcache's: the patched mprotect puts
# mrcache's back on top, chaining to UCX's.)
set -uo pipefail
view="$1"
source tests/coexist/coexist_common.sh

# run ORDER WAY ROUNDS: the probe, with UCX preloaded when UCX_AT_STARTUP is set.
case "$view" in
  linked)
    ucx_preload="$(sanitizer_first tests/coexist/ucx_coexist_linked)libucs.so.0"
    run() {
      LD_PRELOAD="${UCX_AT_STARTUP:+$ucx_preload}" LD_LIBRARY_PATH="$libmrcache_dir" timeout -k 5 120 \
        tests/coexist/ucx_coexist_linked "$@"
    }
    idle=ucx_alone ;;
  shim)
    shim_preload="$(sanitizer_first tests/coexist/ucx_coexist_verbs)$PWD/interpose/libmrcache_preload.so"
    run() {
      LD_PRELOAD="$shim_preload${UCX_AT_STARTUP:+:libucs.so.0}" \
        timeout -k 5 120 tests/coexist/ucx_coexist_verbs "$@"
    }
    idle=mrcache_idle ;;
  *) echo "usage: $0 linked|shim" >&2; exit 2 ;;
esac
export ucx_preload shim_preload

for load in dlopen startup; do
  at_startup=""
  [ "$load" = startup ] && at_startup=1
  for mode in bistro reloc; do
    env=(UCX_MEM_MMAP_HOOK_MODE=$mode UCX_AT_STARTUP=$at_startup)
    if [ "$mode" = reloc ] && [ -n "${TSAN_OPTIONS:-}" ]; then
      # Measured: UCX's reloc mode relocates operator new to its own malloc
      # but not the sized operator delete, which TSan defines: a C++ object
      # allocated after UCX's install (mrcache's uffd monitor state) is freed
      # into TSan's allocator, which aborts (CHECK in its secondary allocator).
      echo "SKIP $load reloc: UCX 1.13's reloc mode under ThreadSanitizer frees its operator new's memory through TSan's sized operator delete"
      continue
    fi
    # Does UCX work in this mode at all, mrcache idle?
    check=$(mode_check "$idle" 20 "${env[@]}")
    rc=$?
    if [ $rc -ne 0 ] || [ "$(field "$check" ucx_stale)" != 0 ]; then
      [ $rc = 124 ] && check="hangs (killed after 20 s)"
      echo "SKIP $load $mode: UCX 1.13 does not work this way here, even with mrcache idle:" \
        "$(why_failed "$check")"
      continue
    fi
    echo "$load $mode" >>"$tmp/modes_run"
    for way in "${ways[@]}"; do
      if [ "$mode" = reloc ] && [ "$way" = brk_shrink ]; then
        # In reloc mode UCX replaces malloc with its own allocator, which
        # grows by sbrk past the break the probe raises; lowering it again
        # would cut that allocator's memory (the probe, not a cache, crashes).
        echo "SKIP $load reloc brk_shrink: UCX's malloc grows the heap above the probe's break"
        continue
      fi
      for order in "$idle" mrcache_first ucx_first; do
        line=$(probe_line "$order" "$way" "${env[@]}")
        [ -n "$line" ] || continue
        echo "$load $mode $line"
        [ "$(field "$line" ucx_stale)" = 0 ] ||
          fail "mrcache took UCX's events away: $load $mode $line"
        stale=$(field "$line" mrcache_stale)
        [ "$stale" = - ] && continue
        [ "$stale" = 0 ] || fail "stale mrcache registration: $load $mode $line"
      done
    done
  done
done
finish "UCX 1.13"
