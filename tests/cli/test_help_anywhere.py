"""``--help`` or ``-h`` anywhere on any command only prints help (issue 15, item 3).

Real ``zuke`` processes against a filesystem store holding a suspended run
(two gates: a signal, and a predicate that is already true, so a sweep would
resume it), a finished run (a prune would delete it) and a held lock (a break
would remove it). Every command line is run with a help flag inserted at every
position; each must exit 0, print its help, and leave every file of the
working directory as it was: no record changed, no run created, no lock
broken, no sweep, no body run, no server started.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.resume_support import OBSERVER, fs_store, record_of, suspend
from tests.e2e.support import ZUKE, clean_env, finish, spawn, write_build
from zuke.state._protocol import LockAcquired

#: every case runs real zuke processes (about 150 of them): CI's suite, not the inner loop
pytestmark = pytest.mark.e2e

BUILD = """
    from pathlib import Path
    from zuke import Build, external_signal, parameter, resume_when, target

    HERE = Path(__file__).parent

    class Release(Build):
        service = parameter("service").default("api")

        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(external_signal("approved")).timeout("72h"))

        @target
        def polled(self, t):
            return t.waits_for(lambda s: s.on(resume_when(lambda: (HERE / "open").exists())))

        @target
        def release(self, t):
            return t.depends_on(self.approve, self.polled).executes(
                lambda: (HERE / "RELEASED").write_text(self.service.value))

        @target
        def noop(self, t):
            return t.executes(lambda: None)
"""
LOCK = "deploy-api"
RUN = "<run>"  # replaced by the suspended run's id


@dataclass
class Workdir:
    path: Path
    run_id: str

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the working directory (the store included), by path."""
        return {
            str(p.relative_to(self.path)): p.read_bytes()
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }


def make_workdir(path: Path) -> Workdir:
    write_build(path, BUILD)
    run_id = suspend(path, ["release"])
    code, out = finish(spawn(["noop", "--state"], path))
    assert code == 0, out
    (path / "open").write_text("")  # from now on a sweep would resume the run
    taken = fs_store(path).acquire_lock(LOCK, OBSERVER, 3_600_000)
    assert isinstance(taken, LockAcquired)
    return Workdir(path, run_id)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Workdir:
    """One store for every help case: each case checks it left it as it found it."""
    return make_workdir(tmp_path_factory.mktemp("help"))


@pytest.fixture
def workdir(tmp_path: Path) -> Workdir:
    return make_workdir(tmp_path)


@dataclass
class Done:
    code: int
    out: str
    err: str


