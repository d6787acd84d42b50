"""``--agent MODULE:ATTR``: import what the user named and make an agent of it, or say why not.

What is recognised (in this order; each framework's module is imported only when the object
already comes from it):

- an agent of this project: an async callable taking one argument (``async def agent(ctx)``, or
  an object with ``async def __call__(self, ctx)``), adapted agents included;
- an ``A2AApp``: its agent, and the card set on it in code;
- an a2a-sdk ``AgentExecutor`` of either generation (:mod:`.adapters.a2a_sdk`), a Strands
  ``A2AServer`` or a CrewAI ``Agent``, with the module's ``agent_card`` (or ``card``) if it
  defines one, else the card the framework knows;
- a Google ADK agent (:mod:`.adapters.adk`) or a pydantic-ai ``Agent``
  (:mod:`.adapters.pydantic_ai`), whose cards come from what the framework knows.

Anything else, a module that fails to import, and an agent whose framework cannot run on the
chosen backend are refused with ``SystemExit`` and one line saying what to do, before anything
listens (the CLI prints it and exits 2).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .adapters.base import check_backend

FRAMEWORK_EXTRAS = {"a2a": "a2a-sdk", "google": "adk", "pydantic_ai": "pydantic-ai"}
"""The extra that installs a framework, by its top-level package (``google``: ADK's)."""


DEFAULT_AGENT = "scoped_a2a.agents.demo:demo_agent"
"""What ``serve`` and ``worker`` run without ``--agent``: the built-in demo agent."""


@dataclass
class LoadedAgent:
    """The agent to serve and the card fields known for it (under ``--card``'s)."""

    agent: Any
    card: dict[str, Any] = field(default_factory=dict)


def is_async_callable(obj: Any) -> bool:
    """True for an ``async def`` function (or a partial of one), or an object whose
    ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(obj):
        return True
    return (callable(obj) and not inspect.isclass(obj)
            and inspect.iscoroutinefunction(type(obj).__call__))


def _takes_one_argument(obj: Any) -> bool:
    try:
        inspect.signature(obj).bind(object())
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let it be tried
        return True
    return True


def _import(module_name: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise SystemExit(f"cannot import agent module {module_name!r}: no such module (run "
                             "from the folder that holds it, or install it)") from None
        extra = FRAMEWORK_EXTRAS.get((exc.name or "").partition(".")[0])
        hint = f": pip install 'scoped-a2a[{extra}]'" if extra else ""
        raise SystemExit(f"cannot import agent module {module_name!r}: it imports "
                         f"{exc.name!r}, which is not installed{hint}") from None
    except SyntaxError as exc:
        where = f"{Path(exc.filename or '?').name}:{exc.lineno}"
        raise SystemExit(f"cannot import agent module {module_name!r}: syntax error at "
                         f"{where}: {exc.msg}") from None
    except Exception as exc:
        raise SystemExit(f"cannot import agent module {module_name!r}: importing it raised "
                         f"{type(exc).__name__}: {exc} (at {_raised_at(exc)})") from None


def _raised_at(exc: BaseException) -> str:
    """``file:line`` of the user's code that raised ``exc`` while their module imported: the
    innermost frame outside Python's own library and installed packages (a KeyError raised in
    ``os.environ`` is reported where the agent module read it), else the innermost frame."""
    import sysconfig
    import traceback

    library = tuple({sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib",
                                                     "platlib")} - {None, ""})
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<")]  # importlib's frozen frames
    if not frames:
        return "an unknown line"
    own = [f for f in frames if not f.filename.startswith(library)] or frames
    frame = own[-1]
    path = Path(frame.filename)
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(Path.cwd().resolve())
    return f"{path}:{frame.lineno}"


def _import_file(spec: str, file_name: str) -> ModuleType:
    """``--agent ./myagent.py:agent``: the module in that file, imported under its stem (its
    folder first on ``sys.path``, so the modules beside it import as they would with
    ``python myagent.py``). SystemExit with one line if there is no such file."""
    import importlib.util

    path = Path(file_name)
    if not path.is_file():
        raise SystemExit(f"--agent {spec}: no such file {file_name!r} (give a path to a .py "
                         "file, or a module name: --agent myagent:agent)")
    name = path.stem
    if not name.isidentifier():
        raise SystemExit(f"--agent {spec}: {path.name!r} is not a module name Python can "
                         "import (letters, digits and _ only); rename the file")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    existing = sys.modules.get(name)
    if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() \
            == path.resolve():
        return existing
    if existing is not None:
        raise SystemExit(f"--agent {spec}: a module named {name!r} is already imported from "
                         "elsewhere; rename the file")
    found = importlib.util.spec_from_file_location(name, path)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise SystemExit(f"cannot import agent file {file_name!r}: syntax error at "
                         f"{Path(exc.filename or '?').name}:{exc.lineno}: {exc.msg}") from None
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        extra = FRAMEWORK_EXTRAS.get((exc.name or "").partition(".")[0])
        hint = f": pip install 'scoped-a2a[{extra}]'" if extra else ""
        raise SystemExit(f"cannot import agent file {file_name!r}: it imports {exc.name!r}, "
                         f"which is not installed{hint}") from None
    except Exception as exc:
        del sys.modules[name]
        raise SystemExit(f"cannot import agent file {file_name!r}: importing it raised "
                         f"{type(exc).__name__}: {exc} (at {_raised_at(exc)})") from None
    return module


def _module_card(module: ModuleType) -> Any:
    for name in ("agent_card", "card"):
        card = getattr(module, name, None)
        if card is not None and not callable(card):
            return card
    return None


def adapt(obj: Any, spec: str, module: ModuleType | None = None) -> LoadedAgent:
    """The agent for ``obj`` (see the module docstring); SystemExit with one line if none."""
    from .server.app import A2AApp

    if isinstance(obj, A2AApp):
        return LoadedAgent(obj.agent, obj.card_overrides)
    # An object of a framework comes from a module that imported it: only then is the
    # adapter (which imports the framework) imported.
    # CrewAI's Agent is served through a2a-sdk too, though importing crewai does not import it.
    if "a2a.server.agent_execution" in sys.modules or "crewai" in sys.modules:
        from .adapters import a2a_sdk

        if a2a_sdk.recognises(obj):
            return LoadedAgent(a2a_sdk.from_executor(
                obj, card=_module_card(module) if module is not None else None))
    if "google.adk" in sys.modules:
        from .adapters import adk

        if adk.recognises(obj):
            return LoadedAgent(adk.from_adk(obj))
    if "pydantic_ai" in sys.modules:
        from .adapters import pydantic_ai

        if pydantic_ai.recognises(obj):
            return LoadedAgent(pydantic_ai.from_pydantic_ai(obj))
    if is_async_callable(obj):
        if not _takes_one_argument(obj):
            raise SystemExit(
                f"--agent {spec} cannot be called with one argument: an agent is "
                "`async def agent(ctx)` (other parameters need defaults)")
        return LoadedAgent(obj)
    raise SystemExit(
        f"--agent {spec} is a {type(obj).__name__}, not an agent: give an `async def "
        "agent(ctx)`, an a2a-sdk AgentExecutor, a Google ADK agent or a pydantic-ai Agent")


def load_agent(spec: str, *, backend: str | None = None) -> LoadedAgent:
    """Import ``MODULE:ATTR`` or ``FILE.py:ATTR`` (ATTR may be dotted) and make an agent of it.

    The current folder is put first on ``sys.path`` if it is not there, as ``python -m`` does.
    ``backend``: refuse an agent whose framework cannot run there. Raises SystemExit with one
    line for every refusal.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--agent must look like MODULE:ATTR or FILE.py:ATTR, not {spec!r}")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        module = _import_file(spec, module_name)  # a path, as a newcomer may give it
    else:
        module = _import(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"{module_name!r} has no attribute {attr!r}") from None
    try:
        loaded = adapt(obj, spec, module)
    except SystemExit:
        raise
    except Exception as exc:  # an adapter refusing (a framework's version, say): one line
        raise SystemExit(f"--agent {spec}: {exc}") from None
    if hasattr(loaded.agent, "card_fields"):
        loaded.card = {**loaded.agent.card_fields(), **loaded.card}
    if backend is not None:
        try:
            check_backend(loaded.agent, backend)
        except Exception as exc:
            raise SystemExit(str(exc)) from None
    return loaded


def load_card(path: str | None) -> dict[str, Any]:
    """The card fields of ``serve --card FILE`` (a JSON object); SystemExit with one line if the
    file is missing or is not a JSON object."""
    if path is None:
        return {}
    try:
        card = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SystemExit(f"--card {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SystemExit(f"--card {path}: not JSON ({exc})") from None
    if not isinstance(card, dict):
        raise SystemExit(f"--card {path}: must hold a JSON object of card fields, not "
                         f"{type(card).__name__}")
    return card
