"""Builds and helpers for the run-lifecycle tests with real ``zuke`` processes.

Processes "started at the same moment" are all spawned before any is waited
for; every wait is a poll or a process exit with a deadline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.resume_support import MARKER_WRITER

#: A ``github_workflow`` gate (``e2e``, then ``ship``) whose GitHub client is made by the
#: build: with ``CLIENT_GATE`` set (a directory), a process about to ask the gate's
#: trigger says so in ``CLIENT_GATE/arrived`` and waits for ``CLIENT_GATE/open`` — before
#: the trigger persists its marker or dispatches, so sweeps that would both ask it both
#: get there.
WORKFLOW_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, parameter, target
    from zuke_gh import GitHubClient, github_workflow, read_workflow_result

    def client():
        gate = os.environ.get("CLIENT_GATE")
        if gate:
            append_line(pathlib.Path(gate) / "arrived", str(os.getpid()))
            wait_for(pathlib.Path(gate) / "open", "the client gate to open")
        return GitHubClient.from_env()

    class Release(Build):
        @target
        def e2e(self, t):
            return t.waits_for(lambda s: s.on(github_workflow(self._workflow)).timeout("2h"))

        def _workflow(self, g):
            g.repo("acme/app").workflow("e2e.yml").ref("main").input("suite", "smoke")
            g.client(client)

        @target
        def ship(self, t):
            return t.depends_on(self.e2e).executes(self._ship)

        def _ship(self, ctx):
            result = read_workflow_result(ctx.state_of("e2e"))
            if result is None or not result.passed:
                raise RuntimeError("the e2e suite did not pass")
"""
)

#: deploy, a gate on ``approved``, promote, a gate on ``confirmed``, finish: two signal
#: gates in a row, so a run is still suspended after its first signal. ``promote`` holds
#: (when the test wrote ``hold``) until the test writes ``release``.
APPROVAL_BUILD = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, external_signal, parameter, target

    class Release(Build):
        markers = parameter("marker directory").required()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def deploy(self, t):
            return t.executes(lambda: append_line(self._m() / "ran", "deploy"))

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("1h"))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(self._promote)

        def _promote(self):
            append_line(self._m() / "ran", "promote")
            if (self._m() / "hold").exists():
                wait_for(self._m() / "release", "the release marker")

        @target
        def confirm(self, t):
            return t.depends_on(self.promote).waits_for(
                lambda s: s.on(external_signal("confirmed")))

        @target
        def finish(self, t):
            return t.depends_on(self.confirm).executes(
                lambda: append_line(self._m() / "ran", "finish"))
"""
)

#: A fan-out over ``--repos``: each item waits for its own signal ``ok-<repo>``, then
#: promotes (one line per body run, with the pid; held while ``hold`` exists until the
#: test writes ``release``); ``announce`` after the batch.
FAN_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, external_signal, parameter, target

    class Rollout(Build):
        markers = parameter("marker directory").required()
        repos = parameter("the services").array()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def batch(self, t):
            return t.for_each(lambda: self.repos.value, self._stages, lambda s: s.concurrency(3))

        @target
        def announce(self, t):
            return t.depends_on(self.batch).executes(
                lambda: append_line(self._m() / "ran", f"announce {os.getpid()}"))

        def _stages(self, repo, index):
            m = self._m()
            def promote():
                append_line(m / "ran", f"promote {repo} {os.getpid()}")
                if (m / "hold").exists():
                    wait_for(m / "release", "the release marker")

            return {
                "build": target().executes(lambda: append_line(m / "ran", f"build {repo}")),
                "approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{repo}"))),
                "promote": target().executes(promote),
            }
"""
)

#: Two independent branches: ``gate`` waits for ``go`` (``after`` depends on it) while
#: ``slow`` says it started and then holds until the test writes ``release``.
BRANCHES_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, external_signal, parameter, target

    class Branches(Build):
        markers = parameter("marker directory").required()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def gate(self, t):
            return t.waits_for(lambda s: s.on(external_signal("go")))

        @target
        def after(self, t):
            return t.depends_on(self.gate).executes(
                lambda: append_line(self._m() / "ran", f"after {os.getpid()}"))

        @target
        def slow(self, t):
            return t.executes(self._slow)

        def _slow(self):
            append_line(self._m() / "started", "slow")
            wait_for(self._m() / "release", "the release marker")
            append_line(self._m() / "ran", "slow")

        @target
        def all(self, t):
            return t.depends_on(self.after, self.slow).executes(
                lambda: append_line(self._m() / "ran", "all"))
"""
)

#: A gate on ``approved`` in a build with a secret parameter (``--token`` / ``TOKEN``).
SECRET_BUILD = (
    MARKER_WRITER
    + """
    import json, pathlib
    from zuke import Build, external_signal, parameter, target

    class Release(Build):
        markers = parameter("marker directory").required()
        token = parameter("the deploy API token").secret().required()

        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(external_signal("approved")))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(self._promote)

        def _promote(self, ctx):
            append_line(pathlib.Path(self.markers.value) / "ran", "promote")
"""
)


def store_files(workdir: Path) -> dict[str, bytes]:
    """Every file under the store's directory, by relative path, with its bytes."""
    root = workdir / ".zuke"
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def files_holding(root: Path, needle: str) -> list[str]:
    """The files under ``root`` whose bytes contain ``needle`` (any file, the index included)."""
    raw = needle.encode()
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and raw in p.read_bytes()]


def zuke_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("zuke:")]


def sweep_summary(code: int, out: str) -> dict[str, Any]:
    """The JSON summary ``zuke resume --check --json`` printed (after any warnings)."""
    start = out.find("{\n")
    assert start >= 0, f"no JSON summary (exit {code}):\n{out}"
    summary: dict[str, Any] = json.loads(out[start:])
    return summary
