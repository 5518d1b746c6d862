"""The setup-python stand-in's body: check the version, layer a venv, put it on PATH.

With ``STANDIN_BARE=1`` the venv is not layered: it has its own pip and nothing else, as a
fresh runner's Python has (the install benchmark and the lock's hash test need that).
"""

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

requested = os.environ.get("REQUESTED", "").strip()
present = ".".join(map(str, sys.version_info[:3]))
if requested and not (present == requested or present.startswith(requested + ".")):
    print(f"::error::setup-python stand-in: asked for {requested}, this machine has {present}")
    sys.exit(1)
root = Path(tempfile.mkdtemp(prefix="standin-python-", dir=os.environ.get("RUNNER_TEMP")))
bare = os.environ.get("STANDIN_BARE") == "1"
subprocess.run(
    [sys.executable, "-m", "venv", *([] if bare else ["--without-pip"]), str(root)], check=True
)
layered = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
overlay = "nothing (bare)" if bare else sysconfig.get_paths()["purelib"]
if not bare:
    (layered / "_standin_overlay.pth").write_text(f"import site; site.addsitedir({overlay!r})\n")
bin_dir = root / "bin"
with open(os.environ["GITHUB_PATH"], "a", encoding="utf-8") as out:
    out.write(f"{bin_dir}\n")
with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
    out.write(f"python-version={present}\npython-path={bin_dir / 'python'}\n")
print(f"setup-python stand-in: Python {present} at {bin_dir}, over {overlay}")
