"""Validate the fake's bodies against GitHub's published schemas (githubkit's models).

githubkit's pydantic models are generated from GitHub's OpenAPI description
(``github/rest-api-description``). ``conforms`` validates strictly (no coercion:
a number where GitHub sends a string fails) with every required field enforced,
then also refuses keys the schema does not have, so the fake cannot invent fields
our client might come to rely on.
"""

from __future__ import annotations

import json
from typing import Any

from githubkit_schemas.v2022_11_28 import models as v2022
from githubkit_schemas.v2026_03_10 import models as v2026
from pydantic import BaseModel, TypeAdapter

__all__ = ["conforms", "conforms_list", "unknown_keys", "v2022", "v2026"]


def unknown_keys(sent: Any, kept: Any, where: str = "$") -> list[str]:
    """Paths in ``sent`` that validation did not keep (keys the schema does not define)."""
    if isinstance(sent, dict) and isinstance(kept, dict):
        out = [f"{where}.{k}" for k in sent if k not in kept]
        for k in sent:
            if k in kept:
                out += unknown_keys(sent[k], kept[k], f"{where}.{k}")
        return out
    if isinstance(sent, list) and isinstance(kept, list):
        return [p for i, (s, k) in enumerate(zip(sent, kept, strict=False))
                for p in unknown_keys(s, k, f"{where}[{i}]")]  # fmt: skip
    return []


def conforms(model: type[BaseModel], body: Any) -> Any:
    """The validated model of ``body``; fails on a schema violation or an undocumented key."""
    parsed = model.model_validate_json(json.dumps(body), strict=True)
    kept = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    extra = unknown_keys(body, kept)
    assert not extra, f"keys {model.__name__} does not document: {extra}"
    return parsed


def conforms_list(model: type[BaseModel], body: Any) -> list[Any]:
    assert isinstance(body, list)
    adapter: TypeAdapter[list[BaseModel]] = TypeAdapter(list[model])  # type: ignore[valid-type]
    parsed = adapter.validate_json(json.dumps(body), strict=True)
    for item, p in zip(body, parsed, strict=True):
        extra = unknown_keys(item, p.model_dump(mode="json", by_alias=True, exclude_unset=True))
        assert not extra, f"keys {model.__name__} does not document: {extra}"
    return list(parsed)
