#!/bin/bash
# softverbs exports exactly the dynamic symbols of the installed
# libibverbs.so.1: every name with its version node and its kind (function,
# data object, version definition), derived from the real library at test
# time, plus only softverbs' own test entry points (node SOFTVERBS_1.0).
# Then every library on this machine that imports from libibverbs
# (librdmacm, the providers libmlx5 and libefa) resolves all its libibverbs
# imports against softverbs.
set -uo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }

soft="$PWD/tests/softverbs/libibverbs.so.1"
real=$(ldconfig -p | awk '$1 == "libibverbs.so.1" && /x86-64/ {print $NF; exit}')
{ [ -n "$real" ] && [ -f "$real" ]; } || fail "the installed libibverbs.so.1 was not found (ldconfig -p)"
[ "$(readlink -f "$real")" != "$(readlink -f "$soft")" ] || fail "ldconfig names softverbs itself"

# exports LIB: "KIND NAME@VERSION" per defined dynamic symbol (nm's letter:
# T function, B/D data, A version node), sorted.
exports() {
  nm -D --defined-only --with-symbol-versions "$1" | awk 'NF == 3 {print $2, $3}' | LC_ALL=C sort
}

out="${TEST_TMPDIR:-$(mktemp -d)}"
exports "$real" >"$out/real.txt"
exports "$soft" | grep -v -E '(^A SOFTVERBS_1\.0$|@@SOFTVERBS_1\.0$)' >"$out/soft.txt"
[ "$(wc -l <"$out/real.txt")" -gt 150 ] || fail "too few symbols read from $real: $(cat "$out/real.txt")"

missing=$(LC_ALL=C comm -23 "$out/real.txt" "$out/soft.txt")
extra=$(LC_ALL=C comm -13 "$out/real.txt" "$out/soft.txt")
[ -z "$missing" ] || fail "softverbs lacks what $real exports:
$missing"
[ -z "$extra" ] || fail "softverbs exports what $real does not:
$extra"
echo "ok: the $(wc -l <"$out/real.txt") dynamic symbols of $real, with their versions and kinds"

# Every importer of libibverbs on this machine links against softverbs.
for lib in librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
  if [ -z "$path" ]; then
    echo "skipped: $lib is not installed"
    continue
  fi
  undefined=$(LD_LIBRARY_PATH="$PWD/tests/softverbs" ldd -r "$path" 2>&1 | grep -i 'undefined symbol')
  [ -z "$undefined" ] || fail "$path does not link against softverbs:
$undefined"
  resolved=$(LD_LIBRARY_PATH="$PWD/tests/softverbs" ldd "$path")
  [[ "$resolved" == *"libibverbs.so.1 => $soft "* ]] ||
    fail "$path did not resolve libibverbs.so.1 to softverbs: $resolved"
  echo "ok: $lib resolves its libibverbs imports against softverbs"
done
echo PASS
