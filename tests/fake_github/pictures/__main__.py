"""``python -m tests.fake_github.pictures [OUT]``: the pictures of ``docs/github.md``.

Run from the repository's root with Debian's Chromium on PATH; writes ``OUT`` (default
``docs/img``)``/github-*.png`` and prints each one's size.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.e2e.deploy_support import deploy_github
from tests.fake_github.pictures.shots import pages_of, shoot
from tests.fake_github.pictures.story import snapshot, tell
from tests.ui.browser.support import chromium_path


def main(out: Path) -> None:
    if chromium_path() is None:
        sys.exit("pictures: Debian's Chromium takes the screenshots: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as tmp, deploy_github() as gh:
        story = tell(gh, Path(tmp))
        snap = snapshot(gh)
    for path in shoot(pages_of(snap, story), out):
        print(f"{path}: {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
