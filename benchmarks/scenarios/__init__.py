"""The scenarios, in the order the issue numbers them (each a :class:`benchmarks.core.Scenario`)."""

from __future__ import annotations

from ..core import Scenario
from .adapters import Adapters
from .auth import Auth
from .chain import Chain
from .clients import Clients
from .detached import Detached
from .fanout import Fanout
from .handover import Handover
from .hangup import Hangup
from .observe import ObserveCost
from .postgres_store import PostgresStore
from .redis_store import RedisStore
from .resend import Resend
from .send import Send
from .slowreaders import SlowReaders
from .soak import Soak
from .sqlite_store import SQLiteStore
from .stored import Stored
from .stream import Stream
from .teardown import Teardown
from .temporal import Temporal
from .workers import Workers


def all_scenarios() -> list[Scenario]:
    return [Send(), Stream(), Hangup(), Teardown(), Fanout(), Soak(), Detached(), SlowReaders(),
            Temporal(), Auth(), Chain(), ObserveCost(), Stored(), RedisStore(),
            Adapters(), Resend(), SQLiteStore(), Clients(), PostgresStore(), Handover(),
            Workers()]
