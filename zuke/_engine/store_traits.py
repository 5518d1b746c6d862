"""What the engine asks of a store beyond the protocol: how to name it, how to write to it."""

from __future__ import annotations

from zuke.state._protocol import StateStore

#: On a checkpointed store (every write is costly: a commit), the longest a change waits.
CHECKPOINT_DEBOUNCE_S = 60.0


def checkpointed(store: StateStore) -> bool:
    """Whether ``store`` asks to be written at durability points only.

    A store whose every write is costly — the GitHub branch store, where each
    is a commit and GitHub allows 80 a minute per token — sets a true
    ``checkpointed`` attribute. Its run's transitions are then coalesced: they
    are written when the run is created, suspends or ends, when a trigger or
    an effect asks for ``persist()`` (before an external call), and otherwise
    at most every :data:`CHECKPOINT_DEBOUNCE_S`; a ``running`` row is not
    awaited before its body. What a crash then loses is since the last
    durability point, which a resume re-drives (see docs/state.md).
    """
    return getattr(store, "checkpointed", False) is True


def describe_store(store: StateStore) -> str:
    """Where the record lives, for messages: a directory, a URL, or the store's repr."""
    directory = getattr(store, "directory", None)
    if isinstance(directory, str):
        return directory
    url = getattr(getattr(store, "_wire", None), "shown_url", None)  # HttpStateStore, redacted
    return url if isinstance(url, str) else repr(store)
