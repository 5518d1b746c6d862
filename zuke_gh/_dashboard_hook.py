"""``ZUKE_GITHUB_DASHBOARD=OWNER/REPO``: every ``zuke resume --check`` keeps that repository's
release dashboard issue after its sweep, with the sweep's own store.

Registered under the core's ``zuke.after_sweep`` entry point group (the core never imports
``zuke_gh``); light, so a sweep without the setting loads nothing of GitHub. The Action
keeps the dashboard in a step of its own instead (its ``dashboard`` input), so that step's
permissions and exit code stay apart from the sweep's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

from zuke.state._protocol import StateStore

SETTING = "ZUKE_GITHUB_DASHBOARD"


def after_sweep(store: StateStore, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    """Keep the dashboard ``ZUKE_GITHUB_DASHBOARD`` names (0 when it names none)."""
    repository = env.get(SETTING, "").strip()
    if not repository:
        return 0
    from zuke_gh.dashboard import keep

    return keep({**env, "ZUKE_DASHBOARD_REPO": repository}, store=store, out=out, err=err)
