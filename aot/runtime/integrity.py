"""Is a file of the bundle the one its manifest names? Size first (a stat), then sha256.

The threat is damage (a truncated copy, a flipped block on disk or in transit, an archive from
another build put beside this manifest), not deliberate replacement: whoever can rewrite a
bundle's weights can rewrite its manifest's digests too (docs/safety.md).

Hashing a 100 MB weights archive takes ~120 ms here, over ten times what loading the bundle
takes (the archive is mmapped, not read), so a digest that matched is remembered, keyed by the
file's identity and change stamps (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): any write
to the file, or a rename of another file over it, changes the key. The cache lives in the user's
cache folder ($XDG_CACHE_HOME/aot or ~/.cache/aot), never in the bundle (which may be read-only
or shared); a cache that cannot be read or written is ignored. ``AOT_DIGEST_CACHE=0`` turns it
off. ``aot check --integrity`` always hashes.

Part of the runtime that bundles ship: standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from .atomic import write_json
from .errors import BundleError

CACHE_FILE = "verified-digests.json"
CACHE_ENTRIES = 512          # the most recent verified files; older ones are hashed again
# A file written within this long of its check may still be written in the same timestamp tick
# (coarse file-system clocks), so its stamps cannot vouch for its bytes yet: git's "racy clean".
RACY_NS = 2_000_000_000

_memo: dict[str, str] = {}   # this process's verified digests (a bucketed bundle names one archive many times)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_file(path: Path, sha256: str, size: int | None, what: str, *, cached: bool = True) -> None:
    """``path`` exists, is ``size`` bytes (when known) and has digest ``sha256``; else a
    BundleError naming ``what``, the file, and what was expected and found. ``cached=False``
    hashes even a file verified before."""
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not path.is_file():
        raise BundleError(f"bundle lacks {what}: no file {str(path)!r}",
                          hint="the bundle is incomplete; copy it again or rebuild it with `aot build`")
    if size is not None and st.st_size != size:
        raise BundleError(f"{what} does not match its size in the manifest: the file {str(path)!r} is "
                          f"{st.st_size} bytes, the manifest says {size} "
                          f"({'truncated' if st.st_size < size else 'longer than built'})",
                          hint="copy the bundle again from its source, or rebuild it with `aot build`")
    key = _key(st)
    if cached and _verified(key) == sha256:
        return
    try:
        found = file_sha256(path)
    except OSError as e:
        raise BundleError(f"{what} cannot be read: {e}", hint="check the file's permissions") from None
    if found != sha256:
        raise BundleError(f"{what} does not match its sha256 in the manifest: the file {str(path)!r} has "
                          f"sha256 {found}, the manifest says {sha256} (damaged or replaced)",
                          hint="copy the bundle again from its source, or rebuild it with `aot build`; "
                               "`aot check --integrity BUNDLE` checks every file")
    try:
        unchanged = _key(path.stat()) == key
    except OSError:
        unchanged = False
    if unchanged and time.time_ns() - st.st_mtime_ns > RACY_NS:
        _remember(key, found)


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def cache_path() -> Path | None:
    """Where verified digests are kept; None when the cache is off or there is no home."""
    if os.environ.get("AOT_DIGEST_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:   # no $HOME and no password entry
            return None
    return Path(base) / "aot" / CACHE_FILE


def _entries(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
        entries = data["entries"] if isinstance(data, dict) and data.get("version") == 1 else {}
        return {str(k): str(v) for k, v in entries.items()} if isinstance(entries, dict) else {}
    except (OSError, ValueError, KeyError, AttributeError, RuntimeError):
        return {}   # no cache yet, or a damaged one: hash again


def _verified(key: str) -> str | None:
    if key in _memo:
        return _memo[key]
    path = cache_path()
    return None if path is None else _entries(path).get(key)


def _remember(key: str, sha256: str) -> None:
    _memo[key] = sha256
    path = cache_path()
    if path is None:
        return
    entries = _entries(path)
    entries.pop(key, None)
    entries[key] = sha256                       # newest last; the oldest fall off the front
    kept = dict(list(entries.items())[-CACHE_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"version": 1, "entries": kept})
    except OSError:
        pass   # a read-only home or a full disk costs a hash next time, nothing else
