"""Static views of a build: ``--list``, ``--list --json``, ``graph`` and ``--help``.

These describe the declared graph only; a fan-out's items and ordering edges
resolved at run time are not part of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from zuke._engine.plan import BuildGraph, TargetSpec
from zuke._param_parse import UNSET
from zuke._params import Parameter
from zuke._version import __version__

GRAPH_FORMATS = ("text", "mermaid", "dot", "json")


def describe_parameters(params: Sequence[Parameter[Any]]) -> list[dict[str, Any]]:
    out = []
    for p in params:
        row: dict[str, Any] = {
            "name": p.name,
            "flag": p.flag,
            "env": p.env_var,
            "description": p.description,
            "kind": p.kind,
            "required": p.is_required,
            "array": p.is_array,
            "secret": p.is_secret,
            "options": list(p.choices),
        }
        if p.default_value is not UNSET and not p.is_secret:
            row["default"] = p.default_value
        out.append(row)
    return out


def describe_targets(graph: BuildGraph) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "description": s.description,
            "dependsOn": list(s.depends_on),
            **({"fanOut": True} if s.fan_out is not None else {}),
        }
        for s in graph.specs.values()
    ]


def _label(spec: TargetSpec) -> str:
    """A target's name as the static views show it: a fan-out is annotated (its items are
    known only when it runs)."""
    return f"{spec.name} [fan-out]" if spec.fan_out is not None else spec.name


def list_json(graph: BuildGraph, params: Sequence[Parameter[Any]]) -> str:
    payload = {"targets": describe_targets(graph), "parameters": describe_parameters(params)}
    return json.dumps(payload, indent=2)


def _param_line(p: Parameter[Any]) -> tuple[str, str]:
    notes = [p.kind_label]
    if p.is_required:
        notes.append("required")
    if p.default_value is not UNSET and not p.is_secret:
        notes.append(f"default {p.default_value!r}")
    if p.is_secret:
        notes.append("secret")
    desc = f"{p.description}  " if p.description else ""
    return f"{p.flag} ({p.env_var})", f"{desc}[{', '.join(notes)}]"


def list_text(graph: BuildGraph, params: Sequence[Parameter[Any]]) -> str:
    lines = ["Targets:"]
    width = max(len(_label(s)) for s in graph.specs.values())
    for spec in graph.specs.values():
        deps = f"  (depends on: {', '.join(spec.depends_on)})" if spec.depends_on else ""
        text = "  ".join(part for part in (spec.description, deps.strip()) if part)
        lines.append(f"  {_label(spec):<{width}}  {text}".rstrip())
    if params:
        lines.append("")
        lines.append("Parameters:")
        rows = [_param_line(p) for p in params]
        pwidth = max(len(r[0]) for r in rows)
        lines.extend(f"  {flag:<{pwidth}}  {text}" for flag, text in rows)
    return "\n".join(lines)


def _mermaid_id(name: str) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in name)


def graph_text(graph: BuildGraph, fmt: str) -> str:
    specs = graph.specs.values()
    if fmt == "json":
        return json.dumps({"targets": describe_targets(graph)}, indent=2)
    if fmt == "mermaid":
        lines = ["graph TD"]
        for s in specs:
            lines.append(f'  {_mermaid_id(s.name)}["{_label(s)}"]')
        for s in specs:
            lines.extend(f"  {_mermaid_id(d)} --> {_mermaid_id(s.name)}" for d in s.depends_on)
        return "\n".join(lines)
    if fmt == "dot":
        lines = ["digraph zuke {", "  rankdir=LR;"]
        for s in specs:
            label = f" [label={json.dumps(_label(s))}]" if s.fan_out is not None else ""
            lines.append(f"  {json.dumps(s.name)}{label};")
        for s in specs:
            lines.extend(f"  {json.dumps(d)} -> {json.dumps(s.name)};" for d in s.depends_on)
        lines.append("}")
        return "\n".join(lines)
    lines = ["Dependency graph:"]
    for s in specs:
        arrow = f" → {', '.join(s.depends_on)}" if s.depends_on else ""
        lines.append(f"  {_label(s)}{arrow}")
    return "\n".join(lines)


USAGE = f"""\
Usage: zuke [TARGET ...] [--PARAM VALUE ...] [OPTIONS]
       zuke COMMAND [ARGS ...]

  zuke {__version__}: run the targets of the build (build.py, --file or ZUKE_FILE),
  or look after its runs. `zuke COMMAND --help` shows a command's options.

