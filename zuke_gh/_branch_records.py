"""Decisions about run records on the state branch: where a record is, and what writing it
changes in the index.

A record lives at ``runs/<hh>/<id>.json``, or — on a branch migrated from the
first layout — still at ``runs/<id>.json`` until a write moves it. The index
(``active.json`` and the shards) is read from the view; a branch without
``active.json`` is laid out (migrated) by the next write's commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from zuke.state._protocol import Conflict, Written
from zuke.state.records import RunRecord
from zuke_gh._branch_files import (
    LEGACY_INDEX_PATH,
    README_PATH,
    README_TEXT,
    blob_sha,
    legacy_run_path,
    parse_entries,
    run_path,
)
from zuke_gh._branch_index import (
    ACTIVE_PATH,
    Active,
    Shard,
    index_entry,
    migrate,
    parse_active,
    parse_shard,
    place,
    shard_path,
)
from zuke_gh._branch_view import Blob, Step, View


def find_record(view: View, run_id: str, *, text: bool) -> tuple[str, Blob] | None:
    """(path, blob) of the run's record at the view's head: its path, else its old one."""
    paths = run_paths(run_id, view)
    if view.knows(paths[0], text=text) and view.files[paths[0]] is not None:
        paths = paths[:1]  # where it is now: the old path need not be looked at
    view.need(paths, text=text)
    for path in paths:
        blob = view.files[path]
        if blob is not None:
            return path, blob
    return None


def run_paths(run_id: str, view: View | None = None) -> list[str]:
    paths = [run_path(run_id)]
    legacy = True
    if view is not None and view.head is not None and view.knows(ACTIVE_PATH, text=True):
        text = view.text(ACTIVE_PATH)
        legacy = text is None or parse_active(text).legacy_runs
    if legacy:
        paths.append(legacy_run_path(run_id))
    return paths


def index_at(
    view: View, *, readme: bool = True
) -> tuple[Active, dict[str, bytes], tuple[str, ...]]:
    """The index at the view's head, and the files that migrate a first-layout branch (or
    lay out a new one) — written with the next commit."""
    text = view.text(ACTIVE_PATH)
    if text is not None:
        return parse_active(text), {}, ()
    legacy = view.text(LEGACY_INDEX_PATH)
    files = migrate(parse_entries(legacy, LEGACY_INDEX_PATH)["runs"])
    if readme and view.oid(README_PATH) is None:
        files[README_PATH] = README_TEXT.encode()
    deletions = (LEGACY_INDEX_PATH,) if legacy is not None else ()
    return parse_active(files[ACTIVE_PATH].decode()), files, deletions


def shards(view: View, files: Mapping[str, bytes], batch: int = 1) -> Callable[[int], Shard]:
    def shard_of(number: int) -> Shard:
        path = shard_path(number)
        if path in files:
            return parse_shard(files[path].decode(), number)
        wanted = [shard_path(n) for n in range(number, max(0, number - batch), -1)]
        view.need([p for p in wanted if p not in files])
        return parse_shard(view.text(path), number)

    return shard_of


def find_shard(view: View, layout: Active, files: Mapping[str, bytes], run_id: str) -> int | None:
    """The shard holding a finished run's entry (newest first, four shards a read)."""
    shard_of = shards(view, files, batch=4)
    for number in range(layout.shard, 0, -1):
        if run_id in shard_of(number).runs:
            return number
    return None


def record_step(
    view: View, record: RunRecord, data: bytes, message: str
) -> Step[Written | Conflict]:
    layout, files, deletions = index_at(view)
    found = find_record(view, record.id, text=False)
    shard = None
    if found is not None and record.id not in layout.runs:
        shard = find_shard(view, layout, files, record.id)
    index = place(layout, shards(view, files), record.id, shard, index_entry(record))
    path = run_path(record.id)
    additions = {**files, **index, path: data}
    if found is not None and found[0] != path:
        deletions = (*deletions, found[0])  # the first layout's path: moved
    return Step(Written(version=blob_sha(data)), additions, deletions, message)
