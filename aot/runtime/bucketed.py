"""A bundle compiled for several shape buckets, run as one model of symbolic shape.

Each bucket is a ``Session`` over its own region modules; all of them share one VM instance and
one device per driver (``Devices``). A call picks the smallest bucket holding its sizes, pads,
runs and crops; a call larger than the largest bucket along a batch dimension runs in chunks of
that bucket, and along any other dimension is refused with the sizes that would serve it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import manifest as mf
from . import memory
from . import shapes as sh
from .errors import RuntimeInputError
from .manifest import Manifest, TensorSig
from .devices import Devices
from .session import Session, check_inputs


class BucketedSession:
    """``session(x)`` / ``session.run({...})`` with any size along the symbolic dimensions;
    ``run_batch`` for many requests at once. Calls are serialised (one device queue each)."""

    def __init__(self, bundle: Path, manifest: Manifest, *, devices: Devices | None = None,
                 memory_limits: Mapping[str, int] | None = None, overlap: bool = True) -> None:
        assert manifest.shapes is not None
        self.manifest = manifest
        self.shapes = manifest.shapes
        self._own_devices = devices is None
        self._devices = devices or Devices()
        self._lock = threading.Lock()
        self._output_names = tuple(o.name for o in manifest.outputs)
        self._batch = self._batch_dim()
        self.sessions: dict[tuple[tuple[str, int], ...], Session] = {}
        manifests = [manifest if b.manifest == mf.MANIFEST else mf.read_bucket(bundle, b) for b in self.shapes.buckets]
        records = [m.memory for m in manifests if m.memory]
        # Every bucket stays loaded, each with its own modules and weights: the device must hold them all.
        memory.preflight(memory.needs(records), memory_limits)
        self.fallback: Session | None = None   # the dynamic host module (``--fallback dynamic``)
        try:
            for b, m in zip(self.shapes.buckets, manifests):
                self.sessions[b.sizes] = Session(bundle, m, devices=self._devices, check_memory=False,
                                                 overlap=overlap)
            if self.shapes.fallback is not None:
                self.fallback = Session(bundle, mf.read_fallback(bundle, self.shapes.fallback),
                                        devices=self._devices, check_memory=False)
        except Exception:
            self.close()
            raise

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(args) > len(self.manifest.inputs):
            raise RuntimeInputError(f"{len(args)} positional inputs given, the model takes {len(self.manifest.inputs)}")
        return self.run({**{s.name: a for s, a in zip(self.manifest.inputs, args)}, **kwargs})

    def run(self, inputs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        checked = self.check(inputs)
        with self._lock:
            return self._run_checked(checked)

    def check(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Names and dtypes as the bundle's signature; fixed axes exact, symbolic ones any size."""
        free = {(a.tensor, a.axis) for d in self.shapes.dims for a in d.inputs}
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        specs = []
        for spec in self.manifest.inputs:
            arr = arrays.get(spec.name)
            shape = spec.shape
            if arr is not None and arr.ndim == len(shape):
                shape = tuple(arr.shape[i] if (spec.name, i) in free else n for i, n in enumerate(shape))
            specs.append(TensorSig(spec.name, spec.dtype, shape))
        checked = check_inputs(tuple(specs), arrays)
        sh.sizes_of(self.shapes, checked)   # consistent sizes, none empty
        return checked

    def _run_checked(self, checked: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        sizes = sh.sizes_of(self.shapes, checked)
        over = [d for d in self.shapes.dims if sizes[d.symbol] > d.largest]
        if over:
            d = next((d for d in over if not d.batch), over[0])
            if not d.batch and self.fallback is not None:
                # Every symbolic dimension is dynamic in the fallback: the call runs as it is.
                return self.fallback.run_checked(checked)
            if not d.batch:
                use = d.inputs[0]
                raise RuntimeInputError(
                    f"input {use.tensor!r} axis {use.axis} ({d.symbol!r}) is {sizes[d.symbol]}; the largest "
                    f"bucket compiled for it is {d.largest}",
                    hint=f"rebuild with a ladder reaching {sizes[d.symbol]} (--dim {d.symbol}=...), or with "
                         f"--fallback dynamic for a host module that takes any size")
            # Along a batch axis: the largest bucket's worth at a time, the last chunk padded.
            parts = [self._run_checked(sh.take(d.inputs, checked, part))
                     for part in sh.chunks(sizes[d.symbol], d.largest)]
            return sh.join(d.outputs, self._output_names, parts)
        bucket = sh.fitting(self.shapes, sizes)
        assert bucket is not None   # every size is within its ladder
        # Checked once, in ``check``: padding gives exactly the bucket's shapes.
        outputs = self.sessions[bucket.sizes].run_checked(sh.pad(self.shapes, checked, dict(bucket.sizes)))
        return sh.crop(self.shapes, self._output_names, outputs, sizes)

    def run_batch(self, requests: Sequence[Mapping[str, Any]]) -> list[tuple[np.ndarray, ...]]:
        """Run many requests as one call: each padded to the largest along the non-batch
        dimensions, stacked along the batch dimension, run in the smallest bucket that holds
        them all (chunked past the largest), then split and cropped back per request."""
        checked = [self._checked_request(i, r) for i, r in enumerate(requests)]
        with self._lock:
            if self._batch is None or len(checked) < 2:
                return [self._run_checked(c) for c in checked]
            return self._run_stacked(self._batch, checked)

    def _checked_request(self, index: int, request: Mapping[str, Any]) -> dict[str, np.ndarray]:
        try:
            return self.check(request)
        except RuntimeInputError as e:
            raise RuntimeInputError(f"request {index}: {e.message}", hint=e.hint) from None

    def _batch_dim(self) -> sh.Dim | None:
        """The one batch dimension every input and output carries (stacking needs it everywhere)."""
        names = {s.name for s in self.manifest.inputs}
        for d in self.shapes.dims:
            if (d.batch and {a.tensor for a in d.inputs} == names
                    and {a.tensor for a in d.outputs} == set(self._output_names)):
                return d
        return None

    def _run_stacked(self, batch: sh.Dim, requests: list[dict[str, np.ndarray]]) -> list[tuple[np.ndarray, ...]]:
        sizes = [sh.sizes_of(self.shapes, r) for r in requests]
        common = {d.symbol: max(s[d.symbol] for s in sizes) for d in self.shapes.dims if d is not batch}
        padded = [sh.pad(self.shapes, r, {**common, batch.symbol: s[batch.symbol]}) for r, s in zip(requests, sizes)]
        axis = {a.tensor: a.axis for a in batch.inputs}
        stacked = {name: np.concatenate([p[name] for p in padded], axis=axis[name]) for name in requests[0]}
        outputs = dict(zip(self._output_names, self._run_checked(stacked)))
        results, start = [], 0
        for s in sizes:
            part = slice(start, start + s[batch.symbol])
            start = part.stop
            mine = sh.take(batch.outputs, outputs, part)
            cropped = sh.crop(self.shapes, self._output_names, tuple(mine[n] for n in self._output_names), s)
            results.append(tuple(np.array(o, copy=True) for o in cropped))
        return results

    def close(self) -> None:
        """Every bucket's session, then the devices they shared (when this session opened them)."""
        for s in [*self.sessions.values(), *filter(None, [self.fallback])]:
            s.close()
        self.sessions.clear()
        self.fallback = None
        if self._own_devices:
            self._devices.close()

    def __enter__(self) -> "BucketedSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
