"""Every async test runs on asyncio and on trio (anyio's pytest plugin).

Tests marked ``one_python`` (the slowest real-process fleet tests: replicas SIGKILLed, workers
restarted, a database's server killed) run on one Python only: CI runs the suite on 3.11 and
3.13 and each must stay under 10 minutes on two cores. What these tests add is store and process
behaviour, which the Python version does not change. By default they run on 3.11 (its
``asyncio.wait_for`` swallows cancels, the bug this project exists to be immune to);
``one_python("3.13")`` puts a test (or a file) on 3.13 instead, to share the time between the
two runs; a test whose subject is a Python 3.12+ behaviour (hypercorn's hang in
``Server.wait_closed``) goes there.

Every ``httpx.AsyncClient()`` with the default trust shares one SSL context here (see
``_share_httpx_default_tls``): the tests make thousands of clients.
"""

from __future__ import annotations

import functools
import os
import ssl
import sys
from typing import Any

import httpx._transports.default as _httpx_transports
import pytest

ONE_PYTHON = "3.11"


def _share_httpx_default_tls() -> None:
    """httpx builds a new SSL context for every client, loading certifi's CA bundle: about
    36 ms of CPU, even for an ``http://`` client, and the tests make one or more per test
    (thousands per run). Clients with httpx's default trust (``verify=True``, no client
    certificate) share one here, as ``scoped_a2a.client.connection.default_tls`` does for the
    library's own clients. A test's own context or CA file (the TLS tests) is untouched."""
    real = _httpx_transports.create_ssl_context

    @functools.cache
    def default(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
        return real()  # reads the same two variables

    def create_ssl_context(verify: Any = True, cert: Any = None,
                           trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None and trust_env:
            return default(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        return real(verify=verify, cert=cert, trust_env=trust_env)

    _httpx_transports.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_share_httpx_default_tls()


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
