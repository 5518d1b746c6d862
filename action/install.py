"""The action's install step: zuke's locked dependencies and zuke itself, fast and pinned.

Why it is shaped this way (issue 28 §4; measured in docs/benchmarks.md):

- **Every dependency by hash.** ``requirements.lock`` (zuke's runtime dependencies) and
  ``build.lock`` (its build backend, hatchling) are pip-compile output with ``--generate-hashes``;
  pip installs them with ``--require-hashes --no-deps --only-binary :all:``, so pinning the
  action's SHA pins every byte it installs, not only zuke's own code.
- **A wheelhouse, not pip's HTTP cache.** The wheels are downloaded once into
  ``$RUNNER_TEMP/zuke-action-wheels`` (kept by ``actions/cache``, keyed on the locks and the
  Python: :func:`cache_key`) and installed from there with ``--no-index``: a warm job asks
  no index anything, and the hashes are checked again on every install, so a cache entry
  cannot swap a wheel. (pip's own cache keeps only what an index's Cache-Control headers
  let it keep; a registry proxy that sends none leaves it empty.)
- **No build backend fetched at run time.** zuke's checkout (this action's ``..``) is built
  by the hatchling from ``build.lock`` (PEP 517's hook called directly: no isolated build
  environment, so nothing fetched), installed into a throwaway ``--target`` directory (so it
  never lands in the job's Python), in every job: the cache holds nothing its hashes do not
  check.
- **No bytecode compiled up front** (``--no-compile``): Python compiles what a job imports
  when it imports it; pip would compile every module of every wheel.
- A ``zuke-version`` spec that is not a checkout (a VCS URL pinned to a commit, a wheel)
  is handed to pip as it is, with ``--no-deps``: the lock already provides the dependencies.

Run with the job's Python: ``python install.py key`` (writes ``key`` to ``$GITHUB_OUTPUT``)
and ``python install.py install``. The spec is ``ZUKE_SPEC``, else ``ZUKE_INSTALL_SPEC``
(tests), else this action's checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME_LOCK = HERE / "requirements.lock"
BUILD_LOCK = HERE / "build.lock"
KEY_PREFIX = "zuke-action-wheels"
PIP = (
    "-m",
    "pip",
    "--disable-pip-version-check",
    "--no-input",
    "--quiet",
)
# bytecode is compiled on first import, for the modules a job imports (pip would compile
# every module of every wheel: pygments' lexers are a third of a warm install's CPU)
NO_COMPILE = "--no-compile"


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


def lock_hash() -> str:
    """A hash of both locks: what the wheelhouse holds follows from them alone."""
    sha = hashlib.sha256()
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        sha.update(lock.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def cache_key() -> str:
    """The wheelhouse's cache key: the platform, the interpreter (the wheels of C extensions
    are per Python) and the locks."""
    platform = f"{os.environ.get('RUNNER_OS', sys.platform)}-{os.environ.get('RUNNER_ARCH', '')}"
    python = "{}.{}.{}-{}".format(*sys.version_info[:3], sys.implementation.name)
    return f"{KEY_PREFIX}-{platform}-py{python}-{lock_hash()}"


def _pip(*args: str, env: dict[str, str] | None = None, hush: bool = False) -> bool:
    """pip with these arguments; ``hush`` keeps its complaints out of the log (a first try
    from the wheelhouse, whose failure only means the cache is cold)."""
    done = subprocess.run([sys.executable, *PIP, *args], env=env, check=False, capture_output=hush)
    return done.returncode == 0


def _locked(lock: Path, wheels: Path, *extra: str, online: bool, hush: bool = False) -> bool:
    hashed = ["--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(lock)]
    if online:  # the index (PyPI, or PIP_INDEX_URL), into the wheelhouse; hashes checked
        return _pip("download", "--dest", str(wheels), *hashed)
    return _pip("install", NO_COMPILE, "--no-index", "--find-links", str(wheels), *extra, *hashed)


def pins(lock: Path) -> dict[str, str]:
    """A lock's ``name==version`` lines, by normalised name (PEP 503)."""
    found = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", lock.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in found}


def installed(lock: Path) -> bool:
    """Every package of the lock is installed at its locked version already (a self-hosted
    runner's Python, the tests' environment): pip would only say so, for a second of CPU.
    pip checks no hash of what is installed either."""
    try:
        return all(version(name) == pinned for name, pinned in pins(lock).items())
    except PackageNotFoundError:
        return False


