#!/usr/bin/env bash
# Runs scripts/test (its path is $1) in a scratch tree whose scripts/setup,
# scripts/fuzz and source checks are stubs that succeed, with a fake `bazel`
# first on PATH. The fake prints a test summary and writes the test logs that
# FAKE_BAZEL_MODE selects, then exits with FAKE_BAZEL_EXIT. Each case states
# what scripts/test must conclude from that.
set -euo pipefail
script=$(readlink -f "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

tree="$TEST_TMPDIR/tree"
bin="$TEST_TMPDIR/bin"
mkdir -p "$tree/scripts" "$bin"
cp "$script" "$tree/scripts/test"
for stub in setup fuzz check_format check_thread_safety; do
  printf '#!/bin/sh\nexit 0\n' >"$tree/scripts/$stub"
  chmod +x "$tree/scripts/$stub"
done

# The fake bazel. Logs go where bazel's convenience symlink would point.
cat >"$bin/bazel" <<'FAKE'
#!/usr/bin/env bash
gtest_log() {  # gtest_log FILE PASSED SKIPPED FAILED
  mkdir -p "$(dirname "$1")"
  {
    echo "[==========] $(($2 + $3 + $4)) tests from 1 test suite ran. (1 ms total)"
    echo "[  PASSED  ] $2 tests."
    [ "$3" = 0 ] || echo "[  SKIPPED ] $3 tests, listed below:"
    [ "$4" = 0 ] || echo "[  FAILED  ] $4 tests, listed below:"
  } >"$1"
}
plain_log() {  # plain_log FILE LINE
  mkdir -p "$(dirname "$1")"
  echo "$2" >"$1"
}
logs=bazel-testlogs/t
case "$FAKE_BAZEL_MODE" in
  suite)
    gtest_log $logs/gtest_test/test.log 3 1 0
    gtest_log $logs/sharded_test/shard_1_of_2/test.log 2 0 0
    gtest_log $logs/sharded_test/shard_2_of_2/test.log 2 1 0
    plain_log $logs/shell_test/test.log "PASS"
    plain_log $logs/shell_skip_test/test.log "SKIPPED: a tool is not installed here"
    echo "//t:gtest_test                        PASSED in 0.1s"
    echo "//t:sharded_test             (cached) PASSED in 0.2s"
    echo "  Stats over 2 runs: max = 0.2s, min = 0.1s, avg = 0.1s, dev = 0.0s"
    echo "//t:shell_test                        PASSED in 0.1s"
    echo "//t:shell_skip_test                   PASSED in 0.1s"
    echo
    echo "Executed 4 out of 4 tests: 4 tests pass."
    ;;
  failing_case)
    gtest_log $logs/gtest_test/test.log 3 0 2
    echo "//t:gtest_test                        FAILED in 0.1s"
    ;;
  no_cases)
    gtest_log $logs/gtest_test/test.log 0 0 0
    echo "//t:gtest_test                        PASSED in 0.1s"
    ;;
  no_targets)
    echo "ERROR: No test targets were found, yet testing was requested"
    ;;
  silent) ;;
esac
exit "${FAKE_BAZEL_EXIT:-0}"
FAKE
chmod +x "$bin/bazel"

# run_script MODE EXIT: runs scripts/test; its output is left in $out and its
# exit status in $status.
out="$TEST_TMPDIR/out"
run_script() {
  rm -rf "$tree/bazel-testlogs"
  status=0
  (cd "$tree" && PATH="$bin:$PATH" FAKE_BAZEL_MODE=$1 FAKE_BAZEL_EXIT=$2 \
    timeout 60 scripts/test) >"$out" 2>&1 || status=$?
}
closing_line() { tail -1 "$out"; }

# Every phase (plain, asan, tsan) sees the fake suite: per phase 3+2+2 cases
# and one shell test pass (8), 1+1 cases and one shell test skip (3). Three
# phases, plus fuzzing (two targets) and the two source checks, pass 28 and
# skip 9.
run_script suite 0
[ "$status" = 0 ] || { cat "$out"; fail "a passing suite: scripts/test exited $status"; }
[ "$(closing_line)" = "tests: 28 passed, 0 failed, 9 skipped" ] ||
  { cat "$out"; fail "a passing suite closed with '$(closing_line)'"; }

# Bazel reports every target PASSED but exits 1 (a target failed to build
# after the tests ran, or an error the summary does not show).
run_script suite 1
[ "$status" != 0 ] || { cat "$out"; fail "bazel exited 1 but scripts/test exited 0"; }
[ "$(closing_line)" = "tests: 28 passed, 3 failed, 9 skipped" ] ||
  { cat "$out"; fail "bazel exiting 1 closed with '$(closing_line)'"; }

# A GoogleTest target with two failing cases counts them.
run_script failing_case 3
[ "$status" != 0 ] || { cat "$out"; fail "failing cases but scripts/test exited 0"; }
[ "$(closing_line)" = "tests: 13 passed, 6 failed, 0 skipped" ] ||
  { cat "$out"; fail "failing cases closed with '$(closing_line)'"; }

# A GoogleTest target that ran no case (a filter that matches nothing) fails.
run_script no_cases 0
[ "$status" != 0 ] || { cat "$out"; fail "a target ran no test case but scripts/test exited 0"; }
[ "$(closing_line)" = "tests: 4 passed, 3 failed, 0 skipped" ] ||
  { cat "$out"; fail "no cases closed with '$(closing_line)'"; }

# No test target found, whether bazel says so and exits 4 or exits 0 silently.
run_script no_targets 4
[ "$status" != 0 ] || { cat "$out"; fail "no test targets but scripts/test exited 0"; }
grep -q "no test target ran" "$out" || { cat "$out"; fail "no test targets: no reason printed"; }
run_script silent 0
[ "$status" != 0 ] || { cat "$out"; fail "bazel ran nothing but scripts/test exited 0"; }

# Fuzzing that cannot run fails the suite instead of vanishing from it.
chmod -x "$tree/scripts/fuzz"
run_script suite 0
chmod +x "$tree/scripts/fuzz"
[ "$status" != 0 ] || { cat "$out"; fail "scripts/fuzz not executable but scripts/test exited 0"; }
[ "$(closing_line)" = "tests: 26 passed, 2 failed, 9 skipped" ] ||
  { cat "$out"; fail "unrunnable fuzzing closed with '$(closing_line)'"; }

# A failing source check fails the suite.
printf '#!/bin/sh\nexit 1\n' >"$tree/scripts/check_format"
run_script suite 0
printf '#!/bin/sh\nexit 0\n' >"$tree/scripts/check_format"
[ "$status" != 0 ] || { cat "$out"; fail "check_format failed but scripts/test exited 0"; }

# MRCACHE_TEST_DEVICE naming a device ibv_devices does not list stops at once.
cat >"$bin/ibv_devices" <<'FAKE'
#!/bin/sh
printf '    device                 node GUID\n    ------              ----------------\n    mlx5_0              0000000000000000\n'
FAKE
chmod +x "$bin/ibv_devices"
status=0
(cd "$tree" && PATH="$bin:$PATH" FAKE_BAZEL_MODE=suite MRCACHE_TEST_DEVICE=nosuch0 \
  timeout 60 scripts/test) >"$out" 2>&1 || status=$?
[ "$status" != 0 ] || { cat "$out"; fail "an unknown MRCACHE_TEST_DEVICE but scripts/test exited 0"; }
grep -q "device nosuch0 not found" "$out" || { cat "$out"; fail "unknown device: no reason printed"; }

echo "PASS"
