"""The action's hashed locks (issue 28 §4): they match pyproject.toml, pin every package by
hash, and the test environment is the one they describe (the act tests install from them
offline, so a drift fails there too; this says which package and what to do)."""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = ROOT / "action" / "requirements.lock"
BUILD_LOCK = ROOT / "action" / "build.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REGENERATE = "pip-compile --allow-unsafe"
_LOCK_LINE = re.compile(
    r"^(#.*|\s+#.*|\s+--hash=sha256:[0-9a-f]{64}( \\)?|[A-Za-z0-9._-]+==\S+ \\|)$"
)


def parse_lock(path: Path) -> dict[str, tuple[str, list[str], list[str]]]:
    """name → (version, sha256 hashes, what it is there for: the ``# via`` lines)."""
    text = path.read_text().replace("\\\n", " ")
    found: dict[str, tuple[str, list[str], list[str]]] = {}
    name = ""
    for line in text.splitlines():
        pinned = re.match(r"^([A-Za-z0-9._-]+)==(\S+)(.*)$", line)
        if pinned:
            name = canonicalize_name(pinned[1])
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", pinned[3])
            found[name] = (pinned[2], hashes, [])
        elif name and re.match(r"^\s+#\s+(via\s+)?\S", line):
            found[name][2].append(line.strip().removeprefix("#").strip().removeprefix("via "))
    return found


RUNTIME = parse_lock(RUNTIME_LOCK)
BUILD = parse_lock(BUILD_LOCK)


def _install_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zuke_action_install", ROOT / "action/install.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_each_lock_says_how_it_was_made_and_pins_every_package_by_hash(lock):
    text = lock.read_text()
    assert REGENERATE in text and "--generate-hashes" in text and "pyproject.toml" in text
    pins = parse_lock(lock)
    assert pins
    for name, (pinned, hashes, _) in pins.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", pinned), name
        assert hashes, f"{name} has no --hash"
    # nothing but pins, hashes and comments: no index URL or option a lock could smuggle in
    for line in text.splitlines():
        assert _LOCK_LINE.match(line), line


def test_the_runtime_lock_pins_exactly_pyprojects_dependencies_within_their_ranges():
    wanted = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    direct = {name for name, (_, _, via) in RUNTIME.items() if "zuke (pyproject.toml)" in via}
    assert direct == {canonicalize_name(r.name) for r in wanted}
    for requirement in wanted:
        pinned = RUNTIME[canonicalize_name(requirement.name)][0]
        assert requirement.specifier.contains(pinned, prereleases=True), (requirement, pinned)


def test_the_build_lock_pins_the_build_backend_pyproject_names():
    for text in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(text)
        pinned = BUILD[canonicalize_name(requirement.name)][0]
        assert requirement.specifier.contains(pinned, prereleases=True), (requirement, pinned)


def test_the_runtime_lock_holds_every_dependency_of_what_it_pins():
    """The action installs the lock with --no-deps: a dependency missing from it would be
    missing on the runner. Read from the installed packages' metadata (the next test checks
    that they are the locked versions), for this Python, extras left out."""
    environment = {key: str(value) for key, value in default_environment().items()}
    environment["extra"] = ""
    for name in RUNTIME:
        for text in requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in RUNTIME, f"{name} needs {requirement}, which the lock lacks"
            assert requirement.specifier.contains(RUNTIME[dependency][0], prereleases=True)


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_the_test_environment_has_the_locked_version(name):
    try:
        found = version(name)
    except PackageNotFoundError:
        found = "nothing"
    if found != RUNTIME[name][0] and os.environ.get("ZUKE_REQUIRE_LOCK") != "1":
        # The README's install resolves from the index, which moves on; the act tests then
        # fetch the locked wheels instead of reusing these. CI installs the lock and asks.
        pytest.skip(
            f"{name}: {found} installed, {RUNTIME[name][0]} locked (ZUKE_REQUIRE_LOCK=1 "
            "makes this a failure; pip install --no-deps -r action/requirements.lock)"
        )
    assert found == RUNTIME[name][0], (
        f"{name}: {found} installed, {RUNTIME[name][0]} locked; "
        "pip install --no-deps -r action/requirements.lock (or regenerate the lock: "
        "action/README.md, Pinned dependencies)"
    )


def test_the_cache_key_names_the_platform_the_python_and_both_locks(monkeypatch, tmp_path):
    install = _install_module()
    monkeypatch.setenv("RUNNER_OS", "Linux")
    monkeypatch.setenv("RUNNER_ARCH", "X64")
    key = install.cache_key()
    assert key.startswith("zuke-action-wheels-Linux-X64-py3.")
    assert len(key) <= 512 and "," not in key  # actions/cache's limits
    for lock in ("RUNTIME_LOCK", "BUILD_LOCK"):
        copy = tmp_path / lock
        copy.write_text(getattr(install, lock).read_text() + "# changed\n")
        monkeypatch.setattr(install, lock, copy)
        changed = install.cache_key()
        assert changed != key
        key = changed


def test_only_a_directory_with_a_pyproject_is_built_as_a_checkout(tmp_path):
    install = _install_module()
    assert install.checkout_of(str(ROOT)) == ROOT
    assert install.checkout_of(str(tmp_path)) is None
    assert install.checkout_of("git+https://github.com/zuke-build/zuke@" + "0" * 40) is None


def test_a_bad_command_is_one_error_line_and_a_failure(capsys):
    install = _install_module()
    assert install.main(["upgrade"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("::error::zuke action: usage: install.py")
