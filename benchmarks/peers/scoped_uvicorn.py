"""scoped-a2a's A2AApp under uvicorn (it is a plain ASGI app; its lifespan opens the nursery).

On hypercorn the benchmarks use the real command line, ``python -m scoped_a2a serve``; this script
is the uvicorn equivalent with the same options the benchmarks pass there.
"""

from __future__ import annotations

from benchmarks.peers._serve import arguments, run
from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.cli import load_agent
from scoped_a2a.server import gc_tuning
from scoped_a2a.store.memory import MemoryTaskStore

if __name__ == "__main__":
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--agent", required=True)
    parser.add_argument("--detach-metadata", action="append", default=[])
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--max-ended-tasks", type=int, default=10_000)
    parser.add_argument("--no-gc-tuning", action="store_true")
    args = parser.parse_args()
    app = A2AApp(load_agent(args.agent), policy=RunPolicy.from_rules(args.detach_metadata),
                 grace=args.grace, store=MemoryTaskStore(max_ended_tasks=args.max_ended_tasks))
    # What ``serve`` does once started (docs/memory.md), uvicorn's way.
    run(app, args.server, args.port, started=None if args.no_gc_tuning else gc_tuning.apply)
