"""The package's shape, checked: no import cycles, DynamoDB only in its own sub-package, no
backend reached but through the store registry, a docstring in every room, every sub-package
shipped."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "awsflock"
DYNAMODB = "awsflock.stores.dynamodb"
#: Who outside the DynamoDB sub-package may import it: the public names (``DynamoDBStore``,
#: ``fenced_update``). Everything else opens stores through the registry (``stores.kinds``).
DYNAMODB_USERS = {"awsflock"}
#: The modules of ``awsflock.stores`` that are not a backend.
NOT_BACKENDS = {"awsflock.stores", "awsflock.stores.kinds", "awsflock.stores.programs"}
#: ... nor the rules that find the store a caller names (the CLI's and ``connect()``'s).
RESOLVE = "awsflock.stores.resolve"
NOT_BACKENDS |= {RESOLVE}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module this one imports, anywhere in it (TYPE_CHECKING and function bodies too)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return found


GRAPH = {name: {m for m in _imports(name, path) if m in MODULES} for name, path in MODULES.items()}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_there_are_no_import_cycles():
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_the_cycle_finder_finds_a_cycle():
    GRAPH["awsflock.errors"].add("awsflock.lock.lease")
    try:
        assert _cycle() is not None
    finally:
        GRAPH["awsflock.errors"].discard("awsflock.lock.lease")


def test_only_the_dynamodb_store_imports_botocore():
    for name, path in MODULES.items():
        if name.startswith(DYNAMODB):
            continue
        sdk = {m for m in _imports(name, path) if m.split(".")[0] in ("botocore", "boto3")}
        sdk |= {m for m in _imports(name, path) if m.startswith("mypy_boto3")}
        assert not sdk, f"{name} imports {sdk}"


def test_only_the_named_modules_reach_into_the_dynamodb_store():
    for name in MODULES:
        if name.startswith(DYNAMODB) or name in DYNAMODB_USERS:
            continue
        inside = {m for m in GRAPH[name] if m.startswith(DYNAMODB)}
        assert not inside, f"{name} imports {inside}"


def _backends_reached(graph: dict[str, set[str]], under: str) -> dict[str, set[str]]:
    """The modules under ``under`` that import a backend (anything in ``awsflock.stores`` but
    the registry and the request layer), and what they import."""
    found = {}
    for name, imported in graph.items():
        if name == under or name.startswith(under + "."):
            backends = {
                m
                for m in imported
                if m.startswith("awsflock.stores.")
                and m not in NOT_BACKENDS
                and not m.startswith(SHARED)
            }
            if backends:
                found[name] = backends
    return found


def test_the_cli_imports_no_backend_package():
    # Stores are chosen and opened through the registry alone (``awsflock.stores.kinds``).
    assert _backends_reached(GRAPH, "awsflock.cli") == {}


def test_the_cli_rule_finds_a_planted_violation(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""Planted."""\n\ndef f():\n    from awsflock.stores.postgresql import schema\n'
    )
    graph = {**GRAPH, "awsflock.cli.planted": _imports("awsflock.cli.planted", planted)}
    assert _backends_reached(graph, "awsflock.cli") == {
        "awsflock.cli.planted": {"awsflock.stores.postgresql.schema"}
    }


def test_the_lease_logic_speaks_only_to_the_store_interface():
    for name in (
        "awsflock.lock.acquisition",
        "awsflock.lock.waiting",
        "awsflock.lock.admin",
        "awsflock.names",
    ):
        assert not {m for m in GRAPH[name] if m.startswith("awsflock.stores")}, name


#: The stores' packages: each a backend but ``remote``, the layer they share.
SHARED = "awsflock.stores.remote"
BACKENDS = ("memory", "dynamodb", "postgresql", "redis")
#: Threads a backend may start that are not request threads: a waiter's pub/sub reader, and
#: the dev server's (each named for what it is).
OTHER_THREADS = {"awsflock.stores.redis.wake", "awsflock.stores.dynamodb.devserver"}


def _backend_of(name: str) -> str | None:
    parts = name.split(".")
    if len(parts) < 3 or parts[1] != "stores":
        return None
    top = parts[2].split("_")[0]  # memory_records, memory_kind: the memory store's
    return top if top in BACKENDS else None


