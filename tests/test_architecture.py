"""Dependencies point one way.

The layers, lowest first (each may import the ones before it, never those after):

    base     zuke/_errors, _clock, _duration, _redact,       the vocabulary everyone shares
             _text, _inert, _version, _held_back
    state    zuke/state/                                     records, stores, the one CAS loop
    engine   zuke/_engine/ and the authoring modules          plan, schedule, record a run
             (_build, _target, _params, _lock_settings, _loader, ...)
    runs     zuke/runs/                                      what run-management commands call
    mcp      zuke/mcp/                                       the MCP server's tools (``zuke mcp``)
    cli      zuke/cli/                                       the only package that parses argv

Beside them: ``zuke/_serve/`` (the state service) and ``zuke/testing/`` (the
shipped store contract kit) stand on base and state only — a service or a
store test needs no engine. ``zuke/__init__.py`` and ``zuke/_main.py`` (the
public surface) take base, state and engine; ``run()`` imports the CLI only
when it is called. ``zuke/__main__.py`` is the entry point and may import
anything. Imports under ``if TYPE_CHECKING:`` are annotations, not
dependencies, and are not counted.

Also: zuke never imports zuke_gh; only zuke/cli imports click, and nothing
imports typer; only zuke/mcp/server.py imports the MCP SDK (an optional
extra); ``import zuke`` loads neither the CLI nor click, httpx or
cryptography, nor the engine or asyncio; and a management command (``zuke runs
list``, ``zuke cancel``) loads neither typer nor pydantic, and the engine's
scheduler and asyncio only if a build file it loads does.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.pg_support import PgCluster

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "zuke"

BASE_MODULES = {
    "_errors", "_clock", "_duration", "_redact", "_text", "_inert", "_version", "_held_back",
}  # fmt: skip
#: layer -> the layers it may import
ALLOWED: dict[str, set[str]] = {
    "base": {"base"},
    "state": {"base", "state"},
    "engine": {"base", "state", "engine"},
    "runs": {"base", "state", "engine", "runs"},
    "mcp": {"base", "state", "engine", "runs", "mcp"},
    "cli": {"base", "state", "engine", "runs", "mcp", "serve", "cli"},
    "serve": {"base", "state", "serve"},
    "testing": {"base", "state", "testing"},
    "api": {"base", "state", "engine", "api"},
    "entry": {"base", "state", "engine", "runs", "mcp", "cli", "serve", "testing", "api", "entry"},
}
#: (file, module) imports allowed across the layers because they happen only when called
LAZY = {("zuke/_main.py", "zuke.cli")}


def layer_of_module(module: str) -> str:
    """The layer of a dotted ``zuke`` module name."""
    parts = module.split(".")
    if parts == ["zuke"] or parts[1] in ("__init__", "_main"):
        return "api"
    top = parts[1]
    if top == "__main__":
        return "entry"
    packages = {"state": "state", "_engine": "engine", "runs": "runs", "cli": "cli",
                "_serve": "serve", "testing": "testing", "mcp": "mcp"}  # fmt: skip
    if top in packages:
        return packages[top]
    return "base" if top in BASE_MODULES else "engine"  # the authoring modules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement in ``tree``, nested ones too (function and class bodies, branches,
    handlers, ``match`` cases): what an import or an ``if TYPE_CHECKING:`` can be. Walking
    these alone, not every expression node as ``ast.walk`` does, made each worker's first
    walk over all the modules several times cheaper (issue 28 §7)."""
    todo: list[ast.stmt] = list(reversed(tree.body))
    while todo:
        node = todo.pop()
        yield node
        nested: list[ast.stmt] = []
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list):
                nested += value
        for holder in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            nested += holder.body
        todo.extend(reversed(nested))


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in statements(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


@cache
def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once a session: a dozen tests here walk every module
    (about 210 files), and parsing them again for each was most of these tests' time."""
    return ast.parse(path.read_text(), filename=str(path))


@cache
def imports_of(
    path: Path, *, module: str | None = None, runtime_only: bool = False
) -> frozenset[str]:
    """Every module ``path`` (the module ``module``) imports, relative imports resolved."""
    tree = parsed(path)
    skip = _type_checking_lines(tree) if runtime_only else set()
    package = (module or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in statements(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                found.add(node.module)
    return frozenset(found)


def modules_importing(package: str, prefix: str) -> list[str]:
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / package).rglob("*.py")
        if any(m == prefix or m.startswith(prefix + ".") for m in imports_of(path))
    )


def file_violations(path: Path, module: str, shown: str) -> list[str]:
    """``file imports module (layer X may not import layer Y)`` for each breach in one file."""
    layer = layer_of_module(module)
    found = []
    for imported in sorted(imports_of(path, module=module, runtime_only=True)):
        if imported != "zuke" and not imported.startswith("zuke."):
            continue
        target = layer_of_module(imported)
        if target not in ALLOWED[layer] and (shown, imported) not in LAZY:
            found.append(f"{shown} imports {imported} ({layer} may not import {target})")
    return found


def layer_violations(layer: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if layer_of_module(module) == layer:
            found += file_violations(path, module, str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    assert layer_violations(layer) == []


def test_a_violation_names_the_file_and_the_import(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import records\n"
        "from zuke._engine.run import execute\n"
        "if TYPE_CHECKING:\n"
        "    from zuke.cli import main\n"
        "def later():\n"
        "    import zuke.runs\n"
    )
    assert file_violations(bad, "zuke.state.probe", "zuke/state/probe.py") == [
        "zuke/state/probe.py imports zuke._engine.run (state may not import engine)",
        "zuke/state/probe.py imports zuke.runs (state may not import runs)",
    ]


def module_graph(
    packages: tuple[str, ...] = ("zuke", "zuke_gh"), *, annotations: bool = False
) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports at run time, deferred imports in
    functions included (``if TYPE_CHECKING:`` blocks are annotations, not dependencies).

    ``from pkg import sub`` names the submodule ``pkg.sub``; a package's ``__init__``
    is an edge only when a name is taken from the package itself. With ``annotations``,
    the ``if TYPE_CHECKING:`` imports are edges too.
    """
    paths = {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}
    modules = {name.removesuffix(".__init__"): path for name, path in paths.items()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = parsed(path)
        skip = set() if annotations else _type_checking_lines(tree)
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges: set[str] = set()
        for node in statements(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                subs = {f"{source}.{a.name}" for a in node.names} & modules.keys()
                edges |= subs
                if len(subs) < len(node.names):
                    edges.add(source)
        known = set()
        for edge in edges:
            while edge and edge not in modules:
                edge = edge.rpartition(".")[0]
            if edge and edge != name:
                known.add(edge)
        graph[name] = known
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others_not_even_deferred() -> None:
    """An import circle makes a module's meaning depend on import order; a deferred import
    only hides one. Each circle is named with the imports that close it."""
    graph = module_graph()
    circles = import_circles(graph)
    named = [
        " ; ".join(f"{a} -> {b}" for a in group for b in sorted(graph[a]) if b in group)
        for group in circles
    ]
    assert named == []


#: type-only circles left (issue 25 §9): none; a new one fails the test below
TYPE_ONLY_CIRCLES_LEFT: list[list[str]] = []


def test_no_type_only_import_circles() -> None:
    """A circle closed only by an ``if TYPE_CHECKING:`` import still ties two modules'
    meanings together (one cannot be read, or moved, without the other); the last ones
    were broken by naming what one side needs as a protocol (``fan_host.FanHost``,
    ``observer.RecordWriter``, ``_fs_shape.FsStore``, ``_params.ParamShape``) or by
    moving a shared type to its own module (``options.RunOptions``, ``_target_handle``)."""
    circles = import_circles(module_graph(annotations=True))
    assert sorted(circles) == sorted(TYPE_ONLY_CIRCLES_LEFT)


def test_the_module_map_in_the_architecture_doc_is_current() -> None:
    """``docs/architecture.md``'s module table is made from the modules' docstrings; a module
    added, renamed or re-described without ``python -m tests.module_map`` leaves it stale."""
    from tests import module_map

    assert module_map.current(), "docs/architecture.md has lost the module map's markers"
    assert module_map.current() == module_map.table(), (
        "docs/architecture.md's module map is stale: run `python -m tests.module_map`"
    )


def test_every_module_says_what_it_owns() -> None:
    """The map is only as good as the first paragraph of each module's docstring."""
    from tests import module_map

    assert [p for p in module_map.modules() if not module_map.summary(p)] == []


def test_the_circle_finder_finds_a_deferred_circle(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_modules_are_put_in_the_layer_their_folder_says() -> None:
    assert layer_of_module("zuke._errors") == "base"
    assert layer_of_module("zuke.state.update") == "state"
    assert layer_of_module("zuke._engine.writer") == "engine"
    assert layer_of_module("zuke._build") == "engine"
    assert layer_of_module("zuke.runs.cancel") == "runs"
    assert layer_of_module("zuke.cli.console") == "cli"
    assert layer_of_module("zuke") == "api"


def test_core_never_imports_the_github_package() -> None:
    assert modules_importing("zuke", "zuke_gh") == []


def test_only_the_cli_package_imports_click() -> None:
    offenders = [m for m in modules_importing("zuke", "click") if not m.startswith("zuke/cli/")]
    assert offenders == []


def test_no_module_imports_typer_or_pydantic() -> None:
    assert modules_importing("zuke", "typer") == []
    assert modules_importing("zuke", "pydantic") == ["zuke/mcp/server.py"]  # the SDK's own


def test_only_the_mcp_server_module_imports_the_mcp_sdk() -> None:
    assert modules_importing("zuke", "mcp") == ["zuke/mcp/server.py"]
    assert modules_importing("zuke", "mcp_types") == ["zuke/mcp/server.py"]


def test_importing_zuke_loads_no_heavy_dependency_and_not_the_cli() -> None:
    probe = (
        "import sys, zuke; "
        "print(sorted({'typer', 'pydantic', 'httpx', 'cryptography', 'rich', 'click', 'zuke.cli',"
        " 'mcp', 'zuke.mcp'}"
        " & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_zuke_loads_neither_the_engine_nor_asyncio() -> None:
    probe = "import sys, zuke; print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('zuke._engine')))"  # noqa: E501
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: Prints every module that ``zuke <argv>`` loaded (argv is sys.argv[1:]).
_COMMAND_PROBE = """
import io, json, sys
from zuke.cli import main
try:
    main(sys.argv[1:], out=io.StringIO(), err=io.StringIO())
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def _is_heavy(module: str) -> bool:
    """The engine, asyncio, typer, pydantic, the MCP SDK: what a management command skips."""
    return module in {"asyncio", "typer", "pydantic", "mcp"} or module.startswith(
        ("zuke._engine", "mcp.", "zuke.mcp")
    )


def _loaded_by(
    argv: list[str], cwd: Path, *, which: Callable[[str], bool] = _is_heavy
) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    env["ZUKE_STATE_DIR"] = str(cwd / "state")  # an empty store
    out = subprocess.run(
        [sys.executable, "-c", _COMMAND_PROBE, *argv],
        capture_output=True, text=True, check=True, cwd=cwd, env=env,
    )  # fmt: skip
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])  # after any help text
    return [m for m in loaded if which(m)]


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["runs", "list", "--status", "suspended", "--limit", "20"],
        ["runs", "list", "--counts", "--json"],
        ["runs", "show", "no-such-run"],
        ["runs", "--help"],
        ["runs", "list", "--help"],
        ["cancel", "--help"],
        ["cancel", "no-such-run", "--wait", "0s"],
    ],
)
def test_a_management_command_without_a_build_file_loads_no_engine_asyncio_typer_or_pydantic(
    argv: list[str], tmp_path: Path
) -> None:
    assert _loaded_by(argv, tmp_path) == []


def test_runs_list_beside_a_build_file_loads_its_authoring_modules_but_not_the_scheduler(
    tmp_path: Path,
) -> None:
    (tmp_path / "build.py").write_text(
        "from zuke import Build, Context, target\n"
        "class Release(Build):\n"
        "    @target\n"
        "    def compile(self, t):\n"
        "        return t.executes(self._compile)\n"
        "    def _compile(self, ctx: Context) -> None:\n"
        "        pass\n"
    )
    loaded = _loaded_by(["runs", "list"], tmp_path)
    assert "zuke._engine.context" in loaded  # the build file's `Context`: it was loaded
    assert not {"asyncio", "zuke._engine.run", "zuke._engine.scheduler"} & set(loaded)
    assert not {"typer", "pydantic"} & set(loaded)


def test_runs_list_loads_neither_filelock_nor_openssl_nor_the_cancel_module(
    tmp_path: Path,
) -> None:
    # A listing takes no contended mutex, compares no token and cancels nothing:
    # these load on first use (together about 12 ms of start-up).
    lazy = {"filelock", "hmac", "_hashlib", "zuke.runs.cancel", "zuke._provenance"}
    for argv in (["runs", "list", "--limit", "20"], ["runs", "list", "--status", "suspended"]):
        assert _loaded_by(argv, tmp_path, which=lazy.__contains__) == []


#: a build of one target that does nothing: what a command loads for a build, and no more
ONE_TARGET_BUILD = (
    "from zuke import Build, target\n"
    "class Release(Build):\n"
    "    @target\n"
    "    def compile(self, t):\n"
    "        return t.executes(lambda: None)\n"
)


def _mcp_modules(module: str) -> bool:
    return module in {"mcp", "mcp_types", "zuke.mcp"} or module.startswith(("mcp.", "zuke.mcp."))


def test_list_and_runs_beside_a_build_file_never_load_the_mcp_sdk(tmp_path: Path) -> None:
    (tmp_path / "build.py").write_text(ONE_TARGET_BUILD)
    for argv in (["--list"], ["--list", "--json"], ["runs", "list"], ["mcp", "--help"]):
        assert _loaded_by(argv, tmp_path, which=_mcp_modules) == [], argv


def test_serve_loads_no_engine(tmp_path: Path) -> None:
    assert [m for m in _loaded_by(["serve", "--help"], tmp_path) if m != "asyncio"] == []


def test_importing_zuke_loads_only_the_errors() -> None:
    """``import zuke`` stays near bare Python's start-up (issue 19: ≤ 25 ms): the store's
    values (frozen dataclasses, with ``dataclasses`` and ``inspect``) and ``typing`` load on
    first use."""
    probe = (
        "import sys; before = set(sys.modules); import zuke; "
        "print(sorted(m for m in set(sys.modules) - before"
        " if m.startswith('zuke') or m in ('typing', 'dataclasses', 'inspect')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['zuke', 'zuke._errors']"
    names = "import zuke; print(zuke.Signal.__module__, zuke.Conflict.__module__)"
    out = subprocess.run([sys.executable, "-c", names], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["zuke.state.records", "zuke.state._protocol"]


def test_list_graph_and_help_of_a_build_load_no_asyncio_nor_the_run(tmp_path: Path) -> None:
    """``--list``, ``graph`` and ``--help`` only load the build (``zuke._engine.loading``):
    asyncio, the scheduler, the writer and the claims are about half of their start-up."""
    (tmp_path / "build.py").write_text(
        "from zuke import Build, parameter, target\n"
        "class Release(Build):\n"
        "    env = parameter('where').default('sit')\n"
        "    @target\n"
        "    def compile(self, t):\n"
        "        return t.description('compile').executes(lambda: None)\n"
    )
    heavy = {"asyncio", "zuke._engine.run", "zuke._engine.scheduler", "zuke._engine.claims"}
    for argv in (["--list"], ["--list", "--json"], ["graph"], ["--help"]):
        loaded = _loaded_by(argv, tmp_path, which=lambda m: True)
        assert "zuke._engine.loading" in loaded, argv  # the build was loaded
        assert not heavy & set(loaded), argv


def test_reading_commands_on_postgres_load_one_driver_and_no_hashing(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    """``runs list``, ``runs show`` and ``locks list`` on ``ZUKE_STATE=postgresql://`` load
    psycopg2 and nothing else of a driver (psycopg 3 alone is 0.12 s of start-up), and a
    listing hashes no token (no OpenSSL ``_hashlib``)."""
    from zuke.state.postgres import PostgresStateStore
    from zuke.testing.store_contract import sample_holder, sample_record

    url = pg_cluster.create_database()
    store = PostgresStateStore(url)
    try:
        record = sample_record()
        store.create_run(record)
        store.acquire_lock("env-sit", sample_holder(record.id), 60_000)
    finally:
        store.close()
    probe = (
        "import io, json, sys\n"
        "from zuke.cli import main\n"
        "out = io.StringIO()\n"
        "code = main(sys.argv[1:], out=out, err=sys.stderr)\n"
        "print(json.dumps([code, out.getvalue(), sorted(m for m in sys.modules"
        " if m.startswith('psycopg') or m == '_hashlib')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    env["ZUKE_STATE"] = url
    for argv in (["runs", "list", "--limit", "20"], ["runs", "show", record.id], ["locks", "list"]):
        child = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=True,
        )  # fmt: skip
        code, out, loaded = json.loads(child.stdout.splitlines()[-1])
        assert code == 0 and (record.id in out or "env-sit" in out), (argv, out, child.stderr)
        assert "_hashlib" not in loaded, argv
        assert {m.partition(".")[0] for m in loaded} == {"psycopg2"}, argv


#: the durable side of a run: a run with no store needs none of it (about 10 ms of start-up)
_DURABLE = (
    "zuke._engine.durable",
    "zuke._engine.claims",
    "zuke._engine.writer",
    "zuke._engine.gates",
    "zuke._engine.walk",
    "zuke._engine.held",
)


def test_a_run_without_a_store_loads_no_durable_side(tmp_path: Path) -> None:
    """A run that records nothing — a chain without ``--state``, a fan-out under
    ``ZUKE_STATE=off`` — loads neither the durable run, its claims, writer and gates, nor
    the compensation walk; a run with a store loads the durable side, and the walk only
    once it is cancelled (issue 28 §1: a tenth of a stateful run's imports)."""
    (tmp_path / "build.py").write_text(
        "from zuke import Build, target\n"
        "class Release(Build):\n"
        "    @target\n"
        "    def compile(self, t):\n"
        "        return t.executes(lambda: None)\n"
        "    @target\n"
        "    def batch(self, t):\n"
        "        return t.for_each(lambda: ['a', 'b'],\n"
        "                          lambda item, index: {'s': target().executes(lambda: None)})\n"
    )
    probe = (
        "import io, json, sys\n"
        "from zuke.cli import main\n"
        "code = main(sys.argv[1:], out=io.StringIO(), err=sys.stderr)\n"
        f"print(json.dumps([code, sorted(set({_DURABLE!r}) & set(sys.modules))]))\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    cases = [
        (["compile"], base, []),
        (["batch"], {**base, "ZUKE_STATE": "off"}, []),
        (["--state", "compile"], base, sorted(set(_DURABLE) - {"zuke._engine.walk"})),
    ]
    for argv, env, expected in cases:
        child = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=True,
        )  # fmt: skip
        code, loaded = json.loads(child.stdout.splitlines()[-1])
        assert code == 0, (argv, child.stderr)
        assert loaded == expected, argv


def test_a_run_without_a_store_loads_no_uuid_difflib_or_getpass(tmp_path: Path) -> None:
    """A run's id, its typo hint and its OS user are made without ``uuid`` (which loads
    ``platform``), ``difflib`` or ``getpass`` (``termios``): about 3 ms of every run's
    start-up (issue 28 §1). A typo still gets its hint, loading ``difflib`` then."""
    (tmp_path / "build.py").write_text(ONE_TARGET_BUILD)
    lazy = {"uuid", "platform", "difflib", "getpass", "termios"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    for argv, expected in ((["compile"], []), (["compil"], ["difflib"])):
        out = subprocess.run(
            [sys.executable, "-c", _COMMAND_PROBE, *argv],
            capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
        )  # fmt: skip
        assert sorted(lazy & set(json.loads(out.stdout.splitlines()[-1]))) == expected, argv


#: what ``zuke resume RUN --signal NAME`` on Postgres does without (issue 28 §3: its start-up
#: is most of the command's time to the next body)
_RESUME_SKIPS = (  # ssl: psycopg2's C part; the walk and the compensations: a rollback's
    "uuid", "platform", "difflib", "getpass", "termios",
    "zuke._engine.walk", "zuke._engine.compensation", "zuke.runs.compensate",
    "zuke._engine.gate_cancel",
)  # fmt: skip

#: ``zuke <argv>`` as the console script runs it; at exit, which of ``skips`` it loaded
_SCRIPT_PROBE = """
import atexit, json, sys
skips = set(json.loads(sys.argv[1]))
atexit.register(lambda: print(json.dumps(sorted(skips & set(sys.modules)))))
sys.argv = ["zuke", *sys.argv[2:]]
from zuke.cli import entrypoint
entrypoint()
"""


def test_resume_with_a_signal_on_postgres_loads_no_uuid_difflib_or_getpass(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    """The whole command — the delivery, the lease, the continuation and its next body —
    without ``uuid`` (a lock's token, a run's id), ``difflib`` or ``getpass``."""
    from zuke import execute
    from zuke._loader import load_build_class

    (tmp_path / "build.py").write_text(
        "from zuke import Build, external_signal, target\n"
        "class Wake(Build):\n"
        "    @target\n"
        "    def approve(self, t):\n"
        "        return t.waits_for(lambda s: s.on(external_signal('go')).timeout('1h'))\n"
        "    @target\n"
        "    def ship(self, t):\n"
        "        return t.depends_on(self.approve).executes(lambda: print('shipped'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    env["ZUKE_STATE"] = pg_cluster.create_database()
    parked = execute(load_build_class(tmp_path / "build.py"), ["ship"], env=env)
    assert parked.status == "suspended" and parked.run_id is not None
    child = subprocess.run(
        [sys.executable, "-c", _SCRIPT_PROBE, json.dumps(_RESUME_SKIPS), "resume",
         parked.run_id, "--signal", "go"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=True,
    )  # fmt: skip
    assert "shipped" in child.stdout
    assert json.loads(child.stdout.splitlines()[-1]) == [], child.stderr


def test_a_run_without_a_store_loads_no_ssl(tmp_path: Path) -> None:
    """asyncio comes without ``ssl`` (zuke/cli/lean_asyncio.py: 8 ms of start-up); a body
    that imports ``ssl`` gets it, and asyncio with it."""
    (tmp_path / "build.py").write_text(
        "from zuke import Build, target\n"
        "def tls():\n"
        "    import asyncio.sslproto, ssl\n"
        "    assert asyncio.sslproto.ssl is ssl\n"
        "class Release(Build):\n"
        "    @target\n"
        "    def compile(self, t):\n"
        "        return t.executes(lambda: None)\n"
        "    @target\n"
        "    def fetch(self, t):\n"
        "        return t.executes(tls)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    for argv, expected in ((["compile"], []), (["fetch"], ["ssl"])):
        child = subprocess.run(
            [sys.executable, "-c", _SCRIPT_PROBE, json.dumps(["ssl"]), *argv],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=True,
        )  # fmt: skip
        assert json.loads(child.stdout.splitlines()[-1]) == expected, (argv, child.stderr)
