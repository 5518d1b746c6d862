"""Cross-run locks of the filesystem store: claim files, their mutex, and fencing.

The rules (expiry, renewal, release, fences) are :mod:`zuke.state.lock_rules`;
this module maps a key's :class:`~zuke.state.lock_rules.ClaimState` onto files
under ``<dir>/locks/``:

- ``<key>.json`` — the claim ``{"holder": {"actor","runId","since","runUrl"?},
  "token", "expiresAt" (epoch ms), "fence"}``; written atomically, removed on
  release (as the original implementation did, so "no file" still means
  "nobody claims it"). Expiry alone never removes it: only the next acquirer
  proves the holder gone.
- ``<key>.fence`` — the highest fence ever issued for the key (a decimal
  integer). It outlives release, which is what keeps fences strictly
  increasing across acquire / release / acquire. It is written *before* the
  claim, so a crash between the two can only skip a fence, never repeat one.
- ``<key>.lock`` — the filelock mutex serialising every operation on the key.
- ``@fence-floor`` (and its mutex ``@fence-floor.lock``) — the highest fence of
  any key whose files were forgotten (a deleted run's lease), so a forgotten
  key taken again still gets a greater fence. ``@`` is no key character, so
  no key's files can collide with it.
- ``@clock`` — an empty file stamped by ``FileSystemStateStore.clock`` to
  read the filesystem's time outside a lock operation.

Expiry is judged by the filesystem's time, not the calling process's: an
operation that needs "now" stamps the key's mutex file and reads its mtime
back (:func:`~zuke.state._files.stamped_mutex`), so processes whose clocks
disagree — a sweeper two hours ahead — still agree on which claims are live,
and ``expiresAt`` is in that time too. Tests inject a
:class:`~zuke._clock.Clock` instead. A claim file that does not parse is
reported, never silently overwritten: stealing a lock on a guess is worse
than failing loudly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Final

from zuke._clock import Clock
from zuke._errors import CorruptRecordError, StoreUnavailableError, UnsafeIdError
from zuke.state import lock_rules
from zuke.state._files import (
    atomic_write,
    ensure_directory,
    mutex,
    os_failure,
    read_small,
    remove,
    stamped_mutex,
)
from zuke.state._ids import check_id, check_ttl
from zuke.state._protocol import LockAcquired, LockEntry, LockHeld, LockHolder
from zuke.state.lock_rules import ClaimState
from zuke.state.wire import holder_to_json, parse_holder

_LOG: Final = logging.getLogger("zuke.state")
FLOOR = "@fence-floor"
CLOCK_FILE = "@clock"  #: what the store's ``clock`` stamps to read the filesystem's time


def _claim_bytes(state: ClaimState) -> bytes:
    assert state.holder is not None
    body = {
        "holder": holder_to_json(state.holder),
        "token": state.token,
        "expiresAt": state.expires_at,
        "fence": state.fence,
    }
    return (json.dumps(body, indent=2) + "\n").encode("utf-8")


class FsLocks:
    """The lock half of :class:`~zuke.state.filesystem.FileSystemStateStore`.

    ``clock`` ``None``: judge time by the filesystem (the default); a clock: by it (tests).
    """

    def __init__(
        self, directory: str, clock: Clock | None, timeout_s: float, count: Callable[[int], None]
    ) -> None:
        self._store_dir = directory
        self._dir = os.path.join(directory, "locks")
        self._clock = clock
        self._timeout_s = timeout_s
        self._count = count

    def _path(self, key: str, suffix: str) -> str:
        return os.path.join(self._dir, check_id(key, "lock key") + suffix)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        ensure_directory(self._dir, directory=self._store_dir)
        with mutex(self._path(key, ".lock"), self._timeout_s, directory=self._store_dir):
            yield

    @contextlib.contextmanager
    def _timed(self, key: str) -> Iterator[int]:
        """:meth:`_locked`, yielding now (epoch ms): the filesystem's, or the injected clock's."""
        if self._clock is not None:
            with self._locked(key):
                yield self._clock.now_ms()
            return
        ensure_directory(self._dir, directory=self._store_dir)
        path = self._path(key, ".lock")
        with stamped_mutex(path, self._timeout_s, directory=self._store_dir) as now:
            yield now

    def _read_claim(self, key: str) -> ClaimState | None:
        """The claim file of ``key`` (its ``fence`` is that acquisition's), or ``None``."""
        path = self._path(key, ".json")
        try:
            data = read_small(path)
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._store_dir) from None
        if data is None:
            return None
        where = f"lock {key!r} ({path})"
        try:
            raw = json.loads(data)
        except ValueError:
            raw = None
        if not isinstance(raw, dict):
            raise CorruptRecordError(
                f"state: {where} is not a valid lock record; if no run holds {key!r}, "
                "delete the file to free the key"
            )
        token, expires_at, fence = raw.get("token"), raw.get("expiresAt"), raw.get("fence", 0)
        if not isinstance(token, str) or not isinstance(expires_at, int):
            raise CorruptRecordError(f'state: {where}: "token" and "expiresAt" are required')
        if not isinstance(fence, int):
            raise CorruptRecordError(f'state: {where}: "fence" must be an integer')
        holder = parse_holder(raw.get("holder"), where=where)
        return ClaimState(fence=fence, holder=holder, token=token, expires_at=expires_at)

    def _read_number(self, path: str) -> int:
        try:
            data = read_small(path)
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._store_dir) from None
        if data is None:
            return 0
        try:
            return int(data.strip())
        except ValueError:
            raise CorruptRecordError(
                f"state: lock fence file {path!r} does not hold an integer; restore it or "
                "replace it with a number larger than any fence already issued"
            ) from None

    def _state(self, key: str) -> ClaimState | None:
        """The key's :class:`ClaimState`: its claim (if any) and its highest fence."""
        claim = self._read_claim(key)
        fence = self._read_number(self._path(key, ".fence"))
        if claim is None:
            return ClaimState(fence=fence) if fence else None
        return ClaimState(
            fence=max(fence, claim.fence),
            holder=claim.holder,
            token=claim.token,
            expires_at=claim.expires_at,
        )

    def _write(self, path: str, data: bytes) -> None:
        self._count(atomic_write(path, data, directory=self._store_dir))

    def acquire(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self._timed(key) as now_ms:
            current = self._state(key)
            # A key with no fence on disk may be one forgotten with its run: the floor.
            floor = self._read_number(os.path.join(self._dir, FLOOR)) if current is None else 0
            outcome = lock_rules.acquire(
                current,
                holder,
                ttl_ms,
                now_ms=now_ms,
                token=uuid.uuid4().hex,
                fence_floor=floor,
            )
            if isinstance(outcome, lock_rules.Refused):
                return LockHeld(holder=outcome.holder)
            state = outcome.state
            # Fence first: a crash before the claim lands skips a number, never reuses one.
            self._write(self._path(key, ".fence"), f"{state.fence}\n".encode())
            self._write(self._path(key, ".json"), _claim_bytes(state))
            assert state.token is not None
            return LockAcquired(token=state.token, fence=state.fence)

    def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        if not os.path.isdir(self._dir):
            return False
        with self._timed(key) as now_ms:
            renewed = lock_rules.renew(self._read_claim(key), token, ttl_ms, now_ms=now_ms)
            if renewed is None:
                return False
            self._write(self._path(key, ".json"), _claim_bytes(renewed))
            return True

    def release(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        if not os.path.isdir(self._dir):
            return
        with self._locked(key):
            if lock_rules.release(self._read_claim(key), token) is None:
                return
            remove(self._path(key, ".json"), directory=self._store_dir)

    def break_claim(self, key: str) -> LockHolder | None:
        """Remove ``key``'s claim file whatever its token; the holder removed, or ``None``.

        The ``.fence`` file stays, so the next acquisition's fence is greater.
        """
        check_id(key, "lock key")
        if not os.path.isdir(self._dir):
            return None
        with self._locked(key):
            current = self._read_claim(key)
            if current is None or lock_rules.break_claim(current) is None:
                return None
            # The fence file may lag the claim (written first, but a claim from an older
            # store has none): make sure it is at least this claim's fence before removing it.
            if self._read_number(self._path(key, ".fence")) < current.fence:
                self._write(self._path(key, ".fence"), f"{current.fence}\n".encode())
            remove(self._path(key, ".json"), directory=self._store_dir)
            return current.holder

    def forget(self, key: str) -> None:
        """Remove every file of ``key`` unless a live claim holds it.

        Only for keys nobody should take again (a deleted run's lease), so the
        per-run files do not pile up. The key's fence is first folded into the
        store-wide floor, so should the key be taken again its fence is still
        greater. The mutex file goes while it is held, so a process still
        waiting on it ends up on an orphaned file.
        """
        check_id(key, "lock key")
        if not os.path.exists(self._path(key, ".lock")):
            return
        with self._timed(key) as now_ms:
            current = self._state(key)
            if current is not None and current.is_live(now_ms):
                return
            if current is not None:
                self._raise_floor(current.fence)
            for suffix in (".json", ".fence", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(key, suffix))

    def _raise_floor(self, fence: int) -> None:
        path = os.path.join(self._dir, FLOOR)
        with mutex(path + ".lock", self._timeout_s, directory=self._store_dir):
            if self._read_number(path) < fence:
                self._write(path, f"{fence}\n".encode())

    def entries(self, run_id: str | None = None) -> list[LockEntry]:
        """Every claim file's claim (optionally only ``run_id``'s), sorted by key.

        Reads take no mutex: a claim file is replaced atomically. A file that
        does not parse is skipped with a warning, like a corrupt run in a listing.
        """
        try:
            names = sorted(os.listdir(self._dir))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise os_failure("list", self._dir, exc, directory=self._store_dir) from None
        found: list[LockEntry] = []
        for name in names:
            if not name.endswith(".json"):
                continue
            key = name[: -len(".json")]
            try:
                claim = self._read_claim(key)
            except UnsafeIdError:
                continue  # not a lock file of this store
            except (CorruptRecordError, StoreUnavailableError) as exc:
                _LOG.warning("state: skipping unreadable lock file %s: %s", name, exc)
                continue
            if claim is None or claim.holder is None or claim.expires_at is None:
                continue  # released since the directory was listed
            if run_id is None or claim.holder.run_id == run_id:
                found.append(LockEntry(key, claim.holder, claim.expires_at, claim.fence))
        return found
