# shellcheck shell=bash
# coexist_common.sh: sourced by the coexistence tests (ucx_coexist_test.sh,
# fabric_coexist_test.sh), which define run ORDER WAY ROUNDS (their probe,
# tests/coexist/coexist_rounds.h) before calling probe_line.

rounds="${COEXIST_ROUNDS:-200}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# The matrix's release ways every coexistence test runs.
ways=(munmap mremap_move mremap_shrink madvise_dontneed shmdt brk_shrink glibc_free)
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  ways=(munmap mremap_move mremap_shrink madvise_dontneed shmdt brk_shrink)
  echo "SKIP glibc_free: malloc is the sanitizer's here, not glibc's"
fi
: >"$tmp/failures"
: >"$tmp/modes_run"
fail() { echo "FAIL: $*" | tee -a "$tmp/failures" >&2; }

# The directory where a linked probe finds libmrcache.so.0 (its soname).
libmrcache_dir="$tmp/lib"
mkdir -p "$libmrcache_dir"
ln -sf "$PWD/libmrcache.so" "$libmrcache_dir/libmrcache.so.0"

# sanitizer_first PROBE: under a sanitizer build, the sanitizer runtime
# PROBE links, followed by ':' (it must come first among the preloaded
# libraries when the test preloads another one); empty otherwise.
sanitizer_first() {
  ldd "$1" | awk '/lib(asan|tsan)\.so/ {printf "%s:", $3}'
}

# What run() reads in the shells probe_line and mode_check start.
export tmp libmrcache_dir

# field LINE NAME: the value of NAME= in the probe's line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

probe_line() {  # probe_line ORDER WAY [ENV...]: the probe's result line, or empty
  local order="$1" way="$2"
  shift 2
  local out
  out=$(env "$@" bash -c "$(declare -f run); run $order $way $rounds" 2>"$tmp/err")
  local rc=$?
  if [ $rc -ne 0 ]; then
    fail "$order $way ($*): exit $rc: $(tail -3 "$tmp/err")"
    return
  fi
  echo "$out"
}

# mode_check ORDER SECONDS [ENV...]: 10 rounds of munmap in ORDER (the other
# tracker alone, or next to an idle mrcache) with ENV, killed after SECONDS:
# the output (stdout and stderr); the exit status is the probe's (124 when
# killed).
mode_check() {
  local order="$1" seconds="$2"
  shift 2
  env "$@" timeout -k 5 "$seconds" bash -c \
    "$(declare -f run); run $order munmap 10" 2>&1
}

# why_failed OUTPUT: the line of a failed run's OUTPUT that says why: a
# sanitizer's report (its ERROR or SUMMARY), else the last line.
why_failed() {
  grep -m1 -E "(ERROR|SUMMARY): [A-Za-z]+Sanitizer" <<<"$1" || tail -1 <<<"$1"
}

# finish WHAT: exits 1 if anything failed; "SKIPPED" (0) if no mode of WHAT
# (the other tracker) ran; PASS otherwise.
finish() {
  local failures
  failures=$(wc -l <"$tmp/failures")
  [ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
  if [ ! -s "$tmp/modes_run" ]; then
    echo "SKIPPED: $1 works in no mode here, even with mrcache idle (SKIP lines above)"
    exit 0
  fi
  echo PASS
  exit 0
}
