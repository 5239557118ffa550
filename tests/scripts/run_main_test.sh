#!/usr/bin/env bash
# Runs scripts/run_main (its path is $1) in a scratch tree whose scripts/setup
# is a stub, with a fake `bazel` first on PATH whose build makes a fake
# mrbench: it prints its arguments and, given --plot PATH, writes PATH. Each
# case states which arguments mrbench must get and what run_main must say.
set -euo pipefail
script=$(readlink -f "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

tree="$TEST_TMPDIR/tree"
bin="$TEST_TMPDIR/bin"
mkdir -p "$tree/scripts" "$bin"
cp "$script" "$tree/scripts/run_main"
printf '#!/bin/sh\nexit 0\n' >"$tree/scripts/setup"
chmod +x "$tree/scripts/setup"
cat >"$bin/bazel" <<'FAKE'
#!/usr/bin/env bash
[ "$1" = build ] || exit 2
mkdir -p bazel-bin/bench
cat >bazel-bin/bench/mrbench <<'MRBENCH'
#!/usr/bin/env bash
echo "mrbench args: $*"
while [ $# -gt 0 ]; do
  [ "$1" = --plot ] && echo "<svg/>" >"$2"
  shift
done
exit "${FAKE_MRBENCH_EXIT:-0}"
MRBENCH
chmod +x bazel-bin/bench/mrbench
FAKE
chmod +x "$bin/bazel"
export PATH="$bin:$PATH"
work="$TEST_TMPDIR/work"
mkdir -p "$work"
cd "$work"

# run_main ARGS...: runs the script from $work, output in $out.
run_main() { out=$("$tree/scripts/run_main" "$@" 2>&1); }

# By default: the plot is mrbench.svg where run_main was started, and it says so.
run_main || fail "run_main exited $?: $out"
grep -qxF "mrbench args: --plot $work/mrbench.svg" <<<"$out" || fail "default args: $out"
[ -s "$work/mrbench.svg" ] || fail "no $work/mrbench.svg"
grep -qxF "run_main: plot written to $work/mrbench.svg" <<<"$out" || fail "does not say where: $out"

# Arguments still reach mrbench, and MRBENCH_PLOT (relative to the caller) moves the plot.
mkdir -p "$work/plots"
MRBENCH_PLOT=plots/x.svg run_main --workload kv || fail "MRBENCH_PLOT: $out"
grep -qxF "mrbench args: --workload kv --plot $work/plots/x.svg" <<<"$out" || fail "MRBENCH_PLOT args: $out"
[ -s "$work/plots/x.svg" ] || fail "no plot at MRBENCH_PLOT"

# The caller's --plot wins: mrbench gets it alone, exactly as given.
run_main --plot mine.svg || fail "--plot: $out"
grep -qxF "mrbench args: --plot mine.svg" <<<"$out" || fail "--plot args: $out"
grep -q "run_main:" <<<"$out" && fail "run_main spoke about a plot it did not ask for: $out"

# --help and --save-trace are not runs: no plot asked for.
run_main --help || fail "--help: $out"
grep -qxF "mrbench args: --help" <<<"$out" || fail "--help args: $out"
run_main --save-trace t.txt || fail "--save-trace: $out"
grep -qxF "mrbench args: --save-trace t.txt" <<<"$out" || fail "--save-trace args: $out"

# mrbench's exit status is run_main's.
rc=0
FAKE_MRBENCH_EXIT=3 run_main || rc=$?
[ "$rc" = 3 ] || fail "run_main exited $rc when mrbench exited 3: $out"
echo "PASS: run_main plots by default, says where, and keeps mrbench's arguments and status"
