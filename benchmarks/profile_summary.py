"""Summarise a py-spy ``--format raw`` profile: where the samples are, by function.

    python -m benchmarks.profile_summary PROFILE.txt [--top 25] [--match TEXT]

"self" counts samples whose innermost frame is the function; "total" counts samples with the
function anywhere on the stack (once per sample). Idle samples are already left out by py-spy.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r" \(([^)]*)\)$")


def _frame(raw: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py)``; line numbers merged."""
    m = _LINE.search(raw)
    if not m:
        return raw
    where = m.group(1).rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{raw[: m.start()]} ({where})"


def summarise(path: Path, top: int, match: str | None) -> str:
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        samples += n
        self_c[frames[-1]] += n
        for f in set(frames):
            total_c[f] += n
    out = [f"{path.name}: {samples} samples"]
    out.append(f"  top {top} by self time:")
    for f, n in self_c.most_common(top):
        out.append(f"    {100 * n / samples:5.1f}%  {f}")
    out.append(f"  top {top} by total time" + (f" (matching {match!r})" if match else "") + ":")
    picked = [(f, n) for f, n in total_c.most_common() if match is None or match in f][:top]
    for f, n in picked:
        out.append(f"    {100 * n / samples:5.1f}%  {f}")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", type=Path, nargs="+")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--match")
    args = p.parse_args()
    for path in args.profile:
        print(summarise(path, args.top, args.match))


if __name__ == "__main__":
    main()
