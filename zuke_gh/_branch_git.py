"""The GitHub calls behind the branch store: read the head, read a tree, commit on a head.

* :meth:`BranchGit.head` — ``GET /git/ref/heads/<branch>`` with an ETag: a 304
  costs no rate limit, and its ``Date`` is GitHub's clock for lock expiry.
* :meth:`BranchGit.snapshot` — one GraphQL query naming the head's SHA in every
  expression (``<sha>:runs``, ``<sha>:locks.json``, …), so what it answers is
  exactly the tree at that commit, however the branch moves meanwhile.
* :meth:`BranchGit.head_and_tree` — the head and its tree in one GraphQL query,
  for a store that has no view of the branch yet (its first write).
* :meth:`BranchGit.commit` — ``createCommitOnBranch`` with ``expectedHeadOid``:
  the compare-and-swap of the branch head. ``None`` means the head moved
  (``STALE_DATA``).
* :meth:`BranchGit.create_branch` — the orphan branch: an empty tree, a commit
  with no parents, ``POST /git/refs`` (422 "already exists" means another
  process won the race: fine).
* :meth:`BranchGit.read_file` — the contents API with an ETag, for listings.

Every failure is a :class:`~zuke.StoreUnavailableError` (a
:class:`~zuke.StateError`, so the engine retries it like any store's), one
line naming the repository and what to do; no token reaches a message (the
client scrubs answers).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from zuke._errors import StoreUnavailableError
from zuke_gh._branch_files import INDEX_PATH, LOCKS_PATH, RUNS_DIR, run_path
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

_SNAPSHOT_QUERY = """query($owner: String!, $name: String!, $runs: String!, $index: String!,
                          $locks: String!, $run: String!) {
  repository(owner: $owner, name: $name) {
    runs: object(expression: $runs) { ... on Tree { entries { name oid } } }
    index: object(expression: $index) { ... on Blob { oid text } }
    locks: object(expression: $locks) { ... on Blob { oid text } }
    run: object(expression: $run) { ... on Blob { oid text } }
  }
}"""
_HEAD_TREE_QUERY = """query($owner: String!, $name: String!, $ref: String!) {
  repository(owner: $owner, name: $name) {
    ref(qualifiedName: $ref) {
      target {
        oid
        ... on Commit {
          tree { entries { name oid object {
            ... on Blob { oid text }
            ... on Tree { entries { name oid } }
          } } }
        }
      }
    }
  }
}"""
_COMMIT_MUTATION = """mutation($input: CreateCommitOnBranchInput!) {
  createCommitOnBranch(input: $input) { commit { oid } }
}"""


@dataclass(frozen=True)
class Head:
    """The branch head (``None``: no such branch) and GitHub's clock when it was read."""

    sha: str | None
    server_ms: int | None


@dataclass(frozen=True)
class Tree:
    """What a snapshot query found at one commit."""

    runs: dict[str, str]  #: run id -> blob SHA
    index: str | None
    locks: str | None
    #: the requested run's (blob SHA, text), when one was asked for and exists
    run: tuple[str, str] | None


