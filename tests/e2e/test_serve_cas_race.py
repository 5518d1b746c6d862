"""Eight client processes race one run from the same version against a real ``zuke serve``.

Each round, every racer is told the run and the version it read, arms itself
(its connection already open), and blocks reading one byte from a shared
pipe. The test releases all of them at once with a single write of eight
bytes — a barrier, not a sleep — and exactly one ``put_run`` may land. Twenty
rounds, the same eight processes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.racer_support import Lines, race_round, racer_processes
from tests.serve.support import TOKEN, running_server
from zuke.state._protocol import Written
from zuke.state.http import HttpStateStore
from zuke.state.records import RunRecord

pytestmark = pytest.mark.e2e

RACERS = 8
ROUNDS = 20

RACER = r"""
import json, os, sys
from zuke.state._protocol import Written
from zuke.state.http import HttpStateStore
from zuke.state.records import RunRecord

url, go_fd, index = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = HttpStateStore(url, token=os.environ["ZUKE_STATE_TOKEN"])
for line in sys.stdin:
    order = json.loads(line)
    if order.get("quit"):
        break
    record = RunRecord(
        id=order["run"], build="Race", root_target="deploy", status="running",
        actor=f"racer-{index}", created_at="2026-04-01T00:00:00.000Z",
        updated_at=f"2026-04-01T00:00:{index:02d}.000Z",
    )
    assert store.get_run(order["run"]) is not None  # warm the connection
    print("armed", flush=True)
    assert os.read(go_fd, 1) == b"x"
    result = store.put_run(record, expected_version=order["version"])
    won = isinstance(result, Written)
    print(json.dumps({"won": won, "version": result.version if won else None}), flush=True)
store.close()
"""


@pytest.fixture
def racers(tmp_path: Path) -> Iterator[tuple[str, int, list[subprocess.Popen[bytes]]]]:
    with running_server(tmp_path) as server, racer_processes(RACER, [server.url], RACERS) as race:
        go_write, procs = race
        yield server.url, go_write, procs


def test_exactly_one_of_eight_racing_processes_wins_each_round(
    racers: tuple[str, int, list[subprocess.Popen[bytes]]],
) -> None:
    url, go, procs = racers
    lines = [Lines(p) for p in procs]
    with HttpStateStore(url, token=TOKEN) as store:
        for round_no in range(ROUNDS):
            run_id = f"race-{round_no}"
            created = store.create_run(
                RunRecord(
                    id=run_id,
                    build="Race",
                    root_target="deploy",
                    status="running",
                    actor="parent",
                    created_at="2026-04-01T00:00:00.000Z",
                    updated_at="2026-04-01T00:00:00.000Z",
                )
            )
            assert isinstance(created, Written)
            results = race_round(procs, lines, go, {"run": run_id, "version": created.version})

            winners = [i for i, r in enumerate(results) if r["won"]]
            assert len(winners) == 1, f"round {round_no}: {results}"
            stored = store.get_run(run_id)
            assert stored is not None
            assert stored.record.actor == f"racer-{winners[0]}"
            assert stored.version == results[winners[0]]["version"]
