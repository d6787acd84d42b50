"""Summarize conformance-kit logs (scripts/run_conformance_kit.sh) as a Markdown table.

    python scripts/conformance_table.py LOG [LOG ...]

One row per log: pass/fail/skip per kit category, read from the kit's closing summary (its JSON
report leaves the counts empty); then each log's failed tests.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CATEGORIES = ("Mandatory", "Capability", "Transport Equivalence", "Quality", "Feature")
LINE = re.compile(r"(Mandatory|Capability|Transport Equivalence|Quality|Feature)[^(]*"
                  r"\(p:(\d+)/f:(\d+)/x:(\d+)/e:(\d+)/s:(\d+)\)")


def summarize(path: Path) -> tuple[dict[str, str], list[str]]:
    cells: dict[str, str] = {}
    failed: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.search(line)
        if m:
            p, f, _x, e, s = m.group(2, 3, 4, 5, 6)
            err = f"+{e}e" if e != "0" else ""
            cells[m.group(1)] = f"{p}/{f}{err}/{s}"
        if line.startswith(("FAILED tests/", "ERROR tests/")):
            failed.append(line.split(" ")[1].split("/", 1)[1])
    return cells, failed


def main(paths: list[str]) -> None:
    print("| run | " + " | ".join(CATEGORIES) + " |")
    print("|---" * (len(CATEGORIES) + 1) + "|")
    details = []
    for raw in paths:
        path = Path(raw)
        cells, failed = summarize(path)
        name = path.name.removesuffix(".log")
        print(f"| {name} | " + " | ".join(cells.get(c, "-") for c in CATEGORIES) + " |")
        details.append((name, failed))
    print("\n(pass/fail/skip per category)\n")
    for name, failed in details:
        print(f"{name}: {len(failed)} failed")
        for t in failed:
            print(f"  {t}")


if __name__ == "__main__":
    main(sys.argv[1:])
