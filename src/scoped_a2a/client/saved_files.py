"""``send --out DIR``: the file parts an agent answered with, saved under DIR/files, safely.

A filename is the agent's: it may hold ``../``, an absolute path, a drive letter, control
characters or nothing at all. Only its last path component is kept, cleaned of what no file name
should hold; a name that is empty, ``.`` or ``..`` afterwards becomes ``<artifact>-<n>.bin``.
Nothing is ever written outside DIR/files, nothing existing is overwritten (a second file of the
same name gets `` (2)`` before its extension), and each file is written atomically
(:mod:`.atomic`). A file part given as a URL is not fetched, so not saved (``--json`` prints
it, in the task).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from ..protocol.types import Message, Part, Task
from .atomic import write_once

MAX_NAME = 120
"""Characters kept of a filename (the extension is kept whole when the name is cut)."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f/\\:*?\"<>|]")


def safe_filename(name: str | None, fallback: str) -> str:
    """A plain file name made from the agent's ``name`` (see the module docstring)."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    base = unicodedata.normalize("NFC", _UNSAFE.sub("_", base)).strip().lstrip(".")
    if not base or set(base) <= {"_", " "}:
        return fallback
    if len(base) > MAX_NAME:
        stem, dot, ext = base.rpartition(".")
        base = (stem[: MAX_NAME - len(ext) - 1] + dot + ext) if dot and len(ext) < 16 \
            else base[:MAX_NAME]
    return base


def file_parts(result: Task | Message) -> list[tuple[str, Part]]:
    """The file parts with bytes in ``result`` (a task's artifacts, or a direct reply), each
    with a fallback name: its artifact's name and its place among the result's files."""
    found: list[tuple[str, Part]] = []
    if isinstance(result, Message):
        groups = [("reply", result.parts)]
    else:
        groups = [(a.name or a.artifact_id, a.parts) for a in result.artifacts or ()]
    for label, parts in groups:
        for part in parts:
            if part.raw is not None:
                place = len(found) + 1
                found.append((f"{safe_filename(label, 'artifact')}-{place}.bin", part))
    return found


def _unused(folder: Path, name: str, taken: set[str]) -> Path:
    stem, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
    candidate, n = name, 1
    while candidate in taken or (folder / candidate).exists():
        n += 1
        candidate = f"{stem} ({n}){dot}{ext}"
    taken.add(candidate)
    return folder / candidate


async def save_files(result: Task | Message, folder: Path) -> list[Path]:
    """Write every file part with bytes in ``result`` into ``folder``; return the paths."""
    saved: list[Path] = []
    taken: set[str] = set()
    for fallback, part in file_parts(result):
        assert part.raw is not None
        path = _unused(folder, safe_filename(part.filename, fallback), taken)
        await write_once(path, part.raw)
        saved.append(path)
    return saved
