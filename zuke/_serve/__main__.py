"""``python -m zuke._serve``: run the state service from the command line.

:func:`main` is what the ``zuke serve`` command calls. It reads the token
from ``ZUKE_SERVE_TOKEN`` (never from a flag, so it stays out of process
listings), prints exactly one line ``zuke serve listening on http://HOST:PORT``
to stdout once the socket is bound, and returns an exit code: 0 after a
graceful SIGTERM/SIGINT shutdown, 2 for a usage error (including an unsafe
auth configuration), 1 when the service cannot start.
"""

from __future__ import annotations

import argparse
import os
import sys

from zuke._errors import StateError, UsageError
from zuke._serve.server import (
    DEFAULT_MAX_BODY_BYTES,
    READ_TOKEN_ENV,
    TOKEN_ENV,
    ServeLimits,
    serve,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zuke serve",
        description=(
            "Serve the Zuke state HTTP API from a SQLite file, or from a Postgres "
            "database that several replicas may share. Clients must send "
            f"the bearer token from {TOKEN_ENV}. A read-only web view of the runs is "
            f"at /ui/ (it asks for that token, or {READ_TOKEN_ENV}, once)."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8780, help="port to bind; 0 picks a free one (default 8780)"
    )
    parser.add_argument(
        "--db",
        default=".zuke/state.db",
        metavar="FILE|URL",
        help="a SQLite file (default .zuke/state.db), or postgresql://USER@HOST:PORT/DB"
        "[?sslmode=require] (needs zuke[postgres]; put the password in PGPASSWORD or "
        "~/.pgpass rather than the URL)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without a token (only on a loopback host)",
    )
    parser.add_argument(
        "--no-ui",
        action="store_true",
        help="do not serve the read-only web view at /ui/ (on by default; it takes the "
        f"serve token or {READ_TOKEN_ENV}, which authorises nothing else)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES})",
    )
    defaults = ServeLimits()
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=defaults.request_timeout_s,
        metavar="SECONDS",
        help="a request's head, then its body, must arrive within this "
        f"(default {defaults.request_timeout_s:g})",
    )
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=defaults.keep_alive_s,
        metavar="SECONDS",
        help=f"close an idle connection after this (default {defaults.keep_alive_s:g})",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=defaults.shutdown_grace_s,
        metavar="SECONDS",
        help="on SIGTERM, let requests in flight finish for at most this "
        f"(default {defaults.shutdown_grace_s:g})",
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=defaults.backlog,
        help=f"connections queued before they are accepted (default {defaults.backlog})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; the process exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad flags (2)
        return exc.code if isinstance(exc.code, int) else 2
    if not 0 <= args.port <= 65535 or args.max_body_bytes < 0:
        print("zuke serve: --port must be 0-65535 and --max-body-bytes >= 0", file=sys.stderr)
        return 2
    times = (args.request_timeout, args.keep_alive, args.shutdown_grace)
    if not all(0 < t <= 3600 for t in times) or not 1 <= args.backlog <= 65535:
        print(
            "zuke serve: --request-timeout, --keep-alive and --shutdown-grace must be "
            "0-3600 seconds (above 0), --backlog 1-65535",
            file=sys.stderr,
        )
        return 2
    limits = ServeLimits(
        request_timeout_s=args.request_timeout,
        keep_alive_s=args.keep_alive,
        shutdown_grace_s=args.shutdown_grace,
        backlog=args.backlog,
    )

    def ready(url: str) -> None:
        print(f"zuke serve listening on {url}", flush=True)

    try:
        serve(
            host=args.host,
            port=args.port,
            db_path=args.db,
            token=os.environ.get(TOKEN_ENV) or None,
            no_auth=args.no_auth,
            max_body_bytes=args.max_body_bytes,
            limits=limits,
            ready=ready,
            ui=not args.no_ui,
            read_token=os.environ.get(READ_TOKEN_ENV) or None,
        )
    except UsageError as exc:
        print(f"zuke serve: {exc}", file=sys.stderr)
        return 2
    except (OSError, StateError) as exc:
        print(f"zuke serve: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
