"""Every async test runs on asyncio and on trio (anyio's pytest plugin).

Tests marked ``one_python`` (the slowest real-process fleet tests: replicas SIGKILLed, workers
restarted, a database's server killed) run on one Python only: CI runs the suite on 3.11 and
3.13 and each must stay under 10 minutes on two cores. What these tests add is store and process
behaviour, which the Python version does not change. By default they run on 3.11 (its
``asyncio.wait_for`` swallows cancels, the bug this project exists to be immune to);
``one_python("3.13")`` puts a test (or a file) on 3.13 instead, to share the time between the
two runs; a test whose subject is a Python 3.12+ behaviour (hypercorn's hang in
``Server.wait_closed``) goes there.
"""

from __future__ import annotations

import sys

import pytest

ONE_PYTHON = "3.11"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for item in items:
        marker = item.get_closest_marker("one_python")
        if marker is None:
            continue
        version = marker.args[0] if marker.args else ONE_PYTHON
        if version != running:
            item.add_marker(pytest.mark.skip(
                reason=f"a slow test: runs on Python {version} only "
                       "(suite time)"))
