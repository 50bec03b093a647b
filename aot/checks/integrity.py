"""`aot check --integrity`: every file a bundle's manifest names, checked against its size and
sha256 (hashed afresh, not taken from the runtime's cache of verified digests), with nothing
loaded or run. Each file gets a line, so one damaged file does not hide another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aot.errors import BundleError
from aot.runtime import manifest as mf
from aot.runtime.integrity import check_file


@dataclass(frozen=True, slots=True)
class FileCheck:
    path: str              # inside the bundle, as the manifest names it
    what: str              # "module of region r0", "weights archive", ...
    error: str | None      # None: present, the right size and digest

    def line(self) -> str:
        return f"ok    {self.path}  ({self.what})" if self.error is None else f"FAIL  {self.path}: {self.error}"


@dataclass(frozen=True, slots=True)
class _Named:
    path: str
    sha256: str
    size: int | None
    what: str


def audit(bundle: Path) -> tuple[Path, tuple[FileCheck, ...]]:
    """The bundle's folder and a check per file its manifests name (its own, each bucket's and
    the dynamic fallback's), the manifests themselves first. Raises BundleError only when
    ``bundle`` has no manifest at all."""
    bundle = mf.bundle_dir(bundle)
    if not (bundle / mf.MANIFEST).is_file():
        raise BundleError(f"{str(bundle)!r} is not a bundle: no {mf.MANIFEST}",
                          hint="point at the directory given to `aot build -o`, or its bundle/")
    checks: list[FileCheck] = []
    seen: set[str] = set()
    pending = [(mf.MANIFEST, "the bundle's manifest")]
    while pending:
        rel, what = pending.pop(0)
        try:
            manifest = mf.parse_file(mf.safe_member(bundle, rel))
        except BundleError:
            if rel == mf.MANIFEST:
                raise   # nothing else can be checked: the manifest carries the digests
            continue    # a bucket's manifest that does not parse already failed its digest line
        if rel == mf.MANIFEST:
            checks.append(FileCheck(rel, what + ": it parses", None))
        for named in _named(manifest):
            if named.path in seen:
                continue
            seen.add(named.path)
            checks.append(_check(bundle, named))
            if named.path.endswith(".json") and checks[-1].error is None:
                pending.append((named.path, named.what))
    return bundle, tuple(checks)


def _named(m: mf.Manifest) -> list[_Named]:
    files = [_Named(r.module, r.sha256, None, f"module of region {r.name}") for r in m.regions]
    files += [_Named(w.path, w.sha256, w.size, f"weights archive, scope {w.scope!r}") for w in m.archives]
    if m.shapes is not None:
        files += [_Named(b.manifest, b.sha256 or "", None, f"manifest of bucket {b.label}")
                  for b in m.shapes.buckets[1:]]
        if m.shapes.fallback is not None:
            files.append(_Named(m.shapes.fallback.manifest, m.shapes.fallback.sha256, None,
                                "manifest of the dynamic fallback"))
    return files


def _check(bundle: Path, named: _Named) -> FileCheck:
    try:
        path = mf.safe_member(bundle, named.path)
        check_file(path, named.sha256, named.size, named.what, cached=False)
    except BundleError as e:
        return FileCheck(named.path, named.what, e.message)
    return FileCheck(named.path, named.what, None)
