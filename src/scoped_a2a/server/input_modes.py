"""Which media types the agent accepts in a message's parts, read from its card (no I/O).

The specification (§3.1.1 and §3.3.2, ``ContentTypeNotSupportedError``): "A Media Type provided
in the request's message parts ... is not supported by the agent or the specific skill being
invoked" (JSON-RPC -32005, HTTP 400, 1.0.1 §5.4). What the agent supports is what its
card declares: ``defaultInputModes``, and each skill's ``inputModes`` (a skill may accept more
than the defaults). A part's media type is its ``mediaType``; without one, a text part is
``text/plain`` and a data part ``application/json``; a file part without one is not checked (it
names no type to refuse). Matching ignores case and parameters (``text/plain; charset=utf-8``
is ``text/plain``); a mode ``*/*`` accepts everything, ``image/*`` (or a bare ``image``, as
0.3-era cards write ``text``) every subtype.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..protocol.errors import ContentTypeNotSupported
from ..protocol.types import Message, Part


def _base(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def part_media_type(part: Part) -> str | None:
    """The media type a part carries or implies (None: a file part that names none)."""
    if part.media_type:
        return _base(part.media_type)
    if part.text is not None:
        return "text/plain"
    if part.data is not None:
        return "application/json"
    return None


class InputModes:
    """The set of media types a card accepts; :meth:`check` refuses a message outside it."""

    def __init__(self, modes: Iterable[str]) -> None:
        self.exact: set[str] = set()
        self.majors: set[str] = set()
        self.any = False
        for mode in modes:
            base = _base(mode)
            if base in ("*", "*/*"):
                self.any = True
            elif base.endswith("/*") or "/" not in base:
                self.majors.add(base.split("/", 1)[0])
            else:
                self.exact.add(base)

    @classmethod
    def from_card(cls, card: Mapping[str, Any]) -> InputModes:
        """The modes of ``card``: its defaults plus every skill's own (absent: accept all)."""
        modes = card.get("defaultInputModes")
        if not isinstance(modes, list):
            return cls(["*/*"])
        found = [m for m in modes if isinstance(m, str)]
        for skill in card.get("skills") or ():
            if isinstance(skill, Mapping) and isinstance(skill.get("inputModes"), list):
                found.extend(m for m in skill["inputModes"] if isinstance(m, str))
        return cls(found)

    def accepts(self, media_type: str) -> bool:
        return self._accepts_base(_base(media_type))

    def _accepts_base(self, base: str) -> bool:
        return self.any or base in self.exact or base.split("/", 1)[0] in self.majors

    def check(self, message: Message) -> None:
        """Raise :class:`ContentTypeNotSupported` (-32005, HTTP 400) for a part the agent
        does not accept, naming its type and what the agent accepts."""
        if self.any:
            return
        for part in message.parts:
            media_type = part_media_type(part)
            if media_type is not None and not self._accepts_base(media_type):
                accepted = sorted(self.exact | {f"{m}/*" for m in self.majors})
                raise ContentTypeNotSupported(
                    f"this agent does not accept {media_type!r} parts; its card's input modes "
                    f"are {', '.join(accepted) or 'none'}")
