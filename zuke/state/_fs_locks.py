"""Cross-run locks of the filesystem store: claim files, their mutex, and fencing.

Layout under ``<dir>/locks/``:

- ``<key>.json`` — the live claim ``{"holder": {"actor","runId","since","runUrl"?},
  "token", "expiresAt" (epoch ms), "fence"}``; written atomically, removed on
  release (as the original implementation did, so "no file" still means
  "nobody claims it"). Expiry alone never removes it: only the next acquirer
  proves the holder gone.
- ``<key>.fence`` — the highest fence ever issued for the key (a decimal
  integer). It outlives release, which is what keeps fences strictly
  increasing across acquire / release / acquire. It is written *before* the
  claim, so a crash between the two can only skip a fence, never repeat one.
- ``<key>.lock`` — the filelock mutex serialising every operation on the key.

Expiry is judged by the store's :class:`~zuke._clock.Clock`. A claim file that
does not parse is reported, never silently overwritten: stealing a lock on a
guess is worse than failing loudly.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zuke._clock import Clock
from zuke._errors import CorruptRecordError
from zuke.state._files import atomic_write, ensure_directory, mutex, os_failure
from zuke.state._ids import check_id, check_ttl
from zuke.state._protocol import LockAcquired, LockHeld, LockHolder
from zuke.state.wire import holder_to_json, parse_holder


@dataclass(frozen=True)
class _Claim:
    holder: LockHolder
    token: str
    expires_at: int
    fence: int

    def to_bytes(self) -> bytes:
        body = {
            "holder": holder_to_json(self.holder),
            "token": self.token,
            "expiresAt": self.expires_at,
            "fence": self.fence,
        }
        return (json.dumps(body, indent=2) + "\n").encode("utf-8")


class FsLocks:
    """The lock half of :class:`~zuke.state.filesystem.FileSystemStateStore`."""

    def __init__(
        self, directory: str, clock: Clock, timeout_s: float, count: Callable[[int], None]
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

    def _read_claim(self, key: str) -> _Claim | None:
        path = self._path(key, ".json")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._store_dir) from None
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
        return _Claim(holder=holder, token=token, expires_at=expires_at, fence=fence)

    def _read_fence(self, key: str) -> int:
        path = self._path(key, ".fence")
        try:
            with open(path, "rb") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._store_dir) from None
        try:
            return int(text)
        except ValueError:
            raise CorruptRecordError(
                f"state: lock fence file {path!r} does not hold an integer; restore it or "
                "replace it with a number larger than any fence already issued"
            ) from None

    def _write(self, path: str, data: bytes) -> None:
        self._count(atomic_write(path, data, directory=self._store_dir))

    def acquire(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        with self._locked(key):
            now = self._clock.now_ms()
            current = self._read_claim(key)
            if current is not None and current.expires_at > now:
                return LockHeld(holder=current.holder)
            previous = max(self._read_fence(key), current.fence if current else 0)
            claim = _Claim(
                holder=holder, token=uuid.uuid4().hex, expires_at=now + ttl_ms, fence=previous + 1
            )
            # Fence first: a crash before the claim lands skips a number, never reuses one.
            self._write(self._path(key, ".fence"), f"{claim.fence}\n".encode())
            self._write(self._path(key, ".json"), claim.to_bytes())
            return LockAcquired(token=claim.token, fence=claim.fence)

    def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        if not os.path.isdir(self._dir):
            return False
        with self._locked(key):
            current = self._read_claim(key)
            # Expired is not abandoned: until someone acquires the key, the
            # holder whose token still matches may carry on.
            if current is None or current.token != token:
                return False
            renewed = _Claim(
                holder=current.holder,
                token=current.token,
                expires_at=self._clock.now_ms() + ttl_ms,
                fence=current.fence,
            )
            self._write(self._path(key, ".json"), renewed.to_bytes())
            return True

    def release(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        if not os.path.isdir(self._dir):
            return
        with self._locked(key):
            current = self._read_claim(key)
            if current is None or current.token != token:
                return
            path = self._path(key, ".json")
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise os_failure("remove", path, exc, directory=self._store_dir) from None

    def forget(self, key: str) -> None:
        """Remove every file of ``key`` unless a live claim holds it.

        Only for keys nobody will take again (a deleted run's lease): forgetting
        resets the key's fence, and the mutex file goes while it is held, so a
        process still waiting on it ends up on an orphaned file.
        """
        check_id(key, "lock key")
        if not os.path.exists(self._path(key, ".lock")):
            return
        with self._locked(key):
            current = self._read_claim(key)
            if current is not None and current.expires_at > self._clock.now_ms():
                return
            for suffix in (".json", ".fence", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(key, suffix))
