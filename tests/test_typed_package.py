"""A service that imports scoped-a2a as a library type-checks against its types (PEP 561: the
package ships ``py.typed``), rather than mypy skipping it as untyped and every name being Any."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_CODE = textwrap.dedent("""\
    from scoped_a2a import A2AClient, RunContext, Task

    async def agent(ctx: RunContext) -> None:
        wrong: int = ctx.task_id
""")


@pytest.mark.one_python  # suite time: mypy reads the package the same from either Python
def test_a_user_of_the_library_gets_its_types(tmp_path: Path) -> None:
    (tmp_path / "service.py").write_text(USER_CODE)
    # Run from the temporary directory so the project's own mypy settings do not apply: mypy
    # finds the package where the user's would, among the installed ones.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "service.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = (done.stdout + done.stderr)[-2000:]
    assert "py.typed" not in out and "import-untyped" not in out, out
    # The one error is the user's: RunContext.task_id is a str, so mypy read the package.
    assert 'service.py:4: error: Incompatible types in assignment (expression has type "str", ' \
           'variable has type "int")' in out, out
    assert "Found 1 error in 1 file" in out, out
