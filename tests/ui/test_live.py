"""Live pages over server-sent events: what a stream carries, when it wakes, when it ends.

Streams are read on a thread into a queue; every wait has a deadline. The
poll interval is injected (:class:`LiveSettings`), so the Postgres test can
make polling too slow to matter and see the ``NOTIFY`` wake the page.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.support import wait_until
from tests.ui.support import Served, release, view_server
from zuke._serve.ui.live import LiveSettings, event
from zuke.state.records import RunDelta, Signal
from zuke.state.wire import delta_to_json

DEADLINE_S = 10.0
FAST = LiveSettings(poll_s=0.05, listen_poll_s=0.05, tick_s=0.02)


def test_an_event_cannot_be_ended_or_forged_by_the_text_it_carries() -> None:
    frame = event("update", "a\r\nevent: gone\rdata: x\n\nb", event_id="d1").decode()
    assert frame == (
        "event: update\nid: d1\ndata: a\ndata: event: gone\ndata: data: x\ndata: \ndata: b\n\n"
    )
    assert frame.count("\n\n") == 1 and frame.endswith("\n\n")


@contextmanager
def stream(client: httpx.Client, path: str) -> Iterator[queue.Queue[tuple[str, str]]]:
    """The events of ``path`` as ``(name, data)``, read on a thread; the status as
    ``("status", code)`` first."""
    events: queue.Queue[tuple[str, str]] = queue.Queue()
    stop = threading.Event()

    def read() -> None:
        try:
            with client.stream("GET", path, timeout=httpx.Timeout(30.0)) as answer:
                events.put(("status", str(answer.status_code)))
                name, data = "message", []
                for line in answer.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif line == "" and data:
                        events.put((name, "\n".join(data)))
                        name, data = "message", []
                events.put(("end", ""))
        except httpx.HTTPError as exc:
            events.put(("error", repr(exc)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield events
    finally:
        stop.set()


def next_event(events: queue.Queue[tuple[str, str]], *names: str) -> tuple[str, str]:
    """The next event named one of ``names`` (others skipped), within the deadline."""
    while True:
        try:
            got = events.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError(f"no {names} event within {DEADLINE_S}s") from None
        if got[0] in names or got[0] in ("end", "error"):
            return got


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with view_server(tmp_path, ui_live=FAST) as s:
        yield s


def patch(served: Served, run_id: str, delta: RunDelta) -> None:
    etag = served.api.get(f"/runs/{run_id}").headers["etag"]
    answer = served.api.patch(
        f"/runs/{run_id}", json=delta_to_json(delta), headers={"If-Match": etag}
    )
    assert answer.status_code == 200, answer.text


def test_a_change_to_the_run_is_pushed_to_its_page(served: Served) -> None:
    served.put(release("r1"))
    browser = served.browser()
    page = browser.get("/ui/runs/r1").text
    live = page.split('data-live="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    with stream(browser, live) as events:
        assert next_event(events, "status") == ("status", "200")
        patch(
            served,
            "r1",
            RunDelta(
                updated_at="2026-03-01T11:00:00.000Z",
                status="succeeded",
                targets={"approve": release("r1", status="succeeded").targets["approve"]},
            ),
        )
        name, data = next_event(events, "update")
        assert name == "update" and 'class="badge s-succeeded"' in data.split("</h1>", 1)[0]


def test_the_runs_page_is_pushed_a_new_run(served: Served) -> None:
    browser = served.browser()
    with stream(browser, "/ui/events?view=runs&status=suspended") as events:
        assert next_event(events, "status") == ("status", "200")
        _, first = next_event(events, "update")  # no digest given: the page as it is
        assert "No runs" in first
        served.put(release("r-new"))
        _name, data = next_event(events, "update")
        assert 'id="run-r-new"' in data


def test_a_stream_needs_a_session(served: Served) -> None:
    with stream(served.client(), "/ui/events?view=runs") as events:
        assert next_event(events, "status") == ("status", "401")


def test_a_deleted_run_ends_its_pages_stream(served: Served) -> None:
    served.put(release("r1"))
    with stream(served.browser(), "/ui/events?view=run&id=r1") as events:
        assert next_event(events, "update")[0] == "update"
        served.api.delete("/runs/r1")
        name, data = next_event(events, "gone")
        assert name == "gone" and "no run 'r1'" in data
        assert next_event(events, "end")[0] == "end"


def test_streams_of_one_view_share_one_feed(served: Served) -> None:
    served.put(release("r1"))
    hub = served.server._ui_app.hub
    first, second = served.browser(), served.browser()
    with (
        stream(first, "/ui/events?view=run&id=r1") as a,
        stream(second, "/ui/events?view=run&id=r1") as b,
    ):
        assert next_event(a, "update")[0] == next_event(b, "update")[0] == "update"
        assert len(hub._feeds) == 1 and next(iter(hub._feeds.values())).streams == 2


def test_stopping_the_server_ends_open_streams_without_waiting_for_them(tmp_path: Path) -> None:
    from zuke._serve.server import ServeLimits

    with view_server(tmp_path, ui_live=FAST, limits=ServeLimits(shutdown_grace_s=120)) as served:
        served.put(release("r1"))
        with stream(served.browser(), "/ui/events?view=run&id=r1") as events:
            assert next_event(events, "update")[0] == "update"
            stopper = threading.Thread(target=served.server.stop)
            stopper.start()
            stopper.join(DEADLINE_S)
            assert not stopper.is_alive(), "stop() waited on a live page's stream"
            assert next_event(events, "end", "error")[0] in ("end", "error")


def test_on_postgres_a_signal_wakes_the_page_through_notify(tmp_path: Path, pg_url: str) -> None:
    asleep = LiveSettings(poll_s=3600, listen_poll_s=3600, tick_s=0.02)  # only NOTIFY wakes it
    with view_server(tmp_path, db=pg_url, ui_live=asleep) as served:
        served.put(release("r1"))
        with stream(served.browser(), "/ui/events?view=run&id=r1") as events:
            assert next_event(events, "update")[0] == "update"
            hub = served.server._ui_app.hub
            wait_until(lambda: "" in hub.listening, "the LISTEN to be in place")
            patch(
                served,
                "r1",
                RunDelta(
                    updated_at="2026-03-01T11:00:00.000Z",
                    signals={
                        "approved": Signal(
                            data={"by": "qa"}, received_at="2026-03-01T11:00:00.000Z"
                        )
                    },
                ),
            )
            name, data = next_event(events, "update")
            assert name == "update" and "the signal came" in data
