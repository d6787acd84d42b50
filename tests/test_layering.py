"""The import structure of src/: no module import cycles, and a protocol layer without I/O.

The graph is built from the source with ``ast`` (nothing is imported), and counts every import:
module level, inside functions, and under ``if TYPE_CHECKING:``. A type-only import that points up
a layer is still an upward dependency; the fix is to move the shared type (a Protocol, a small
dataclass) down to the layer both sides can import.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "scoped_a2a"

# The protocol layer is types, encoding and errors; anything that does I/O lives above it.
IO_PACKAGES = {"anyio", "trio", "asyncio", "httpx", "hypercorn", "coredis", "socket", "uvicorn"}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, set[str]]:
    """What ``name`` imports: in-package modules under "internal", top-level names under
    "external"."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    internal: set[str] = set()
    external: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                if target.split(".")[0] == PACKAGE:
                    internal.add(target)
                else:
                    external.add(target.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != PACKAGE:
                external.add(base.split(".")[0])
                continue
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import Name`` the module.
                sub = f"{base}.{alias.name}"
                internal.add(sub if sub in modules else base)
    internal.discard(name)
    unknown = internal - modules.keys()
    assert not unknown, f"{name} imports modules that do not exist: {sorted(unknown)}"
    return {"internal": internal, "external": external}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules)["internal"] for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# Lowest first: a package may import only the packages before it in this list.
LAYERS = ["protocol", "timeouts", "observe", "store", "client", "runtime", "push", "server",
          "testing", "cli"]
# No exceptions: the worker of the durable queues lives in the runtime (runtime/durable_worker.py).
ABOVE_ITS_PACKAGE: set[str] = set()


def _describe(cycle: list[str], graph: dict[str, set[str]]) -> str:
    members = set(cycle)
    edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph[a] & members)]
    return "; ".join(edges)


def test_no_import_cycles() -> None:
    graph = _graph()
    assert len(graph) > 20, "the scan found too few modules: is SRC right?"
    cycles = _cycles(graph)
    assert not cycles, "import cycles (move the shared type to the lower layer):\n" + "\n".join(
        _describe(cycle, graph) for cycle in cycles
    )


def test_cycle_detection_finds_a_cycle() -> None:
    # The checker itself: a two-module cycle and a three-module cycle are both reported.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert _cycles(graph) == [["a", "b"], ["c", "d", "e"]]


def test_each_layer_imports_only_layers_below_it() -> None:
    rank = {f"{PACKAGE}.{name}": i for i, name in enumerate(LAYERS)}

    def layer(module: str) -> str | None:
        top = ".".join(module.split(".")[:2])
        return top if top in rank else None

    upward = []
    for module, targets in _graph().items():
        here = layer(module)
        if here is None or module in ABOVE_ITS_PACKAGE:
            continue
        for target in sorted(targets):
            there = layer(target)
            if there is not None and rank[there] > rank[here]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_nothing_below_the_command_line_imports_it() -> None:
    # cli/ is the top: the library (every other module of the package, whether in a layer of
    # LAYERS or not: agent_loading, adapters, agents, temporal) never imports it. Only the
    # ``python -m scoped_a2a`` entry module does.
    modules = _modules()
    cli = f"{PACKAGE}.cli"
    entry = {f"{PACKAGE}.__main__"}
    offenders = sorted(
        f"{name} -> {target}"
        for name, path in modules.items()
        if name != cli and not name.startswith(cli + ".") and name not in entry
        for target in _imports(name, path, modules)["internal"]
        if target == cli or target.startswith(cli + ".")
    )
    assert not offenders, "modules below cli/ import it:\n" + "\n".join(offenders)
    assert any(m.startswith(cli + ".") for m in modules), "no cli/ package: is SRC right?"


def test_client_library_keeps_no_terminal_code() -> None:
    # What the commands print and parse lives in cli/: no client module uses argparse.
    modules = _modules()
    offenders = sorted(
        name for name, path in modules.items() if name.startswith(f"{PACKAGE}.client")
        and "argparse" in _imports(name, path, modules)["external"])
    assert not offenders, f"client/ modules with command-line code: {offenders}"


def test_protocol_layer_does_no_io() -> None:
    modules = _modules()
    offenders = {}
    for name, path in modules.items():
        if name != f"{PACKAGE}.protocol" and not name.startswith(f"{PACKAGE}.protocol."):
            continue
        found = _imports(name, path, modules)
        io = found["external"] & IO_PACKAGES
        upward = {m for m in found["internal"] if not m.startswith(f"{PACKAGE}.protocol")}
        if io or upward:
            offenders[name] = sorted(io | upward)
    assert not offenders, f"protocol/ must import no I/O and nothing above it: {offenders}"