def satisfied(spec: str) -> bool:
    """A ``name==version`` spec whose version is installed (pip would say "Requirement
    already satisfied" and do nothing)."""
    pinned = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!_-]+)", spec)
    try:
        return pinned is not None and version(pinned[1]) == pinned[2]
    except PackageNotFoundError:
        return False


def install_lock(lock: Path, wheels: Path, *extra: str, fetch: Path | None = None) -> None:
    """Install a lock from the wheelhouse; on a miss (a cold cache) download ``fetch`` (the
    lock itself unless said otherwise) into the wheelhouse first."""
    wheels.mkdir(parents=True, exist_ok=True)
    if _locked(lock, wheels, *extra, online=False, hush=True):
        return
    fetch = fetch or lock
    print(f"zuke action: {fetch.name}: fetching the wheels the cache lacks", flush=True)
    if not _locked(fetch, wheels, online=True):
        raise InstallError(f"{fetch.name}: the download failed or a hash did not match")
    if not _locked(lock, wheels, *extra, online=False):
        raise InstallError(f"{lock.name}: a wheel did not match its hash")


# PEP 517's build_wheel hook, called directly: what `pip wheel --no-build-isolation` does, for
# a third of its CPU (no pip start-up, no hook subprocess of its own); the same wheel, byte
# for byte (hatchling's builds are reproducible)
_BUILD = (
    "import importlib, sys, tomllib; "
    "backend = tomllib.load(open('pyproject.toml', 'rb'))['build-system']['build-backend']; "
    "importlib.import_module(backend).build_wheel(sys.argv[1])"
)


def build_zuke(checkout: Path, into: Path) -> Path:
    """zuke's wheel, built from the checkout by the locked hatchling (never a backend fetched
    from an index). Built in every job, never taken from the cache: the cache holds only what
    the locks' hashes check again on each install, and the build costs about a second of CPU,
    the backend's install included (docs/benchmarks.md)."""
    backend = into / "backend"
    install_lock(BUILD_LOCK, wheelhouse(), "--target", str(backend))
    env = {**os.environ, "PYTHONPATH": str(backend)}
    built = into / "dist"
    built.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, str(built)], cwd=checkout, env=env, check=False
    )
    found = sorted(built.glob("zuke-*.whl"))
    if done.returncode != 0 or len(found) != 1:
        raise InstallError(f"building zuke from {checkout} failed")
    return found[0]


def install(spec: str) -> None:
    """The runtime lock, then zuke; for a checkout, both in one pip call, zuke's wheel with
    the hash of the wheel just built (hash-checking mode covers a whole call)."""
    wheels = wheelhouse()
    checkout = checkout_of(spec)
    if checkout is None:
        if not installed(RUNTIME_LOCK):
            install_lock(RUNTIME_LOCK, wheels)
        if not satisfied(spec) and not _pip("install", NO_COMPILE, "--no-deps", spec):
            raise InstallError(f"installing zuke ({spec}) failed")
        return
    with tempfile.TemporaryDirectory(prefix="zuke-build-") as tmp:
        wheel = build_zuke(checkout, Path(tmp))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        both = Path(tmp) / "requirements.txt"
        both.write_text(f"-r {RUNTIME_LOCK}\n{wheel} --hash=sha256:{digest}\n")
        install_lock(both, wheels, fetch=RUNTIME_LOCK)  # zuke's own wheel is no download


def _cpu() -> float:
    """CPU seconds of this process and the pips it ran (the benchmark reads the line)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main(argv: list[str]) -> int:
    spec = requested_spec()
    started, cpu = time.perf_counter(), _cpu()
    try:
        if argv == ["key"]:
            with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
                out.write(f"key={cache_key()}\n")
        elif argv == ["install"]:
            install(spec)
            print(
                f"zuke action: installed in {time.perf_counter() - started:.1f}s"
                f" ({_cpu() - cpu:.1f}s of CPU)",
                flush=True,
            )
        else:
            raise InstallError(f"usage: install.py key|install (got {' '.join(argv)!r})")
    except InstallError as error:
        shown = " ".join(str(error).split())  # one line: a spec's newline starts no command
        print(f"::error::zuke action: {shown}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
