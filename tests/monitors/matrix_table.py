#!/usr/bin/env python3
"""Turns the invalidation matrix test's output into the README table.

Usage: matrix_table.py LOG [LOG...]   (test.log files or invalidation_matrix.txt)
Reads lines `matrix <row> <monitor> covered|stale <passes>` and prints a
Markdown table: one row per way memory disappears, one column per monitor.
A cell reads "covered (N)" when N passes in a row succeeded, or
"stale (pass N)" when the device write was lost at pass N. Nothing is
inferred: a cell the logs do not contain is shown as "not run".
"""
import re
import sys

ROWS = ["munmap", "mremap_move", "mremap_shrink", "madvise_dontneed", "madvise_free",
        "madvise_remove", "brk_shrink", "shmdt", "mmap_fixed", "shmat_remap",
        "memfd_ftruncate", "shm_open_ftruncate", "shm_open_truncate", "memfd_punch_hole",
        "mremap_onto_target", "madvise_dontneed_thp", "dlclose", "glibc_free", "jemalloc_purge",
        "syscall_munmap", "raw_munmap"]
COLUMNS = ["none", "symbols", "patch", "jemalloc", "auto", "auto+uffd"]
LINE = re.compile(r"^matrix (\S+) (\S+) (covered|stale) (\d+)$")


def main(paths):
    cells = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if m:
                    row, monitor, verdict, passes = m.groups()
                    cells[(row, monitor)] = (verdict, int(passes))
    if not cells:
        sys.exit("no 'matrix ...' lines found in " + ", ".join(paths))
    columns = [c for c in COLUMNS if any(k[1] == c for k in cells)]
    rows = [r for r in ROWS if any(k[0] == r for k in cells)]
    print("| way memory disappears | " + " | ".join(f"`{c}`" for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for r in rows:
        out = []
        for c in columns:
            if (r, c) not in cells:
                out.append("not run")
                continue
            verdict, passes = cells[(r, c)]
            out.append(f"covered ({passes})" if verdict == "covered" else f"stale (pass {passes})")
        print(f"| {r} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
