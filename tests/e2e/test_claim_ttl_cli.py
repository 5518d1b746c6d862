"""Real ``zuke`` processes: a lease or lock TTL too short to renew is refused at load —
one ``zuke:`` line naming the minimum, exit 2, no body run, no record written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.support import finish, spawn, write_build
from zuke.state.filesystem import FileSystemStateStore

pytestmark = pytest.mark.e2e

TTL_BUILD = """
    import pathlib
    from zuke import Build, parameter, target

    class Short(Build):
        ttl = parameter("lock TTL").default("1m")

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("ttl-key").with_ttl(self.ttl.value)).executes(
                lambda: (pathlib.Path(__file__).parent / "ran").write_text("")
            )
"""


def nothing_happened(workdir: Path) -> bool:
    runs = workdir / ".zuke" / "runs"
    recorded = runs.exists() and FileSystemStateStore(runs).list_runs() != []
    return not recorded and not (workdir / "ran").exists()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--ttl", "500ms"], {}, "zuke: target 'deploy': lock TTL: 500ms is shorter than the 1s "
                                 "minimum"),
        ([], {"ZUKE_RUN_LEASE_TTL": "50ms"}, "zuke: ZUKE_RUN_LEASE_TTL: 50ms is shorter than "
                                             "the 1s minimum"),
    ],
)  # fmt: skip
def test_a_ttl_too_short_to_renew_is_exit_2_before_anything_runs(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    write_build(tmp_path, TTL_BUILD)
    code, out = finish(spawn(["deploy", *args], tmp_path, env))
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), out
    assert "safety margin" in lines[0] and "Traceback" not in out
    assert nothing_happened(tmp_path)


def test_the_shortest_ttls_allowed_run(tmp_path: Path) -> None:
    write_build(tmp_path, TTL_BUILD)
    code, out = finish(spawn(["deploy", "--ttl", "1s"], tmp_path, {"ZUKE_RUN_LEASE_TTL": "1s"}))
    assert code == 0, out
    assert (tmp_path / "ran").exists()
