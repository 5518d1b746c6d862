"""Whether a commit whose answer was lost landed: a witness later writes cannot erase.

A commit of the state branch is sent once (``createCommitOnBranch`` with
``expectedHeadOid``). When its answer is lost — a 5xx, a dropped connection, a
GraphQL timeout — it may or may not have landed, and the branch's content
cannot tell: another process's write, landing between the loss and the look,
may have replaced the record, released or broken the lock, or taken it over.

So every commit carries a **write id**, a random 128-bit token in a trailer of
its message (``Zuke-Write: <32 hex>``), unique to one attempt of one write.
``createCommitOnBranch`` makes a commit whose parent is the expected head, and
the state branch is linear, so an attempt landed if and only if a commit after
its expected head carries its id. :func:`landed` walks the branch back from
the head just read (``GET /repos/{owner}/{repo}/commits?sha=HEAD``, the
documented "List commits", newest first) until it passes the oldest expected
head: one request while fewer than :data:`PER_PAGE` commits landed since (the
usual case: the loss and the look are a second apart, and GitHub allows 80
commits a minute per token), at most :data:`MAX_PAGES`. Reaching the end of
the history without the expected head means the branch was made afresh:
nothing of ours is on it. Past :data:`MAX_PAGES` the look cannot tell and
says so (:class:`~zuke.StoreUnavailableError`): the write is then *unsure*,
remembered by the store so that the same write sent again looks first
(:mod:`zuke.state._unsure`).

Nobody else can write a commit carrying one of our ids before it is on the
branch (they are drawn from ``uuid4``), so a commit that carries it is ours.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from zuke._errors import StoreUnavailableError
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

T = TypeVar("T")

TRAILER = "Zuke-Write"
#: commits a page of the walk (GitHub's default is 30, its maximum 100)
PER_PAGE = 20
#: pages walked at most: 200 commits, half an hour of GitHub's 500 writes an hour per token
MAX_PAGES = 10
_ID = re.compile(rf"^{TRAILER}: ([0-9a-f]{{32}})$", re.M)
#: GraphQL's answer when a request ran out of time ("Something went wrong while executing
#: your query. This may be the result of a timeout, or it could be a GitHub bug."): a
#: mutation may still have been applied
_TIMED_OUT = re.compile(r"result of a timeout|something went wrong", re.I)


class LostAnswer(StoreUnavailableError):
    """A commit went out and its answer was lost (a 5xx, a dropped connection, a GraphQL
    timeout): it may or may not have landed."""


class Unsure(Exception):
    """Attempts whose answer was lost and whose landing could not be told (the store notes
    them, and raises :class:`~zuke.state._unsure.UnsureWriteError`)."""

    def __init__(self, message: str, sent: tuple[Sent[Any], ...]) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass(frozen=True)
class Sent(Generic[T]):
    """One attempt whose answer was lost: the head it expected, its id, and its answer (what
    the operation returns if it landed)."""

    head: str
    write_id: str
    result: T


def new_id() -> str:
    return uuid.uuid4().hex


def trailer(write_id: str) -> str:
    """The commit message's body that carries the id."""
    return f"{TRAILER}: {write_id}"


def write_id_of(message: str) -> str | None:
    """The id a commit message carries (its last ``Zuke-Write`` trailer), if any."""
    found = _ID.findall(message)
    return found[-1] if found else None


def timed_out(body: Mapping[str, Any]) -> bool:
    """Whether a GraphQL answer without data says the request ran out of time."""
    return any(
        isinstance(e, dict) and _TIMED_OUT.search(str(e.get("message") or ""))
        for e in body.get("errors") or []
    )


def landed(
    client: GitHubClient, owner: str, repo: str, where: str, head: str, sent: Sequence[Sent[T]]
) -> Sent[T] | None:
    """The attempt of ``sent`` (oldest first) that landed on the branch now at ``head``, or
    ``None`` if none did; :class:`~zuke.StoreUnavailableError` if the walk cannot tell."""
    if not sent:
        return None
    ids = {s.write_id: s for s in sent}
    oldest = sent[0].head
    seen = 0
    try:
        for item in client.paginate(
            "/repos/{owner}/{repo}/commits", params={"sha": head}, per_page=PER_PAGE,
            max_pages=MAX_PAGES, owner=owner, repo=repo,
        ):  # fmt: skip
            seen += 1
            sha = item.get("sha") if isinstance(item, dict) else None
            commit = item.get("commit") if isinstance(item, dict) else None
            message = commit.get("message") if isinstance(commit, dict) else None
            if not isinstance(sha, str) or not isinstance(message, str):
                raise StoreUnavailableError(
                    f"state: {where}: GitHub's commit listing has a commit without its sha or "
                    "message"
                )
            if sha == oldest:
                return None  # every commit since the first attempt's head: none is ours
            found = ids.get(write_id_of(message) or "")
            if found is not None:
                return found
    except GitHubError as exc:
        raise StoreUnavailableError(f"state: {where}: {str(exc).rstrip('.')}") from None
    if seen < PER_PAGE * MAX_PAGES:
        return None  # the whole history, without the head it expected: made afresh since
    raise StoreUnavailableError(
        f"state: {where}: more than {seen} commits landed since a write whose answer was lost; "
        "cannot tell whether it landed"
    )


__all__ = ["MAX_PAGES", "PER_PAGE", "LostAnswer", "Sent", "Unsure", "landed", "new_id",
           "timed_out", "trailer", "write_id_of"]  # fmt: skip
