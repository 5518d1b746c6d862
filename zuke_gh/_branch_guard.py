"""A deleted state branch is never silently re-created over lost state.

When the store creates its branch it also creates the tag
``refs/tags/zuke-state/<branch>`` (GitHub accepts any ``refs/tags/...`` name
through ``POST /git/refs``). A process that finds the branch missing and the
tag present knows the branch was deleted — with every suspended run and held
lock on it — and refuses, naming what to do; so does a process that saw the
branch earlier itself. Starting afresh is deliberate (``zuke state init
--force``), and keeps fences from going back: the new ``locks.json`` starts its
``fenceFloor`` at GitHub's clock in ms, above any fence a store could have issued.
"""

from __future__ import annotations

from zuke._clock import Clock
from zuke._errors import StoreRefusedError
from zuke_gh._branch_files import LOCKS_PATH, README_PATH, README_TEXT, LockFile, locks_bytes
from zuke_gh._branch_git import BranchGit
from zuke_gh._branch_index import ACTIVE_PATH, Active, active_bytes


def deleted(git: BranchGit) -> StoreRefusedError:
    return StoreRefusedError(
        f"state: {git.where}: the state branch was deleted (the tag refs/{git.marker_ref} shows "
        "zuke created it), and with it every run and lock it held; zuke will not re-create it "
        "over lost state. Restore the branch (GitHub restores a deleted branch from the "
        "repository's Activity view or its pull request), or start afresh on purpose with "
        "`zuke state init --force`"
    )


def initialize(git: BranchGit, clock: Clock, *, force: bool) -> str:
    """Create the branch unless it exists; over a deleted one only with ``force``."""
    head = git.head()
    if head.sha is not None:
        return f"{git.where} exists"
    marker = git.marker()
    if marker is not None and not force:
        raise deleted(git)
    files = {README_PATH: README_TEXT.encode(), ACTIVE_PATH: active_bytes(Active())}
    if force:
        floor = head.server_ms if head.server_ms is not None else clock.now_ms()
        files[LOCKS_PATH] = locks_bytes(LockFile(fence_floor=floor))
    afresh = marker is not None
    message = "zuke state: branch created" + (" afresh (zuke state init --force)" if afresh else "")
    git.create_branch(files, message, force=force)
    return f"{git.where} created" + (" afresh" if afresh else "")
