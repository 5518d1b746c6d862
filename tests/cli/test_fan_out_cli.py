"""A fan-out at the command line: static views, piped and live output, array parameters, names.

The static views (``--list``, ``graph``) show a fan-out as one node, since its
items are known only when it runs; a run prints a start line, every stage's
lines and an end line when piped, and one live line per fan-out on a
terminal (``rich``, never imported otherwise).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from tests.e2e.support import clean_env
from zuke import Build, TargetBuilder, execute, target
from zuke._fan_out import decode_key
from zuke.cli.console import ConsoleReporter
from zuke.state.filesystem import FileSystemStateStore

BUILD = """
    from zuke import Build, parameter, target

    class Fleet(Build):
        repos = parameter("the services").array()
        shards = parameter("shard numbers").integer().array()

        @target
        def prepare(self, t):
            return t.executes(lambda: print("prepared"))

        @target
        def batch(self, t):
            return t.depends_on(self.prepare).for_each(
                lambda: self.repos.value, self._stages,
                lambda s: s.concurrency(2).continue_on_item_failure(),
            )

        def _stages(self, repo, index):
            def ship():
                if repo == "bad":
                    raise RuntimeError(f"cannot ship {repo}")
            return {
                "check": target().executes(lambda: print(f"checked <{repo}>")),
                "ship": target().executes(ship),
            }

        @target
        def shard(self, t):
            return t.depends_on(self.prepare).for_each(
                lambda: self.shards.value, lambda n, i: {"go": target().executes(lambda: None)})

        @target
        def after(self, t):
            return t.depends_on(self.batch).executes(lambda: None)
