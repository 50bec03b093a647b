"""Load a bundle and run its schedule across devices.

Deployment code: imports only numpy, iree.runtime and aot's pure-data modules (no iree.compiler,
onnx, jinja2 or onnxruntime), so a bundle runs where just iree-base-runtime and numpy are installed.
"""

from __future__ import annotations

import atexit
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

import numpy as np

from .errors import BundleError, DeviceError, DeviceLostError, RuntimeInputError
from . import devices as dv
from . import manifest as mf
from . import heap, invoke, lanes, memory, staging
from .devices import Devices
from .dtypes import numpy_dtype
from .manifest import Manifest, RegionEntry, TensorSig

_LIVE: "weakref.WeakSet[Session]" = weakref.WeakSet()
LOAD_ATTEMPTS = 3  # contexts created per device before a load gives up (see Session._load_driver)
_LOST = ("VK_ERROR_DEVICE_LOST", "DATA_LOSS")   # how IREE reports a device that stopped answering


_S = TypeVar("_S", bound="Session")

class Session:
    """A loaded bundle; call it with numpy inputs, get numpy outputs in manifest order.

    ``Session(dir, manifest)`` opens files the manifest names inside ``dir``: the build verifies
    and measures staged candidates this way (through checks.session.CheckSession) before it
    publishes one. ``overlap=False`` runs the schedule in order even where the manifest says
    regions on different devices may run at the same time (runtime/lanes.py)."""

    def __init__(self, bundle: Path, manifest: Manifest, *, devices: Devices | None = None,
                 memory_limits: Mapping[str, int] | None = None, check_memory: bool = True,
                 overlap: bool = True) -> None:
        import iree.runtime as rt

        heap.keep_intermediates()   # runtime/heap.py: a call's large buffers reused, not mapped anew
        if check_memory and manifest.memory:
            # Before any device opens: a bundle too large for a device fails here, not mid-run.
            memory.preflight(memory.needs([manifest.memory]), memory_limits)
        self.manifest = manifest
        self._inputs = manifest.inputs
        self._outputs = manifest.outputs
        self._output_dtypes = tuple(numpy_dtype(o.dtype) if o.dtype else None for o in manifest.outputs)
        self._regions = {r.name: r for r in manifest.regions}
        self._schedule = manifest.schedule
        self._checked_indices = tuple(op for op in manifest.index_ops if op.status == "checked")
        self._guards = tuple(op for op in manifest.index_ops if op.status == "guarded")
        self._shared = devices
        self._rt = rt
        self._instance = devices.instance if devices is not None else rt.VmInstance()
        self._devices: dict[str, Any] = {}
        self._contexts: dict[str, Any] = {}
        self._modules: list[Any] = []
        self._invokers: dict[str, Any] = {}
        self._staging: dict[str, staging.StagingBuffers] = {}   # accelerator driver -> its staging buffers
        self._params: list[tuple[Any, str]] = []   # (parameter index, its scope) per archive
        for w in manifest.archives:
            self._params.append((load_archive(rt, bundle, w), w.scope))
        self._bundle = bundle
        self._by_driver: dict[str, list[RegionEntry]] = {}
        for r in manifest.regions:
            self._by_driver.setdefault(manifest.driver(r), []).append(r)
        self._driver_of = {r.name: manifest.driver(r) for r in manifest.regions}
        self._modules_of: dict[str, list[Any]] = {}
        # A lane per device, only when some regions on different devices may overlap.
        self._lanes = (lanes.LaneRunner(lanes.lanes(manifest.schedule, self._driver_of),
                                        lanes.waits({r.name: r.inputs for r in manifest.regions},
                                                    {r.name: r.outputs for r in manifest.regions}))
                       if overlap and manifest.overlap else None)
        self.load_retries = 0
        self.reopened = 0   # lavapipe devices lost during a run and opened again (see run)
        try:
            for driver in self._by_driver:
                self._open(rt, driver, check=True)
        except Exception:
            self.close()
            raise
        _LIVE.add(self)

    def _open(self, rt: Any, driver: str, check: bool) -> None:
        """Open ``driver``'s device, load its regions' modules and make their invokers."""
        regions = self._by_driver[driver]
        device, ctx, loaded = self._load_driver(rt, self._bundle, driver, regions, self._params, check)
        self._devices[driver], self._contexts[driver] = device, ctx
        if driver not in mf.HOST_DRIVERS:
            self._staging[driver] = staging.StagingBuffers(rt, device)
        self._modules_of[driver] = loaded
        self._modules += loaded
        for r, m in zip(regions, loaded):
            fn = m.lookup_function(r.function)
            if fn is None:
                raise BundleError(f"module {r.module!r} has no function {r.function!r}")
            # A CPU region through the lean call (runtime/invoke.py); an accelerator's results
            # need DeviceArray's transfers.
            workers = driver == invoke.WORKER_DRIVER      # runtime/invoke.py: its calls wait as SCHED_BATCH
            self._invokers[r.name] = (invoke.HostCall(rt, ctx, device, fn, len(r.outputs), workers)
                                      if driver in mf.HOST_DRIVERS
                                      else rt.FunctionInvoker(ctx, device, fn))

    def _reopen(self, driver: str) -> None:
        """Drop ``driver``'s invokers, context, modules and device (in that order), then open it anew."""
        import iree.runtime as rt

        for r in self._by_driver[driver]:
            del self._invokers[r.name]
        del self._contexts[driver]
        stale = {id(m) for m in self._modules_of.pop(driver)}
        self._modules = [m for m in self._modules if id(m) not in stale]
        if driver in self._staging:
            self._staging.pop(driver).close()
        del self._devices[driver]
        self._open(rt, driver, check=False)
        self.reopened += 1

    def _may_reopen(self, driver: str) -> bool:
        """Only Mesa lavapipe's own device: a real GPU's loss is an error to report, and a shared
        device belongs to other sessions too."""
        return (driver == "vulkan" and self._shared is None
                and all(r.target.arch == "llvmpipe" for r in self._by_driver[driver]))

    def _load_driver(self, rt: Any, bundle: Path, driver: str, regions: list[RegionEntry], params: Any,
                     check: bool) -> tuple[Any, Any, list[Any]]:
        """Open ``driver``'s device and create its VM context, which runs the modules' initializers
        (weight uploads, hoisted constants). IREE 3.13 on lavapipe fails such an initializer now
        and then (PP-OCR's recognizer: about 1 load in 30, DATA_LOSS from hal.fence.await) and the
        next attempt on a fresh device succeeds, so a failed context is retried on a new device;
        one that keeps failing is a DeviceError naming the regions."""
        error = ""
        for _ in range(LOAD_ATTEMPTS):
            # A shared device is not replaced (other sessions hold it): its attempts reuse it.
            device = (self._shared.device(rt, driver, regions, self.manifest) if self._shared
                      else dv.open_device(rt, driver, regions, self.manifest))
            if check:
                self._check_device(rt, driver, regions)
            modules = [rt.create_hal_module(self._instance, device)]
            if params:
                providers = [index.create_provider(scope=scope) for index, scope in params]
                modules.append(rt.create_io_parameters_module(self._instance, *providers))
            loaded = [rt.VmModule.mmap(self._instance, str(mf.safe_member(bundle, r.module))) for r in regions]
            try:
                return device, rt.VmContext(self._instance, modules=[*modules, *loaded]), loaded
            except RuntimeError as e:
                error = str(e).splitlines()[0]
                self.load_retries += 1
                # Drop the context's pieces before their device (the teardown order close() keeps).
                modules.clear()
                loaded.clear()
                del device
        raise DeviceError(f"loading region(s) {', '.join(r.name for r in regions)} on {driver!r} failed "
                          f"{LOAD_ATTEMPTS} times while running their initializers: {error}",
                          hint="run `aot check` on the bundle; rebuild with --accel none to rule out the accelerator")

    def _check_device(self, rt: Any, driver: str, regions: list[RegionEntry]) -> None:
        """The device just opened can run ``regions`` (devices.check_device). A method, not a call
        inlined above, for one reason: the build's verification (checks.session.CheckSession)
        overrides it to see what a module compiled for another device really computes there."""
        dv.check_device(rt, driver, regions, self.manifest)

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(args) > len(self._inputs):
            raise RuntimeInputError(f"{len(args)} positional inputs given, the model takes {len(self._inputs)}")
        named = {spec.name: a for spec, a in zip(self._inputs, args)}
        overlap = named.keys() & kwargs.keys()
        if overlap:
            raise RuntimeInputError(f"input {sorted(overlap)[0]!r} given twice")
        return self.run({**named, **kwargs})

    def run(self, inputs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        """Run the schedule; intermediates stay on a device while the next region runs there.

        Mesa lavapipe loses its device now and then under CPU load (VK_ERROR_DEVICE_LOST from a
        fence wait, seen about once in a full test run on 2 busy cores); a fresh device runs the
        same call correctly. So a lavapipe device lost mid-run is opened again and the call runs
        once more from its inputs; a second loss, or a loss on any other device, is raised."""
        return self.run_checked(check_inputs(self._inputs, inputs))

    def run_checked(self, checked: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """``run`` of inputs whose names, dtypes and shapes were checked already: a bucketed
        session's padded inputs, or its dynamic fallback's, whose sizes no static signature
        lists. Index ranges are checked here; a chunk sliced along an inner axis is made
        contiguous (IREE reads C order)."""
        if not self._invokers:
            raise BundleError("this session is closed")
        checked = {name: contiguous(arr) for name, arr in checked.items()}
        check_index_inputs(self._checked_indices, checked)
        try:
            return self._run_schedule(checked)
        except DeviceLostError as lost:
            if not self._may_reopen(lost.driver):
                raise
            self._reopen(lost.driver)
        return self._run_schedule(checked)

    def check(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The inputs checked against the signature and the index ranges, as ``run`` checks them."""
        checked = check_inputs(self._inputs, inputs)
        check_index_inputs(self._checked_indices, checked)
        return checked

    def run_batch(self, requests: Sequence[Mapping[str, Any]]) -> list[tuple[np.ndarray, ...]]:
        """One result per request. A static bundle has one shape, so the requests run in turn;
        a bucketed bundle (``BucketedSession``) stacks them into one call."""
        return [self.run(r) for r in requests]

    def _run_schedule(self, checked: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        values: dict[str, tuple[str | None, Any]] = {name: (None, arr) for name, arr in checked.items()}
        try:
            if self._lanes is not None:
                self._lanes.run(lambda name: self._run_region(name, values))
            else:
                for name in self._schedule:
                    self._run_region(name, values)
            self._check_guards(values)
            return tuple(self._to_numpy(values[o.name], dtype) for o, dtype in zip(self._outputs, self._output_dtypes))
        finally:
            # Device buffers must not outlive this call through a traceback: released after
            # their device at interpreter exit, they crash the process.
            values.clear()

    def _check_guards(self, values: dict[str, tuple[str | None, Any]]) -> None:
        """A guard clamped indices computed in the graph: the result is not the model's answer."""
        for op in self._guards:
            count = int(self._to_numpy(values[str(op.flag)]))   # a guarded op names its flag (IndexOp reads so)
            if count:
                raise RuntimeInputError(
                    f"{op.op} node {op.node!r}: {count} index value(s) computed inside the model from these "
                    f"inputs fall outside {op.valid}; the bundle refused the result instead of reading "
                    "outside the tensor",
                    hint="onnxruntime fails on these inputs too; check the values that feed the indices")

    def _run_region(self, name: str, values: dict[str, tuple[str | None, Any]]) -> None:
        region = self._regions[name]
        driver = self._driver_of[name]
        args = [self._move(values[v], driver) for v in region.inputs]
        try:
            results = self._invokers[name](*args)
        except (ValueError, RuntimeError) as e:
            message = f"region {name!r} failed on {driver!r}: {str(e).splitlines()[0]}"
            hint = "run `aot check` on the bundle; rebuild with --accel none to rule out the accelerator"
            if any(sign in str(e) for sign in _LOST):
                raise DeviceLostError(message, driver=driver, hint=hint) from None
            raise DeviceError(message, hint=hint) from None
        finally:
            args.clear()
        if not isinstance(results, (tuple, list)):
            results = (results,)
        for v, res in zip(region.outputs, results):
            values[v] = (driver, res)

    def _move(self, value: tuple[str | None, Any], driver: str) -> Any:
        where, arr = value
        if where == driver:
            return arr  # same device: hand the device buffer on without a copy
        if where is not None:
            arr = contiguous(self._host(value)[0])   # across devices through host memory
        buffers = self._staging.get(driver)
        return buffers.upload(arr) if buffers is not None else arr

    def _host(self, value: tuple[str | None, Any]) -> tuple[np.ndarray, bool]:
        """``value`` in host memory, and whether that array is a fresh one of its own (a staged
        download). Vulkan modules are compiled with mappable external resources, so to_host()
        maps most of their results; dv.to_host copies the rest."""
        where, arr = value
        if where is None:
            return arr, False
        if invoke.is_host_view(self._rt, arr):
            return invoke.to_numpy(self._rt, arr), True
        buffers = self._staging.get(where)
        fresh = buffers.download(arr) if buffers is not None else None
        return (fresh, True) if fresh is not None else (dv.to_host(arr), False)

    def _to_numpy(self, value: tuple[str | None, Any], dtype: np.dtype | None = None) -> np.ndarray:
        host, fresh = self._host(value)
        # Own the memory (device buffers get reused); cast to the manifest dtype (i1 comes back as i8).
        return np.asarray(host, dtype=dtype) if fresh else np.array(host, dtype=dtype, copy=True)

    def close(self) -> None:
        """Release in dependency order: invokers, contexts and modules before their devices
        (a different teardown order at interpreter exit segfaults)."""
        if self._lanes is not None:
            self._lanes.close()
        self._invokers.clear()
        for buffers in self._staging.values():
            buffers.close()
        self._staging.clear()
        self._contexts.clear()
        self._modules.clear()
        self._devices.clear()
        _LIVE.discard(self)

    def __enter__(self: _S) -> _S:   # a subclass (checks.session.CheckSession) gets itself back
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_inputs(specs: tuple[TensorSig, ...], inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Check names, dtypes and shapes; IREE does not bounds-check, so this is the only guard."""
    expected = [s.name for s in specs]
    unknown = [k for k in inputs if k not in expected]
    if unknown:
        raise RuntimeInputError(f"unknown input {unknown[0]!r}", hint=f"the model's inputs are {expected}")
    out = {}
    for spec in specs:
        name = spec.name
        if name not in inputs:
            raise RuntimeInputError(f"missing input {name!r}", hint=f"the model's inputs are {expected}")
        try:
            arr = np.asarray(inputs[name])
        except Exception as e:  # ragged lists, objects numpy cannot turn into one array
            raise RuntimeInputError(f"input {name!r} is not an array: {e}") from None
        want_dtype, want_shape = numpy_dtype(spec.dtype), spec.shape
        if arr.dtype != want_dtype and arr.dtype.newbyteorder("=") == want_dtype:
            arr = arr.astype(want_dtype)    # the right type in the other byte order: swap (a copy)
        if arr.dtype != want_dtype:
            raise RuntimeInputError(f"input {name!r}: expected dtype {want_dtype.name}, got {arr.dtype.name}",
                                    hint=f"convert with .astype(np.{want_dtype.name})")
        if arr.shape != want_shape:
            raise RuntimeInputError(f"input {name!r}: expected shape {list(want_shape)}, got {list(arr.shape)}",
                                    hint="rebuild with --input-shape to compile another shape")
        # A narrow type travels in its carrier (int4 in int8, ...): the same values, exactly.
        out[name] = contiguous(arr.astype(spec.carrier) if spec.carrier else arr)
    return out


def check_index_inputs(ops: tuple[mf.IndexOp, ...], inputs: Mapping[str, np.ndarray]) -> None:
    """Inputs that index a tensor must lie inside its axis: the compiled code would read or write
    wherever an out-of-range index points. Negative indices count from the end, as in ONNX."""
    for op in ops:
        arr = inputs[str(op.input)]   # a checked op names its input (IndexOp reads so)
        dims = np.array(op.dims, dtype=np.int64)
        if len(op.dims) > 1 and (arr.ndim == 0 or arr.shape[-1] != len(op.dims)):
            raise RuntimeInputError(f"input {op.input!r}: its last axis must hold {len(op.dims)} indices "
                                    f"for the {op.op} node {op.node!r}")
        bad = (arr < -dims) | (arr > dims - 1)
        if bad.any():
            pos = tuple(int(i) for i in np.argwhere(bad)[0])
            raise RuntimeInputError(
                f"input {op.input!r}: value {arr[pos]} at position {list(pos)} is outside {op.valid}, "
                f"the range the {op.op} node {op.node!r} can index",
                hint="onnxruntime rejects it too (indices out of data bounds); pass ids the model knows")


def load_archive(rt: Any, bundle: Path, weights: mf.Weights) -> Any:
    """The parameter index of one weights archive. IREE's parser answers a truncated or foreign
    file with a bare IndexError or ValueError; this names the file instead. (``runtime.load``
    checked its size and digest already; a Session opened on a staged candidate did not.)"""
    path = mf.safe_member(bundle, weights.path)
    index = rt.ParameterIndex()
    try:
        index.load(str(path))
    except (IndexError, ValueError, RuntimeError, OSError) as e:
        raise BundleError(f"weights archive {weights.path!r} cannot be read: the file {str(path)!r} is not a "
                          f"valid parameter archive ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
                          hint="copy the bundle again from its source, or rebuild it with `aot build`") from None
    return index


def contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` as IREE reads it: C order, aligned."""
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,), which IREE rejects. Aligned:
    # a view at an odd byte offset (np.frombuffer(buf, offset=1)) is copied, not handed to IREE.
    # The flags test first: what a caller passes is nearly always fine already, and np.require
    # costs about 1.5 us per array even then (it parses its requirements on every call).
    flags = arr.flags
    if flags.c_contiguous and flags.aligned:
        return arr
    return np.require(arr, requirements=["C", "A"])


@atexit.register
def _close_all() -> None:
    for session in list(_LIVE):
        session.close()
