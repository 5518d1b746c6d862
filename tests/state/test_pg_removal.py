"""A stopped test cluster's directory is removed without the session waiting for it
(``tests/pg_support.remove_later``, issue 28 §7): the tail of every pytest run."""

from __future__ import annotations

import time
from pathlib import Path

from tests.pg_support import PREFIX, reap_orphans, remove_later

DEADLINE_S = 60.0


def test_the_directory_leaves_its_name_at_once_and_is_removed_behind(tmp_path: Path) -> None:
    root = tmp_path / f"{PREFIX}4242-abc"
    for n in range(200):
        (root / "data" / f"d{n % 7}").mkdir(parents=True, exist_ok=True)
        (root / "data" / f"d{n % 7}" / f"f{n}").write_bytes(b"x" * 1024)
    remove_later(root)
    assert not root.exists()  # a new cluster, or reap_orphans, never meets it
    deadline = time.monotonic() + DEADLINE_S
    while any(tmp_path.iterdir()):
        assert time.monotonic() < deadline, list(tmp_path.iterdir())
        time.sleep(0.02)


def test_a_directory_being_removed_is_no_orphan_to_stop(tmp_path: Path) -> None:
    """Its new name names no owner process, so the next session leaves it be."""
    being_removed = tmp_path / f"{PREFIX}removing-{PREFIX}1-abc"
    being_removed.mkdir()
    (being_removed / "keep").write_text("")
    reap_orphans(tmp_path)
    assert (being_removed / "keep").exists()


def test_a_directory_already_gone_is_nothing_to_do(tmp_path: Path) -> None:
    remove_later(tmp_path / f"{PREFIX}1-gone")
    assert list(tmp_path.iterdir()) == []
