"""What the filesystem store's listing modules read of the store, as a protocol.

:mod:`zuke.state._fs_listing` and :mod:`zuke.state._fs_fresh` work on a
:class:`~zuke.state.filesystem.FileSystemStateStore` that imports them; naming the store
by this shape instead keeps the three modules free of a circle.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from zuke.state._fs_index import RunIndex
    from zuke.state._protocol import StoredRun
    from zuke.state.records import RunRecord


class FsStore(Protocol):
    """The filesystem store as its listing sees it: paths, the index and reads."""

    @property
    def directory(self) -> str: ...
    @property
    def mutex_timeout_s(self) -> float: ...
    @property
    def index(self) -> RunIndex: ...
    def path_of(self, run_id: str) -> str: ...
    def where(self, run_id: str) -> str: ...
    def mutex_path(self, run_id: str) -> str: ...
    def get_run(self, run_id: str) -> StoredRun | None: ...
    def read_run(self, run_id: str) -> tuple[StoredRun, os.stat_result] | None: ...
    def scan(self) -> Iterator[RunRecord]: ...
