"""What the invariants read of the store, whichever store a seed runs on.

The invariants look at the store from outside the actors, after every step:
every run's stored text and version, and every key's claim (token, holder, fence,
expiry). The memory store keeps both in plain maps; the filesystem store keeps
them in files, read here through its own parsers (never the actors' path, so a
look is never a store call an actor could see); the Postgres store's rows are read
on a connection of the view's own (:class:`tests.sim.pg.PgView`). A view reads the *inner* store:
the fault layer (:mod:`tests.sim.faults`) and the scheduler's holds do not apply.
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from zuke._clock import Clock
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.lock_rules import ClaimState
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord
from zuke.state.wire import record_to_json


class StoreView(Protocol):
    clock: Clock

    def runs(self) -> dict[str, tuple[str, str]]:
        """Every run: id -> (its record as JSON text, its version)."""
        ...

    def record(self, run_id: str) -> RunRecord | None:
        """The run's record as stored now."""
        ...

    def claim(self, key: str) -> ClaimState | None:
        """The key's claim as the store keeps it (a released key keeps its fence)."""
        ...

    def claims(self) -> dict[str, ClaimState]:
        """Every key the store knows, with its claim."""
        ...


class MemoryView:
    """The memory store's own maps."""

    def __init__(self, store: MemoryStateStore) -> None:
        self.store = store
        self.clock = store.clock

    def runs(self) -> dict[str, tuple[str, str]]:
        return dict(self.store._runs)

    def record(self, run_id: str) -> RunRecord | None:
        found = self.store.get_run(run_id)
        return found.record if found is not None else None

    def claim(self, key: str) -> ClaimState | None:
        return self.store._claims.get(key)

    def claims(self) -> dict[str, ClaimState]:
        return dict(self.store._claims)


class FileView:
    """The filesystem store's files, read with its own parsers. Run ids are the ones
    actors asked to create (``noted``): the view never lists a directory it does not own."""

    def __init__(self, store: FileSystemStateStore) -> None:
        self.store = store
        self.clock = store.clock
        self.ids: set[str] = set()
        #: run id -> (the journal's stat signature, its record, JSON text, version): a
        #: journal is re-parsed only when it changed (a look after every step is cheap)
        self._read: dict[str, tuple[tuple[int, ...], RunRecord, str, str]] = {}

    def noted(self, run_id: str) -> None:
        self.ids.add(run_id)

    def _load(self, run_id: str) -> tuple[RunRecord, str, str] | None:
        try:
            info = os.stat(self.store.path_of(run_id))
        except FileNotFoundError:
            self._read.pop(run_id, None)
            return None
        signature = (info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._read.get(run_id)
        if cached is not None and cached[0] == signature:
            return cached[1:]
        stored = self.store.get_run(run_id)
        if stored is None:
            return None
        text = json.dumps(record_to_json(stored.record))
        self._read[run_id] = (signature, stored.record, text, stored.version)
        return stored.record, text, stored.version

    def runs(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for run_id in sorted(self.ids):
            loaded = self._load(run_id)
            if loaded is not None:
                found[run_id] = (loaded[1], loaded[2])
        return found

    def record(self, run_id: str) -> RunRecord | None:
        loaded = self._load(run_id) if run_id in self.ids else None
        if loaded is None:
            found = self.store.get_run(run_id)
            return found.record if found is not None else None
        return loaded[0]

    def claim(self, key: str) -> ClaimState | None:
        return self.store._locks._state(key)

    def claims(self) -> dict[str, ClaimState]:
        where = os.path.join(self.store.directory, "locks")
        try:
            names = os.listdir(where)
        except FileNotFoundError:
            return {}
        keys = {n.rsplit(".", 1)[0] for n in names if n.endswith((".json", ".fence"))}
        found = {key: self.claim(key) for key in sorted(keys)}
        return {key: state for key, state in found.items() if state is not None}


def view_of(store: object) -> StoreView:
    """The view for ``store`` (a view is returned as it is; a store that makes its own,
    as :class:`tests.sim.pg.ClockedPg` does, is asked for it)."""
    make = getattr(type(store), "view", None)
    if make is not None:
        view: StoreView = make(store)
        return view
    if isinstance(store, MemoryStateStore):
        return MemoryView(store)
    if isinstance(store, FileSystemStateStore):
        return FileView(store)
    assert isinstance(store, (MemoryView, FileView)), store
    return store
