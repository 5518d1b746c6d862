"""The GitHub calls behind the branch store: read the head, read files, commit on a head.

* :meth:`BranchGit.head` — ``GET /git/ref/heads/<branch>`` with an ETag: a 304
  costs no rate limit, and its ``Date`` is GitHub's clock for lock expiry.
* :meth:`BranchGit.read` — one GraphQL query naming the head's SHA in every
  expression (``<sha>:active.json``, ``<sha>:runs/ab/<id>.json``, …), so what it
  answers is exactly the files at that commit, however the branch moves
  meanwhile. A text GitHub cut (``isTruncated``: ``Blob.text`` stops at 512,000
  bytes) is read again whole by its blob SHA (``GET /git/blobs/{sha}``, no cut
  below 100 MB), so it is exact for that version.
* :meth:`BranchGit.first_view` — the head, the files asked for at that very
  commit (``Commit.file(path:)``) and the deletion marker, in one query: a
  store with no view of the branch yet pays one request.
* :meth:`BranchGit.commit` — ``createCommitOnBranch`` with ``expectedHeadOid``:
  the compare-and-swap of the branch head, sent once. ``None`` means the head
  moved (nothing landed); :class:`LostAnswer`, that it went out and its answer
  was lost, so it may have landed (:mod:`zuke_gh._branch_witness` tells).
* :meth:`BranchGit.create_branch` — checks the repository can hold it, then an
  orphan commit of a README (GitHub refuses an empty tree), the branch, and the
  marker tag ``refs/tags/zuke-state/<branch>`` that tells a deleted branch from
  one never made.

Every failure is a :class:`~zuke.StoreUnavailableError` (a
:class:`~zuke.StateError`, so the engine retries it like any store's), one
line naming the repository and what to do; no token reaches a message (the
client scrubs answers).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zuke._errors import StoreRefusedError, StoreUnavailableError
from zuke_gh._branch_view import Blob
from zuke_gh._branch_witness import LostAnswer, timed_out
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

_COMMIT_MUTATION = """mutation($input: CreateCommitOnBranchInput!) {
  createCommitOnBranch(input: $input) { commit { oid } }
}"""
#: A head conflict, typed or not: GitHub's 'Expected branch to point to "<oid>" but it did
#: not.  Pull and try again.' (STALE_DATA), and the "... is at <oid> but expected <oid>"
#: shape reported without a type (babarot/gh-infra#163).
_HEAD_MOVED = re.compile(r"expected branch to point to|\bis at\b.*\bbut expected\b", re.I | re.S)
MARKER_PREFIX = "tags/zuke-state/"


@dataclass(frozen=True)
class Head:
    """The branch head (``None``: no such branch) and GitHub's clock when it was read."""

    sha: str | None
    server_ms: int | None


@dataclass(frozen=True)
class FirstView:
    head: str | None
    files: dict[str, Blob | None]
    marker: str | None  #: the marker tag's SHA, if the branch was ever created


