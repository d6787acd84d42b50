"""The client side: call A2A agents, follow live trajectories, run conversations as steps."""

from .auth import ApiKey, BearerToken
from .backoff import Backoff
from .card import AgentCard
from .card_verify import CardSignatureError, CardVerifier
from .client import A2AClient, user_message
from .errors import AgentHTTPError, AgentTimeout, AgentUnreachable, TransportError
from .follower import Follower, follow_trajectory, live_followers
from .pages import LivePage, PageSink
from .sinks import DirectorySink, MemorySink, StepSink
from .step import Step, Turn
from .streams import EventStream
from .wire import StreamEvent

__all__ = [
    "A2AClient",
    "AgentCard",
    "AgentHTTPError",
    "AgentTimeout",
    "AgentUnreachable",
    "ApiKey",
    "Backoff",
    "BearerToken",
    "CardSignatureError",
    "CardVerifier",
    "DirectorySink",
    "EventStream",
    "Follower",
    "LivePage",
    "MemorySink",
    "PageSink",
    "Step",
    "StepSink",
    "StreamEvent",
    "TransportError",
    "Turn",
    "follow_trajectory",
    "live_followers",
    "user_message",
]
