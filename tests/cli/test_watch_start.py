"""Issue 28 §6: the watcher swept twice at start, and its text lines carried no time.

On Postgres the store's first ``LISTEN`` came in place while the first sweep ran, and its
``listening`` wake (a write before it may have been missed) made a second sweep at once. The
first sweep now waits for the listen (briefly) so that it covers that wake. Here with the real
store's listener on a real Postgres: the first sweep begins only once it listens, and no wake
is left for a second.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_watch_broken_build import GOOD, STAMP, suspended_run
from tests.conftest import CliRunner
from tests.runs.support import FakeWaiter
from zuke._clock import ManualClock, iso
from zuke.runs.sweep_report import SweepReport
from zuke.runs.watch import Watcher, WatchObserver, WatchSettings
from zuke.state.postgres import PostgresStateStore

NOT_YET = "the predicate is not true yet"


def test_on_postgres_the_watcher_sweeps_once_at_start(pg_url: str) -> None:
    store = PostgresStateStore(pg_url)
    assert store.list_runs() == []  # a database in use: its schema is there (the first LISTEN
    listening = threading.Event()  # of a fresh one waits for the migration)
    began_listening: list[bool] = []
    left: list[bool] = []

    def listen(wake: Callable[[str, str | None], None]) -> object:
        def relay(kind: str, detail: str | None) -> None:
            if kind == "listening":  # set before the wake: the sweep it lets start reads it
                listening.set()
            wake(kind, detail)

        return store.listen(relay)

    def sweep(stop: Callable[[], bool]) -> SweepReport:
        began_listening.append(listening.is_set())
        # a first sweep that began before the LISTEN ran while it came in place
        assert listening.wait(30), "the store never listened"
        return SweepReport()

    class FirstSweep(WatchObserver):
        def idle(self, next_ms: int) -> None:
            left.append(watcher.wake_pending)  # a second sweep at once, if a wake is left
            watcher.stop()

    watcher = Watcher(sweep, listen=listen, observer=FirstSweep(),
                      settings=WatchSettings(every_ms=3_600_000))  # fmt: skip
    try:
        assert watcher.run() == 1
    finally:
        store.close()
    assert began_listening == [True] and left == [False]


def test_the_watchers_text_lines_carry_the_time_of_their_sweep(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    import zuke.cli.watch_cmd as watch_cmd

    run_id, _ = suspended_run(cli, tmp_path)
    (tmp_path / "build.py").write_text(GOOD)
    clock = ManualClock()
    start = clock.now_ms()

    def on_wait(n: int) -> None:
        if n == 2:
            signal.raise_signal(signal.SIGTERM)  # the watcher's handler: stop after this wait

    monkeypatch.setattr(watch_cmd, "run_watch", functools.partial(
        watch_cmd.run_watch, clock=clock, waiter=FakeWaiter(clock, on_wait)))  # fmt: skip
    result = cli("resume", "--check", "--watch", "--every", "1m")
    assert result.code == 0, result.text
    lines = result.out.splitlines()
    first, second = iso(start)[:19] + "Z", iso(start + 60_000)[:19] + "Z"
    assert lines == [
        f"{first} {run_id} Release [approve]: still-waiting → suspended — {NOT_YET}",
        f"{first} Checked 1 suspended run(s): 0 resumed, 1 still waiting, 0 timed out, "
        "0 gate(s) failed, 0 deferred, 0 failed; reaped 0, skipped 0, 0 check error(s).",
        f"{second} {run_id} Release [approve]: still-waiting → suspended — {NOT_YET}",
        f"{second} Checked 1 suspended run(s): 0 resumed, 1 still waiting, 0 timed out, "
        "0 gate(s) failed, 0 deferred, 0 failed; reaped 0, skipped 0, 0 check error(s).",
    ]
    assert all(STAMP.match(line) for line in lines)
    assert re.fullmatch(r"zuke: SIGTERM: the watcher stopped after 2 sweep\(s\)\n", result.err)