class BranchGit:
    """The branch ``branch`` of ``owner/repo``, through one :class:`GitHubClient`."""

    def __init__(self, client: GitHubClient, owner: str, repo: str, branch: str) -> None:
        self.client, self.owner, self.repo, self.branch = client, owner, repo, branch
        self.where = f"github://{owner}/{repo}?branch={branch}"

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
            self._check_repository()
            return Head(None, answer.server_time_ms)
        sha = _dig(answer.body, "object", "sha")
        if not isinstance(sha, str):
            raise self._unavailable("GitHub's answer for the branch has no object.sha")
        return Head(sha, answer.server_time_ms)

    def snapshot(self, head: str, run_id: str | None = None) -> Tree:
        variables = {
            "owner": self.owner,
            "name": self.repo,
            "runs": f"{head}:{RUNS_DIR}",
            "index": f"{head}:{INDEX_PATH}",
            "locks": f"{head}:{LOCKS_PATH}",
            # a path no run can have (ids exclude '/') when no run is asked for
            "run": f"{head}:{run_path(run_id) if run_id else RUNS_DIR + '/-/-'}",
        }
        body = self._graphql(_SNAPSHOT_QUERY, variables, "read the state branch")
        repository = _dig(body, "data", "repository")
        if not isinstance(repository, dict):
            raise self._graphql_failure(body, "read the state branch")
        runs = _run_files(_dig(repository, "runs", "entries"))
        run = repository.get("run")
        found = None
        if isinstance(run, dict) and isinstance(run.get("oid"), str):
            found = (run["oid"], self._text(run, run_path(run_id or "")))
        return Tree(
            runs=runs,
            index=self._blob_text(repository.get("index"), INDEX_PATH),
            locks=self._blob_text(repository.get("locks"), LOCKS_PATH),
            run=found,
        )

    def head_and_tree(self) -> tuple[str | None, Tree | None]:
        """The head and its tree in one query (the tree of the very commit the ref names, so
        consistent): a store with no view of the branch yet pays one request, not two.
        ``(None, None)``: no such branch."""
        variables = {"owner": self.owner, "name": self.repo, "ref": f"refs/heads/{self.branch}"}
        body = self._graphql(_HEAD_TREE_QUERY, variables, "read the state branch")
        repository = _dig(body, "data", "repository")
        if not isinstance(repository, dict):
            raise self._graphql_failure(body, "read the state branch")
        target = _dig(repository, "ref", "target")
        if not isinstance(target, dict) or not isinstance(target.get("oid"), str):
            return None, None
        entries = {
            e["name"]: e.get("object")
            for e in _dig(target, "tree", "entries") or []
            if isinstance(e, dict) and isinstance(e.get("name"), str)
        }
        runs = _run_files(_dig(entries, RUNS_DIR, "entries"))
        tree = Tree(
            runs=runs,
            index=self._blob_text(entries.get(INDEX_PATH), INDEX_PATH),
            locks=self._blob_text(entries.get(LOCKS_PATH), LOCKS_PATH),
            run=None,
        )
        return target["oid"], tree

    def read_file(self, path: str) -> tuple[str, str] | None:
        """(blob SHA, text) of ``path`` at the branch's head, or ``None`` when absent."""
        answer = self._call(
            "GET",
            "/repos/{owner}/{repo}/contents/{file+}",
            file=path,
            params={"ref": self.branch},
            etag=True,
            expected=(404,),
        )
        if answer.status == 404:
            self.head()  # a missing repository raises; a missing branch or file is None
            return None
        body = answer.body
        sha, content = body.get("sha"), body.get("content")
        if not isinstance(sha, str) or not isinstance(content, str):
            raise self._unavailable(f"GitHub's answer for {path} has no sha and content")
        try:
            return sha, base64.b64decode(content).decode()
        except (ValueError, UnicodeDecodeError):
            raise self._unavailable(f"{path} on the branch is not UTF-8 text") from None

    # -- writes ------------------------------------------------------------------------------

    def commit(
        self, head: str, additions: dict[str, bytes], deletions: list[str], message: str
    ) -> str | None:
        """The new head's SHA, or ``None`` if the branch no longer points at ``head``."""
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
            "message": {"headline": message},
            "expectedHeadOid": head,
            "fileChanges": change,
        }  # fmt: skip
        # idempotent: a resend after a lost answer finds the head moved (by us) and is refused
        body = self._graphql(_COMMIT_MUTATION, {"input": given}, "commit", idempotent=True)
        oid = _dig(body, "data", "createCommitOnBranch", "commit", "oid")
        if isinstance(oid, str):
            return oid
        kinds = {e.get("type") for e in body.get("errors") or [] if isinstance(e, dict)}
        if kinds & {"STALE_DATA", "NOT_FOUND"}:  # moved, or deleted under us: re-read
            return None
        raise self._graphql_failure(body, "commit")

    def create_branch(self) -> None:
        """The orphan branch: an empty tree, a parentless commit, then the ref."""
        tree = self._call("POST", "/repos/{owner}/{repo}/git/trees", json={"tree": []})
        commit = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/commits",
            json={
                "message": "zuke state: branch created",
                "tree": _dig(tree.body, "sha"),
                "parents": [],
            },
        )
        made = self._call(
            "POST",
            "/repos/{owner}/{repo}/git/refs",
            json={"ref": f"refs/heads/{self.branch}", "sha": _dig(commit.body, "sha")},
            expected=(422,),
        )
        if made.status == 422 and "already exists" not in str(made.body).lower():
            raise self._unavailable(f"GitHub refused to create the branch: {made.body}")

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, method: str, template: str, /, **kwargs: Any) -> Any:
        try:
            return self.client.request(method, template, owner=self.owner, repo=self.repo, **kwargs)
        except GitHubError as exc:
            raise self._unavailable(str(exc)) from None

    def _graphql(
        self, query: str, variables: dict[str, Any], what: str, *, idempotent: bool = False
    ) -> dict[str, Any]:
        try:
            return self.client.graphql(query, variables, idempotent=idempotent)
        except GitHubError as exc:
            raise self._unavailable(str(exc)) from None

    def _check_repository(self) -> None:
        answer = self._call(
            "GET",
            "/repos/{owner}/{repo}/git/matching-refs/{ref+}",
            ref=f"heads/{self.branch}",
            expected=(404, 409),
        )
        if answer.status == 404:
            raise StoreUnavailableError(
                f"state: the repository {self.owner}/{self.repo} was not found on GitHub, or the "
                "token cannot see it: check ZUKE_STATE and the token's repository access "
                "(the state branch needs `contents: write`)"
            )

    def _blob_text(self, node: Any, path: str) -> str | None:
        return self._text(node, path) if isinstance(node, dict) else None

    def _text(self, node: dict[str, Any], path: str) -> str:
        text = node.get("text")
        if not isinstance(text, str):
            raise StoreUnavailableError(
                f"state: {path} on {self.where} is binary or too large to read; "
                "the file is not zuke's: remove it from the branch"
            )
        return text

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
            return StoreUnavailableError(
                f"state: could not {what} on {self.where}: {message} The token needs "
                "`contents: write` on the repository"
            )
        return self._unavailable(f"could not {what}: GitHub's GraphQL answered {message}")

    def _unavailable(self, why: str) -> StoreUnavailableError:
        return StoreUnavailableError(f"state: {self.where}: {why.rstrip('.')}")


def _run_files(entries: Any) -> dict[str, str]:
    """The ``runs/`` tree's entries as run id -> blob SHA (anything malformed left out)."""
    return {
        e["name"][: -len(".json")]: e["oid"]
        for e in entries or []
        if isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and e["name"].endswith(".json")
        and isinstance(e.get("oid"), str)
    }


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
