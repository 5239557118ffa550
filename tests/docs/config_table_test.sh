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

# compare WHAT FIX: fails with a diff if $expected (the tool's output) and
# $actual (the document's copy) differ; FIX says how to mend the document.
compare() {
  if ! diff -u "$expected" "$actual"; then
    echo "FAIL: $1 differs from what the library documents (above: - the library, + $1)."
    echo "      $2"
    exit 1
  fi
}

"$info" --config-table > "$expected"
# The first table after the "## Configuration" heading.
awk '/^## Configuration$/ {in_section = 1; next}
     /^## / {in_section = 0}
     in_section && /^\|/ {print; seen = 1; next}
     in_section && seen {exit}' "$readme" > "$actual"
compare "README.md's configuration table" "Paste the output of 'mrcache-info --config-table'."
echo "PASS: README.md: $(($(wc -l < "$expected") - 2)) keys documented identically"

"$info" --config-man > "$expected"
# From the line after the "generated" comment up to the next section.
awk '/^\.\\" The key list below is generated/ {in_list = 1; next}
     in_list && /^\.SH / {exit}
     in_list {print}' "$manpage" > "$actual"
compare "mrcache(7)'s CONFIGURATION list" \
  "Paste the output of 'mrcache-info --config-man' after the man page's 'generated' comment."
echo "PASS: mrcache(7): $(grep -c '^\.TP$' "$expected") keys documented identically"