def zuke(workdir: Workdir, *args: str, timeout: float = 30.0) -> Done:
    argv = [workdir.run_id if a == RUN else a for a in args]
    done = subprocess.run(
        [ZUKE, *argv], cwd=workdir.path, env=clean_env(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return Done(done.returncode, done.stdout, done.stderr)


#: (a command line, text its help prints). Each acts on the store without a help flag.
COMMANDS: list[tuple[list[str], str]] = [
    (["resume", RUN, "--signal", "approved", "--data", '{"by": "qa"}'], "Usage: zuke resume"),
    (["resume", "--check", "--json"], "Usage: zuke resume"),
    (["resume", "--check", RUN, "--actor", "cron"], "Usage: zuke resume"),
    (["cancel", RUN, "--actor", "ops", "--wait", "0s"], "Usage: zuke cancel"),
    (["runs", "list", "--status", "suspended", "--json"], "Usage: zuke runs"),
    (["runs", "show", RUN, "--json"], "Usage: zuke runs"),
    (["runs", "prune", "--keep-last", "0"], "Usage: zuke runs"),
    (["locks", "list", "--json"], "Usage: zuke locks"),
    (["locks", "break", LOCK, "--reason", "stuck", "--force"], "Usage: zuke locks"),
    (["serve", "--db", "serve.db", "--port", "0"], "Usage: zuke serve"),
    (["mcp", "--no-run", "--actor", "bot"], "Usage: zuke mcp"),
    (["release", "--service", "web"], "  --list [--json]"),
    (["release", "--service", "web", "--bogus", "--parallel=zero"], "  --list [--json]"),
    (["noop", "--state", "--skip", "approve"], "  --list [--json]"),
    (["--list", "--json"], "Usage: zuke --list [--json]"),  # its own help, not the global one
    (["graph", "--format", "dot"], "Usage: zuke graph [--format"),
    (["--file", "build.py", "resume", RUN, "--signal", "approved"], "Usage:"),
]


def cases() -> list[Any]:
    """Each command line with a help flag at each position (``--help`` and ``-h`` in turn)."""
    out = []
    for argv, expected in COMMANDS:
        for at in range(len(argv) + 1):
            flag = "--help" if at % 2 else "-h"
            line = [*argv[:at], flag, *argv[at:]]
            out.append(pytest.param(line, expected, id=" ".join(line).replace(RUN, "RUN")))
    return out


@pytest.mark.parametrize(("argv", "expected"), cases())
def test_a_help_flag_anywhere_prints_help_and_changes_nothing(
    shared: Workdir, argv: list[str], expected: str
) -> None:
    before = shared.snapshot()
    done = zuke(shared, *argv)
    assert done.code == 0, done.out + done.err
    assert expected in done.out and done.err == "", done.out + done.err
    assert shared.snapshot() == before
    assert record_of(fs_store(shared.path), shared.run_id).status == "suspended"


def test_the_help_of_a_build_command_lists_its_targets_and_parameters(shared: Workdir) -> None:
    done = zuke(shared, "release", "--service", "--help")
    assert done.code == 0
    assert "release" in done.out and "--service (SERVICE)" in done.out


def test_without_a_help_flag_the_same_store_shows_every_action(workdir: Workdir) -> None:
    """The control: the snapshot sees a prune, a sweep and a resume (the cases above can fail)."""
    before = workdir.snapshot()
    assert zuke(workdir, "runs", "prune", "--keep-last", "0").code == 0
    pruned = workdir.snapshot()
    assert len(pruned) < len(before)
    code = zuke(workdir, "resume", "--check", RUN, "--json").code
    assert code == 0
    swept = workdir.snapshot()
    assert swept != pruned
    assert record_of(fs_store(workdir.path), workdir.run_id).targets["polled"].status != "waiting"
    done = zuke(workdir, "resume", RUN, "--signal", "approved")
    assert done.code == 0, done.out + done.err
    assert (workdir.path / "RELEASED").read_text() == "api"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["release", "--", "--help"], "zuke: Unknown target: --help"),
        (["resume", RUN, "--signal", "approved", "--", "-h"], "zuke: usage: zuke resume RUN_ID"),
        (["runs", "show", "--", "--help"], 'no run "--help"'),
    ],
    ids=["build", "resume", "click"],
)
def test_after_double_dash_a_help_flag_is_an_operand_not_a_request(
    shared: Workdir, argv: list[str], message: str
) -> None:
    before = shared.snapshot()
    done = zuke(shared, *argv)
    assert done.code != 0 and message in done.err, done.out + done.err
    assert "Traceback" not in done.err
    assert shared.snapshot() == before


def test_a_value_that_is_literally_help_is_written_with_equals(workdir: Workdir) -> None:
    done = zuke(workdir, "noop", "--service=--help")
    assert done.code == 0, done.out + done.err
    assert "✔ Build succeeded" in done.out and "Usage:" not in done.out


# -- item 8: JSON nested too deep ---------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize(
    "data",
    [nested(980), nested(65), '{"a":' * 65 + "1" + "}" * 65, nested(100_000)[:60_000]],
    ids=["980-deep", "65-deep", "65-deep-objects", "unclosed-60000-deep"],
)
def test_data_nested_past_the_limit_is_one_line_exit_2_and_nothing_written(
    shared: Workdir, data: str
) -> None:
    before = shared.snapshot()
    done = zuke(shared, "resume", RUN, "--signal", "approved", "--data", data)
    assert done.code == 2, done.out + done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zuke: --data is nested too deep"), done.err
    assert "the limit is 64 levels" in lines[0] and "[[" not in lines[0]
    assert shared.snapshot() == before


def test_data_nested_to_the_limit_is_stored_and_read_back(workdir: Workdir) -> None:
    data = {"deep": json.loads(nested(63)), "text": "[[[{{ not nesting"}  # 64 levels in all
    done = zuke(workdir, "resume", RUN, "--signal", "approved", "--data", json.dumps(data))
    assert done.code == 0, done.out + done.err
    assert record_of(fs_store(workdir.path), workdir.run_id).signals["approved"].data == data
    shown = zuke(workdir, "runs", "show", RUN, "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["signals"]["approved"]["data"] == data
