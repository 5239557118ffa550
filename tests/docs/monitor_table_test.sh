#!/bin/bash
# Every document that lists the memory monitors lists the library's own table
# (mrcache/monitors/monitor_table.h, printed by `mrcache-info --monitors`):
# mrcache(7)'s MEMORY MONITORS, mrcache-run(1)'s --monitor, `mrcache-run
# --help`, and docs/ARCHITECTURE.md's layer map, vocabulary and chaining
# table. A monitor added, renamed or removed in the table without the
# documents (or the other way round) fails here. (The `monitor` key's row of
# README.md and mrcache(7) is generated from the table too:
# config_table_test.sh.)
set -euo pipefail
info="$1"
run="$2"
mrcache7="$3"
run1="$4"
architecture="$5"
table="$(mktemp)"
trap 'rm -f "$table"' EXIT

"$info" --monitors > "$table"
[ -s "$table" ] || { echo "FAIL: mrcache-info --monitors printed nothing"; exit 1; }
# names WHEN...: the table's names whose "reports" column is one of WHEN, in order.
names() {
  local pattern
  pattern="$(IFS='|'; echo "$*")"
  awk -F'\t' -v p="^($pattern)\$" '$2 ~ p {print $1}' "$table"
}
all="$(names nothing before after combination)"
installable="$(names before after)"

# same WHAT EXPECTED ACTUAL [sorted]: one name a line; with `sorted`, as sets.
same() {
  local what="$1" expected="$2" actual="$3"
  if [ "${4:-}" = sorted ]; then
    expected="$(sort <<<"$expected")"
    actual="$(sort <<<"$actual")"
  fi
  if [ "$expected" != "$actual" ]; then
    echo "FAIL: $what lists other monitors than the table (mrcache-info --monitors)."
    diff -u <(echo "$expected") <(echo "$actual") --label table --label "$what" || true
    exit 1
  fi
  echo "PASS: $what: $(echo "$actual" | tr '\n' ' ')"
}

# A monitor that may not be used alone says which it needs, and `alone` otherwise.
awk -F'\t' '$3 != "alone" && $3 !~ /^only with / {bad = 1} END {exit bad}' "$table" ||
  { echo "FAIL: a row of --monitors is neither 'alone' nor 'only with ...'"; exit 1; }

# mrcache(7): the `.B name` after each `.TP` of MEMORY MONITORS.
same "mrcache(7) MEMORY MONITORS" "$all" "$(awk '
  /^\.SH / {in_section = ($0 == ".SH MEMORY MONITORS"); next}
  in_section && prev == ".TP" && /^\.B / {print $2}
  {prev = $0}' "$mrcache7")" sorted

# mrcache-run(1): the `.BR name ,` list of --monitor, in table order.
same "mrcache-run(1) --monitor" "$all" "$(awk '
  /^\.BI \\-\\-monitor / {in_option = 1; next}
  in_option && /^\.BR [a-z]+ ,$/ {print $2; next}
  in_option && /^or a$/ {exit}' "$run1")"

# mrcache-run --help: "memory monitor: a|b|c, or a".
same "mrcache-run --help" "$all" "$("$run" --help |
  sed -n 's/.*memory monitor: \([a-z|]*\), or a.*/\1/p' | tr '|' '\n')"

# ARCHITECTURE.md's layer map: "mrcache/monitors/ ... went away: a, b, c; fork".
same "ARCHITECTURE.md layer map" "$installable" "$(
  sed -n 's/.*mrcache\/monitors\/ *learning that memory went away: \([a-z, ]*\);.*/\1/p' \
    "$architecture" | tr -d ' ' | tr ',' '\n')" sorted

# ARCHITECTURE.md's vocabulary: "hooks (`a`, `b`) before they happen, `c` after".
vocabulary="$(grep '^| \*monitor\* |' "$architecture")"
same "ARCHITECTURE.md vocabulary (before)" "$(names before)" "$(
  sed -n 's/.*hooks (\([^)]*\)) before they happen.*/\1/p' <<<"$vocabulary" |
    tr -d '` ' | tr ',' '\n')" sorted
same "ARCHITECTURE.md vocabulary (after)" "$(names after)" "$(
  sed -n 's/.*before they happen, \(.*\) after.*/\1/p' <<<"$vocabulary" |
    tr -d '` ' | tr ',' '\n')" sorted

# ARCHITECTURE.md's "How each monitor chains": one row per installable monitor.
same "ARCHITECTURE.md chaining table" "$installable" "$(awk '
  /^\*\*How each monitor chains\.\*\*/ {in_table = 1; next}
  in_table && /^\| `[a-z]+` \|/ {split($0, cell, "`"); print cell[2]; next}
  in_table && seen_row && !/^\|/ {exit}
  in_table && /^\|/ {seen_row = 1}' "$architecture")" sorted
