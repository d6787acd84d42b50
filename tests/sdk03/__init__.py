"""Tests of the a2a-sdk 0.3 generation (Strands, BeeAI, CrewAI and plain 0.3 executors).

a2a-sdk 0.3 and 1.x are one distribution, so these run in their own environment
(``scripts/test`` makes ``.venv-sdk03``); where 1.x is installed every module here is skipped
at import, in one line, before it imports a 0.3 type.
"""

from importlib.metadata import PackageNotFoundError, version

import pytest

try:
    _installed = version("a2a-sdk")
except PackageNotFoundError:
    _installed = "none"
if not _installed.startswith("0.3."):
    pytest.skip(f"a2a-sdk 0.3 tests: a2a-sdk {_installed} is installed here (scripts/test runs "
                "them in .venv-sdk03)", allow_module_level=True)
