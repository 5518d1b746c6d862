"""The view's three pages — runs, a run, locks — as a template and its values.

Each page has a *live region*, its own template, which the page includes and
the live feed (:mod:`zuke._serve.ui.live`) renders again when the state may
have changed: what a page shows and what it is updated with come from the
same function. These functions block (the database): the caller runs them
on a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke._errors import CorruptRecordError, UnsafeIdError
from zuke._serve.backend import ServeDb
from zuke._serve.ui.locks_view import is_safe_id, lock_rows
from zuke._serve.ui.queries import BadQuery, namespace, parse_filter, runs_page
from zuke._serve.ui.run_view import run_view
from zuke.state._ids import check_id
from zuke.state.records import RUN_STATUSES
from zuke.state.wire import loads_record

#: the views the live feed can follow, and the parameters each reads
LIVE_VIEWS = {"runs": ("status", "build", "starter", "since", "before"), "run": ("id",),
              "locks": ()}  # fmt: skip


class NotFound(LookupError):
    """No such page, or no such run; the message says which."""


@dataclass(frozen=True)
class View:
    name: str  #: "runs", "run", "locks"
    title: str
    page: str  #: the template of the whole page
    live: str  #: the template of its live region
    context: dict[str, Any] = field(default_factory=dict)
    #: the live feed's parameters that reproduce this view
    live_params: dict[str, str] = field(default_factory=dict)


def runs(db: ServeDb, params: Mapping[str, str], *, now_ms: int) -> View:
    ns = namespace(params)
    f = parse_filter(params)
    page = runs_page(db, ns, f, now_ms=now_ms)
    live = f.query(before=params.get("before") or None)
    return View(
        name="runs", title="Runs", page="runs.html", live="runs_live.html",
        context={"page": page, "filters": f, "statuses": RUN_STATUSES, "ns": ns,
                 "filtered": bool(f.query()), "first": f.before is None},
        live_params=live,
    )  # fmt: skip


def run(db: ServeDb, params: Mapping[str, str], run_id: str, *, now_ms: int) -> View:
    ns = namespace(params)
    try:
        check_id(run_id)
    except UnsafeIdError:
        raise NotFound(f"no run {run_id[:80]!r}: a run id is 1-200 characters of "
                       "[A-Za-z0-9._-]") from None  # fmt: skip
    try:
        stored = db.get_run(ns, run_id)  # (a journal that does not fold raises here)
        if stored is None:
            where = f" in the namespace {ns!r}" if ns else ""
            raise NotFound(f"no run {run_id!r}{where}: it may have been pruned")
        record = loads_record(stored.text)
    except CorruptRecordError as exc:
        return View(name="run", title=f"Run {run_id}", page="run.html", live="run_corrupt.html",
                    context={"run_id": run_id, "corrupt": str(exc), "ns": ns},
                    live_params={"id": run_id})  # fmt: skip
    view = run_view(record, db.locks.list(ns, run_id=run_id))
    return View(name="run", title=f"Run {run_id}", page="run.html", live="run_live.html",
                context={"run": view, "run_id": run_id, "ns": ns},
                live_params={"id": run_id})  # fmt: skip


def locks(db: ServeDb, params: Mapping[str, str], *, now_ms: int) -> View:
    ns = namespace(params)
    return View(name="locks", title="Locks", page="locks.html", live="locks_live.html",
                context={"locks": lock_rows(db, ns, now_ms=now_ms), "ns": ns,
                         "linkable": is_safe_id})  # fmt: skip


def for_live(db: ServeDb, params: Mapping[str, str], *, now_ms: int) -> View:
    """The view the live feed follows: ``view=runs|run|locks`` and that view's parameters."""
    name = params.get("view", "")
    if name == "runs":
        return runs(db, params, now_ms=now_ms)
    if name == "run":
        return run(db, params, params.get("id", ""), now_ms=now_ms)
    if name == "locks":
        return locks(db, params, now_ms=now_ms)
    raise BadQuery("view must be runs, run or locks")


__all__ = ["LIVE_VIEWS", "NotFound", "View", "for_live", "locks", "run", "runs"]