class BranchGit:
    """The branch ``branch`` of ``owner/repo``, through one :class:`GitHubClient`."""

    def __init__(self, client: GitHubClient, owner: str, repo: str, branch: str) -> None:
        self.client, self.owner, self.repo, self.branch = client, owner, repo, branch
        self.where = f"github://{owner}/{repo}?branch={branch}"
        self.marker_ref = MARKER_PREFIX + branch

    # -- reads -------------------------------------------------------------------------------

    def head(self) -> Head:
        answer = self._call(
            "GET",
            "/repos/{owner}/{repo}/git/ref/{ref+}",
            ref=f"heads/{self.branch}",
            etag=True,
            expected=(404, 409),
        )
        if answer.status in (404, 409):  # 409: an empty repository
            if answer.status == 404:
                self._check_repository()
            return Head(None, answer.server_time_ms)
        sha = _dig(answer.body, "object", "sha")
        if not isinstance(sha, str):
            raise self._unavailable("GitHub's answer for the branch has no object.sha")
        return Head(sha, answer.server_time_ms)

    def marker(self) -> str | None:
        """The marker tag's SHA (the branch was created here once), or ``None``."""
        answer = self._call(
            "GET", "/repos/{owner}/{repo}/git/ref/{ref+}", ref=self.marker_ref, expected=(404, 409)
        )
        sha = _dig(answer.body, "object", "sha") if answer.status == 200 else None
        return sha if isinstance(sha, str) else None

    def read(
        self, head: str, texts: Sequence[str], oids: Sequence[str] = ()
    ) -> dict[str, Blob | None]:
        """Files at commit ``head``: ``texts`` with their text, ``oids`` their blob SHA only.

        A text GitHub cut (``isTruncated``) comes back without it (``Blob(oid)``): the
        caller reads it whole by its SHA (:meth:`blob_text`) if and when it needs it.
        """
        asked = [(p, True) for p in texts] + [(p, False) for p in oids if p not in texts]
        repository = self._repository(*_blobs_query(head, [(p, _fields(t)) for p, t in asked]))
        return {p: self._blob(repository.get(f"f{i}"), p, t) for i, (p, t) in enumerate(asked)}

    def sizes(self, head: str, paths: Sequence[str]) -> dict[str, tuple[str, int] | None]:
        """(blob SHA, size in bytes) of each of ``paths`` at commit ``head``, no text: what
        a batched read of many records needs to keep each answer's size bounded."""
        repository = self._repository(*_blobs_query(head, [(p, "oid byteSize") for p in paths]))
        found: dict[str, tuple[str, int] | None] = {}
        for i, path in enumerate(paths):
            node = repository.get(f"f{i}")
            node = node if isinstance(node, dict) else {}
            oid, size = node.get("oid"), node.get("byteSize")
            found[path] = (
                (oid, size if isinstance(size, int) else 0) if isinstance(oid, str) else None
            )
        return found

    def first_view(self, texts: Sequence[str], oids: Sequence[str] = ()) -> FirstView:
        """The head, files at that very commit (``Commit.file``) and the marker, in one query."""
        asked = [(p, True) for p in texts] + [(p, False) for p in oids if p not in texts]
        params = "".join(f", $p{i}: String!" for i in range(len(asked)))
        files = "\n".join(
            f"        f{i}: file(path: $p{i}) {{ oid object {{ ... on Blob {{ {_fields(t)} }} }} }}"
            for i, (_, t) in enumerate(asked)
        )
        query = (
            f"query($owner: String!, $name: String!, $ref: String!, $marker: String!{params}) {{\n"
            "  repository(owner: $owner, name: $name) {\n"
            "    marker: ref(qualifiedName: $marker) { target { oid } }\n"
            "    ref(qualifiedName: $ref) {\n"
            f"      target {{ oid ... on Commit {{\n{files}\n      }} }}\n"
            "    }\n  }\n}"
        )
        variables: dict[str, Any] = {"ref": f"refs/heads/{self.branch}",
                                     "marker": f"refs/{self.marker_ref}"}  # fmt: skip
        variables.update({f"p{i}": p for i, (p, _) in enumerate(asked)})
        repository = self._repository(query, variables)
        marker = _dig(repository, "marker", "target", "oid")
        marker = marker if isinstance(marker, str) else None
        target = _dig(repository, "ref", "target")
        if not isinstance(target, dict) or not isinstance(target.get("oid"), str):
            return FirstView(None, {}, marker)
        found = {p: self._blob(_dig(target, f"f{i}", "object"), p, t)
                 for i, (p, t) in enumerate(asked)}  # fmt: skip
        return FirstView(target["oid"], found, marker)

    def blob_text(self, oid: str, path: str) -> str:
        """A file's whole text by its blob SHA (the git blobs API: no cut below 100 MB)."""
        answer = self._call("GET", "/repos/{owner}/{repo}/git/blobs/{sha}", sha=oid)
        content = _dig(answer.body, "content")
        if not isinstance(content, str):
            raise self._unavailable(f"GitHub's answer for the blob of {path} has no content")
        try:
            return base64.b64decode(content).decode()
        except (ValueError, UnicodeDecodeError):
            raise self._not_zukes(path) from None

    def default_branch(self) -> str:
        """The repository's default branch, which must exist (workflows are dispatched to it)."""
        answer = self._call("GET", "/repos/{owner}/{repo}", expected=(404,))
        if answer.status == 404:
            raise self._missing_repository()
        name = _dig(answer.body, "default_branch")
        name = name if isinstance(name, str) else "main"
        ref = self._call("GET", "/repos/{owner}/{repo}/git/ref/{ref+}", ref=f"heads/{name}",
                         expected=(404, 409))  # fmt: skip
        if ref.status == 409:
            raise StoreRefusedError(
                f"state: {self.where}: the repository has no commits yet, so GitHub cannot "
                f"hold the state branch: push a first commit to its default branch ({name}) "
                "and run again"
            )
        if ref.status == 404:
            raise StoreRefusedError(
                f"state: {self.where}: the repository's default branch {name!r} does not exist; "
                "create it (release workflows are dispatched to it) and run again"
            )
        return name

    # -- writes ------------------------------------------------------------------------------

    def commit(
        self,
        head: str,
        additions: Mapping[str, bytes],
        deletions: Sequence[str],
        message: str,
        *,
        body: str | None = None,
    ) -> str | None:
        """The new head's SHA, or ``None`` if the branch no longer points at ``head``.

        Sent once: an answer lost after the commit went out raises :class:`LostAnswer`
        (resending it would only be refused as stale, and say nothing of whether it landed).
        """
        change: dict[str, Any] = {}
        if additions:
            change["additions"] = [
                {"path": p, "contents": base64.b64encode(data).decode()}
                for p, data in additions.items()
            ]
        if deletions:
            change["deletions"] = [{"path": p} for p in deletions]
        given = {
            "branch": {"repositoryNameWithOwner": f"{self.owner}/{self.repo}",
                       "branchName": self.branch},
            "message": {"headline": message, **({"body": body} if body else {})},
            "expectedHeadOid": head,
            "fileChanges": change,
        }  # fmt: skip
        try:
            answer = self.client.graphql(_COMMIT_MUTATION, {"input": given}, idempotent=False)
        except GitHubError as exc:
            if exc.unsent:  # it never reached GitHub (or GitHub applied nothing: a limit)
                raise self._unavailable(str(exc)) from None
            raise LostAnswer(f"state: {self.where}: {str(exc).rstrip('.')}") from None
        oid = _dig(answer, "data", "createCommitOnBranch", "commit", "oid")
        if isinstance(oid, str):
            return oid
        if head_moved(answer):
            return None
        if timed_out(answer):
            raise LostAnswer(f"state: {self.where}: GitHub's GraphQL timed out on the commit")
        raise self._graphql_failure(answer, "commit")

    def create_branch(self, files: Mapping[str, bytes], message: str, *, force: bool) -> None:
        """The orphan branch holding ``files``, and its marker (moved there when ``force``)."""
        self.default_branch()
        tree = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/trees",
            json={"tree": [{"path": p, "mode": "100644", "type": "blob", "content": d.decode()}
                           for p, d in files.items()]},
        )  # fmt: skip
        commit = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/commits",
            json={"message": message, "tree": _dig(tree.body, "sha"), "parents": []},
        )
        sha = _dig(commit.body, "sha")
        made = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/refs",
            json={"ref": f"refs/heads/{self.branch}", "sha": sha},
            expected=(422,),
        )
        if made.status == 422 and "already exists" not in str(made.body).lower():
            raise self._unavailable(f"GitHub refused to create the branch: {made.body}")
        self.mark(sha, force=force)

    def mark(self, sha: Any, *, force: bool = False) -> None:
        """Create the marker tag at ``sha`` (kept if it exists, unless ``force``).

        A refusal (a ruleset on tags: 403/422) is not an error: the store then
        guards its branch only by what each process saw itself.
        """
        made = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/refs",
            json={"ref": f"refs/{self.marker_ref}", "sha": sha},
            expected=(403, 422),
        )
        if made.status == 422 and force:
            self._call("PATCH", "/repos/{owner}/{repo}/git/refs/{ref+}", ref=self.marker_ref,
                       json={"sha": sha, "force": True}, expected=(403, 422))  # fmt: skip

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, method: str, template: str, /, **kwargs: Any) -> Any:
        try:
            return self.client.request(method, template, owner=self.owner, repo=self.repo, **kwargs)
        except GitHubError as exc:
            raise self._unavailable(str(exc)) from None

    def _graphql(
        self, query: str, variables: dict[str, Any], *, idempotent: bool = False
    ) -> dict[str, Any]:
        variables = {"owner": self.owner, "name": self.repo, **variables}
        try:
            return self.client.graphql(query, variables, idempotent=idempotent)
        except GitHubError as exc:
            raise self._unavailable(str(exc)) from None

    def _repository(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        body = self._graphql(query, variables, idempotent=True)  # a read: safe to send again
        repository = _dig(body, "data", "repository")
        if not isinstance(repository, dict):
            raise self._graphql_failure(body, "read the state branch")
        return repository

    def _blob(self, node: Any, path: str, text: bool) -> Blob | None:
        if not isinstance(node, dict) or not isinstance(node.get("oid"), str):
            return None
        oid = node["oid"]
        if not text:
            return Blob(oid)
        if node.get("isTruncated"):
            return Blob(oid)  # cut: read whole by its SHA when needed (BranchGit.blob_text)
        if not isinstance(node.get("text"), str):
            raise self._not_zukes(path)
        return Blob(oid, node["text"])

    def _check_repository(self) -> None:
        answer = self._call(
            "GET",
            "/repos/{owner}/{repo}/git/matching-refs/{ref+}",
            ref=f"heads/{self.branch}",
            expected=(404, 409),
        )
        if answer.status == 404:
            raise self._missing_repository()

    def _missing_repository(self) -> StoreRefusedError:
        return StoreRefusedError(
            f"state: the repository {self.owner}/{self.repo} was not found on GitHub, or the "
            "token cannot see it: check ZUKE_STATE and the token's repository access "
            "(the state branch needs `contents: write`)"
        )

    def _not_zukes(self, path: str) -> StoreRefusedError:
        return StoreRefusedError(
            f"state: {path} on {self.where} is binary; the file is not zuke's: remove it from "
            "the branch"
        )

    def _graphql_failure(self, body: dict[str, Any], what: str) -> StoreUnavailableError:
        errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
        first = errors[0] if errors else {}
        kind, message = first.get("type"), str(first.get("message") or "no data in the answer")
        if kind == "NOT_FOUND":
            return StoreUnavailableError(
                f"state: could not {what} on {self.where}: {message} Check ZUKE_STATE and the "
                "token's repository access (`contents: write`)"
            )
        if kind == "FORBIDDEN":
            return StoreRefusedError(
                f"state: could not {what} on {self.where}: {message} The token needs "
                "`contents: write` on the repository"
            )
        return self._unavailable(f"could not {what}: GitHub's GraphQL answered {message}")

    def _unavailable(self, why: str) -> StoreUnavailableError:
        return StoreUnavailableError(f"state: {self.where}: {why.rstrip('.')}")


def _blobs_query(head: str, asked: Sequence[tuple[str, str]]) -> tuple[str, dict[str, Any]]:
    """One query for files at commit ``head``, each ``(path, Blob fields)`` as alias ``f<i>``:
    aliased object lookups open no connection, so the query costs GitHub's minimum point."""
    params = ", ".join(f"$e{i}: String!" for i in range(len(asked)))
    body = "\n".join(
        f"    f{i}: object(expression: $e{i}) {{ ... on Blob {{ {fields} }} }}"
        for i, (_, fields) in enumerate(asked)
    )
    query = (
        f"query($owner: String!, $name: String!, {params}) {{\n"
        f"  repository(owner: $owner, name: $name) {{\n{body}\n  }}\n}}"
    )
    return query, {f"e{i}": f"{head}:{path}" for i, (path, _) in enumerate(asked)}


def _fields(text: bool) -> str:
    return "oid text isTruncated" if text else "oid"


def head_moved(body: Mapping[str, Any]) -> bool:
    """Whether a refused ``createCommitOnBranch`` says the head moved (or the branch went).

    ``STALE_DATA``, or a message of a head conflict's shape with no type (item 9:
    GitHub has reported one without it); ``NOT_FOUND``: the branch was deleted under us,
    which the store's re-read then names.
    """
    for error in body.get("errors") or []:
        if not isinstance(error, dict):
            continue
        if error.get("type") in ("STALE_DATA", "NOT_FOUND"):
            return True
        if _HEAD_MOVED.search(str(error.get("message") or "")):
            return True
    return False


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
