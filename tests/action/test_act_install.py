"""The action's install step under a real runner (nektos/act): the lock is installed in
pip's hash-checking mode, so a wheel whose hash is not the locked one is refused and the job
fails before any of it is installed (issue 28 §4).

Offline: the action is staged with a one-package lock for a wheel this test builds, which
pip finds through ``PIP_FIND_LINKS`` (the registry, as far as pip can tell); zuke itself is
a second such wheel given as ``ZUKE_INSTALL_SPEC``. The wheel is the same in both runs; only
the hash the lock names differs.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.action.act_support import (
    ACTION_DIR,
    make_repo,
    requires_act,
    run_act,
    sweep_env,
    zuke_action_pin,
)

pytestmark = [pytest.mark.act, requires_act]

_REPO, _SHA = zuke_action_pin().split("@")
WORKFLOW = f"""name: install
on: workflow_dispatch
permissions: {{}}
jobs:
  install:
    runs-on: ubuntu-latest
    steps:
      - uses: {_REPO}/action@{_SHA} # v0.1.0
        with:
          install-only: "true"
      - name: Use what was installed
        run: python -c 'import zuke_probe; print("probe", zuke_probe.MARK)'
"""


def build_wheel(into: Path, name: str, version: str, module: str) -> Path:
    """A minimal valid wheel (PEP 427): one module, METADATA, WHEEL and RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = into / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _run(tmp_path: Path, *, tamper: bool):
    index = tmp_path / "index"
    index.mkdir()
    probe = build_wheel(index, "zuke_probe", "1.0", 'MARK = "installed"\n')
    stub = build_wheel(tmp_path, "zuke_stub", "0.1", "")
    digest = hashlib.sha256(probe.read_bytes()).hexdigest()
    if tamper:  # one hex digit changed: what a swapped or corrupted wheel looks like to pip
        digest = ("0" if digest[0] != "0" else "1") + digest[1:]
    cache = tmp_path / "act"
    action = cache / "zuke-repository" / "action"  # what local_repositories would copy
    shutil.copytree(ACTION_DIR, action, ignore=shutil.ignore_patterns("__pycache__"))
    (action / "requirements.lock").write_text(f"zuke-probe==1.0 \\\n    --hash=sha256:{digest}\n")
    repo = make_repo(tmp_path / "repo", build_py="")
    (repo / ".github" / "workflows" / "install.yml").write_text(WORKFLOW)
    env = {**sweep_env(), "ZUKE_INSTALL_SPEC": str(stub), "PIP_FIND_LINKS": str(index)}
    return run_act(repo, "workflow_dispatch", "install.yml", env=env, cache=cache, timeout=180)


def test_the_locked_hash_installs_the_wheel(tmp_path):
    result = _run(tmp_path, tamper=False)
    assert result.job_succeeded(), result.log
    assert "probe installed" in result.log


def test_a_tampered_hash_fails_the_install_and_installs_nothing(tmp_path):
    result = _run(tmp_path, tamper=True)
    assert not result.job_succeeded()
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.log
    assert "::error::zuke action: requirements.lock:" in result.log or (
        "zuke action: requirements.lock: the download failed or a hash did not match" in result.log
    )
    assert "probe installed" not in result.log  # the job stopped at the install
