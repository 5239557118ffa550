#!/usr/bin/env bash
# What scripts/install_tree (the end of scripts/install) does so that programs
# find libmrcache.so.0: for a prefix whose lib/ the dynamic loader does not
# search, it prints the LD_LIBRARY_PATH and rpath to use and runs no ldconfig;
# for one ldconfig searches, it runs ldconfig and says so; for a staged tree
# (DESTDIR) it does neither. A fake ldconfig first on PATH stands for the
# system's, so nothing outside the test's directory changes.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
fake_bin="$TEST_TMPDIR/bin"
mkdir -p "$fake_bin"
# The fake ldconfig: `-v -N` lists $FAKE_LOADER_DIR as a search directory, as
# the real one prints it; any other call records that the cache was rebuilt.
cat >"$fake_bin/ldconfig" <<'FAKE'
#!/bin/sh
if [ "$1" = "-v" ]; then
  echo "$FAKE_LOADER_DIR: (from /etc/ld.so.conf.d/fake.conf:1)"
  printf '\tlibfake.so.1 -> libfake.so.1.0\n'
else
  echo "$*" >>"$FAKE_LDCONFIG_RAN"
fi
FAKE
chmod +x "$fake_bin/ldconfig"
export PATH="$fake_bin:$PATH" FAKE_LDCONFIG_RAN="$TEST_TMPDIR/ldconfig_ran"
export FAKE_LOADER_DIR=/usr/local/lib

# A private prefix: the note, and no ldconfig.
prefix="$TEST_TMPDIR/private"
out=$(scripts/install_tree . . "$prefix")
echo "$out"
grep -qF "LD_LIBRARY_PATH=$prefix/lib" <<<"$out" || fail "no LD_LIBRARY_PATH note for $prefix"
grep -qF -- "-Wl,-rpath,$prefix/lib" <<<"$out" || fail "no rpath note for $prefix"
[ ! -e "$FAKE_LDCONFIG_RAN" ] || fail "ldconfig ran for a prefix outside its search path"

# A prefix whose lib/ ldconfig searches: ldconfig runs, and the output says so.
prefix="$TEST_TMPDIR/system"
mkdir -p "$prefix/lib"
FAKE_LOADER_DIR="$prefix/lib"
out=$(scripts/install_tree . . "$prefix")
echo "$out"
[ -e "$FAKE_LDCONFIG_RAN" ] || fail "ldconfig did not run for $prefix/lib, in its search path"
grep -q "ran ldconfig" <<<"$out" || fail "the output does not say ldconfig ran"
grep -q "LD_LIBRARY_PATH" <<<"$out" && fail "LD_LIBRARY_PATH note for a prefix ldconfig searches"
rm "$FAKE_LDCONFIG_RAN"

# Staging (DESTDIR, what scripts/package does): the package's trigger runs
# ldconfig on the target machine, not the install here.
out=$(DESTDIR="$TEST_TMPDIR/stage" scripts/install_tree . . "$prefix")
[ ! -e "$FAKE_LDCONFIG_RAN" ] || fail "ldconfig ran for a DESTDIR staging"
grep -q "loader" <<<"$out" && fail "a loader note for a DESTDIR staging: $out"
echo "PASS: install note for a private prefix, ldconfig for the loader's, neither when staging"
