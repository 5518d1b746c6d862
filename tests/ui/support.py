"""The web view under test: a ``zuke serve`` on a thread, a client that signs in like a browser.

:func:`view_server` starts a :class:`~zuke._serve.StateServer` (SQLite in the
test's directory, or the Postgres URL given) with a write token and a
read-only token, and yields a :class:`Served`: the state API client (bearer
token) to write records with, and :meth:`Served.browser` for a client that
signed in through the login form — with the form's anti-forgery cookie, an
``Origin`` header, as a browser does.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from zuke._serve import StateServer
from zuke.state.records import GraphNode, RunRecord, TargetRecord, WaitingFor
from zuke.state.wire import record_to_json

TOKEN = f"write-{uuid.uuid4().hex}"
READ_TOKEN = f"read-{uuid.uuid4().hex}"
#: record text that would be markup if a page did not escape it
HOSTILE = '<img src=x onerror="alert(1)">'
_FORM = re.compile(r'name="form" value="([^"]+)"')


@dataclass
class Served:
    server: StateServer
    api: httpx.Client
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self) -> httpx.Client:
        """A client with no session (closed with the server)."""
        c = httpx.Client(base_url=self.url, follow_redirects=False, timeout=15)
        self.clients.append(c)
        return c

    def browser(self, token: str = TOKEN) -> httpx.Client:
        """A client signed in with ``token`` through the login form."""
        c = self.client()
        answer = sign_in(c, self.url, token)
        assert answer.status_code == 303, answer.text
        return c

    def put(self, record: RunRecord) -> None:
        answer = self.api.put(
            f"/runs/{record.id}", json=record_to_json(record), headers={"If-None-Match": "*"}
        )
        assert answer.status_code == 201, answer.text


def form_value(page: str) -> str:
    found = _FORM.search(page)
    assert found is not None, page
    return found.group(1)


def sign_in(client: httpx.Client, url: str, token: str, **extra: str) -> httpx.Response:
    """GET the form (its cookie), then POST it with ``token`` from this origin."""
    form = client.get("/ui/login")
    assert form.status_code == 200, form.text
    data = {"form": form_value(form.text), "token": token, "next": "/ui/", **extra}
    return client.post("/ui/login", data=data, headers={"Origin": url})


@contextmanager
def view_server(workdir: Path, *, db: str | Path | None = None, **kwargs: Any) -> Iterator[Served]:
    options: dict[str, Any] = {"token": TOKEN, "read_token": READ_TOKEN, **kwargs}
    with StateServer(db_path=db or workdir / "state.db", **options) as server:
        headers = {"Authorization": f"Bearer {TOKEN}", "x-zuke-state-protocol": "1"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=15) as api:
            served = Served(server=server, api=api)
            try:
                yield served
            finally:
                for c in served.clients:
                    c.close()


def release(
    run_id: str,
    *,
    status: Any = "suspended",
    created_at: str = "2026-03-01T10:00:00.000Z",
    actor: str = "alice",
    build: str = "Release",
    **changes: Any,
) -> RunRecord:
    """A release run: built, staged, waiting at ``approve`` for the signal ``approved``."""
    waiting = status == "suspended"
    targets = {
        "build": TargetRecord(status="succeeded", started_at=created_at, ended_at=created_at),
        "approve": TargetRecord(
            status="waiting" if waiting else "succeeded" if status == "succeeded" else "pending",
            started_at=created_at,
            waiting_for=WaitingFor(
                trigger="signal:approved",
                deadline="2026-03-04T10:00:00.000Z",
                checked_at=created_at,
                detail="waiting for the signal 'approved'",
            )
            if waiting
            else None,
        ),
        "publish": TargetRecord(status="succeeded" if status == "succeeded" else "pending"),
    }
    fields: dict[str, Any] = {
        "id": run_id,
        "build": build,
        "root_target": "publish",
        "status": status,
        "actor": actor,
        "created_at": created_at,
        "updated_at": created_at,
        "graph": (
            GraphNode("build"),
            GraphNode("approve", ("build",)),
            GraphNode("publish", ("approve",)),
        ),
        "targets": targets,
        "parked_at": created_at if waiting else None,
    }
    fields.update(changes)
    return RunRecord(**fields)
