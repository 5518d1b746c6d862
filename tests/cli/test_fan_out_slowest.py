"""Issue 28 §6: the fan-out's live line said "slowest x (0ms)" for as long as x ran.

The engine reports where a fan-out stands when an item starts or ends; the slowest item's
time in that report is how long it had run then — 0 ms when the items have just started —
and the line showed it until the next event. It now counts on from the report at every
redraw. A :class:`LiveFanOuts` on a fake terminal and an injected clock: no sleeping.
"""

from __future__ import annotations

import io

from zuke._engine.observer import FanOutProgress
from zuke.cli.progress import LiveFanOuts, status_text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_slowest_items_time_runs_on_between_events() -> None:
    now = [100.0]
    live = LiveFanOuts(Terminal(), str, now=lambda: now[0])
    try:
        started = FanOutProgress("deploy", total=3, succeeded=0, failed=0, running=3,
                                 slowest=("eu-west", 0.0))  # fmt: skip
        live.update(started)  # every item just started: nothing more happens for a while
        assert live.status("deploy") == "0/3 done · 3 running · slowest eu-west (0ms)"
        now[0] += 4.2
        assert live.status("deploy") == "0/3 done · 3 running · slowest eu-west (4.2s)"
        now[0] += 121.0
        assert live.status("deploy").endswith("slowest eu-west (2m05s)")
        one_done = FanOutProgress("deploy", total=3, succeeded=1, failed=0, running=2,
                                  slowest=("us-east", 30_000.0))  # fmt: skip
        live.update(one_done)  # a new report: counted on from what it says
        now[0] += 1.0
        assert live.status("deploy") == "1/3 done · 2 running · slowest us-east (31.0s)"
    finally:
        live.stop()


def test_a_name_in_the_live_line_is_one_line_and_no_markup() -> None:
    p = FanOutProgress("deploy", total=1, succeeded=0, failed=0, running=1,
                       slowest=("[bold]x\n::add-mask::y", 5.0))  # fmt: skip
    assert status_text(p).endswith("slowest [bold]x\\n::add-mask::y (5ms)")
