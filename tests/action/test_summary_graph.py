"""The sweep summary's run graphs: mermaid and a table from each touched run's record
(action/run_graph.py, and summary.py reading the records with ``zuke runs show --json``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.action.test_summary import summary

run_graph = summary.run_graph  # action/run_graph.py, as summary.py imports it

SHA = "0123456789abcdef0123456789abcdef01234567"


def _record(
    targets: dict[str, str], graph: list[tuple[str, list[str]]], **extra: Any
) -> dict[str, Any]:
    return {
        "id": "run-1",
        "build": "Release",
        "status": "suspended",
        "graph": [{"name": n, "dependsOn": d} for n, d in graph],
        "targets": {name: {"status": status} for name, status in targets.items()},
        **extra,
    }


RELEASE = _record(
    {"build": "succeeded", "staging": "succeeded", "qa": "waiting", "release": "pending"},
    [("build", []), ("staging", ["build"]), ("qa", ["staging"]), ("release", ["qa"])],
)


def _mermaid_block(text: str) -> str:
    [block] = re.findall(r"```mermaid\n(.*?)\n```", text, flags=re.DOTALL)
    return str(block)


def test_a_run_is_a_flowchart_of_its_targets_with_their_edges_and_status_marks_and_classes():
    text = run_graph.section(RELEASE)
    block = _mermaid_block(text).splitlines()
    assert block[0] == "flowchart LR"
    assert block[1:5] == [
        '  t0["✔ build"]:::succeeded',
        '  t1["✔ staging"]:::succeeded',
        '  t2["⏸ qa"]:::waiting',
        '  t3["… release"]:::pending',
    ]
    assert block[5:8] == ["  t0 --> t1", "  t1 --> t2", "  t2 --> t3"]
    assert {line.split()[1] for line in block[8:]} == {"pending", "succeeded", "waiting"}
    assert all(line.startswith("  classDef ") for line in block[8:])


def test_beside_it_the_same_targets_as_a_plain_table():
    lines = run_graph.section(RELEASE).splitlines()
    assert lines[0] == "#### Run `run-1`: `Release` `suspended`"
    start = lines.index("| Target | Status | Depends on |")
    assert lines[start + 2 : start + 6] == [
        "| `build` | ✔ succeeded | — |",
        "| `staging` | ✔ succeeded | `build` |",
        "| `qa` | ⏸ waiting | `staging` |",
        "| `release` | … pending | `qa` |",
    ]


def test_failed_and_skipped_targets_have_their_own_marks():
    record = _record({"a": "failed", "b": "skipped"}, [("a", []), ("b", ["a"])])
    block = _mermaid_block(run_graph.section(record))
    assert 't0["✖ a"]:::failed' in block and 't1["⏭ b"]:::skipped' in block


HOSTILE = 'x"]; click t0 href "javascript:alert(1)" ``` <img src=x> | @team\n#35; %'


def test_a_hostile_target_name_cannot_leave_its_label_the_fence_or_the_table_cell():
    record = _record({HOSTILE: "failed", "ok": "pending"}, [(HOSTILE, []), ("ok", [HOSTILE])])
    text = run_graph.section(record)
    block = _mermaid_block(text)
    node = block.splitlines()[1]
    label = node[node.index('["') + 2 : node.rindex('"]')]
    assert '"' not in label and "`" not in label and "<" not in label and ";" in label
    assert "#34;" in label and "#96;" in label and "#60;" in label and "#35;35#59;" in label
    assert node.endswith('"]:::failed')
    assert "t0 --> t1" in block
    assert text.count("```") == 2  # the fence opens and closes once: no name closed it
    [row] = [line for line in text.splitlines() if line.startswith("| `x")]
    assert row.count(" | ") == 2  # three cells: the name's pipe is escaped
    name = row.split(" | ")[0].removeprefix("| ")
    assert name.startswith("`") and name.endswith("`") and "`" not in name[1:-1]
    assert "\\|" in name and "\n" not in name


def test_control_and_bidi_characters_never_reach_the_summary():
    name = "a\x1b[2J\u202eb"
    record = _record({name: "succeeded"}, [(name, [])])
    text = run_graph.section(record)
    assert "\x1b" not in text and "\u202e" not in text
    assert "#65533;" in _mermaid_block(text)


def test_a_long_name_is_cut_in_the_label():
    name = "n" * 300
    label = run_graph.label(name)
    assert label == "n" * (run_graph.MAX_LABEL - 1) + "#8230;"


def test_fan_out_items_are_counted_on_their_parent():
    record = _record(
        {
            "deploy": "failed",
            "deploy[eu].push": "succeeded",
            "deploy[us].push": "failed",
            "deploy[ap].push": "succeeded",
            "cleanup": "succeeded",  # a compensation: recorded, not planned
        },
        [("deploy", [])],
    )
    text = run_graph.section(record)
    block = _mermaid_block(text)
    assert 't0["✖ deploy (items: 1 #10006; 2 #10004;)"]:::failed' in block
    assert 't1["✔ cleanup"]:::succeeded' in block
    assert "push" not in block
    assert "| `deploy` | ✖ failed (items: 1 failed\\, 2 succeeded) | — |" in text


def test_a_large_graph_is_cut_with_a_note():
    many = [(f"t{i}", [f"t{i - 1}"] if i else []) for i in range(run_graph.MAX_NODES + 5)]
    record = _record({name: "succeeded" for name, _ in many}, many)
    text = run_graph.section(record)
    block = _mermaid_block(text)
    assert block.count(":::") == run_graph.MAX_NODES
    assert f"t{run_graph.MAX_NODES}" not in block.replace(f"t{run_graph.MAX_NODES - 1}", "")
    assert text.rstrip().endswith("5 more targets not shown (`zuke runs show`).")


def test_the_summary_draws_each_touched_run_once_and_caps_how_many():
    runs = [{"id": f"r-{i}"} for i in range(summary.GRAPHS + 3)]
    report = {"runs": [*runs, {"id": "r-0"}, {"id": "bad id;"}], "counts": {}}
    asked: list[str] = []

    def read(run_id: str) -> dict[str, Any] | None:
        asked.append(run_id)
        return None if run_id == "r-1" else {**RELEASE, "id": run_id}

    text = summary.graphs(report, read)
    assert asked == [f"r-{i}" for i in range(summary.GRAPHS)]
    assert text.count("```mermaid") == summary.GRAPHS - 1
    assert "#### Run `r-1`\n\nIts record could not be read." in text
    assert "3 more runs not drawn" in text


def test_the_graphs_input_sets_how_many_runs_are_drawn_and_zero_reads_no_record():
    assert summary.graph_limit({}) == summary.GRAPHS
    assert summary.graph_limit({"ZUKE_SUMMARY_GRAPHS": "3"}) == 3
    assert summary.graph_limit({"ZUKE_SUMMARY_GRAPHS": "1000"}) == summary.MAX_GRAPHS
    assert summary.graph_limit({"ZUKE_SUMMARY_GRAPHS": "-1"}) == summary.GRAPHS
    assert summary.graph_limit({"ZUKE_SUMMARY_GRAPHS": "٣"}) == summary.GRAPHS  # Arabic 3

    def unread(run_id: str) -> dict[str, Any] | None:
        raise AssertionError(f"read {run_id}")

    assert summary.graphs({"runs": [{"id": "r-1"}], "counts": {}}, unread, 0) == ""


def test_a_sweep_that_touched_nothing_draws_nothing():
    assert summary.graphs({"runs": [], "counts": {}}, lambda _: None) == ""


BUILD = """
from zuke import Build, external_signal, target


