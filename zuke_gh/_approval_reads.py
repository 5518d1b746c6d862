"""Reading an approval thread's comments: a gate's own read, and a sweep's batched look.

**A gate reads forward from where it stopped.** Comments are read with
GraphQL's cursor pagination, ``comments(first: 100, after: $cursor)``, from the
cursor the gate keeps in its state — the end of the last page it judged — in
the thread's order (creation, so comment-id order). A cursor names a place in
the thread, not a page number or a time, so nothing can blind it: a burst of
comments within one second, an edit of an old comment, a deletion between two
page reads, a page that did not change — every comment created after the last
one judged is read, whatever page it lands on. (REST's listing could not
promise that: it pages by number, so a deletion between two page reads slides
a comment into a page already read; its ``since`` has whole seconds and lists
every old comment edited since; and its ETags are per token, so a sweep in a
new job never gets a 304 anyway.) A cursor GitHub no longer takes is dropped:
the thread is read from its start again, skipping every comment up to the
last id judged (``lastId``). One read reads at most :data:`READ_PAGES` pages
(2,000 comments); a thread with more new comments is finished by the next
checks, and the check says so.

**A sweep asks every waiting gate at once** (:func:`news`): one query with an
alias per thread, ``comments(first: 1, after: $cursor)``, answers for up to
100 threads whether anything was written after each gate's cursor — one
request and one GraphQL point ("Rate limits and query limits for the GraphQL
API": the connections requested, over 100, at least 1). A gate with nothing
new then makes no request at all; one with news reads for itself. Bodies are
never asked in the batch: someone flooding one thread with 65,536-character
comments makes that gate's read large, not everyone's.

GraphQL spells a bot's login without ``[bot]``: comments are handed on with
REST's spelling (:func:`zuke_gh._identity.rest_login`), so a ``Bot`` can never
pass for the user who has its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from zuke_gh._approval_api import Repo
from zuke_gh._identity import rest_login
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, one_line

PER_PAGE = 100
#: The pages one read of a thread reads at most (the rest is the next check's).
READ_PAGES = 20
#: Threads one batched query asks about (GitHub allows 100 nodes a connection's ``first``;
#: one point covers 100 connections).
BATCH = 100
Kind = Literal["issue", "pull_request"]
_FIELD = {"issue": "issue", "pull_request": "pullRequest"}
_NODE = "fullDatabaseId author { login __typename } body createdAt updatedAt lastEditedAt"
THREAD = """query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    thread: %s(number: $number) {
      comments(first: %d, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { %s }
      }
    }
  }
}"""


class ThreadError(GitHubError):
    """GitHub's GraphQL API could not answer for a thread: ``kind`` says why — ``"repository"``
    (not found: gone, or out of the token's reach), ``"thread"`` (no such issue or pull
    request), ``"forbidden"``, ``"cursor"`` (a cursor it no longer takes), ``"other"``."""

    def __init__(self, message: str, *, kind: str, detail: str = "") -> None:
        status = {"repository": 404, "thread": 404, "forbidden": 403}.get(kind)
        super().__init__(message, status=status, method="POST", path="/graphql", detail=detail)
        self.kind = kind


@dataclass(frozen=True)
class ThreadRead:
    """What one read found: the comments after the cursor (REST-shaped, in thread order)."""

    comments: list[dict[str, Any]]
    #: where the next read starts: the end of the last page read
    cursor: str | None
    #: pages are left past this read's budget
    more: bool
    pages: int


def comment_url(issue_url: str | None, comment_id: int) -> str:
    """A comment's URL, built from the thread's own URL GitHub gave when the gate asked."""
    base = (issue_url or "").split("#", 1)[0]
    return f"{base}#issuecomment-{comment_id}" if base else ""


def _as_comment(node: Mapping[str, Any], issue_url: str | None) -> dict[str, Any] | None:
    """A GraphQL comment as the judge reads one (REST's field names and login spelling)."""
    raw = node.get("fullDatabaseId")
    try:
        ident = int(raw) if isinstance(raw, (int, str)) and not isinstance(raw, bool) else None
    except ValueError:
        ident = None
    if ident is None:
        return None
    author = node.get("author")
    login = author.get("login") if isinstance(author, Mapping) else None
    user = {"login": rest_login(login, author.get("__typename"))} if isinstance(
        login, str) and login and isinstance(author, Mapping) else None  # fmt: skip
    return {"id": ident, "user": user, "body": node.get("body"),
            "created_at": node.get("createdAt"),
            "edited_at": node.get("lastEditedAt") if "lastEditedAt" in node
            else node.get("updatedAt"), "html_url": comment_url(issue_url, ident)}  # fmt: skip


def _problem(body: Mapping[str, Any], where: str, path: Sequence[str]) -> ThreadError | None:
    """The first GraphQL error on ``path`` (or above it), as a :class:`ThreadError`."""
    errors = body.get("errors")
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, Mapping):
            continue
        at = [str(p) for p in error.get("path") or []]
        if at and at != list(path[: len(at)]):
            continue
        said = one_line(str(error.get("message") or "no message"))
        kind = {"NOT_FOUND": "repository" if len(at) <= 1 else "thread",
                "FORBIDDEN": "forbidden"}.get(str(error.get("type")), "other")  # fmt: skip
        if kind == "other" and "cursor" in said.lower():
            kind = "cursor"
        return ThreadError(f"GitHub's GraphQL API answered for {where}: {said}", kind=kind,
                           detail=said)  # fmt: skip
    return None


