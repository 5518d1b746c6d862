"""A secret array as fan-out items, across real ``zuke`` processes on the filesystem store.

The run that suspends, a resume by signal and a sweep (``zuke resume --check``)
in other processes, and ``zuke runs show`` / ``list``: none prints or stores a
token, and every process names the items alike (the later ones get the tokens
from the environment, since secrets are not recorded).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.resume_support import MARKER_WRITER, SUSPENDED_LINE, fs_store, lines, record_of
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e

BUILD = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, external_signal, parameter, resume_when, target

    class Keys(Build):
        markers = parameter("marker directory").required()
        tokens = parameter("API tokens").secret().array()

        @target
        def batch(self, t):
            return t.for_each(
                lambda: self.tokens.value, self._stages,
                lambda s: s.concurrency(1).continue_on_item_failure(),
            )

        def _stages(self, token, index):
            m = pathlib.Path(self.markers.value)

            def check(ctx):
                ctx.state.set({"token": token})
                append_line(m / "ran", ctx.target)
                if index == 2:
                    raise RuntimeError(f"the API refused {token}")

            if index == 0:  # a predicate a sweep checks
                gate = target().waits_for(
                    lambda s: s.on(resume_when(lambda: (m / "ok-0").exists())))
            else:
                gate = target().waits_for(lambda s: s.on(external_signal(f"ok-{index}")))
            return {
                "check": target().executes(check),
                "approve": gate,
                "use": target().executes(lambda ctx: append_line(m / "ran", ctx.target)),
            }
"""
)
#: the second has a byte a name would percent-encode
TOKENS = ["hunter2-token-aaaa", "hunter2-token/bbbb", "hunter2-token-cccc"]
#: what every token, raw or encoded, holds
SECRET = b"hunter2-token"


def test_no_process_prints_or_stores_a_token_and_all_name_the_items_alike(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    env = {"TOKENS": ",".join(TOKENS)}
    argv = ["batch", "--markers", str(markers), "--tokens", env["TOKENS"]]
    code, out = finish(spawn(argv, tmp_path))
    outputs = [out]
    suspended = SUSPENDED_LINE.search(out)
    assert code == 0 and suspended, out
    run_id = suspended.group(1)
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    assert parked.targets["batch[#2].check"].status == "failed"
    assert parked.targets["batch[#0].approve"].status == "waiting"

    code, out = finish(spawn(["resume", run_id, "--signal", "ok-1"], tmp_path, env))
    outputs.append(out)
    assert code == 0, out
    (markers / "ok-0").touch()
    code, out = finish(spawn(["resume", "--check", run_id], tmp_path, env))
    outputs.append(out)
    assert code == 1, out  # the run ends failed: item 2's check failed

    record = record_of(store, run_id)
    assert record.status == "failed"
    assert record.targets["batch"].error == "1 of 3 item(s) failed: #2 (check)"
    assert sorted(record.targets) == sorted(
        ["batch"] + [f"batch[#{i}].{s}" for i in range(3) for s in ("check", "approve", "use")]
    )
    # Each stage ran once, under the name every process computed.
    assert sorted(lines(markers / "ran")) == [
        "batch[#0].check", "batch[#0].use", "batch[#1].check", "batch[#1].use",
        "batch[#2].check",
    ]  # fmt: skip
    for argv in (["runs", "show", run_id], ["runs", "show", run_id, "--json"], ["runs", "list"]):
        code, out = finish(spawn(argv, tmp_path))
        assert code == 0, out
        outputs.append(out)
    assert "batch[#1].use" in outputs[3]  # runs show
    leaks = [out for out in outputs if SECRET.decode() in out]
    assert not leaks, leaks
    files = [p for p in (tmp_path / ".zuke").rglob("*") if p.is_file()]
    assert files
    assert not [p for p in files if SECRET in p.read_bytes()]