class Release(Build):
    @target
    def staging(self, t):
        return t.executes(lambda: print("staging"))

    @target
    def qa(self, t):
        return t.depends_on(self.staging).waits_for(lambda s: s.on(external_signal("go")))

    @target
    def release(self, t):
        return t.depends_on(self.qa).executes(lambda: print("released"))
"""


def test_a_record_is_read_with_zuke_runs_show_in_the_sweeps_store(tmp_path, monkeypatch):
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "release.py").write_text(BUILD)
    env = {
        "PATH": str(Path(sys.executable).parent),
        "ZUKE_STATE_DIR": str(tmp_path / "state"),
        "ZUKE_BUILD_FILE": "ci/release.py",
    }
    subprocess.run(
        [sys.executable, "-m", "zuke", "--file", "ci/release.py", "release"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=True,
    )
    listed = subprocess.run(
        [sys.executable, "-m", "zuke", "--file", "ci/release.py", "runs", "list", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    [run] = json.loads(listed.stdout)
    monkeypatch.chdir(tmp_path)

    record = summary.read_record(run["id"], env)
    assert record is not None
    text = run_graph.section(record)
    assert 't1["⏸ qa"]:::waiting' in text and "t0 --> t1" in text and "t1 --> t2" in text
    assert summary.read_record("no-such-run", env) is None
