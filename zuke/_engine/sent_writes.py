"""A transition's write sent now and answered just before the next body (issue 28 §2).

A ``running`` transition's write must be acknowledged before its body starts
(``docs/state.md``). What the engine does between that write and the body — the
console's line, the observers that do not report the record as stored — need not
wait for it: on a store that can send an append and answer it later (the Postgres
store's ``send_append_known``) the writer sends it, lets that work run while the
server works, and waits for the answer (:meth:`SentWrites.acknowledged`) before the
transition counts as recorded: :class:`~zuke._engine.observer.Observers` awaits it
before any other observer, before the transition returns, and so before the body,
``ctx``, the hooks or the run's end. A write that fails or conflicts is then
settled exactly as :meth:`~zuke._engine.record_writes.RecordWrites.flush` settles it
(retried with backoff, re-applied to a fresh record, the run disowned when it is
another's), still before the body.
"""

from __future__ import annotations

from collections.abc import Callable

from zuke._engine.record_writes import RecordWrites
from zuke.state._protocol import Conflict, Written
from zuke.state.records import RunDelta, apply_delta, merge_deltas


class SentWrites(RecordWrites):
    """Sending a write and waiting for its answer later; :class:`~zuke._engine.writer.
    RunStateWriter` sets these attributes up."""

    #: the store can send an append now and answer it later (:meth:`_send`)
    _sends: bool
    #: the write :meth:`_send` sent and the function that waits for its answer
    _sent: tuple[RunDelta, Callable[[], Written | Conflict]] | None

    async def _send(self) -> bool:
        """Send what is queued without waiting for its answer, where the store can
        (``send_append_known``, :func:`~zuke._engine.store_traits.sends_appends`) and the
        write would be made on the loop's thread anyway; ``False``: not sent, write it the
        ordinary way (:meth:`flush`).

        Sent, the write holds the write lock until :meth:`acknowledged` has its answer: no
        other write, no persist, no run's end goes out before it, and the caller awaits
        ``acknowledged`` before the transition counts as recorded — before the next body.
        """
        if not (self._sends and self._local and self.inline()) or self._write_lock.locked():
            return False
        if self._disowned or self._ended or self._failing is not None or not self._head_ours():
            return False
        await self._write_lock.acquire()  # free (checked above): it does not suspend
        try:
            self._take_meta()
            delta = self._take_delta()
            if delta is None:
                self._write_lock.release()
                return True  # nothing to write
            assert self.version is not None, "create() the record before writing to it"
            answer = self.store.send_append_known(  # type: ignore[attr-defined]
                self.run_id, delta, expected_version=self.version,
                after=lambda: apply_delta(self.record, delta),
            )  # fmt: skip
        except BaseException:
            self._write_lock.release()
            raise
        if answer is None:  # not this one: back in front of the queue, for flush()
            self._pending = delta if self._pending is None else merge_deltas(delta, self._pending)
            self._write_lock.release()
            return False
        self._sent = (delta, answer)
        return True

    async def acknowledged(self) -> None:
        """Wait for the answer of the write :meth:`_send` sent, and settle it as :meth:`flush`
        would have (retried with backoff if it failed, re-applied if it conflicted)."""
        sent, self._sent = self._sent, None
        if sent is None:
            return
        delta, answer = sent
        try:
            await self._deliver(delta, self.backoff_s, lambda: self._appended(delta, answer()))
        finally:
            self._write_lock.release()
