"""The action's install step: zuke's locked dependencies and zuke itself, fast and pinned.

Why it is shaped this way (issue 28 §4; measured in docs/benchmarks.md):

- **Every dependency by hash.** ``requirements.lock`` (zuke's runtime dependencies) and
  ``build.lock`` (its build backend, hatchling) are pip-compile output with ``--generate-hashes``;
  pip installs them with ``--require-hashes --no-deps --only-binary :all:``, so pinning the
  action's SHA pins every byte it installs, not only zuke's own code.
- **A wheelhouse, not pip's HTTP cache.** The wheels are downloaded once into
  ``$RUNNER_TEMP/zuke-action-wheels`` (kept by ``actions/cache``, keyed on the locks, the
  Python and zuke's source: :func:`cache_key`) and installed from there with ``--no-index``:
  a warm job asks no index anything, and the hashes are checked again on every install, so a
  cache entry cannot swap a wheel. (pip's own cache only keeps what an index lets it keep, by
  its Cache-Control headers; a registry proxy that sends none leaves it empty.)
- **No build backend fetched at run time.** zuke's checkout (this action's ``..``) is built
  with ``--no-build-isolation`` by the hatchling from ``build.lock``, installed into a
  throwaway ``--target`` directory (so it never lands in the job's Python), and the built
  wheel is kept in the wheelhouse under a hash of the source, so a warm job builds nothing.
- A ``zuke-version`` spec that is not a checkout (a VCS URL pinned to a commit, a wheel)
  is handed to pip as it is, with ``--no-deps``: the lock already provides the dependencies.

Run with the job's Python: ``python install.py key`` (writes ``key`` and ``restore-key``
to ``$GITHUB_OUTPUT``) and ``python install.py install``. The spec is ``ZUKE_SPEC``, else
``ZUKE_INSTALL_SPEC`` (tests), else this action's checkout.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME_LOCK = HERE / "requirements.lock"
BUILD_LOCK = HERE / "build.lock"
# what zuke's wheel is made of (pyproject.toml's [tool.hatch.build.targets.wheel] and metadata)
SOURCE_PARTS = ("pyproject.toml", "README.md", "zuke", "zuke_gh")
KEY_PREFIX = "zuke-action-wheels"
PIP = (
    "-m",
    "pip",
    "--disable-pip-version-check",
    "--no-input",
    "--quiet",
)


class InstallError(Exception):
    """A step of the install failed; its message is the one line the job shows."""


def wheelhouse() -> Path:
    """Where the wheels live: the path ``actions/cache`` restores and saves."""
    return Path(os.environ.get("RUNNER_TEMP") or tempfile.gettempdir()) / "zuke-action-wheels"


def requested_spec() -> str:
    """The ``zuke-version`` input, else ``ZUKE_INSTALL_SPEC`` (tests), else the checkout."""
    return os.environ.get("ZUKE_SPEC") or os.environ.get("ZUKE_INSTALL_SPEC") or str(HERE.parent)


def checkout_of(spec: str) -> Path | None:
    """The spec as a zuke source checkout (a directory with a pyproject.toml), else None."""
    path = Path(spec)
    return path.resolve() if (path / "pyproject.toml").is_file() else None


def _digest(paths: list[Path], root: Path) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.relative_to(root).as_posix().encode() + b"\0")
        sha.update(path.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def source_hash(root: Path) -> str:
    """A hash of what zuke's wheel is built from (bytecode caches left out): a new commit of
    zuke gets a new wheel, the same commit reuses the one built before."""
    files: list[Path] = []
    for part in SOURCE_PARTS:
        path = root / part
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return _digest(sorted(files), root)


def lock_hash() -> str:
    return _digest([RUNTIME_LOCK, BUILD_LOCK], HERE)


def cache_key(spec: str) -> tuple[str, str]:
    """(key, restore-key prefix). The prefix names the locks and the interpreter, so a new
    zuke commit with the same locks restores the dependencies' wheels and only builds zuke."""
    platform = f"{os.environ.get('RUNNER_OS', sys.platform)}-{os.environ.get('RUNNER_ARCH', '')}"
    python = "{}.{}.{}-{}".format(*sys.version_info[:3], sys.implementation.name)
    prefix = f"{KEY_PREFIX}-{platform}-py{python}-{lock_hash()}-"
    checkout = checkout_of(spec)
    return prefix + (source_hash(checkout) if checkout else "spec"), prefix


def _pip(*args: str, env: dict[str, str] | None = None) -> bool:
    return subprocess.run([sys.executable, *PIP, *args], env=env, check=False).returncode == 0


def _locked(lock: Path, wheels: Path, *extra: str, online: bool) -> bool:
    hashed = ["--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(lock)]
    if online:  # the index (PyPI, or PIP_INDEX_URL), into the wheelhouse; hashes checked
        return _pip("download", "--dest", str(wheels), *hashed)
    return _pip("install", "--no-index", "--find-links", str(wheels), *extra, *hashed)


def install_lock(lock: Path, wheels: Path, *extra: str) -> None:
    """Install a lock from the wheelhouse; download what it lacks first (a cold cache)."""
    wheels.mkdir(parents=True, exist_ok=True)
    if _locked(lock, wheels, *extra, online=False):
        return
    print(f"zuke action: {lock.name}: fetching the wheels the cache lacks", flush=True)
    if not _locked(lock, wheels, *extra, online=True):
        raise InstallError(f"{lock.name}: the download failed or a hash did not match")
    if not _locked(lock, wheels, *extra, online=False):
        raise InstallError(f"{lock.name}: a wheel did not match its hash")


def zuke_wheel(checkout: Path, wheels: Path) -> Path:
    """zuke's wheel for this checkout: from the wheelhouse, or built now with the locked
    hatchling (never one fetched from an index), and kept there for the next job."""
    built = wheels / f"zuke-src-{source_hash(checkout)}"
    found = sorted(built.glob("zuke-*.whl"))
    if found:
        return found[0]
    for stale in wheels.glob("zuke-src-*"):  # one zuke build kept: the cache stays small
        shutil.rmtree(stale)
    with tempfile.TemporaryDirectory(prefix="zuke-backend-") as backend:
        install_lock(BUILD_LOCK, wheels, "--target", backend)
        env = {**os.environ, "PYTHONPATH": backend}
        building = tempfile.mkdtemp(prefix="zuke-wheel-", dir=wheels)
        args = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", building]
        if not _pip(*args, str(checkout), env=env):
            raise InstallError(f"building zuke from {checkout} failed")
        Path(building).rename(built)
    return next(built.glob("zuke-*.whl"))


def install(spec: str) -> None:
    wheels = wheelhouse()
    install_lock(RUNTIME_LOCK, wheels)
    checkout = checkout_of(spec)
    target = str(zuke_wheel(checkout, wheels)) if checkout else spec
    if not _pip("install", "--no-deps", *(["--no-index"] if checkout else []), target):
        raise InstallError(f"installing zuke ({spec}) failed")


def main(argv: list[str]) -> int:
    spec = requested_spec()
    try:
        if argv == ["key"]:
            key, prefix = cache_key(spec)
            with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
                out.write(f"key={key}\nrestore-key={prefix}\n")
        elif argv == ["install"]:
            install(spec)
        else:
            raise InstallError(f"usage: install.py key|install (got {' '.join(argv)!r})")
    except InstallError as error:
        print(f"::error::zuke action: {error}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
