"""Errors raised before scheduling, with every secret value taken out of them.

Before the scheduler starts, nothing sits between an error and its reader:
a definition method that raises, ``timeout(self.token.value)``, a
``deadline()`` or ``order_with()`` that fails — their messages quote whatever
value they were handed, and :func:`zuke.execute` gives the exception to its
caller as is. So the pre-run pipeline runs under :func:`preflight`, which
cleans the exception *object* (its arguments, notes and whole cause/context
chain), not only the line the CLI prints. A link whose text cannot be
cleaned in place (a custom ``__str__``) is cut from the chain, and a
top-level error that cannot be cleaned is replaced by one that can.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from zuke._errors import BuildDefinitionError
from zuke._redact import Redactor


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not hide the error
        return type(exc).__name__


def _clean_arg(arg: object, redactor: Redactor) -> object:
    if isinstance(arg, str):
        return redactor.text(arg)
    try:
        shown = str(arg)
    except Exception:  # an argument that cannot be shown cannot show a secret either
        return arg
    return redactor.text(shown) if redactor.reveals(shown) else arg


def _clean_in_place(exc: BaseException, redactor: Redactor) -> bool:
    """Redact ``exc``'s arguments and notes; whether its text is clean afterwards."""
    args = tuple(_clean_arg(a, redactor) for a in exc.args)
    if args != exc.args:
        exc.args = args
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        exc.__notes__ = [redactor.text(n) if isinstance(n, str) else n for n in notes]
    return not redactor.reveals(_text(exc))


def _clean_chain(exc: BaseException, redactor: Redactor, seen: set[int]) -> None:
    seen.add(id(exc))
    for attr in ("__cause__", "__context__"):
        linked = getattr(exc, attr)
        if linked is None or id(linked) in seen:
            continue
        if _clean_in_place(linked, redactor):
            _clean_chain(linked, redactor, seen)
        else:
            # Cannot be cleaned: drop it (and what hangs off it) from the chain.
            setattr(exc, attr, None)
            if attr == "__context__":
                exc.__suppress_context__ = True
    for inner in getattr(exc, "exceptions", ()) or ():
        if isinstance(inner, BaseException) and id(inner) not in seen:
            _clean_in_place(inner, redactor)
            _clean_chain(inner, redactor, seen)


def scrub(exc: BaseException, redactor: Redactor) -> BaseException:
    """``exc`` with no secret left in it or its chain; a replacement if it cannot be cleaned."""
    if not redactor:
        return exc
    clean = _clean_in_place(exc, redactor)
    _clean_chain(exc, redactor, set())
    if clean:
        return exc
    replacement = BuildDefinitionError(redactor.text(_text(exc)))
    replacement.__traceback__ = exc.__traceback__
    return replacement


@contextmanager
def preflight(redactor: Redactor) -> Iterator[None]:
    """Run a pre-run step so that any error it raises carries no secret."""
    try:
        yield
    except Exception as exc:
        clean = scrub(exc, redactor)
        if clean is exc:
            raise
        raise clean from None
