"""The chain on Postgres against the filesystem store, paired, with the CPU each side spent.

``bench_postgres.py --only chain`` (issue 28 §2). Wall time on a shared
2-core machine follows the load more than the store: a Postgres run makes a
thousand round trips, each needing the server's process scheduled, where the
filesystem run only competes for a core. So each run's CPU is taken too:

- **zuke's**: the child's user + system time (``RUSAGE_CHILDREN``);
- **the server's**: the CPU of the run's own backend, read from the
  postmaster's reaped children (``cutime`` + ``cstime`` in
  ``/proc/<postmaster>/stat``, Linux) once that backend has exited — the
  backend of a connection is a child of the postmaster, and its time is added
  there when it is reaped. Where ``/proc`` is missing it is not reported.

And a third run beside the two, **the floor** (:func:`floor_build`): the same
chain on the filesystem store, plus one bare ``SELECT 1`` round trip to the
same server after every append. No store that has a server acknowledge each
transition before the next body starts (``docs/state.md``) can cost less than
that: the Postgres store against the floor is what its SQL, its driver use
and its bookkeeping add; the floor against the filesystem store is what the
round trip itself costs on this machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from _timing import BenchmarkError

#: the floor's server, for the build's store (:func:`floor_build`)
FLOOR_URL_ENV = "ZUKE_BENCH_FLOOR_URL"
#: the store of the floor's build: the filesystem store, then one ``SELECT 1`` per append
_FLOOR_STORE = """
import os

import psycopg2

from zuke.state.filesystem import FileSystemStateStore


class OneRoundTripStore(FileSystemStateStore):
    inline_writes = True  # as the filesystem and Postgres stores: written on the loop's thread
    append_after_lazily = True

    def __init__(self, directory, url):
        super().__init__(directory)
        self._url, self._conn = url, None

    def _round_trip(self):
        if self._conn is None:  # connected at the first append, as the Postgres store's pool
            self._conn = psycopg2.connect(self._url)
            self._conn.autocommit = True
        cur = self._conn.cursor()
        cur.execute("SELECT 1")
        cur.fetchone()

    def append_run(self, *args, **kwargs):
        written = super().append_run(*args, **kwargs)
        self._round_trip()
        return written

    def append_run_known(self, *args, **kwargs):
        written = super().append_run_known(*args, **kwargs)
        self._round_trip()
        return written

"""


def floor_build(chain: str) -> str:
    """``chain`` (a build's text: ``bench_engine.chain_build``) with its runs on the floor's
    store: the filesystem store in ``ZUKE_STATE_DIR``, one ``SELECT 1`` on the server at
    ``$ZUKE_BENCH_FLOOR_URL`` after each append."""
    head, sep, body = chain.partition("class Chain(Build):\n")
    if not sep:
        raise BenchmarkError("floor_build: not a chain_build() text")
    override = (
        "    def state_store(self):\n"
        "        return OneRoundTripStore(os.environ['ZUKE_STATE_DIR'],"
        f" os.environ[{FLOOR_URL_ENV!r}])\n\n"
    )
    return head + _FLOOR_STORE + sep + override + body


#: how long a run's backend may take to exit and be reaped after the run
REAP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sample:
    wall_s: float
    #: zuke's own CPU (user + system)
    cpu_s: float
    #: the run's backend's CPU (``None``: no server, or not measurable here)
    server_s: float | None = None


class ServerCpu:
    """The CPU of a cluster's exited backends, from its postmaster's reaped children."""

    def __init__(self, data: Path) -> None:
        self.pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        self._tick = os.sysconf("SC_CLK_TCK")

    @property
    def available(self) -> bool:
        return Path(f"/proc/{self.pid}/stat").exists()

    def reaped_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / self._tick  # cutime, cstime

    def wait_idle(self, database: str) -> None:
        """Wait until no backend of ``database`` is left (the run's exited and was reaped)."""
        deadline = time.monotonic() + REAP_TIMEOUT_S
        while time.monotonic() < deadline:
            if not any(database in cmd for cmd in self._children()):
                return
            time.sleep(0.01)
        raise BenchmarkError(f"a backend of {database} did not exit in {REAP_TIMEOUT_S:g}s")

    def _children(self) -> list[str]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.pid:
                    found.append((stat.parent / "cmdline").read_text(errors="replace"))
            except (OSError, IndexError, ValueError):
                continue  # it exited while looked at
        return found


def run_once(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    server: ServerCpu | None = None,
    database: str = "",
) -> Sample:
    """One fresh ``zuke`` process: its wall time, its CPU, and its backend's (``server``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = server.reaped_s() if server is not None else 0.0
    started = time.perf_counter()
    proc = subprocess.run(
        list(argv), cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        raise BenchmarkError(f"{' '.join(argv)} exited {proc.returncode} in {cwd}:\n{tail}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if server is None:
        return Sample(wall, cpu)
    server.wait_idle(database)
    return Sample(wall, cpu, server.reaped_s() - served)


__all__ = ["FLOOR_URL_ENV", "Sample", "ServerCpu", "floor_build", "run_once"]
