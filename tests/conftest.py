"""Every async test runs on asyncio and on trio (anyio's pytest plugin).

Tests marked ``one_python`` (the slowest real-process fleet tests: replicas SIGKILLed, workers
restarted, a database's server killed) run on Python 3.11 only: CI runs the suite on 3.11 and
3.13 and each must stay under 10 minutes on two cores. 3.11 is the one kept because its
``asyncio.wait_for`` swallows cancels, the bug this project exists to be immune to; what these
tests add beyond that is store and process behaviour, which the Python version does not change.
"""

from __future__ import annotations

import sys

import pytest

ONE_PYTHON = (3, 11)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if sys.version_info[:2] == ONE_PYTHON:
        return
    skip = pytest.mark.skip(reason="a slow real-process fleet test: runs on Python "
                                   f"{ONE_PYTHON[0]}.{ONE_PYTHON[1]} only (suite time)")
    for item in items:
        if item.get_closest_marker("one_python") is not None:
            item.add_marker(skip)