def read_thread(
    client: GitHubClient, repo: Repo, number: int, kind: Kind, *, cursor: str | None,
    last_id: int | None, issue_url: str | None, pages: int | None = None,
) -> ThreadRead:  # fmt: skip
    """The comments after ``cursor`` (and after ``last_id``), at most ``pages`` pages
    (:data:`READ_PAGES` by default)."""
    pages = READ_PAGES if pages is None else pages
    query = THREAD % (_FIELD[kind], PER_PAGE, _NODE)
    where = f"{repo.slug}#{number}"
    found: list[dict[str, Any]] = []
    after, asked = cursor, 0
    while asked < pages:
        asked += 1
        variables = {"owner": repo.owner, "name": repo.name, "number": number, "after": after}
        body = client.graphql(query, variables)
        problem = _problem(body, where, ["repository", "thread", "comments"])
        if problem is not None and problem.kind == "cursor" and after is not None:
            after = None  # read from the start; last_id keeps what was judged from coming back
            continue
        if problem is not None:
            raise problem
        conn = _dig(body, "data", "repository", "thread", "comments")
        if conn is None:
            raise ThreadError(f"GitHub's GraphQL API gave no comments for {where}", kind="thread")
        for node in conn.get("nodes") or []:
            made = _as_comment(node, issue_url) if isinstance(node, Mapping) else None
            if made is not None and (last_id is None or made["id"] > last_id):
                found.append(made)
        info = conn.get("pageInfo")
        info = info if isinstance(info, Mapping) else {}
        end = info.get("endCursor")
        after = end if isinstance(end, str) and end else after
        if info.get("hasNextPage") is not True:
            return ThreadRead(found, after, more=False, pages=asked)
    return ThreadRead(found, after, more=True, pages=asked)


def _dig(body: Any, *keys: str) -> Mapping[str, Any] | None:
    for key in keys:
        body = body.get(key) if isinstance(body, Mapping) else None
    return body if isinstance(body, Mapping) else None


@dataclass(frozen=True)
class Asked:
    """One thread a sweep asks about: what comes after ``cursor`` on ``repo#number``."""

    repo: Repo
    number: int
    kind: Kind
    cursor: str | None


#: What the batch says of a thread: nothing after the cursor, something, or ask it yourself
#: (an error the gate's own read will meet and judge, with what GitHub said).
News = Literal["idle", "news", "ask"]


def news(client: GitHubClient, threads: Sequence[Asked]) -> dict[Asked, News]:
    """For each thread, whether anything was written after its cursor: one query (one
    GraphQL point) per :data:`BATCH` threads. An HTTP failure raises (the caller decides)."""
    unique = list(dict.fromkeys(threads))
    said: dict[Asked, News] = {}
    for start in range(0, len(unique), BATCH):
        said.update(_batch(client, unique[start : start + BATCH]))
    return said


def _batch(client: GitHubClient, threads: Sequence[Asked]) -> dict[Asked, News]:
    repos = list(dict.fromkeys(t.repo for t in threads))
    params: list[str] = []
    variables: dict[str, Any] = {}
    blocks = []
    for r, repo in enumerate(repos):
        params += [f"$o{r}: String!", f"$n{r}: String!"]
        variables.update({f"o{r}": repo.owner, f"n{r}": repo.name})
        inner = []
        for g, thread in enumerate(threads):
            if thread.repo != repo:
                continue
            params += [f"$i{g}: Int!", f"$c{g}: String"]
            variables.update({f"i{g}": thread.number, f"c{g}": thread.cursor})
            look = f"comments(first: 1, after: $c{g}) {{ nodes {{ fullDatabaseId }} }}"
            inner.append(f"g{g}: {_FIELD[thread.kind]}(number: $i{g}) {{ {look} }}")
        blocks.append(f"r{r}: repository(owner: $o{r}, name: $n{r}) {{ {' '.join(inner)} }}")
    query = f"query({', '.join(params)}) {{ {' '.join(blocks)} }}"
    body = client.graphql(query, variables)
    if not isinstance(body.get("data"), Mapping):  # nothing answered: say why, read one by one
        problem = _problem(body, f"{len(threads)} approval threads", [])
        raise problem or ThreadError(
            "GitHub's GraphQL API answered the batched look with no data", kind="other"
        )
    said: dict[Asked, News] = {}
    for g, thread in enumerate(threads):
        r = repos.index(thread.repo)
        path = [f"r{r}", f"g{g}", "comments"]
        conn = _dig(body, "data", *path)
        nodes = conn.get("nodes") if conn is not None else None
        if _problem(body, "", path) is not None or not isinstance(nodes, list):
            said[thread] = "ask"
        else:
            said[thread] = "news" if nodes else "idle"
    return said
