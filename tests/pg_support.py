"""A throwaway Postgres cluster for the tests: started once per session, always stopped.

:func:`start_cluster` runs Debian's ``initdb`` and ``pg_ctl`` (as the
``postgres`` user when we are root: CI runs as root, and Postgres refuses to
run as root) in a fresh directory — for the tests' fixtures in memory when
``/dev/shm`` has room (:mod:`tests.pg_place` says why), else under the system
temp dir — on a free
loopback port, with trust authentication for the user ``zuke``. It is stopped
with ``pg_ctl stop -m immediate`` and its directory removed by
:meth:`PgCluster.stop`, which the fixture calls in its finaliser and registers
with :mod:`atexit` too. A session killed outright (``kill -9``) cannot run
either, so each cluster's directory names the pytest process that owns it and
the next session stops the clusters whose owner is gone.

When the binaries (or psycopg2) are missing, :func:`unavailable` says why; the
fixture skips with that reason, or fails when ``ZUKE_REQUIRE_POSTGRES=1`` (CI).

For fault tests: :meth:`PgCluster.restart` (``pg_ctl restart -m immediate``),
:meth:`PgCluster.password_role`, and :class:`LosingProxy` (:mod:`tests.pg_proxy`), a
TCP proxy that loses one answer (after the server committed) or one request, or holds
every new connection unanswered (a stalled server).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests import pg_place
from tests.pg_proxy import LosingProxy, Mode
from zuke.state._pg_pool import PgConn

REQUIRE_ENV = "ZUKE_REQUIRE_POSTGRES"
#: a directory holding ``initdb`` and ``pg_ctl`` to use instead of looking for them
BINDIR_ENV = "ZUKE_PG_BINDIR"
USER = "zuke"
PREFIX = "zuke-pg-"
START_ATTEMPTS = 3
COMMAND_TIMEOUT_S = 60.0
#: how long :meth:`PgCluster.restart` lets ``pg_ctl`` take (its ``-t``)
RESTART_TIMEOUT_S = 60


def required() -> bool:
    """Whether a missing Postgres fails the tests instead of skipping them (CI)."""
    return os.environ.get(REQUIRE_ENV, "") == "1"


def bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: ``$ZUKE_PG_BINDIR``, ``pg_config --bindir``, Debian."""
    if os.environ.get(BINDIR_ENV):
        chosen = Path(os.environ[BINDIR_ENV])
        return chosen if (chosen / "initdb").is_file() and (chosen / "pg_ctl").is_file() else None
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for directory in candidates:
        if (Path(directory) / "initdb").is_file() and (Path(directory) / "pg_ctl").is_file():
            return Path(directory)
    return None


