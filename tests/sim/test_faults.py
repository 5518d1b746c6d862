"""The fault layer (tests.sim.faults), the filesystem store under the simulation, and a
hazard of the harness's own (reading every thread's frames)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.faults import AUDITOR, LostAnswers
from tests.sim.runtime import Sim
from tests.sim.scenario import make_scenario, opened, run_seed
from tests.sim.view import FileView, view_of
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError
from zuke.state._protocol import LockAcquired, LockHolder, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord

pytestmark = pytest.mark.sim

_AT = "2024-01-01T00:00:00.000Z"


def _record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(id=run_id, build="B", root_target="t", status="running", actor="a",
                     created_at=_AT, updated_at=_AT)  # fmt: skip


def test_a_lost_answer_is_a_store_failure_after_the_write_and_a_second_writer_lands() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    written = store.create_run(_record())
    assert isinstance(written, Written)
    losses = LostAnswers(Sim(clock), store, budget=1)
    error = losses._lost("append_run", "run-1", "run-1")
    assert isinstance(error, StoreUnavailableError)
    assert "may have landed" in str(error)
    stored = store.get_run("run-1")
    assert stored is not None and stored.version != written.version  # a third version
    [event] = stored.record.events
    assert (event.actor, event.tool) == (AUDITOR, "mcp:show_run")
    assert stored.record.updated_at == _AT  # a look is not a change
    assert losses.appended == 1


@pytest.mark.parametrize("kind", ["memory", "filesystem"])
def test_a_view_reads_runs_and_claims_of_either_store(kind: str) -> None:
    clock = ManualClock()
    with opened(kind, clock) as store:
        view = view_of(store)
        if isinstance(view, FileView):
            view.noted("run-1")
        store.create_run(_record())
        taken = store.acquire_lock("prod", LockHolder("a", "run-1", "t0"), 30_000)
        assert isinstance(taken, LockAcquired)
        [(run_id, (text, _version))] = view.runs().items()
        assert run_id == "run-1" and '"status": "running"' in text
        claim = view.claim("prod")
        assert claim is not None and claim.token == taken.token and claim.fence == taken.fence
        assert set(view.claims()) == {"prod"}
        store.release_lock("prod", taken.token)
        released = view.claims()["prod"]
        assert released.token is None and released.fence == taken.fence  # the fence stays


def test_seeds_lose_answers_on_both_stores_and_break_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lost answers, with a second writer before the retry, over memory and files."""
    lost, appended = 0, 0
    for kind in ("memory", "filesystem"):
        monkeypatch.setenv("ZUKE_SIM_STORE", kind)
        for seed in range(30):
            assert make_scenario(seed).store == kind
            result = run_seed(seed)
            assert result.violations == [], result.describe()
            lost += len(result.lost)
            appended += result.appended
    assert lost > 10 and appended > 3


def test_a_store_forced_by_name_must_be_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZUKE_SIM_STORE", "papyrus")
    with pytest.raises(ValueError, match="expected one of memory, filesystem"):
        make_scenario(0)


def test_a_directed_stall_finds_a_hold_write_on_the_stack() -> None:
    """The hot scenarios' directed stall looks for ``update_run`` called by a hold's write."""
    import sys

    from tests.sim.world import _in_hold_write

    def update_run(change: object) -> bool:  # the frame the stack is searched for
        return _in_hold_write(sys._getframe())

    class Hold:
        def write(self) -> bool:
            def guarded(fresh: object) -> None:
                return None

            return update_run(guarded)

    assert Hold().write()
    assert not update_run(lambda fresh: None)
    assert not _in_hold_write(sys._getframe())


#: a collection due inside ``sys._current_frames()`` that frees a ``threading.local``: the
#: trap laid at each offset of the collector's threshold, one of which falls mid-call
_FRAMES_TRAP = """
import gc, sys, threading
from tests.sim.runtime import thread_frames
class Cycle: pass
for offset in range(10):
    done = threading.Event()  # fresh threads: frames not yet made into objects
    waiters = [threading.Thread(target=done.wait) for _ in range(4)]
    for t in waiters:
        t.start()
    gc.collect()
    gc.disable()
    for _ in range(50):
        c = Cycle(); c.me = c; c.local = threading.local()
    del c
    gc.set_threshold(gc.get_count()[0] + offset)
    gc.enable()
    assert len(thread_frames()) == 5
    done.set()
    for t in waiters:
        t.join()
print("no hang")
"""


def test_reading_the_threads_frames_cannot_hang_in_the_collector() -> None:
    """``thread_frames`` (the hot scenarios' directed stall looks at every thread's stack)
    holds the collector off: with ``sys._current_frames()`` itself, a collection due
    mid-call that frees a ``threading.local`` hangs the process (offsets 3-5 here)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _FRAMES_TRAP], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no hang"