def test_client_never_imports_the_server() -> None:
    # The gRPC client shares the server's wire code only through protocol/grpc/ (framing,
    # status table, messages): a client import of server/ would drag hypercorn's app in.
    modules = _modules()
    offenders = sorted(
        f"{name} -> {target}"
        for name, path in modules.items() if name.startswith(f"{PACKAGE}.client")
        for target in _imports(name, path, modules)["internal"]
        if target.startswith(f"{PACKAGE}.server")
    )
    assert not offenders, "client/ imports server/:\n" + "\n".join(offenders)


def test_protobuf_stays_out_of_the_core_client() -> None:
    # protobuf is the [grpc] extra: of the client, only its gRPC transport (imported when a
    # gRPC interface is chosen) may import it, directly or through protocol/grpc/.
    modules = _modules()
    # client.grpc_call: one call of that transport, imported by it alone.
    allowed = {f"{PACKAGE}.client.grpc", f"{PACKAGE}.client.grpc_call"}
    offenders = []
    for name, path in modules.items():
        if not name.startswith(f"{PACKAGE}.client") or name in allowed:
            continue
        tree = ast.parse(path.read_text(), str(path))
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        found = _imports(name, path, modules)
        grpc_internal = {m for m in found["internal"] if ".protocol.grpc" in m
                         or m == f"{PACKAGE}.client.grpc"}
        eager = [n for n in top_level if isinstance(n, ast.ImportFrom)
                 and (n.module or "").endswith(("grpc", "grpc.messages", "grpc.status"))]
        if "google" in found["external"] or (grpc_internal and eager):
            offenders.append(name)
    assert not offenders, f"these client modules import protobuf eagerly: {offenders}"


def test_no_store_backend_imports_another() -> None:
    # What the stores share (sealing, retention policy, log codecs, claims, leases) lives in
    # store/ itself; a backend package (store/sqlite/, store/redis/, store/postgres/) never
    # reaches into another's, so each can change, or be left uninstalled, on its own.
    modules = _modules()
    backends = {f"{PACKAGE}.store.{b}" for b in ("sqlite", "redis", "postgres")}
    assert backends <= modules.keys(), "a store backend package is missing: is SRC right?"

    def backend(module: str) -> str | None:
        return next((b for b in backends if module == b or module.startswith(b + ".")), None)

    offenders = sorted(
        f"{name} -> {target}"
        for name, path in modules.items() if (here := backend(name)) is not None
        for target in _imports(name, path, modules)["internal"]
        if backend(target) not in (None, here)
    )
    assert not offenders, "store backends importing each other:\n" + "\n".join(offenders)


# Imported by src/ but installed by the declared package named (not declared themselves): the
# HTTP/1.1 and HTTP/2 layers hypercorn runs on, whose internals server/ adjusts (and h2, which
# client/h2conn.py also drives for the gRPC client), and what an extra brings with it. Declaring
# one of them (with the floor our use needs) takes it off this list.
INSTALLED_WITH = {
    "h11": "hypercorn", "h2": "hypercorn", "hyperframe": "hypercorn", "priority": "hypercorn",
    "cryptography": "pyjwt[crypto] (the [auth] extra)",
    "pydantic_core": "pydantic-ai-slim (the [pydantic-ai] extra)",
}


def test_every_package_the_source_imports_is_declared() -> None:
    # A module imported by src/ (anywhere: module level or inside a function) comes from a
    # dependency of pyproject.toml, core or extra, or is listed above. sniffio was imported by
    # the core while only trio's (and once anyio's) dependencies brought it in.
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]

    def name(requirement: str) -> str:
        return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")

    declared = {name(r) for r in project["dependencies"]}
    for requirements in project["optional-dependencies"].values():
        declared |= {name(r) for r in requirements}
    distributions = packages_distributions()
    modules = _modules()
    imported: dict[str, str] = {}
    for module, path in modules.items():
        for top in _imports(module, path, modules)["external"]:
            if top and top not in sys.stdlib_module_names:
                imported.setdefault(top, module)
    assert {"anyio", "httpx", "msgspec"} <= imported.keys(), "the scan found too few imports"
    undeclared = sorted(
        f"{top} (from {', '.join(distributions[top])}; imported by {module})"
        for top, module in imported.items()
        # Not installed here: which distribution it comes from cannot be told.
        if top in distributions and top not in INSTALLED_WITH
        and not {name(d) for d in distributions[top]} & declared)
    assert not undeclared, "imported but not in pyproject.toml's dependencies:\n" + "\n".join(
        undeclared)