"""


@pytest.fixture
def fleet(write_build: BuildWriter) -> Path:
    return write_build(BUILD)


def summary_rows(out: str) -> list[str]:
    """The target column of the summary table."""
    rows: list[str] = []
    for line in out.split("Build Summary\n", 1)[1].splitlines()[1:]:
        if line.startswith("Total"):
            return rows
        rows.append(line.split()[0])
    raise AssertionError(f"no summary table in:\n{out}")


def shown_targets(out: str) -> list[str]:
    """The targets ``zuke runs show`` lists, in its order."""
    names: list[str] = []
    for line in out.split("Targets:\n", 1)[1].splitlines():
        if not line.startswith("  "):
            break
        names.append(line.split()[1])
    return names


#: a sub-target's name (``batch[a].check``), which no static view may show
SUB_TARGET = re.compile(r"\w\[[^\]]*\]\.\w")


def only_run_id(workdir: Path) -> str:
    (summary,) = FileSystemStateStore(workdir / ".zuke" / "runs").list_runs()
    return summary.id


# --- static views -------------------------------------------------------------------------


def test_list_shows_a_fan_out_as_one_node_annotated_fan_out(fleet: Path, cli: CliRunner) -> None:
    result = cli("--list")
    assert result.code == 0, result.text
    assert "  batch [fan-out]  (depends on: prepare)" in result.out.splitlines()
    assert not SUB_TARGET.search(result.out), result.out

    listed = json.loads(cli("--list", "--json").out)
    by_name = {t["name"]: t for t in listed["targets"]}
    assert set(by_name) == {"prepare", "batch", "shard", "after"}
    assert by_name["batch"]["fanOut"] is True and by_name["shard"]["fanOut"] is True
    assert "fanOut" not in by_name["prepare"] or by_name["prepare"]["fanOut"] is False


@pytest.mark.parametrize("fmt", ["text", "mermaid", "dot"])
def test_graph_shows_a_fan_out_as_one_node_and_no_sub_targets(
    fleet: Path, cli: CliRunner, fmt: str
) -> None:
    result = cli("graph", "--format", fmt)
    assert result.code == 0, result.text
    assert "batch [fan-out]" in result.out
    assert not SUB_TARGET.search(result.out) and ".check" not in result.out, result.out


def test_graph_json_marks_the_fan_out_and_lists_no_sub_targets(fleet: Path, cli: CliRunner) -> None:
    result = cli("graph", "--format", "json")
    assert result.code == 0, result.text
    targets = {t["name"]: t for t in json.loads(result.out)["targets"]}
    assert set(targets) == {"prepare", "batch", "shard", "after"}
    assert targets["batch"]["fanOut"] is True
    assert targets["after"]["dependsOn"] == ["batch"]


# --- piped output -------------------------------------------------------------------------


def test_piped_output_frames_the_stages_lines_with_a_start_and_an_end_line(
    fleet: Path, cli: CliRunner
) -> None:
    result = cli("batch", "--repos", "a,bad,c")
    assert result.code == 1, result.text
    out = result.out.splitlines()
    start = out.index("batch: fan-out over 3 item(s).")
    end = out.index("batch: 3 item(s): 2 succeeded, 1 failed.")
    for name in ("batch[a].check", "batch[a].ship", "batch[bad].ship", "batch[c].ship"):
        assert start < out.index(f"══ {name} ══") < end, name
    assert "✘ batch[bad].ship failed" in result.err
    assert "1 of 3 item(s) failed: bad (ship)" in result.err
    # One summary row per sub-target, right after its fan-out, item by item.
    assert summary_rows(result.out) == [
        "prepare", "batch",
        "batch[a].check", "batch[a].ship",
        "batch[bad].check", "batch[bad].ship",
        "batch[c].check", "batch[c].ship",
    ]  # fmt: skip


def test_runs_show_lists_the_sub_targets_grouped_under_their_fan_out_item_by_item(
    fleet: Path, cli: CliRunner, tmp_path: Path
) -> None:
    assert cli("after", "--repos", "a,bad,c").code == 1
    run_id = only_run_id(tmp_path)
    shown = cli("runs", "show", run_id)
    assert shown.code == 0, shown.text
    assert shown_targets(shown.out) == [
        "prepare", "batch",
        "batch[a].check", "batch[a].ship",
        "batch[bad].check", "batch[bad].ship",
        "batch[c].check", "batch[c].ship",
        "after",
    ]  # fmt: skip
    row = next(line for line in shown.out.splitlines() if " batch[bad].ship " in line)
    assert "failed" in row


def test_a_fan_out_over_zero_items_says_there_is_nothing_to_run_and_succeeds(
    fleet: Path, cli: CliRunner
) -> None:
    result = cli("after")
    assert result.code == 0, result.text
    assert "batch: fan-out over 0 items — nothing to run." in result.out.splitlines()
    assert summary_rows(result.out) == ["prepare", "batch", "after"]


# --- live progress ------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Terminal(io.StringIO):
    """What rich and the reporter take for a terminal."""

    def isatty(self) -> bool:
        return True


SCREEN = Terminal()
SEEN_LIVE = threading.Event()


class Live(Build):
    @target
    def batch(self, t: TargetBuilder) -> TargetBuilder:
        def stages(item: str, index: int) -> dict[str, object]:
            def body() -> None:
                if item == "bad":
                    raise RuntimeError("bad item")
                if item == "slow":  # stays in flight until the live line has named it
                    deadline = time.monotonic() + 30
                    while "slowest slow" not in ANSI.sub("", SCREEN.getvalue()):
                        if time.monotonic() > deadline:
                            raise RuntimeError("the live line never named the slowest item")
                        time.sleep(0.01)
                    SEEN_LIVE.set()

            return {"s": target().executes(body)}

        return t.for_each(
            lambda: ["slow", "a", "bad", "b"],
            stages,
            lambda s: s.concurrency(2).continue_on_item_failure(),
        )


def test_on_a_terminal_a_fan_out_is_a_live_line_and_only_failed_stages_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    SCREEN.seek(0)
    SCREEN.truncate()
    SEEN_LIVE.clear()
    reporter = ConsoleReporter(out=SCREEN, err=SCREEN, live=True)
    result = execute(
        Live, ["batch"], env={"ZUKE_STATE_DIR": str(tmp_path / "state")}, observers=[reporter]
    )
    assert result.status == "failed"
    assert SEEN_LIVE.is_set()
    screen = ANSI.sub("", SCREEN.getvalue())
    assert re.search(r"\d/4 done · (1 failed · )?\d running · slowest slow \(", screen), screen
    assert "batch: fan-out over 4 item(s)." in screen
    assert "batch: 4 item(s): 3 succeeded, 1 failed." in screen
    assert "══ batch[a].s ══" not in screen and "✔ batch[a].s" not in screen
    assert "✘ batch[bad].s failed" in screen  # a failure still prints its line
    assert "batch[a].s" in summary_rows(screen)


def test_a_piped_zuke_run_of_a_fan_out_never_imports_rich(fleet: Path, tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from zuke.cli import main\n"
        "code = main(['after', '--repos', 'a,bad,c'])\n"
        "print('rich imported:', 'rich' in sys.modules, 'exit:', code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "batch: fan-out over 3 item(s)." in done.stdout, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "rich imported: False exit: 1", done.stdout


# --- array parameters feeding items -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--repos", "a,b"], {}),
        (["--repos", "a", "--repos", "b"], {}),
        ([], {"REPOS": "a,b"}),
        (["--repos", "a,,b"], {}),
        (["--repos", ",a,b,"], {}),
    ],
    ids=["comma-separated", "repeated", "environment", "blank-dropped", "blank-ends-dropped"],
)
def test_an_array_parameter_feeds_the_items(
    fleet: Path, cli: CliRunner, argv: list[str], env: dict[str, str]
) -> None:
    result = cli("batch", *argv, env=env)
    assert result.code == 0, result.text
    assert "batch: fan-out over 2 item(s)." in result.out
    assert summary_rows(result.out)[2:] == [
        "batch[a].check", "batch[a].ship", "batch[b].check", "batch[b].ship",
    ]  # fmt: skip
    assert sorted(re.findall(r"checked <(.*)>", result.out)) == ["a", "b"]


def test_an_unsupplied_optional_list_gives_zero_items(fleet: Path, cli: CliRunner) -> None:
    result = cli("batch")
    assert result.code == 0, result.text
    assert "batch: fan-out over 0 items — nothing to run." in result.out
    assert "checked" not in result.out


def test_a_bad_element_of_an_integer_array_is_a_usage_error_before_any_target_runs(
    fleet: Path, cli: CliRunner, tmp_path: Path
) -> None:
    result = cli("shard", "--shards", "1,x")
    assert result.code == 2, result.text
    (line,) = result.err.splitlines()
    assert line.startswith("zuke: ") and "--shards" in line and "'x'" in line, line
    assert "prepared" not in result.out and "══" not in result.out
    runs = tmp_path / ".zuke" / "runs"
    assert not runs.exists() or FileSystemStateStore(runs).list_runs() == []


# --- item names ---------------------------------------------------------------------------


def test_items_with_unsafe_characters_get_readable_distinct_reversible_names(
    fleet: Path, cli: CliRunner, tmp_path: Path
) -> None:
    result = cli("batch", "--repos", "acme/app,acme_app,a b,ü")
    assert result.code == 0, result.text
    keys = ["acme%2Fapp", "acme_app", "a%20b", "%C3%BC"]
    checks = [f"batch[{key}].check" for key in keys]
    assert [r for r in summary_rows(result.out) if r.endswith(".check")] == checks
    shown = cli("runs", "show", only_run_id(tmp_path))
    assert [t for t in shown_targets(shown.out) if t.endswith(".check")] == checks
    assert [decode_key(key) for key in keys] == ["acme/app", "acme_app", "a b", "ü"]
    # The bodies see the items themselves, not their keys.
    assert sorted(re.findall(r"checked <(.*)>", result.out)) == sorted(
        ["acme/app", "acme_app", "a b", "ü"]
    )