def _cross_backend(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The backend modules that import another backend's, and what they import."""
    found = {}
    for name, imported in graph.items():
        mine = _backend_of(name)
        if mine is None:
            continue
        others = {m for m in imported if _backend_of(m) not in (None, mine)}
        if others:
            found[name] = others
    return found


def test_no_backend_imports_another():
    assert _cross_backend(GRAPH) == {}


def test_the_backend_rule_finds_a_planted_violation(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""Planted."""\n\nfrom awsflock.stores.postgresql import translate\n')
    name = "awsflock.stores.redis.planted"
    graph = {**GRAPH, name: _imports(name, planted)}
    assert _cross_backend(graph) == {name: {"awsflock.stores.postgresql.translate"}}


def _thread_starters(sources: dict[str, str]) -> set[str]:
    """The modules under ``awsflock.stores`` outside the shared layer that start a thread or
    name one a request thread."""
    found = set()
    for name, text in sources.items():
        if not name.startswith("awsflock.stores.") or name.startswith(SHARED):
            continue
        if "awsflock-request" in text:
            found.add(name)
        if name in OTHER_THREADS:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr in ("Thread", "start_new_thread"):
                found.add(name)
    return found


def test_only_the_shared_layer_starts_request_threads():
    sources = {n: p.read_text() for n, p in MODULES.items()}
    assert _thread_starters(sources) == set()
    places = [
        (n, line)
        for n, text in sources.items()
        for line in text.splitlines()
        if 'name="awsflock-request"' in line
    ]
    assert len(places) == 1 and places[0][0] == "awsflock.stores.remote.worker", places


def test_the_thread_rule_finds_a_planted_violation():
    planted = (
        '"""Planted."""\n\nimport threading\n\n'
        "def f():\n    threading.Thread(target=print, daemon=True).start()\n"
    )
    sources = {"awsflock.stores.postgresql.planted": planted}
    assert _thread_starters(sources) == {"awsflock.stores.postgresql.planted"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_what_it_is_for(name):
    tree = ast.parse(MODULES[name].read_text())
    assert ast.get_docstring(tree), f"{name} has no module docstring"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_every_sub_package_is_shipped():
    import tomllib
    from setuptools import find_packages

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(str(PACKAGE.parent), include=find["include"]))
    packages = {n for n, p in MODULES.items() if p.name == "__init__.py"}
    assert packages <= shipped


def _unshipped_data(package: Path, patterns: list[str]) -> set[str]:
    """The files in ``package`` that are not Python (the step programs, py.typed) and that no
    package-data pattern of the top package ships (setuptools globs them the same way)."""
    files = {
        str(p.relative_to(package))
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    shipped = {str(p.relative_to(package)) for pattern in patterns for p in package.glob(pattern)}
    return files - shipped


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_every_data_file_is_shipped():
    # The Lua and SQL programs are read at run time: one left out of the wheel would fail
    # every step of its store in an installed awsflock, and nothing else would notice.
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["awsflock"]
    assert (PACKAGE / "stores" / "redis" / "steps.lua").is_file()
    assert _unshipped_data(PACKAGE, patterns) == set()


def test_the_data_file_rule_finds_a_planted_violation(tmp_path):
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "steps.lua").write_text("return 1\n")
    (tmp_path / "stores" / "steps.tcl").write_text("return 1\n")
    assert _unshipped_data(tmp_path, ["**/*.lua"]) == {"stores/steps.tcl"}


#: The layers, lowest first: a module may import its own layer and those below, never above.
#: The lock logic reaches stores only through the registry (``stores.kinds``), which it may
#: use to open the default store, and the rules that find the store a URL names
#: (``stores.resolve``, for ``connect()``).
LAYERS = (
    (
        "core",
        (
            "protocol",
            "protocol_async",
            "records",
            "errors",
            "clock",
            "clock_async",
            "durations",
            "text",
            "names",
            "metrics",
            "extras",
            "sets",
            "shares",
            "state",
            "wakers",
        ),
    ),
    ("stores", ("stores",)),
    ("lock", ("lock", "aio")),
    ("supervise", ("supervise",)),
    ("cli", ("cli", "__main__")),
)


def _layer(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) < 2:
        return None  # the package itself: the public names, from every layer
    for rank, (_, tops) in enumerate(LAYERS):
        if parts[1] in tops:
            return rank
    raise AssertionError(f"{name} is in no layer: add it to LAYERS")


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up a layer, or from the lock logic into a store but the registry."""
    found = []
    for name, imported in sorted(graph.items()):
        rank = _layer(name)
        for other in sorted(imported):
            target = _layer(other)
            if rank is None or target is None:
                continue
            if target > rank or (
                LAYERS[rank][0] == "lock"
                and LAYERS[target][0] == "stores"
                and other not in ("awsflock.stores", "awsflock.stores.kinds", RESOLVE)
            ):
                found.append(f"{name} -> {other}")
    return found


def test_no_import_points_up_a_layer():
    assert _upward(GRAPH) == []


def test_the_layer_rule_finds_a_planted_violation():
    graph = {**GRAPH, "awsflock.lock.planted": {"awsflock.supervise.runner"}}
    graph["awsflock.records"] = GRAPH["awsflock.records"] | {"awsflock.lock.lease"}
    graph["awsflock.lock.leak"] = {"awsflock.stores.memory"}
    assert _upward(graph) == [
        "awsflock.lock.leak -> awsflock.stores.memory",
        "awsflock.lock.planted -> awsflock.supervise.runner",
        "awsflock.records -> awsflock.lock.lease",
    ]
