"""``zuke resume --check`` processes on the branch store under a tight write budget: the first
defers what the hour does not afford (exit 0), the next, an hour later on GitHub's clock,
finishes. Real processes against the fake; writes paced for real (1 s apart), so a few
seconds of wall time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e

REPO = "acme/app"
BUILD = """
    from pathlib import Path
    from zuke import Build, resume_when, target

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(resume_when(lambda: Path("approved").exists())))

        @target
        def ship(self, t):
            return t.depends_on(self.approve).executes(lambda: print("shipped"))
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        yield fake


def _sweep(tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, object]]:
    code, out = finish(spawn(["resume", "--check", "--json"], tmp_path, env))
    start = out.find("{\n")
    assert start >= 0, out
    return code, json.loads(out[start:])


def test_a_sweep_out_of_budget_defers_exit_0_and_the_next_hours_sweep_finishes(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    write_build(tmp_path, BUILD)
    env = {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token,
           "ZUKE_STATE": "github://acme/app?branch=zuke-state"}  # fmt: skip
    for _ in range(2):
        code, out = finish(spawn(["ship"], tmp_path, env))
        assert code == 0 and "is suspended" in out, out
    (tmp_path / "approved").write_text("yes")
    gh.advance_clock(3601)  # the runs' own commits are history
    gh.configure(write_min_gap_ms=1000)  # from now on a second between writes is enforced
    gh.reset_stats()
    tight = {**env, "ZUKE_GITHUB_PACING": "on", "ZUKE_GITHUB_WRITES_PER_HOUR": "5"}
    code, first = _sweep(tmp_path, tight)
    assert code == 0, first
    assert first["counts"]["resumed"] == 1 and first["counts"]["deferred"] == 1  # type: ignore[index]
    assert first["ok"] is True
    code, again = _sweep(tmp_path, tight)  # the same hour: the branch says 4 are spent
    assert code == 0 and again["counts"]["deferred"] == 1  # type: ignore[index]
    gh.advance_clock(3601)
    code, last = _sweep(tmp_path, tight)
    assert code == 0 and last["counts"]["resumed"] == 1  # type: ignore[index]
    refused = {k: v for k, v in gh.stats()["statuses"].items() if k in ("403", "429")}
    assert refused == {}, [r for r in gh.requests if r["status"] == 403]
