"""The state API conformance kit: does a service speak the Zuke state HTTP API?

``python -m zuke.testing.conformance --url BASE [--token T]`` runs the
original TypeScript Zuke's scenarios (its ``STATE_SCENARIOS`` and registry
scenarios) over HTTP against a running service — ``zuke serve`` on SQLite or
Postgres, each replica of a deployment, or anyone's implementation. It prints
``PASS  <name>`` or ``FAIL  <name>`` with the reason indented, then
``k/n scenarios passed.``; it exits 0 only when every scenario passed.

Every scenario uses fresh uuid-suffixed ids and keys, so the kit is safe to
run against a shared, persistent backend. A failure that is not the
service's answer — the service cannot be reached, refuses the token, or
speaks another protocol version — stops the kit with ``conformance: aborted
— …`` (exit 1). The token may come from ``ZUKE_STATE_TOKEN`` instead of
``--token``, which keeps it out of process listings; it is never printed.

Programmatic use: :func:`check_state_api` and :func:`check_build_registry`
return a :class:`ScenarioResult` per scenario; :class:`Aborted` is raised
for the failures above.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from zuke.testing._conformance_api import (
    TOKEN_ENV,
    Aborted,
    Api,
    ScenarioFailed,
    ScenarioResult,
    fresh,
)
from zuke.testing._conformance_scenarios import REGISTRY_SCENARIOS, STATE_SCENARIOS, Scenario

__all__ = [
    "REGISTRY_SCENARIOS", "STATE_SCENARIOS", "Aborted", "ScenarioFailed", "ScenarioResult",
    "check_build_registry", "check_state_api", "fresh", "main",
]  # fmt: skip

Report = Callable[[ScenarioResult], None]


def _check(
    url: str, token: str | None, scenarios: Sequence[Scenario], report: Report | None
) -> list[ScenarioResult]:
    api = Api(url, token)
    results: list[ScenarioResult] = []
    try:
        for name, scenario in scenarios:
            try:
                scenario(api)
                result = ScenarioResult(name, ok=True)
            except (ScenarioFailed, KeyError, TypeError, AttributeError, IndexError) as exc:
                result = ScenarioResult(name, ok=False, error=str(exc) or type(exc).__name__)
            results.append(result)
            if report is not None:
                report(result)
    finally:
        api.close()
    return results


def check_state_api(
    url: str, token: str | None = None, *, report: Report | None = None
) -> list[ScenarioResult]:
    """Run :data:`STATE_SCENARIOS` against the service at ``url``; :class:`Aborted` if it cannot."""
    return _check(url, token, STATE_SCENARIOS, report)


def check_build_registry(
    url: str, token: str | None = None, *, report: Report | None = None
) -> list[ScenarioResult]:
    """Run :data:`REGISTRY_SCENARIOS` against the service at ``url``."""
    return _check(url, token, REGISTRY_SCENARIOS, report)


def _args(argv: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    items = iter(argv)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name in ("--url", "--token"):
            found[name[2:]] = value if eq else next(items, "")
    return found


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None,
    err: TextIO | None = None, env: Mapping[str, str] | None = None,
) -> int:  # fmt: skip
    """The command line; the exit code (0: every scenario passed)."""
    out, err = out or sys.stdout, err or sys.stderr
    args = _args(sys.argv[1:] if argv is None else argv)
    if not args.get("url"):
        print("conformance: --url <base> is required.", file=err)
        return 1
    token = args.get("token") or (os.environ if env is None else env).get(TOKEN_ENV) or None

    def report(result: ScenarioResult) -> None:
        print(f"{'PASS' if result.ok else 'FAIL'}  {result.name}", file=out)
        if result.error:
            print(f"      {result.error}", file=out)
        out.flush()

    results: list[ScenarioResult] = []
    try:
        results += check_state_api(args["url"], token, report=report)
        results += check_build_registry(args["url"], token, report=report)
    except Aborted as exc:
        text = str(exc).replace(token, "***") if token else str(exc)
        print(f"conformance: aborted — {text}", file=err)
        return 1
    passed = sum(r.ok for r in results)
    print(f"{passed}/{len(results)} scenarios passed.", file=out)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