Commands:
  --list [--json]        the targets (descriptions, dependencies) and parameters
  graph [--format text|mermaid|dot|json]
  runs list [--status STATUS] [--target TARGET] [--build BUILD] [--since ISO]
            [--limit N] [--counts] [--json]
  runs show RUN_ID [--json]
  runs prune (--keep DURATION | --keep-last N) [--dry-run]
  resume RUN_ID [--signal NAME [--data JSON] [--signal-id ID]] [--force-graph]
         [--resume-degraded] [--actor NAME] [--PARAM VALUE ...]
  resume --check [RUN_ID] [--json] [--watch [--every DURATION]]
  cancel RUN_ID [--actor NAME] [--wait DURATION] [--no-compensations]
  locks list [--json]
  locks break KEY --reason TEXT [--force] [--actor NAME]
  state init [--force]
  mcp [--no-run] [--no-cancel] [--actor NAME]
  serve [--host HOST] [--port PORT] [--db FILE|URL] [--no-auth] [--max-body-bytes N]
        [--request-timeout SECONDS] [--keep-alive SECONDS] [--shutdown-grace SECONDS]
        [--backlog N] [--no-ui]

Options:
  -f, --file PATH     the build file (default build.py, or ZUKE_FILE)
  -l, --list          list targets and parameters (--json for machine-readable)
  --skip TARGET       treat TARGET as done (repeatable, or comma-separated)
  --parallel[=N]      run up to N independent targets at once (default: CPU count);
                      the number only with '=': in --parallel 4, 4 is a target
  --state             record the run in the state store (.zuke/runs beside the build file)
  --actor NAME        who is running this (recorded on the run)
  --version           print zuke's version
  -h, --help          show this help

Environment:
  ZUKE_FILE                  the build file, as --file
  ZUKE_STATE                 a store: postgresql://USER@HOST:PORT/DB,
                             github://OWNER/REPO?branch=…, or off
  PGPASSWORD, PGSSLMODE, …   what libpq reads for a postgresql:// store (PG*, ~/.pgpass):
                             keep the password out of ZUKE_STATE
  ZUKE_PG_POOL_SIZE          the most Postgres connections one process opens (default 10)
  ZUKE_STATE_URL             the HTTP state service (zuke serve); ZUKE_STATE_TOKEN its token
  ZUKE_STATE_DIR             a filesystem store (a relative path: beside the build file)
  ZUKE_STATE_FSYNC           always: fsync every journal append (default: checkpoints)
  ZUKE_ALLOW_INSECURE_URL=1  allow a plaintext http:// state URL off loopback
  ZUKE_ACTOR                 who runs, as --actor (else GITHUB_ACTOR, else the login)
  ZUKE_BUILD_ID              the build's origin, recorded on its runs
  ZUKE_RUN_LEASE_TTL         a run lease's time to live (e.g. 30s)
  ZUKE_CANCEL_POLL           how often a live run looks for `zuke cancel`
  ZUKE_SERVE_TOKEN           the bearer token `zuke serve` requires
  ZUKE_SERVE_READ_TOKEN      a token that opens only `zuke serve`'s web view (/ui/)
  GH_TOKEN, GITHUB_TOKEN     the GitHub token of a github:// store and the GitHub gates
                             (GH_TOKEN first; an App's ZUKE_GH_APP_ID, … wins over both)
  GITHUB_API_URL             GitHub's API (default https://api.github.com; GHES:
                             https://HOST/api/v3)
  ZUKE_GITHUB_DASHBOARD      OWNER/REPO: each `zuke resume --check` then keeps that
                             repository's release dashboard issue (zuke_gh)
  NO_COLOR                   plain output on a terminal too

Exit codes:
  0    succeeded, or suspended (not failed); help; a sweep with no run failed
  1    a target failed, a lock conflict, a failed sweep, a run record not written
  2    a usage or definition error: nothing ran, no record moved
  3    a lock or the run's lease could not be renewed while a body ran: stopped itself
  130  cancelled: Ctrl-C, SIGTERM or `zuke cancel`
"""


def help_text(graph: BuildGraph | None, params: Sequence[Parameter[Any]], note: str = "") -> str:
    parts = [USAGE]
    if graph is not None:
        parts.append(list_text(graph, params))
    if note:
        parts.append(note)
    return "\n".join(parts)
