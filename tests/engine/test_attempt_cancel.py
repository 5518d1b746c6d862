"""An attempt's ``ctx.cancelled``, made when first asked for (issue 28 §1): the same
event in meaning as one made with the attempt — set by the run's cancel whether it was
made before or after, set at once if the run was already cancelled, forgotten (not
told) once the attempt is over."""

from __future__ import annotations

import threading

from zuke._engine.context import Context, RunState
from zuke._redact import Redactor


def _run() -> RunState:
    return RunState(run_id="r1", actor="ada", redactor=Redactor())


def test_an_attempt_that_never_asks_makes_no_event() -> None:
    run = _run()
    attempt = Context(run, "build").for_attempt()
    attempt.attempt_done()
    assert attempt._cancelled is None and not run._attempt_events


def test_an_event_asked_for_is_the_same_each_time_and_told_of_the_runs_cancel() -> None:
    run = _run()
    attempt = Context(run, "build").for_attempt()
    event = attempt.cancelled
    assert attempt.cancelled is event and not event.is_set()
    assert event is not run.cancelled  # a timeout sets this attempt's alone
    run.cancel()
    assert event.is_set()


def test_asked_for_after_the_run_was_cancelled_it_is_set_already() -> None:
    run = _run()
    attempt = Context(run, "build").for_attempt()
    run.cancel()
    assert attempt.cancelled.is_set()


def test_an_attempt_over_is_forgotten_and_an_event_asked_for_later_is_not_kept() -> None:
    run = _run()
    first = Context(run, "build").for_attempt()
    asked = first.cancelled
    first.attempt_done()
    assert not run._attempt_events
    run.cancel()
    assert not asked.is_set()  # over: the run's cancel no longer reaches it
    late = Context(run, "build").for_attempt()
    late.attempt_done()
    assert late.cancelled.is_set()  # a thread the body left behind asks: set as it is made
    assert not run._attempt_events


def test_a_timeout_sets_the_attempts_event_not_the_runs() -> None:
    run = _run()
    attempt = Context(run, "build").for_attempt()
    attempt.cancelled.set()  # what the executor does on a timeout
    assert not run.cancelled.is_set()
    assert Context(run, "build").cancelled is run.cancelled


def test_threads_asking_at_once_get_one_event() -> None:
    run = _run()
    attempt = Context(run, "build").for_attempt()
    seen: list[threading.Event] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        seen.append(attempt.cancelled)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(e) for e in seen}) == 1 and len(run._attempt_events) == 1
