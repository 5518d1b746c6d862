"""Where the tests' throwaway Postgres clusters live: in memory (``/dev/shm``) when it has room.

A test database costs the server its ``CREATE DATABASE`` (about 8 MB of template
pages copied and written to the WAL) and the store's migration (tables, indexes,
functions: new files). On ext4 that was mostly the kernel's file work: about
250 ms of server CPU per test database on the loaded VM, against about 50 ms on
tmpfs (issue 28 §7; docs/benchmarks.md, "The test suite's inner loop"). ``fsync``
is off already, so nothing the tests look at changes: the cluster is thrown away
at the end either way.

Memory is the price: the inner loop's cluster holds about 1 GB of databases, so
``/dev/shm`` is used only when it has :data:`ROOM_BYTES` free (a container's
default 64 MB ``/dev/shm`` has not: the system temp dir is used), and the WAL is
kept short (:data:`SERVER_OPTIONS`). ``$ZUKE_PG_TMPDIR`` names the directory
instead (``/tmp`` to keep the clusters on disk). Only the tests' fixtures are
placed so (``start_cluster(placed=True)``): the benchmarks' clusters stay under
the temp dir, where their figures were measured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: a directory to put the clusters in instead of choosing (must exist)
TMPDIR_ENV = "ZUKE_PG_TMPDIR"
SHM = Path("/dev/shm")
#: the free room ``/dev/shm`` must have: the whole suite's databases and WAL, with margin
ROOM_BYTES = 4 << 30
#: the WAL kept short (128 MB, recycled at each checkpoint, instead of 1 GB): on tmpfs it
#: is memory; no cost in the server's CPU was measurable (docs/benchmarks.md)
SERVER_OPTIONS = "-c max_wal_size=128MB -c min_wal_size=32MB"


def _roomy(directory: Path) -> bool:
    try:
        return os.access(directory, os.W_OK | os.X_OK) and (
            shutil.disk_usage(directory).free >= ROOM_BYTES
        )
    except OSError:
        return False


def parent() -> Path:
    """Where a new cluster's directory goes: ``$ZUKE_PG_TMPDIR``, else ``/dev/shm`` when
    it has room, else the system temp dir."""
    if os.environ.get(TMPDIR_ENV):
        return Path(os.environ[TMPDIR_ENV])
    return SHM if _roomy(SHM) else Path(tempfile.gettempdir())


def parents() -> list[Path]:
    """Every place a cluster may have been put, for finding an earlier session's orphans."""
    places = [Path(tempfile.gettempdir()), SHM]
    if os.environ.get(TMPDIR_ENV):
        places.insert(0, Path(os.environ[TMPDIR_ENV]))
    return [p for i, p in enumerate(places) if p.is_dir() and p not in places[:i]]
