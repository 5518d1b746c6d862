"""What is durable when a process dies mid-chain, with transitions written inline and coalesced.

A target's ``running`` row is appended before its body runs, and the settlement of the
target before it rides on that same append (one journal line: group commit). A process
killed inside a body therefore leaves a record that says exactly what ran: every earlier
target settled, this one ``running``, nothing after it started.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.support import finish, spawn, write_build
from zuke.state.filesystem import FileSystemStateStore

BUILD = """
    import os, signal
    from zuke import Build, target

    class Chain(Build):
        @target
        def t0(self, t):
            return t.executes(lambda ctx: ctx.state.set({"done": 0}))

        @target
        def t1(self, t):
            return t.depends_on(self.t0).executes(lambda ctx: ctx.state.set({"done": 1}))

        @target
        def t2(self, t):
            return t.depends_on(self.t1).executes(lambda: os.kill(os.getpid(), signal.SIGKILL))

        @target
        def t3(self, t):
            return t.depends_on(self.t2).executes(lambda: None)
"""


def test_a_process_killed_in_a_body_leaves_a_record_that_says_what_ran(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    code, out = finish(spawn(["--state", "t3"], tmp_path))
    assert code == -9, out
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    rows = found.record.targets
    assert {name: row.status for name, row in rows.items()} == {
        "t0": "succeeded", "t1": "succeeded", "t2": "running", "t3": "pending",
    }  # fmt: skip
    assert rows["t0"].meta == {"done": 0} and rows["t1"].meta == {"done": 1}
    assert found.record.status == "running"  # for a sweep to reap once the lease lapses
    # Group commit: t1's settlement and t2's start went out as one append.
    journal = (tmp_path / ".zuke" / "runs" / f"{summary.id}.jsonl").read_text().splitlines()
    last = journal[-1]
    assert '"t1":' in last and '"t2":' in last, last
