"""The HTTP state store: a client of the published Zuke state HTTP API.

:class:`HttpStateStore` speaks the same wire contract as the TypeScript Zuke
(runs with ETag compare-and-swap, ``/locks`` acquire/renew/release, and
our ``GET /locks`` listing and ``DELETE /locks/:key?force=1`` break; see
``docs/state-api.md``), so one state service serves both implementations.
This module decides what each answer means for its call; the request
mechanics and the failures every call shares live in
:mod:`zuke.state._http_client`.

The service is untrusted input: every response is checked (status, the
``ETag`` a read or write must carry, the JSON shape via
:mod:`zuke.state.records`) and anything unexpected becomes a
:class:`~zuke.StoreUnavailableError` that names the call. Messages never
contain the token or the credentials of a ``user:pass@`` URL.

Linear persistence rides our ``PATCH /runs/:id`` extension (the body is a
:class:`~zuke.state.records.RunDelta`). A server without it — the TypeScript
one — answers 404/405/501 without advertising the ``journal`` feature; the
store remembers that and appends by GET + apply + PUT ``If-Match`` instead.
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from zuke._errors import CorruptRecordError, StateError, UnsafeIdError
from zuke.state._http_client import Reply, Wire
from zuke.state._http_wire import (
    FEATURES_HEADER,
    JOURNAL_FEATURE,
    MAX_LIST_LIMIT,
    InsecureStateUrlError,
    check_url_is_secure,
    redact_url,
)
from zuke.state._ids import check_id, check_ttl
from zuke.state._protocol import (
    Conflict,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state._unsure import UnsureWriteError, UnsureWrites
from zuke.state.records import RunDelta, RunRecord, RunSummary, apply_delta
from zuke.state.wire import (
    delta_to_json,
    holder_to_json,
    parse_holder,
    parse_record,
    parse_summary,
    record_to_json,
)

if TYPE_CHECKING:
    import httpx

# Statuses with which a server that lacks PATCH turns it down.
_NO_PATCH_STATUSES = frozenset({404, 405, 501})
_NO_FILTER = RunQuery()
# Statuses with which a server that cannot break locks (no token given) turns it down.
_NO_BREAK_STATUSES = frozenset({400, 404, 405, 501})


class HttpStateStore:
    """A :class:`~zuke.state.JournalingStateStore` backed by a Zuke state service.

    ``url`` is the service's base URL, path prefix included (a prefix is a
    namespace on ``zuke serve``). Thread-safe: pooled keep-alive connections
    (``transport``, for tests, replaces them with an httpx transport).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self._wire = Wire(url, token=token, transport=transport, timeout_s=timeout_s)
        # None: not known yet; learned from the first PATCH answer.
        self._patch_supported: bool | None = None
        #: writes whose answer was lost for good, by (run or lock, expected, payload)
        self._unsure: UnsureWrites[str] = UnsureWrites()

    def __repr__(self) -> str:
        token = "<redacted>" if self._wire.has_token else None
        return f"HttpStateStore(url={self._wire.shown_url!r}, token={token!r})"

    @property
    def display_name(self) -> str:
        """The service's URL without credentials: the store as messages name it."""
        return self._wire.shown_url

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> HttpStateStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ runs

    def get_run(self, run_id: str) -> StoredRun | None:
        reply = self._wire.send("GET", _run_path(run_id))
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise self._wire.unexpected(reply)
        version = self._wire.etag(reply)
        raw = self._wire.json(reply, "a run record")
        try:
            record = parse_record(raw, where=reply.call)
        except CorruptRecordError as exc:
            raise self._wire.bad_body(reply, "a run record", detail=str(exc)) from None
        if record.id != run_id:
            raise self._wire.bad_body(reply, f"the record of run {run_id!r}")
        return StoredRun(record=record, version=version)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        path = _run_path(record.id)
        reply = self._keyed(
            (record.id, "", record),
            "PUT", path, body=record_to_json(record), headers={"If-None-Match": "*"},
        )  # fmt: skip
        return self._write_result(reply)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        path = _run_path(record.id)
        reply = self._keyed(
            (record.id, expected_version, record),
            "PUT", path, body=record_to_json(record), headers={"If-Match": expected_version},
        )  # fmt: skip
        return self._write_result(reply)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        path = _run_path(run_id)
        if self._patch_supported is not False:
            reply = self._keyed(
                (run_id, expected_version, delta),
                "PATCH",
                path,
                body=delta_to_json(delta),
                headers={"If-Match": expected_version},
                handles=_NO_PATCH_STATUSES,
            )
            if reply.status in _NO_PATCH_STATUSES and not _has_journal(reply):
                # The TypeScript service (or a proxy) has no PATCH: remember, fall back.
                self._patch_supported = False
            elif reply.status == 404:
                # A journal server saying the run is absent: it is not at that version.
                return Conflict()
            else:
                self._patch_supported = True
                return self._write_result(reply)
        # Fallback: the same compare-and-swap, as a read and a whole-record write.
        current = self.get_run(run_id)
        if current is None or current.version != expected_version:
            return Conflict()
        return self.put_run(apply_delta(current.record, delta), expected_version=expected_version)

    def delete_run(self, run_id: str) -> None:
        reply = self._wire.send("DELETE", _run_path(run_id))
        if reply.status != 404 and not reply.ok:
            raise self._wire.unexpected(reply)

    def list_runs(self, query: RunQuery = _NO_FILTER) -> list[RunSummary]:
        params: dict[str, str] = {}
        if query.status is not None:
            params["status"] = query.status
        if query.target is not None:
            params["target"] = query.target
        if query.since is not None:
            params["since"] = query.since
        if query.build is not None:
            params["build"] = query.build
        if query.limit is not None:
            # As every store: a negative limit lists nothing; past the wire's bound, everything.
            params["limit"] = str(min(max(query.limit, 0), MAX_LIST_LIMIT))
        reply = self._wire.send("GET", "/runs", params=params)
        if reply.status != 200:
            raise self._wire.unexpected(reply)
        raw = self._wire.json(reply, "a list of run summaries")
        if not isinstance(raw, list):
            raise self._wire.bad_body(reply, "a list of run summaries")
        try:
            # Ordering and limit are the server's job; the client does not re-sort.
            return [
                parse_summary(item, where=f"{reply.call} item {i}") for i, item in enumerate(raw)
            ]
        except CorruptRecordError as exc:
            raise self._wire.bad_body(reply, "a list of run summaries", detail=str(exc)) from None

    # ------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        path = _lock_path(key)
        body = {"holder": holder_to_json(holder), "ttlMs": check_ttl(ttl_ms)}
        reply = self._keyed((f"lock:{key}", "", (holder, ttl_ms)), "POST", path, body=body)
        if reply.status == 409:
            return LockHeld(holder=self._holder(reply))
        if not reply.ok:
            raise self._wire.unexpected(reply)
        raw = self._wire.json(reply, "a lock grant")
        if not isinstance(raw, dict):
            raise self._wire.bad_body(reply, "a lock grant {token, fence}")
        token, fence = raw.get("token"), raw.get("fence")
        # A server without fencing (the TypeScript one) sends no fence: report 0.
        fence = 0 if fence is None else fence
        if not isinstance(token, str) or not token or type(fence) is not int or fence < 0:
            raise self._wire.bad_body(reply, "a lock grant {token, fence}")
        return LockAcquired(token=token, fence=fence)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        path = _lock_path(key)
        # A renewal must answer well inside the heartbeat's half-TTL: one hung request
        # with the 30 s default would let a 60 s lease lapse before the next beat.
        reply = self._wire.send(
            "PUT",
            path,
            body={"token": token, "ttlMs": check_ttl(ttl_ms)},
            timeout_s=renewal_timeout_s(ttl_ms, self._wire.timeout_s),
        )
        if reply.status in (404, 409):
            return False
        if not reply.ok:
            raise self._wire.unexpected(reply)
        return True

    def release_lock(self, key: str, token: str) -> None:
        reply = self._wire.send("DELETE", _lock_path(key), body={"token": token})
        # 404 (no such claim) and 409 (someone else's claim) both mean "nothing of ours".
        if reply.status not in (404, 409) and not reply.ok:
            raise self._wire.unexpected(reply)

    def break_lock(self, key: str) -> LockHolder | None:
        """``DELETE /locks/:key?force=1`` (our extension); a server without it: StateError."""
        reply = self._wire.send(
            "DELETE", _lock_path(key), params={"force": "1"}, handles=_NO_BREAK_STATUSES
        )
        raw = self._wire.json(reply, "a lock break") if reply.status == 200 else None
        if not isinstance(raw, dict) or type(raw.get("broken")) is not bool:
            if reply.status in _NO_BREAK_STATUSES or reply.status == 200:
                raise StateError(
                    f"state: the state service at {self._wire.shown_url} cannot break locks "
                    f"(DELETE /locks/:key?force=1 answered {reply.status}); it needs a "
                    "zuke serve with lock breaking"
                )
            raise self._wire.unexpected(reply)
        if not raw["broken"]:
            return None
        try:
            return parse_holder(raw.get("holder"))
        except CorruptRecordError:
            raise self._wire.bad_body(reply, "a lock break {broken, holder}") from None

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        """``GET /locks`` (our extension); a server without it raises :class:`StateError`."""
        params = {} if run_id is None else {"runId": check_id(run_id, "run id")}
        reply = self._wire.send("GET", "/locks", params=params)
        if reply.status == 404:
            raise StateError(
                f"state: the state service at {self._wire.shown_url} does not list locks "
                "(GET /locks answered 404); it needs a zuke serve with lock listing"
            )
        if reply.status != 200:
            raise self._wire.unexpected(reply)
        raw = self._wire.json(reply, "a list of locks")
        if not isinstance(raw, list):
            raise self._wire.bad_body(reply, "a list of locks")
        return [self._lock_entry(reply, item) for item in raw]

    # ------------------------------------------------------------ answers

    def _lock_entry(self, reply: Reply, raw: object) -> LockEntry:
        what = "a list of locks {key, holder, expiresAt, fence}"
        if not isinstance(raw, dict):
            raise self._wire.bad_body(reply, what)
        key, expires_at, fence = raw.get("key"), raw.get("expiresAt"), raw.get("fence")
        try:
            holder = parse_holder(raw.get("holder"))
            check_id(key, "lock key")
        except (CorruptRecordError, UnsafeIdError):
            raise self._wire.bad_body(reply, what) from None
        if type(expires_at) is not int or type(fence) is not int or fence < 0:
            raise self._wire.bad_body(reply, what)
        assert isinstance(key, str)
        return LockEntry(key=key, holder=holder, expires_at=expires_at, fence=fence)

    def _holder(self, reply: Reply) -> LockHolder:
        raw = self._wire.json(reply, "a lock holder")
        try:
            return parse_holder(raw)
        except CorruptRecordError:
            raise self._wire.bad_body(
                reply, "a lock holder {actor, runId, since, runUrl?}"
            ) from None

    def _keyed(self, write: tuple[str, str, object], method: str, path: str, **sent: Any) -> Reply:
        """A write sent with an idempotency key (``x-zuke-write-id``), sent again when it gets
        no answer (:meth:`Wire.send`). ``write`` — (run or lock, expected version, payload) —
        finds the key of the same write if an earlier call of it ended unsure, so that a
        server that kept that key answers it as it landed instead of applying it twice."""
        target, at, payload = write
        write_id = self._unsure.key(target, at, payload) or uuid.uuid4().hex
        try:
            reply = self._wire.send(method, path, write_id=write_id, **sent)
        except UnsureWriteError:
            self._unsure.note(target, at, payload, write_id)
            raise
        self._unsure.forget(target, at, payload)
        return reply

    def _write_result(self, reply: Reply) -> Written | Conflict:
        if reply.status == 412:
            return Conflict()
        if not reply.ok:
            raise self._wire.unexpected(reply)
        return Written(version=self._wire.etag(reply))


def _run_path(run_id: str) -> str:
    return "/runs/" + quote(check_id(run_id, "run id"), safe="")


def renewal_timeout_s(ttl_ms: int, default_s: float) -> float:
    """A renewal's request timeout: a quarter of the TTL, at most the client's default."""
    return max(0.05, min(default_s, ttl_ms / 4000))


def _lock_path(key: str) -> str:
    return "/locks/" + quote(check_id(key, "lock key"), safe="")


def _has_journal(reply: Reply) -> bool:
    features = reply.headers.get(FEATURES_HEADER, "")
    return JOURNAL_FEATURE in (f.strip() for f in features.split(","))


__all__ = [
    "HttpStateStore",
    "InsecureStateUrlError",
    "check_url_is_secure",
    "redact_url",
]
