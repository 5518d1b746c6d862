"""What a child ``pytest`` run by a test may leave out: the plugins none of them use.

A few tests run pytest itself in a child process (the contract kit against
broken stores, a Postgres test without Postgres, the inner loop's collection).
Each child loaded every installed plugin, and hypothesis, anyio, respx and
xdist were over half its start-up (2.2 s of CPU against 0.8 s for the
contract kit's child, on a loaded 2-core VM); none of those children runs a
property test, an async test, a mocked HTTP call or workers.
"""

from __future__ import annotations

#: ``-p no:NAME`` for each plugin a child pytest does not need (the cache: it writes none)
LEAN_PLUGINS: tuple[str, ...] = (
    "-p", "no:cacheprovider",
    "-p", "no:hypothesispytest",
    "-p", "no:anyio",
    "-p", "no:respx",
    "-p", "no:xdist",
    "-p", "no:xdist.looponfail",
)  # fmt: skip
