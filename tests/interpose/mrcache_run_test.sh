#!/bin/bash
# mrcache-run: options, errors, and a real run of the legacy program.
set -uo pipefail
# Sanitizer builds: the preloaded shim precedes the ASan runtime (harmless here).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
# Under the sanitizers their allocators unmap with raw syscalls: `auto` adds
# uffd in a process with a sanitizer runtime, which sees them.
run=interpose/mrcache-run
app=tests/legacy/legacy_app
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_status() {  # expect_status CODE MESSAGE_PATTERN ARGS...
  local code=$1 pattern=$2
  shift 2
  "$run" "$@" >"$out/o" 2>"$out/e"
  local got=$?
  [ "$got" = "$code" ] || fail "mrcache-run $*: exit $got, expected $code ($(cat "$out/e"))"
  grep -q -- "$pattern" "$out/e" || fail "mrcache-run $*: stderr lacks '$pattern': $(cat "$out/e")"
}

# --help documents every option and exits 0.
"$run" --help >"$out/help" || fail "--help exit status"
for opt in --stats --stats=json:PATH --max-bytes --monitor --remote-keys --shim --help; do
  grep -q -- "$opt" "$out/help" || fail "--help does not document $opt"
done

expect_status 2 "no command given"
expect_status 2 "no command given" --stats --
expect_status 2 "unknown option '--frobnicate'" --frobnicate -- true
expect_status 2 "max_bytes" --max-bytes lots -- true
expect_status 2 "needs a value" --max-bytes
expect_status 2 "monitor" --monitor sometimes -- true
expect_status 2 "uffd alone cannot keep registrations fresh" --monitor uffd -- true
expect_status 2 "remote_keys" --remote-keys public -- true
expect_status 2 "needs a value" --remote-keys
expect_status 2 "expected --stats or --stats=json:PATH" --stats=yaml -- true
expect_status 2 "no such readable file" --shim /nonexistent/lib.so -- true
expect_status 127 "cannot run" -- /nonexistent/program

# The environment it sets: an absolute LD_PRELOAD first, MRCACHE_* values.
LD_PRELOAD= "$run" --stats --max-bytes 64M --monitor patch --remote-keys shared -- \
  sh -c 'echo "$LD_PRELOAD|$MRCACHE_STATS|$MRCACHE_MAX_BYTES|$MRCACHE_MONITOR|$MRCACHE_REMOTE_KEYS"' >"$out/env" ||
  fail "env run"
IFS='|' read -r preload stats maxb mon keys <"$out/env"
case "$preload" in /*/libmrcache_preload.so) ;; *) fail "LD_PRELOAD=$preload" ;; esac
[ "$stats|$maxb|$mon|$keys" = "1|64M|patch|shared" ] || fail "MRCACHE_* = $stats|$maxb|$mon|$keys"

# A real run: same output as without the shim, a summary at exit, JSON too.
"$app" 3 100 >"$out/plain.out" 2>/dev/null || fail "plain run"
"$run" --stats -- "$app" 3 100 >"$out/shim.out" 2>"$out/shim.err" || fail "shim run: $(cat "$out/shim.err")"
diff -u "$out/plain.out" "$out/shim.out" || fail "output differs under mrcache-run"
for field in "registration calls" "hit rate" "avoided" "registrar time saved" "estimate" "registered again to time them" "peak pinned bytes"; do
  grep -q "$field" "$out/shim.err" || fail "summary lacks '$field': $(cat "$out/shim.err")"
done
# legacy_app 3 100: 75 REMOTE_READ registrations, private by default.
grep -q "remote keys: *private (75 requests" "$out/shim.err" || fail "summary lacks the remote keys: $(cat "$out/shim.err")"
"$run" --stats --remote-keys shared -- "$app" 3 100 >/dev/null 2>"$out/shared.err" || fail "shared run"
grep -q "remote keys: *shared (0 requests" "$out/shared.err" || fail "--remote-keys shared: $(cat "$out/shared.err")"
"$run" --stats="json:$out/stats.json" -- "$app" 3 100 >/dev/null 2>&1 || fail "json run"
grep -q '"hits": [1-9]' "$out/stats.json" || fail "JSON: $(cat "$out/stats.json")"
grep -q '"peak_pinned_bytes": [1-9]' "$out/stats.json" || fail "JSON: $(cat "$out/stats.json")"
echo PASS
