"""actions/cache's restore and save, offline, for act: entries are directories on disk.

The rules kept from actions/cache (its README and restore/action.yml, save/action.yml at
v5.0.5, https://github.com/actions/cache#inputs and the "Cache Limits"/"Matching" docs at
https://docs.github.com/en/actions/reference/workflows-and-actions/dependency-caching):

- a restore is a hit (``cache-hit=true``) only on an exact match of ``key``; otherwise each
  ``restore-keys`` line is a prefix, and the newest entry matching the first prefix that
  matches anything is restored, with ``cache-hit=false``; a miss restores nothing;
- entries are immutable: saving under an existing key changes nothing (GitHub answers
  "Unable to reserve cache" and the action only warns);
- a key is at most 512 characters and has no comma.

Entries live under ``STANDIN_CACHE_DIR`` (a test's directory); without it nothing is kept.
"""

import os
import shutil
import sys
import time
from pathlib import Path


def _check(key: str) -> None:
    if not key or len(key) > 512 or "," in key:
        print(f"::error::cache stand-in: invalid key {key!r}")
        sys.exit(1)


def _output(**values: str) -> None:
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        for name, value in values.items():
            out.write(f"{name}={value}\n")


def restore(store: Path | None, path: Path, key: str, prefixes: list[str]) -> None:
    found: Path | None = None
    if store is not None and (store / key).is_dir():
        found = store / key
    elif store is not None and store.is_dir():
        for prefix in prefixes:
            matches = [p for p in store.iterdir() if p.name.startswith(prefix)]
            if matches:
                found = max(matches, key=lambda p: p.stat().st_mtime)
                break
    if found is not None:
        shutil.copytree(found, path, dirs_exist_ok=True)
        print(f"cache stand-in: restored {found.name}")
    else:
        print(f"cache stand-in: no entry for {key}")
    _output(
        **{
            "cache-hit": "true" if found is not None and found.name == key else "false",
            "cache-primary-key": key,
            "cache-matched-key": found.name if found is not None else "",
        }
    )


def save(store: Path | None, path: Path, key: str) -> None:
    if store is None:
        print("cache stand-in: STANDIN_CACHE_DIR is not set, nothing saved")
        return
    store.mkdir(parents=True, exist_ok=True)
    if (store / key).exists():
        print(f"::warning::cache stand-in: Unable to reserve cache with key {key}")
        return
    if not path.is_dir():
        print(f"::warning::cache stand-in: Path Validation Error: {path} does not exist")
        return
    staging = store / f".{key}.{time.monotonic_ns()}"
    shutil.copytree(path, staging)
    try:
        staging.rename(store / key)
    except OSError:  # another job saved the key first: GitHub's answer, and only a warning
        shutil.rmtree(staging, ignore_errors=True)
        print(f"::warning::cache stand-in: Unable to reserve cache with key {key}")
        return
    print(f"cache stand-in: saved {key}")


def main() -> None:
    key = os.environ["CACHE_KEY"]
    _check(key)
    store = Path(os.environ["STANDIN_CACHE_DIR"]) if os.environ.get("STANDIN_CACHE_DIR") else None
    path = Path(os.path.expanduser(os.environ["CACHE_PATH"]))
    if sys.argv[1:] == ["restore"]:
        lines = os.environ.get("CACHE_RESTORE_KEYS", "").splitlines()
        restore(store, path, key, [line.strip() for line in lines if line.strip()])
    else:
        save(store, path, key)


if __name__ == "__main__":
    main()
