"""Issue 19 §3 item 9: the README's inner loop
(``pytest -m "not e2e and not act and not sim and not slow"``) leaves out every test of
tests/e2e, tests/action, tests/sim, tests/chaos and tests/ui/browser, by their folders'
markers (which also lets it leave those folders uncollected: ``tests/marked_folders.py``);
``slow`` marks the expensive variants a cheaper test covers (issue 28 §7)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child import LEAN_PLUGINS

ROOT = Path(__file__).resolve().parents[2]
INNER = "not e2e and not act and not sim and not slow"


def collect(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *LEAN_PLUGINS, *args],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    return done.stdout + done.stderr


# slow (a child collecting those folders: 1.9 s of CPU): in the inner loop,
# tests/test_marked_folders.py shows the inner loop's -m rules out each folder's markers,
# and whenever the folders are collected (CI, the whole suite) each of their tests is
# checked to carry them (tests/marked_folders.py)
@pytest.mark.slow
def test_the_inner_loop_leaves_out_every_e2e_and_action_test() -> None:
    inner = collect(
        "-m", INNER, "tests/e2e", "tests/action", "tests/sim", "tests/chaos", "tests/ui/browser"
    )  # fmt: skip
    found = re.search(r"no tests collected \((\d+) deselected\)", inner)
    assert found is not None, inner[-500:]
    assert int(found.group(1)) > 300  # every test of these folders, none left in


def test_the_readme_gives_both_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e '.[test]' && pytest -q" in readme
    assert f'pytest -q -n 4 -m "{INNER}"' in readme


def test_ci_runs_the_readmes_whole_suite_command() -> None:
    """``.ci/run`` runs the README's whole-suite command (its workers included), only
    without the cache: a contributor's run and CI's are the same run."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"pip install -e '\.\[test\]' && (pytest [^\n`]*)", readme)
    assert found is not None
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert [line for line in ci if line.startswith("pytest")] == [
        f"{found.group(1)} -p no:cacheprovider"
    ]
