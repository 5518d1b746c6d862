"""The conformance kit (``python -m zuke.testing.conformance``) against real services and bad ones.

It passes against ``zuke serve`` on SQLite and against each of two
``zuke serve --db postgresql://`` replicas sharing one database (real
processes, the kit run as a command). It fails loudly — ``FAIL`` lines, exit
1 — against a service whose compare-and-swap lands stale writes, and aborts
with one line when the service cannot be reached, refuses the token, or
speaks another protocol version.
"""

from __future__ import annotations

import http.server
import io
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_support import PgCluster
from tests.serve.support import TOKEN, child_env, in_process, running_server
from zuke._serve import db as sqlite_db
from zuke.testing import conformance
from zuke.testing.conformance import REGISTRY_SCENARIOS, STATE_SCENARIOS, main

ALL = len(STATE_SCENARIOS) + len(REGISTRY_SCENARIOS)
DEADLINE_S = 120.0


def kit(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The kit as a command, its token from the environment."""
    return subprocess.run(
        [sys.executable, "-m", "zuke.testing.conformance", "--url", url, *args],
        env={**child_env(None), "ZUKE_STATE_TOKEN": TOKEN},
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip


def assert_all_passed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"{ALL}/{ALL} scenarios passed."
    assert [line.split("  ", 1)[0] for line in lines[:-1]] == ["PASS"] * ALL
    assert done.stderr == ""


def test_the_kit_passes_against_serve_on_sqlite(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        assert_all_passed(kit(server.url))
        assert_all_passed(kit(f"{server.url}/team/a"))  # a namespace, and a second run


# slow (13 s, 3 s of CPU: two servers, three kit runs): the kit itself is run in the inner loop
# against serve on SQLite (above), and serve on Postgres by tests/serve/test_pg_serve.py
@pytest.mark.slow
def test_the_kit_passes_against_each_of_two_postgres_replicas(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    url = pg_cluster.create_database()
    with running_server(tmp_path, db=url) as a, running_server(tmp_path, db=url) as b:
        assert_all_passed(kit(a.url))
        assert_all_passed(kit(b.url))
        assert_all_passed(kit(f"{b.url}/ns/x"))


def test_the_kit_fails_loudly_against_a_service_that_lands_stale_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = sqlite_db.StateDb.update_run

    def lands_anyway(self: sqlite_db.StateDb, ns: str, record: object, text: str, *,
                     if_match: str, write_id: str | None = None) -> tuple[str, str]:  # fmt: skip
        return honest(self, ns, record, text, if_match="*", write_id=write_id)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_db.StateDb, "update_run", lands_anyway)
    out, err = io.StringIO(), io.StringIO()
    with in_process(tmp_path) as (server, _):
        code = main(["--url", server.url, f"--token={TOKEN}"], out=out, err=err)
    lines = out.getvalue().splitlines()
    assert code == 1
    assert "FAIL  a stale version is rejected" in lines
    assert "FAIL  two writers at one version: exactly one wins" in lines
    failed = lines[lines.index("FAIL  a stale version is rejected") + 1]
    assert failed.startswith("      an update at a stale version: HTTP 200, expected 412")
    assert lines[-1] == f"{ALL - 2}/{ALL} scenarios passed."
    assert TOKEN not in out.getvalue() + err.getvalue()


def test_without_url_it_says_so_and_exits_1() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main([], out=out, err=err, env={}) == 1
    assert (out.getvalue(), err.getvalue()) == ("", "conformance: --url <base> is required.\n")


def test_a_refused_token_aborts_without_printing_the_token(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with in_process(tmp_path) as (server, _):
        assert main(["--url", server.url, "--token", "wrong-token-xyz"], out=out, err=err) == 1
    assert out.getvalue() == ""
    assert err.getvalue().startswith("conformance: aborted — the service refused the token")
    assert "wrong-token-xyz" not in err.getvalue()


def test_nobody_listening_aborts_in_one_line(unused_port: int) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--url", f"http://127.0.0.1:{unused_port}"], out=out, err=err, env={}) == 1
    assert len(err.getvalue().splitlines()) == 1
    assert err.getvalue().startswith("conformance: aborted — PUT /runs/conformance-run-")


class _OtherProtocol(http.server.BaseHTTPRequestHandler):
    """A service speaking protocol 2: every answer says so."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(201)
        self.send_header("x-zuke-state-protocol", "2")
        self.send_header("ETag", '"1"')
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def other_protocol() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtherProtocol)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_service_speaking_another_protocol_aborts(other_protocol: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--url", other_protocol], out=out, err=err, env={}) == 1
    assert err.getvalue() == (
        "conformance: aborted — state-api protocol mismatch: the service speaks '2', this kit '1'\n"
    )


def test_scenarios_use_fresh_ids() -> None:
    assert conformance.fresh("run") != conformance.fresh("run")
    assert conformance.fresh("run").startswith("conformance-run-")
