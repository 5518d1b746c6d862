"""The fake's git data, contents and GraphQL behaviour (what the branch-backed store builds on)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.fake_github.support import put_file

GIT = "/repos/acme/app/git"
MUTATION = """mutation($input: CreateCommitOnBranchInput!) {
  createCommitOnBranch(input: $input) { commit { oid url } } }"""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _orphan(api: httpx.Client, files: dict[str, str]) -> str:
    entries = [
        {"path": p, "mode": "100644", "type": "blob", "content": t} for p, t in files.items()
    ]
    tree = api.post(f"{GIT}/trees", json={"tree": entries})
    commit = api.post(f"{GIT}/commits", json={"message": "init", "tree": tree.json()["sha"]})
    assert commit.status_code == 201 and commit.json()["parents"] == []
    return str(commit.json()["sha"])


def _commit(api: httpx.Client, parent: str, changes: list[Any]) -> str:
    base = api.get(f"{GIT}/commits/{parent}").json()["tree"]["sha"]
    tree = api.post(f"{GIT}/trees", json={"base_tree": base, "tree": changes}).json()["sha"]
    body = {"message": "next", "tree": tree, "parents": [parent]}
    return str(api.post(f"{GIT}/commits", json=body).json()["sha"])


def _graphql(api: httpx.Client, query: str, **variables: object) -> httpx.Response:
    return api.post("/graphql", json={"query": query, "variables": variables})


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to compare SHAs")
def test_object_shas_are_the_ones_git_computes(api: httpx.Client, tmp_path: Path) -> None:
    commit_sha = _orphan(api, {"a.txt": "hello\n", "d/b.txt": "x"})
    commit = api.get(f"{GIT}/commits/{commit_sha}").json()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)

    def git(*args: str, stdin: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *args], input=stdin.encode(),
                              capture_output=True, check=True)  # fmt: skip
        return done.stdout.decode().strip()

    blob = git("hash-object", "-w", "--stdin", stdin="hello\n")
    sub = git(
        "mktree",
        "--missing",
        stdin=f"100644 blob {git('hash-object', '--stdin', stdin='x')}\tb.txt\n",
    )
    tree = git("mktree", "--missing", stdin=f"100644 blob {blob}\ta.txt\n040000 tree {sub}\td\n")
    assert commit["tree"]["sha"] == tree
    when = subprocess.run(["date", "-d", commit["author"]["date"], "+%s"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    who = f"{commit['author']['name']} <{commit['author']['email']}> {when} +0000"
    raw = f"tree {tree}\nauthor {who}\ncommitter {who}\n\ninit"
    assert git("hash-object", "-t", "commit", "--stdin", stdin=raw) == commit_sha


def test_trees_take_a_base_nested_paths_and_null_deletions(api: httpx.Client) -> None:
    root = _orphan(api, {"runs/r1.json": "1", "runs/r2.json": "2", "locks/l.json": "L"})
    deletion = {"path": "runs/r1.json", "mode": "100644", "type": "blob", "sha": None}
    addition = {"path": "runs/deep/r3.json", "mode": "100644", "type": "blob", "content": "3"}
    head = _commit(api, root, [deletion, addition])
    tree = api.get(f"{GIT}/trees/{head}", params={"recursive": "1"}).json()["tree"]
    assert [(e["path"], e["type"]) for e in tree] == [
        ("locks", "tree"), ("locks/l.json", "blob"), ("runs", "tree"), ("runs/deep", "tree"),
        ("runs/deep/r3.json", "blob"), ("runs/r2.json", "blob")]  # fmt: skip
    top = api.get(f"{GIT}/trees/{head}").json()["tree"]
    assert [e["path"] for e in top] == ["locks", "runs"]


def test_a_ref_moves_only_by_fast_forward_unless_forced(gh: FakeGitHub, api: httpx.Client):
    root = _orphan(api, {"a": "1"})
    assert (
        api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root}).status_code
        == 201
    )
    again = api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root})
    assert (again.status_code, again.json()["message"]) == (422, "Reference already exists")
    child = _commit(api, root, [{"path": "b", "mode": "100644", "type": "blob", "content": "2"}])
    sibling = _commit(api, root, [{"path": "c", "mode": "100644", "type": "blob", "content": "3"}])
    ref = f"{GIT}/refs/heads/zuke-state"
    assert api.patch(ref, json={"sha": child}).status_code == 200
    refused = api.patch(ref, json={"sha": sibling, "force": False})
    assert (refused.status_code, refused.json()["message"]) == (422, "Update is not a fast forward")
    assert gh.head("acme/app", "zuke-state") == child
    assert api.patch(ref, json={"sha": sibling, "force": True}).status_code == 200
    assert api.get(f"{GIT}/ref/heads/zuke-state").json()["object"]["sha"] == sibling
    assert api.delete(ref).status_code == 204
    assert api.get(f"{GIT}/ref/heads/zuke-state").status_code == 404
    assert api.delete(ref).status_code == 422


def test_blobs_round_trip_utf8_and_base64(api: httpx.Client) -> None:
    text = api.post(f"{GIT}/blobs", json={"content": "héllo", "encoding": "utf-8"}).json()["sha"]
    data = api.post(f"{GIT}/blobs", json={"content": _b64("héllo"), "encoding": "base64"}).json()
    assert data["sha"] == text
    got = api.get(f"{GIT}/blobs/{text}").json()
    assert base64.b64decode(got["content"]).decode() == "héllo" and got["size"] == 6


def test_contents_is_a_per_file_cas_with_one_commit_per_write(gh: FakeGitHub, api) -> None:
    created = put_file(api, "runs/r1.json", "v1")
    sha = created.json()["content"]["sha"]
    assert put_file(api, "runs/r2.json", "other").status_code == 201  # moves the head: no conflict
    stale = put_file(api, "runs/r1.json", "v2", sha="0" * 40)
    assert (stale.status_code, stale.json()["message"]) == (
        409,
        f"runs/r1.json does not match {'0' * 40}",
    )
    missing = put_file(api, "runs/r1.json", "v2")
    assert (missing.status_code, missing.json()["message"]) == (
        422,
        'Invalid request.\n\n"sha" wasn\'t supplied.',
    )
    assert put_file(api, "runs/r1.json", "v2", sha=sha).status_code == 200
    got = api.get("/repos/acme/app/contents/runs/r1.json", params={"ref": "main"}).json()
    assert base64.b64decode(got["content"]) == b"v2"
    gone = api.request("DELETE", "/repos/acme/app/contents/runs/r1.json",
                       json={"message": "rm", "sha": got["sha"]})  # fmt: skip
    assert gone.status_code == 200
    assert gh.files("acme/app", "main") == {"README.md": "# app\n", "runs/r2.json": "other"}
    assert gh.stats()["commits"] == 4  # two creates, one update, one delete
    assert gh.log("acme/app", "main")[0]["message"] == "rm"
    assert put_file(api, "x", "y", branch="nope").status_code == 404


def test_create_commit_on_branch_commits_and_refuses_a_stale_head(gh: FakeGitHub, api) -> None:
    root = _orphan(api, {"runs/r1.json": "1"})
    api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root})
    change = {"branch": {"repositoryNameWithOwner": "acme/app", "branchName": "zuke-state"},
              "message": {"headline": "run r2: created", "body": "by zuke"},
              "expectedHeadOid": root,
              "fileChanges": {"additions": [{"path": "runs/r2.json", "contents": _b64("2")}],
                              "deletions": [{"path": "runs/r1.json"}]}}  # fmt: skip
    done = _graphql(api, MUTATION, input=change)
    assert done.status_code == 200 and "errors" not in done.json()
    oid = done.json()["data"]["createCommitOnBranch"]["commit"]["oid"]
    assert gh.head("acme/app", "zuke-state") == oid
    assert gh.files("acme/app", "zuke-state") == {"runs/r2.json": "2"}
    assert gh.log("acme/app", "zuke-state")[0]["message"] == "run r2: created\n\nby zuke"
    stale = _graphql(api, MUTATION, input=change)
    assert stale.status_code == 200
    [error] = stale.json()["errors"]
    assert error["type"] == "STALE_DATA"
    assert (
        error["message"]
        == f'Expected branch to point to "{root}" but it did not.  Pull and try again.'
    )
    assert gh.head("acme/app", "zuke-state") == oid
    assert gh.stats()["commits"] == 2  # the orphan, the mutation; a refused one is none


def test_graphql_reads_a_ref_a_blob_and_a_tree(api: httpx.Client) -> None:
    root = _orphan(api, {"runs/r1.json": '{"id": 1}', "runs/r2.json": "2"})
    api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root})
    query = """query($owner: String!, $name: String!, $file: String!) {
      repository(owner: $owner, name: $name) {
        head: ref(qualifiedName: "refs/heads/zuke-state") { target { oid } }
        missing: ref(qualifiedName: "refs/heads/nope") { target { oid } }
        file: object(expression: $file) { ... on Blob { text } }
        dir: object(expression: "zuke-state:runs") {
          ... on Tree { entries { name object { ... on Blob { text } } } } }
      } }"""
    data = _graphql(api, query, owner="acme", name="app", file="zuke-state:runs/r1.json").json()[
        "data"
    ]
    repo = data["repository"]
    assert repo["head"]["target"]["oid"] == root and repo["missing"] is None
    assert repo["file"]["text"] == '{"id": 1}'
    assert [(e["name"], e["object"]["text"]) for e in repo["dir"]["entries"]] == [
        ("r1.json", '{"id": 1}'), ("r2.json", "2")]  # fmt: skip


# -- what GitHub refuses (shared/reference/tools.md has the sources) --------------------------


def test_an_empty_tree_is_refused_as_github_does(api: httpx.Client) -> None:
    refused = api.post(f"{GIT}/trees", json={"tree": []})
    assert (refused.status_code, refused.json()["message"]) == (422, "Invalid tree info")
    one = [{"path": "README.md", "mode": "100644", "type": "blob", "content": "x"}]
    assert api.post(f"{GIT}/trees", json={"tree": one}).status_code == 201


def test_an_empty_repository_answers_409_to_every_git_database_call(gh: FakeGitHub, api) -> None:
    gh.add_repo("acme/empty", empty=True)
    base = "/repos/acme/empty/git"
    one = [{"path": "a", "mode": "100644", "type": "blob", "content": "x"}]
    answers = [
        api.post(f"{base}/trees", json={"tree": one}),
        api.post(f"{base}/blobs", json={"content": "x"}),
        api.post(f"{base}/commits", json={"message": "m", "tree": "0" * 40}),
        api.post(f"{base}/refs", json={"ref": "refs/heads/x", "sha": "0" * 40}),
        api.get(f"{base}/ref/heads/main"),
        api.get(f"{base}/matching-refs/heads/"),
        api.get(f"{base}/blobs/{'0' * 40}"),
    ]
    assert {(a.status_code, a.json()["message"]) for a in answers} == {
        (409, "Git Repository is empty.")
    }
    change = {"branch": {"repositoryNameWithOwner": "acme/empty", "branchName": "main"},
              "message": {"headline": "m"}, "expectedHeadOid": "0" * 40,
              "fileChanges": {"additions": [{"path": "a", "contents": _b64("a")}]}}  # fmt: skip
    failed = _graphql(api, MUTATION, input=change).json()
    assert failed["data"]["createCommitOnBranch"] is None and failed["errors"]
    assert gh.refs("acme/empty") == {}
    # the contents API makes the first commit of an empty repository, as on GitHub
    body = {"message": "first", "content": _b64("hi")}
    assert api.put("/repos/acme/empty/contents/README.md", json=body).status_code == 201
    assert api.get(f"{base}/ref/heads/main").status_code == 200


def test_a_repository_has_its_default_branch_with_a_readme_unless_made_empty(gh: FakeGitHub, api):
    repo = api.get("/repos/acme/app").json()
    assert (repo["full_name"], repo["default_branch"]) == ("acme/app", "main")
    assert gh.files("acme/app", "main") == {"README.md": "# app\n"}
    assert gh.stats()["commits"] == 0  # seeding is not a request


def test_blob_text_is_cut_at_the_configured_limit_and_the_blobs_api_is_not(gh: FakeGitHub, api):
    gh.configure(blob_text_limit=10)
    root = _orphan(api, {"big.json": "0123456789abcdef", "small.json": "01234"})
    api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root})
    query = """query { repository(owner: "acme", name: "app") {
      big: object(expression: "zuke-state:big.json") { ... on Blob { oid text isTruncated } }
      small: object(expression: "zuke-state:small.json") { ... on Blob { text isTruncated } }
      ref(qualifiedName: "zuke-state") { target { ... on Commit {
        f: file(path: "big.json") { oid object { ... on Blob { text isTruncated } } } } } } } }"""
    repo = _graphql(api, query).json()["data"]["repository"]
    assert (repo["big"]["text"], repo["big"]["isTruncated"]) == ("0123456789", True)
    assert (repo["small"]["text"], repo["small"]["isTruncated"]) == ("01234", False)
    entry = repo["ref"]["target"]["f"]
    assert entry["oid"] == repo["big"]["oid"] and entry["object"]["isTruncated"] is True
    whole = api.get(f"{GIT}/blobs/{repo['big']['oid']}").json()
    assert base64.b64decode(whole["content"]) == b"0123456789abcdef"


def test_the_contents_api_refuses_json_for_a_file_past_its_limit(gh: FakeGitHub, api) -> None:
    gh.configure(contents_json_limit=8)
    assert put_file(api, "big.json", "0123456789").status_code == 201
    refused = api.get("/repos/acme/app/contents/big.json")
    assert refused.status_code == 403
    assert refused.json()["errors"] == [{"resource": "Blob", "field": "data", "code": "too_large"}]
    assert api.get("/repos/acme/app/contents/README.md").status_code == 200


@pytest.mark.parametrize(
    ("form", "kind", "shape"),
    [
        ("STALE_DATA", "STALE_DATA", 'Expected branch to point to "{old}" but it did not.  Pull'),
        ("untyped", None, 'Expected branch to point to "{old}" but it did not.  Pull'),
        ("is-at", None, 'Branch "refs/heads/zuke-state" is at "{new}" but expected "{old}".'),
    ],
)
def test_a_stale_head_is_answered_in_the_configured_form(
    gh: FakeGitHub, api: httpx.Client, form: str, kind: str | None, shape: str
) -> None:
    gh.configure(stale_head_form=form)
    root = _orphan(api, {"a": "1"})
    api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": root})
    change = {"branch": {"repositoryNameWithOwner": "acme/app", "branchName": "zuke-state"},
              "message": {"headline": "m"}, "expectedHeadOid": root,
              "fileChanges": {"additions": [{"path": "b", "contents": _b64("2")}]}}  # fmt: skip
    new = _graphql(api, MUTATION, input=change).json()["data"]["createCommitOnBranch"]["commit"]
    answer = _graphql(api, MUTATION, input=change)
    assert answer.status_code == 200
    [error] = answer.json()["errors"]
    assert error.get("type") == kind
    assert error["message"].startswith(shape.format(old=root, new=new["oid"]))
