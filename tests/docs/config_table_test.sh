#!/bin/bash
# README.md's table of configuration keys is the library's own table
# (Config::KeyTable, printed by `mrcache-info --config-table`), row for row:
# a key added, renamed or re-documented in mrcache/config.cc without the
# README (or the other way round) fails here.
set -euo pipefail
info="$1"
readme="$2"
expected="$(mktemp)"
actual="$(mktemp)"
trap 'rm -f "$expected" "$actual"' EXIT
"$info" --config-table > "$expected"
# The first table after the "## Configuration" heading.
awk '/^## Configuration$/ {in_section = 1; next}
     /^## / {in_section = 0}
     in_section && /^\|/ {print; seen = 1; next}
     in_section && seen {exit}' "$readme" > "$actual"
if ! diff -u "$expected" "$actual"; then
  echo "FAIL: README.md's configuration table differs from 'mrcache-info --config-table' (above:"
  echo "      - what the library documents, + what README.md says). Paste the tool's output."
  exit 1
fi
echo "PASS: $(($(wc -l < "$expected") - 2)) keys documented identically"
