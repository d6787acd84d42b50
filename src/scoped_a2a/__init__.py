"""scoped-a2a: an A2A server, client and step runner on AnyIO structured concurrency."""

from .client import (
    A2AClient,
    DirectorySink,
    MemorySink,
    Step,
    follow_trajectory,
)
from .protocol.errors import A2AError
from .protocol.principal import Principal
from .protocol.types import Message, Part, Role, Task, TaskState
from .runtime.context import Agent, RunContext
from .runtime.failures import AgentError
from .runtime.outcome import Outcome
from .runtime.policy import RunPolicy
from .server.app import A2AApp
from .server.serve import serve
from .store.base import TaskStore
from .store.memory import MemoryTaskStore

__all__ = [
    "A2AApp",
    "A2AClient",
    "A2AError",
    "Agent",
    "AgentError",
    "DirectorySink",
    "MemorySink",
    "MemoryTaskStore",
    "Message",
    "Outcome",
    "Part",
    "Principal",
    "Role",
    "RunContext",
    "RunPolicy",
    "Step",
    "Task",
    "TaskState",
    "TaskStore",
    "follow_trajectory",
    "serve",
]
