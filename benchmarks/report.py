"""Turning figures into tables, ratios, JSON and a plot.

Ratios are taken pair by pair on the same server (scoped-a2a on uvicorn against a peer on
uvicorn, and so on), because absolute figures on a shared machine drift while ratios measured
back to back hold. Every ratio is oriented so that above 1 means scoped-a2a is ahead.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from .core import Metric, Row, Scenario

PACKAGES = ("scoped-a2a", "anyio", "trio", "hypercorn", "uvicorn", "h11", "a2a-sdk", "fasta2a",
            "starlette", "msgspec", "pydantic")


def _systems(rows: Sequence[Row]) -> list[tuple[str, str, str]]:
    seen: dict[tuple[str, str], str] = {}
    for r in rows:
        seen.setdefault((r.system, r.backend), r.role)
    order = {"ceiling": 0, "subject": 1, "control": 2, "peer": 3}
    return sorted(((s, b, role) for (s, b), role in seen.items()), key=lambda x: order[x[2]])


def _cell(rows: dict[str, Row], metric: Metric) -> str:
    row = rows.get(metric.key)
    if row is None:
        return "-"
    if row.value is None or (isinstance(row.value, float) and math.isnan(row.value)):
        return row.note or "n/a"
    return metric.fmt.format(row.value)


def ratio(subject: float, other: float, better: str) -> float | None:
    """How far ahead ``subject`` is: >1 means better, whichever way the metric points."""
    if subject <= 0 or other <= 0:
        return None
    return subject / other if better == "higher" else other / subject


def ratios(scenario: Scenario, rows: Sequence[Row]) -> list[tuple[str, str, Metric, float | str]]:
    """(peer system, backend, metric, ratio or a word) for each ratio metric and each peer."""
    by_sys: dict[tuple[str, str], dict[str, Row]] = {}
    for r in rows:
        by_sys.setdefault((r.system, r.backend), {})[r.metric] = r
    out: list[tuple[str, str, Metric, float | str]] = []
    subjects = {b: by_sys[(s, b)] for s, b, role in _systems(rows) if role == "subject"}
    for system, backend, role in _systems(rows):
        if role in ("subject", "control"):
            continue
        subject = subjects.get(backend)
        if system in scenario.pairs:
            subject = by_sys.get((scenario.pairs[system], backend))
        if subject is None:
            continue
        for m in scenario.metrics:
            if not m.ratio or m.better is None:
                continue
            mine, theirs = subject.get(m.key), by_sys[(system, backend)].get(m.key)
            if mine is None or theirs is None:
                continue
            if mine.value is None or theirs.value is None:
                if mine.value is not None and theirs.note:
                    out.append((system, backend, m, theirs.note))
                continue
            q = ratio(mine.value, theirs.value, m.better)
            if q is not None:
                out.append((system, backend, m, q))
    return out


def _groups(scenario: Scenario, rows: Sequence[Row]) -> list[tuple[str, list[Metric]]]:
    present = {r.metric for r in rows}
    by_key = {m.key: m for m in scenario.metrics}
    if scenario.tables:
        groups = [(title, [by_key[k] for k in keys if k in present])
                  for title, keys in scenario.tables]
    else:
        groups = [("", [m for m in scenario.metrics if m.key in present])]
    return [(title, ms) for title, ms in groups if ms]


def _grid(scenario: Scenario, rows: Sequence[Row], metrics: list[Metric]) -> list[list[str]]:
    by_sys: dict[tuple[str, str], dict[str, Row]] = {}
    for r in rows:
        by_sys.setdefault((r.system, r.backend), {})[r.metric] = r
    keys = {m.key for m in metrics}
    return [[s, b, *[_cell(by_sys[(s, b)], m) for m in metrics]]
            for s, b, _ in _systems(rows) if keys & by_sys[(s, b)].keys()]


def _ratio_lines(scenario: Scenario, rows: Sequence[Row]) -> list[tuple[str, list[str]]]:
    grouped: dict[str, list[str]] = {}
    for system, backend, m, r in ratios(scenario, rows):
        text = f"{r:.2f}x" if isinstance(r, float) else r
        grouped.setdefault(f"{system} / {backend}", []).append(f"{m.label} {text}")
    return list(grouped.items())


def table(scenario: Scenario, rows: Sequence[Row]) -> str:
    """The scenario's table(s) (systems x metrics) and its ratio lines, as plain text."""
    out = [f"Scenario {scenario.number}: {scenario.title}"]
    for title, metrics in _groups(scenario, rows):
        header = ["system", "server", *[m.label for m in metrics]]
        body = _grid(scenario, rows, metrics)
        widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]

        def line(cells: list[str], widths: list[int] = widths) -> str:
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

        if title:
            out.append(f"-- {title}")
        out += [line(header), "  ".join("-" * w for w in widths), *[line(b) for b in body]]
    lines = _ratio_lines(scenario, rows)
    if lines:
        out += ["", "scoped-a2a on the same server vs (>1: scoped-a2a ahead)"]
        width = max(len(k) for k, _ in lines)
        out += [f"  {k:{width}}  " + ", ".join(items) for k, items in lines]
    if scenario.notes:
        out += ["", f"note: {scenario.notes}"]
    return "\n".join(out)


