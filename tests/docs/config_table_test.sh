#!/bin/bash
# README.md's table of configuration keys and mrcache(7)'s CONFIGURATION list
# are the library's own table (Config::KeyTable, printed by `mrcache-info
# --config-table` and `--config-man`), row for row: a key added, renamed or
# re-documented in mrcache/config.cc without the documents (or the other way
# round) fails here.
set -euo pipefail
info="$1"
readme="$2"
manpage="$3"
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
echo "PASS: README.md: $(($(wc -l < "$expected") - 2)) keys documented identically"

"$info" --config-man > "$expected"
# From the line after the "generated" comment up to the next section.
awk '/^\.\\" The key list below is generated/ {in_list = 1; next}
     in_list && /^\.SH / {exit}
     in_list {print}' "$manpage" > "$actual"
if ! diff -u "$expected" "$actual"; then
  echo "FAIL: mrcache(7)'s CONFIGURATION list differs from 'mrcache-info --config-man' (above:"
  echo "      - what the library documents, + what the man page says). Paste the tool's output"
  echo "      after the man page's 'generated' comment."
  exit 1
fi
echo "PASS: mrcache(7): $(grep -c '^\.TP$' "$expected") keys documented identically"