def unavailable() -> str | None:
    """Why no cluster can be started here, or ``None`` when one can."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed: pip install 'zuke[postgres]'"
    if bindir() is None:
        return "no Postgres binaries: neither `pg_config --bindir` nor /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without `runuser` (Postgres refuses to run as root)"
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the cluster as"
    return None


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def connected(url: str) -> Iterator[PgConn]:
    """An autocommit connection of the store's kind (``conn.execute(...).fetchone()``),
    closed at the end: what tests use to look at or change the database behind zuke."""
    import psycopg2

    conn = PgConn(psycopg2.connect(url))
    conn.raw.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@dataclass
class PgCluster:
    """One running cluster: its directory, port and binaries."""

    root: Path
    port: int
    bin: Path
    stopped: bool = False
    databases: list[str] = field(default_factory=list)
    #: how long each :meth:`restart` took, in seconds (for a failing test to say)
    restarts: list[float] = field(default_factory=list)
    #: this process's connection for ``CREATE DATABASE`` (see :meth:`create_database`)
    _maintenance: PgConn | None = field(default=None, repr=False)
    _maintenance_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: this process's migrated database to copy (see :meth:`_schema_template`)
    _template: str | None = field(default=None, repr=False)
    _template_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}" + (
            f"?{query}" if query else ""
        )

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), *args]),
            capture_output=True,
            text=True,
            check=check,
            timeout=COMMAND_TIMEOUT_S,
        )

    def create_database(self, *, migrated: bool = False) -> str:
        """A new, empty database; its URL.

        Made on one connection per process, kept: a backend started for each of the
        hundred-odd databases a run makes cost the server a start-up each (about 8 ms of
        CPU, issue 28 §7). Should that connection be gone (the cluster restarted), a new
        one makes the database under a new name — the lost answer may have made the first.

        ``migrated``: instead, a copy of a database this process migrated to the current
        schema once (:meth:`_schema_template`), for tests whose subject is not the
        migration: the store's first connection finds the schema in place, as on any
        database in use. The copy costs the server what an empty database does; the
        migration it saves cost about as much again (docs/benchmarks.md).
        """
        name = self._make("template1" if not migrated else self._schema_template())
        self.databases.append(name)
        return self.url(name)

    def _make(self, template: str) -> str:
        import psycopg2

        for attempt in range(2):
            name = f"zt_{uuid.uuid4().hex[:12]}"
            with self._maintenance_lock:
                try:
                    if self._maintenance is None or self._maintenance.raw.closed:
                        self._maintenance = PgConn(psycopg2.connect(self.url()))
                        self._maintenance.raw.autocommit = True
                    self._maintenance.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                except (psycopg2.OperationalError, psycopg2.InterfaceError):
                    self._close_maintenance()
                    if attempt:
                        raise
                    continue
            return name
        raise AssertionError("unreachable")

    def _schema_template(self) -> str:
        """This process's database at the current schema, migrated by the store itself, with
        no one connected (``CREATE DATABASE … TEMPLATE`` needs that). One per process, not
        per cluster: the xdist workers share the cluster, and one template would need them
        to agree who migrates it and when it is done."""
        from zuke.state.postgres import PostgresStateStore

        with self._template_lock:
            if self._template is None:
                name = self._make("template1")
                store = PostgresStateStore(self.url(name))
                try:
                    store.list_runs()
                finally:
                    store.close()
                self._template = name
            return self._template

    def _close_maintenance(self) -> None:
        if self._maintenance is not None:
            self._maintenance.close()
            self._maintenance = None

    def restart(self) -> None:
        """``pg_ctl restart -m immediate``: every backend dies at once, as in a crash; the
        server recovers and listens on the same port (its options are kept in postmaster.opts).

        The log file is named again, or the new server would write to our pipe and
        ``pg_ctl`` never return. It may take up to :data:`RESTART_TIMEOUT_S` (a loaded
        machine; a Postgres 15 postmaster that stops waits for its last children before it
        exits, without accepting meanwhile); how long it took is kept in :attr:`restarts`.
        """
        began = time.monotonic()
        try:
            self.pg_ctl("-m", "immediate", "-l", str(self.root / "server.log"), "-w", "-t",
                        str(RESTART_TIMEOUT_S), "restart")  # fmt: skip
        finally:
            self.restarts.append(round(time.monotonic() - began, 2))

    def password_role(self, role: str, password: str) -> None:
        """A role that must give ``password`` over TCP (scram), ahead of the trust rule."""
        import psycopg2

        hba = self.data / "pg_hba.conf"
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        if rule not in hba.read_text():
            hba.write_text(rule + hba.read_text())
        with connected(self.url()) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        without = self.url().replace(f"{USER}@", f"{role}@")
        while True:  # the postmaster reloads on its own time: poll until it asks
            try:
                psycopg2.connect(without, connect_timeout=5).close()
            except psycopg2.OperationalError:
                return
            if time.monotonic() > deadline:
                raise AssertionError("the server never asked for the password")

    def stop(self) -> None:
        """Stop the cluster at once and remove its directory; safe to call twice."""
        if self.stopped:
            return
        self.stopped = True
        with self._maintenance_lock:
            self._close_maintenance()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.pg_ctl("-m", "immediate", "stop", check=False)
        remove_later(self.root)


def remove_later(root: Path) -> None:
    """Remove a stopped cluster's directory without waiting for it: renamed at once (out of
    :func:`reap_orphans`'s way), then ``rm -rf`` in a process the session does not wait for.

    A session's shared cluster holds every database its tests made (180 MB, 8,000 files
    after the inner loop): removing it inline kept pytest alive 70 s past its summary on
    the loaded VM (issue 28 §7). Should the removal not start, it is done inline.
    """
    gone = root.with_name(f"{PREFIX}removing-{root.name}")
    try:
        root.rename(gone)
        # sh exits at once; its background rm has /dev/null for every stream, so no pipe
        # of ours is held open by it
        subprocess.run(
            ["sh", "-c", 'rm -rf -- "$1" </dev/null >/dev/null 2>&1 &', "sh", str(gone)],
            check=True,
            timeout=COMMAND_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):  # gone already, or no sh: inline
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(gone, ignore_errors=True)


def reap_orphans(tmp: Path) -> None:
    """Stop the clusters of earlier sessions whose pytest process is gone."""
    base = bindir()
    for root in tmp.glob(f"{PREFIX}*"):
        owner = root.name[len(PREFIX) :].split("-", 1)[0]
        if not owner.isdigit() or _pid_alive(int(owner)) or base is None:
            continue
        PgCluster(root=root, port=0, bin=base).stop()


def start_cluster(*, owner: int | None = None, placed: bool = False) -> PgCluster:
    """Start a cluster (see the module docstring), owned by this process — stopped at its
    exit whatever happens — or by the process ``owner``, which stops it (see
    :func:`shared_cluster`); either way its directory names the owner for
    :func:`reap_orphans`.

    ``placed``: where :mod:`tests.pg_place` says (in memory when there is room), with its
    short WAL — the tests' fixtures; without, under the system temp dir as the
    benchmarks' figures were measured.
    """
    base = bindir()
    assert base is not None, "call unavailable() first"
    for place in pg_place.parents():
        reap_orphans(place)
    parent = pg_place.parent() if placed else Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{owner or os.getpid()}-", dir=parent))
    cluster = PgCluster(root=root, port=0, bin=base)
    if owner is None:
        atexit.register(cluster.stop)
    try:
        if os.geteuid() == 0:
            shutil.chown(root, user="postgres")
        initdb = [str(base / "initdb"), "-D", str(cluster.data), "-A", "trust", "-U", USER]
        subprocess.run(
            _as_server_user([*initdb, "-E", "UTF8", "--no-sync"]),
            capture_output=True,
            text=True,
            check=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        for attempt in range(START_ATTEMPTS):  # a free port may be taken before the server binds
            cluster.port = _free_port()
            options = (
                f"-p {cluster.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=400"  # one cluster for every xdist worker
                + (f" {pg_place.SERVER_OPTIONS}" if placed else "")
            )
            started = cluster.pg_ctl(
                "-o", options, "-l", str(root / "server.log"), "-w", "-t", "60", "start",
                check=False,
            )  # fmt: skip
            if started.returncode == 0:
                return cluster
            if attempt == START_ATTEMPTS - 1:
                log = (root / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{log}")
    except BaseException:
        cluster.stop()
        raise
    raise AssertionError("unreachable")


#: where :func:`shared_cluster` writes the shared cluster's root, port and binaries
SHARED_INFO = "cluster.json"


def shared_cluster(directory: Path, owner: int) -> PgCluster:
    """The one cluster the xdist workers of a run share, described in ``directory``: the
    first worker to ask starts it (under a file lock), the others read where it is.

    The run's controller (``owner``) stops it with :func:`stop_shared` when the run
    ends: a worker may finish while the others still use it. One cluster for all
    workers instead of one each saves an ``initdb`` and a server start and stop per
    worker. Tests on it see other workers' databases, so a test that looks at the
    whole cluster (``pg_stat_activity``) keeps to ``current_database()``.
    """
    from filelock import FileLock

    info = directory / SHARED_INFO
    with FileLock(str(directory / "cluster.lock")):
        if info.exists():
            shown = json.loads(info.read_text())
            return PgCluster(root=Path(shown["root"]), port=shown["port"], bin=Path(shown["bin"]))
        cluster = start_cluster(owner=owner, placed=True)
        shown = {"root": str(cluster.root), "port": cluster.port, "bin": str(cluster.bin)}
        info.write_text(json.dumps(shown))
        return cluster


def stop_shared(directory: Path) -> None:
    """Stop the cluster :func:`shared_cluster` started in ``directory``, if any, and remove
    ``directory``."""
    info = directory / SHARED_INFO
    if info.exists():
        shown = json.loads(info.read_text())
        PgCluster(root=Path(shown["root"]), port=shown["port"], bin=Path(shown["bin"])).stop()
    shutil.rmtree(directory, ignore_errors=True)


__all__ = [
    "RESTART_TIMEOUT_S",
    "LosingProxy",
    "Mode",
    "PgCluster",
    "required",
    "shared_cluster",
    "start_cluster",
    "stop_shared",
    "unavailable",
]
