"""Helpers shared by the fake GitHub's tests."""

from __future__ import annotations

import base64

import httpx

MARKER_INPUTS = {"zuke_marker": {"required": False}, "suite": {"required": True}}
DISPATCH = "/repos/acme/app/actions/workflows/e2e.yml/dispatches"


def dispatch(api: httpx.Client, marker: str = "m-1", **extra: object) -> httpx.Response:
    """Dispatch ``e2e.yml`` on main with the marker and the required ``suite`` input."""
    body = {"ref": "main", "inputs": {"zuke_marker": marker, "suite": "all"}, **extra}
    return api.post(DISPATCH, json=body)


def put_file(api: httpx.Client, path: str, text: str, **extra: object) -> httpx.Response:
    body = {
        "message": f"write {path}",
        "content": base64.b64encode(text.encode()).decode(),
        **extra,
    }
    return api.put(f"/repos/acme/app/contents/{path}", json=body)
