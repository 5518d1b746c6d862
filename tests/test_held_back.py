"""``held_back``: an import fails inside the block and works as before after it."""

from __future__ import annotations

import subprocess
import sys

from zuke._held_back import held_back

SCRIPT = """
import sys
from zuke._held_back import held_back
assert "ssl" not in sys.modules
with held_back("ssl"):
    try:
        import ssl
    except ImportError:
        print("refused inside")
import ssl
print("loaded after", ssl.OPENSSL_VERSION_INFO >= (1, 1))
"""


def test_an_import_fails_inside_the_hold_and_loads_after_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["refused inside", "loaded after True"]


def test_a_module_already_loaded_is_not_held_back() -> None:
    import json

    with held_back("json"):
        import json as again

    assert again is json
    assert sys.modules["json"] is json
