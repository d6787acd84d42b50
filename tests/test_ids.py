"""protocol/ids.py: new ids have the format of ``uuid.uuid4().hex`` and do not repeat."""

from __future__ import annotations

import uuid

from scoped_a2a.protocol.ids import new_id


def test_new_id_is_a_uuid4_hex() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == value
