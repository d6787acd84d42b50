"""scripts/cli_reference.py: docs/cli.md generated from the CLI's parsers, deterministically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cli_reference.py"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60, check=False)


def test_output_does_not_depend_on_terminal_or_environment(tmp_path: Path) -> None:
    wide, narrow = tmp_path / "wide.md", tmp_path / "narrow.md"
    assert _run("--file", str(wide), env={"COLUMNS": "200"}).returncode == 0
    assert _run("--file", str(narrow), env={
        "COLUMNS": "40", "SCOPED_A2A_PUSH_BEARER_TOKEN": "tok-3f9a"}).returncode == 0
    text = wide.read_text()
    assert text == narrow.read_text()
    assert "tok-3f9a" not in text
    for command in ("## `serve`", "## `send`", "## `worker`"):
        assert command in text
    for option in ("`--grace SECONDS` | `10.0`",
                   "`--store redis://HOST:PORT/DB\\|postgresql://...` | required",
                   "`--follow` | off"):
        assert option in text


def test_check_fails_with_a_one_line_hint_when_stale(tmp_path: Path) -> None:
    doc = tmp_path / "cli.md"
    assert _run("--file", str(doc)).returncode == 0
    assert _run("--check", "--file", str(doc)).returncode == 0
    doc.write_text(doc.read_text().replace("`--grace SECONDS` | `10.0`", "`--grace SECONDS` | `5`"))
    stale = _run("--check", "--file", str(doc))
    assert stale.returncode == 1
    hint = stale.stderr.strip()
    assert len(hint.splitlines()) == 1
    assert "stale" in hint and "python scripts/cli_reference.py" in hint


def test_lists_exactly_the_options_that_help_shows(tmp_path: Path) -> None:
    """An option hidden from ``--help`` (help=SUPPRESS: serve's internal --reuse-port) is not
    in the reference either, where it showed as a row with no meaning; every option ``--help``
    shows is."""
    import re

    doc = tmp_path / "cli.md"
    assert _run("--file", str(doc)).returncode == 0
    sections = re.split(r"^## `(\w+)`$", doc.read_text(), flags=re.M)[1:]
    assert sections, "no command sections in the reference"
    for name, body in zip(sections[::2], sections[1::2], strict=True):
        shown = subprocess.run([sys.executable, "-m", "scoped_a2a", name, "--help"],
                               capture_output=True, text=True, timeout=60, check=True,
                               env={**os.environ, "COLUMNS": "200"}).stdout
        in_help = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", shown)) - {"--help"}
        rows = set(re.findall(r"^\| `(--[a-z][a-z0-9-]+)", body, flags=re.M))
        assert rows - in_help == set(), f"{name}: in the reference, not in --help: {rows - in_help}"
        missing = {o for o in in_help - rows if o not in body}
        assert missing == set(), f"{name}: in --help, not in the reference: {missing}"
