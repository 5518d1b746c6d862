"""Compact JSON with its C encoder made once: what the stores write a transition at a time
(the filesystem journal's lines, the Postgres store's deltas)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def compact_encoder(*, ensure_ascii: bool = True, allow_nan: bool = True) -> Callable[[Any], str]:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=…, allow_nan=…)``, with its C
    encoder made once.

    ``json.dumps`` with ``separators`` builds a ``JSONEncoder`` and then a C encoder on
    every call: about 60 % of encoding one journal line (one a transition). The C
    encoder made once is the same function with the same arguments — less its
    circular-reference check, which a fresh ``markers`` dict per call would need: every
    value written is built by :mod:`zuke.state.wire` from the record's own classes, and
    ``ctx.state.set`` refuses a circular value before it is kept (``clean_patch``).
    """
    from json import encoder

    plain = json.JSONEncoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan, separators=(",", ":"))
    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python encoder, as json.dumps would
        return plain.encode
    escape = encoder.encode_basestring_ascii if ensure_ascii else encoder.encode_basestring
    one = make(None, plain.default, escape, None, ":", ",", False, False, allow_nan)

    def encode(obj: Any) -> str:
        return "".join(one(obj, 0))

    return encode