def markdown(scenario: Scenario, rows: Sequence[Row]) -> str:
    """The same tables as GitHub markdown (for the README)."""
    out = [f"**{scenario.number}. {scenario.title}**"]
    for title, metrics in _groups(scenario, rows):
        out += ["", f"_{title}_", ""] if title else [""]
        out += ["| system | server | " + " | ".join(m.label for m in metrics) + " |",
                "|---|---|" + "---:|" * len(metrics)]
        out += ["| " + " | ".join(cells) + " |" for cells in _grid(scenario, rows, metrics)]
    lines = _ratio_lines(scenario, rows)
    if lines:
        out += ["", "scoped-a2a on the same server vs each peer (>1: scoped-a2a ahead):", ""]
        out += [f"- {k}: " + ", ".join(items) for k, items in lines]
    if scenario.notes:
        out += ["", f"_{scenario.notes}_"]
    return "\n".join(out)


def environment(python_for_servers: str) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan,) * 3
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "machine": {"platform": platform.platform(), "cpu": model, "cores": os.cpu_count(),
                    "load_average_at_start": load},
        "python": sys.version.split()[0],
        "python_for_servers": python_for_servers,
        "packages": versions,
    }


def write_json(path: Path, scenarios: Sequence[Scenario], rows: Sequence[Row],
               env: dict[str, Any], extra: dict[str, Any]) -> None:
    """Every figure, then every ratio (unit "x", metric "ratio:<metric>", system = the peer)."""
    out = [r.as_json() for r in rows]
    for sc in scenarios:
        for system, backend, m, r in ratios(sc, [x for x in rows if x.scenario == sc.name]):
            row: dict[str, Any] = {"scenario": sc.name, "system": system, "backend": backend,
                                   "metric": f"ratio:{m.key}", "unit": "x"}
            if isinstance(r, float):
                row["value"] = r
            else:
                row["value"], row["note"] = None, r
            out.append(row)
    doc = {**env, **extra, "rows": out}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def short(system: str) -> str:
    """A system's name without its parenthesised explanation (for the plot's labels)."""
    return system.split(" (")[0]


def plot(path: Path, scenarios: Sequence[Scenario], rows: Sequence[Row]) -> None:
    """Two bar charts: scoped-a2a vs each peer, and scoped-a2a's share of the HTTP ceiling."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'scoped-a2a[bench]'") from exc
    peers: list[tuple[str, float | None, str]] = []  # None: a word instead ("never", "hung")
    ceiling: list[tuple[str, float | None, str]] = []
    words: dict[int, str] = {}
    palette = {"a2a-sdk": "#d62728", "fasta2a": "#9467bd", "bare ASGI": "#7f7f7f"}
    for sc in scenarios:
        for system, backend, m, r in ratios(sc, [x for x in rows if x.scenario == sc.name]):
            if system.startswith("scoped-a2a"):
                continue  # scoped-a2a against itself (scenario 14: Redis / memory): tables only
            if not isinstance(r, float):
                if system != "bare ASGI" and r not in ("n/a", "-"):
                    words[len(peers)] = r
                    peers.append((f"{sc.number}. {m.label}  vs {short(system)} / {backend}", None,
                                  palette.get(short(system), "#1f77b4")))
                continue
            if system == "bare ASGI":
                if m.better == "higher":  # throughput only: the share of what the stack can do
                    ceiling.append((f"{sc.number}. {m.label}  on {backend}", r, "#7f7f7f"))
            else:
                peers.append((f"{sc.number}. {m.label}  vs {short(system)} / {backend}", r,
                              palette.get(short(system), "#1f77b4")))
    if not peers and not ceiling:
        return
    height = 0.3 * (len(peers) + len(ceiling)) + 2.5
    fig, axes = plt.subplots(2, 1, figsize=(10, height), squeeze=False,
                             gridspec_kw={"height_ratios": [max(len(peers), 1),
                                                            max(len(ceiling), 1)]})
    for ax, bars, title in (
        (axes[0][0], peers, "scoped-a2a ÷ peer on the same server (>1: scoped-a2a ahead)"),
        (axes[1][0], ceiling, "scoped-a2a ÷ bare ASGI app on the same server (share of the "
                              "HTTP ceiling)"),
    ):
        if not bars:
            ax.set_visible(False)
            continue
        ys = list(range(len(bars)))[::-1]
        numbers = [b[1] for b in bars if b[1] is not None]
        top = max([*numbers, 1.0]) * 3  # where the bars without a number end
        values = [b[1] if b[1] is not None else top for b in bars]
        ax.barh(ys, values, color=[b[2] for b in bars],
                hatch=["//" if b[1] is None else "" for b in bars],
                alpha=None)
        ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.axvline(1.0, color="black", linewidth=0.8)
        for i, (y, v) in enumerate(zip(ys, values, strict=True)):
            text = f" {v:.2f}x" if bars[i][1] is not None else f" {words.get(i, '')}"
            ax.text(v, y, text, va="center", fontsize=7)
        ax.set_title(title, fontsize=10)
    fig.suptitle("scoped-a2a vs peers, measured pair by pair in one run", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(json_path: Path, png_path: Path) -> None:
    """Draw the plot again from a ``--json`` file (no benchmark is run)."""
    from .scenarios import all_scenarios

    data = json.loads(json_path.read_text())
    fields = {"scenario", "system", "backend", "metric", "value", "unit", "role", "note"}
    rows = [Row(**{k: v for k, v in r.items() if k in fields}) for r in data["rows"]
            if not str(r.get("metric", "")).startswith("ratio:")]
    plot(png_path, all_scenarios(), rows)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="python -m benchmarks.report FULL.json OUT.png: redraw the plot of a run")
    parser.add_argument("json_path", type=Path)
    parser.add_argument("png_path", type=Path)
    args = parser.parse_args()
    replot(args.json_path, args.png_path)
