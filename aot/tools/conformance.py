"""ONNX node conformance through the whole pipeline: load -> import -> partition -> compile -> run.

Each of ONNX's node test cases (``onnx.backend.test.case.node.collect_testcases``) is built into a
bundle for the target and run on its data sets; the result is classified as pass, wrong result,
runtime error, compile error, import error or unsupported (rejected by aot's own checks).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import re
import shutil
import tempfile
import time
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from aot.checks.compare import compare
from aot.runtime.target import Target
from aot.tools import conformance_report
from aot.tools.isolate import in_child
from aot.partition.plan import GateMode

# An ONNX node test case (onnx.backend.test.case.test_case.TestCase). That class types its model
# and data sets as optional; a node case always has both, so the harness reads them as Any.
Case = Any
# Per data set of a case: its inputs and expected outputs (arrays, or sequences/optionals of them).
DataSets = list[tuple[list[Any], list[Any]]]

CATEGORIES = conformance_report.CATEGORIES


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0


def collect(pattern: str | None = None, limit: int | None = None) -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = sorted(collect_testcases(), key=lambda c: c.name)
    if pattern:
        cases = [c for c in cases if re.search(pattern, c.name)]
    return cases[:limit] if limit else cases


def run_case(case: Case, accel: str) -> CaseResult:
    """Build and run one case in a scratch folder; never raises."""
    import onnx

    from aot import runtime
    from aot.errors import CompileError, ImporterError, ModelError, OutlineError, PartitionError
    from aot.options import BuildOptions
    from aot.pipeline import build

    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="aot-conf-"))
    try:
        model_path = scratch / "model.onnx"
        onnx.save(case.model, str(model_path))
        sets = _data_sets(case)  # converted once: baking, shapes and the run all read them
        baked = _constants_from_data(case, sets)
        options = BuildOptions(accel=Target.accelerator(accel), min_compute=1, gate=GateMode.OFF, verify=False, accel_compile_timeout=120,
                               input_shapes=_shapes_from_data(case, sets, baked), constant_inputs=baked)
        try:
            result = build(model_path, scratch / "out", options)
        except ModelError as e:
            return CaseResult(case.name, "unsupported", e.message[:200], time.perf_counter() - start)
        except (ImporterError, OutlineError, PartitionError) as e:
            return CaseResult(case.name, "import error", e.message[:200], time.perf_counter() - start)
        except CompileError as e:
            return CaseResult(case.name, "compile error", _first_error(e.stderr_tail), time.perf_counter() - start)
        fallbacks = [r.name for r in result.bundle.record.regions if r.fallback]
        names, skip = _input_names(case), dict(baked)
        try:
            with runtime.load(result.bundle.path) as session:
                for inputs, expected in sets:
                    outputs = session.run({n: v for n, v in zip(names, inputs) if n not in skip})
                    for got, want in zip(outputs, expected):
                        want = np.asarray(want)
                        if not (c := compare(got, want, rtol=case.rtol, atol=case.atol)).ok:
                            return CaseResult(case.name, "wrong result", c.reason[:200], time.perf_counter() - start)
        except Exception as e:  # noqa: BLE001 - classified, not hidden
            return CaseResult(case.name, "runtime error", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
                              time.perf_counter() - start)
        return CaseResult(case.name, "pass", _where_it_ran(result.bundle.manifest, accel, fallbacks), time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - anything else is still a result
        return CaseResult(case.name, "import error", f"{type(e).__name__}: {str(e)[:200]}", time.perf_counter() - start)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# Operand slots that carry what other frameworks make attributes: axes, shapes, pads, sizes, k.
# A deployment fixes these (`aot build --const-input`), and IREE's ONNX lowering needs them
# constant for most ops (a runtime `axes` input makes ReduceSum illegal), so the harness bakes
# them in, as it pins shapes, when every data set agrees on the value.
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Squeeze",
                           "Unsqueeze", "Reshape", "Expand", "Tile", "TopK", "Split", "CumSum", "CumProd", "Trilu",
                           "CenterCropPad", "OneHot", "Upsample")},
    "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3), "ConstantOfShape": (0,),
    "Col2Im": (1, 2), "Compress": (1,), "DFT": (1, 2), "STFT": (1, 3), "NonMaxSuppression": (2, 3, 4),
    "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4),
    "AffineGrid": (1,),   # size: a list in PyTorch's affine_grid, the output's shape
}


def _data_sets(case: Case) -> DataSets:
    """The case's (inputs, outputs) with TensorProtos (how ONNX stores float8, int4, bfloat16
    test data) turned into numpy arrays (ml_dtypes for the narrow floats)."""
    from onnx import TensorProto, numpy_helper

    def arr(v: Any) -> Any:
        return numpy_helper.to_array(v) if isinstance(v, TensorProto) else v

    return [([arr(v) for v in ins], [arr(v) for v in outs]) for ins, outs in case.data_sets]


def _input_names(case: Case) -> list[str]:
    inits = {t.name for t in case.model.graph.initializer}
    return [v.name for v in case.model.graph.input if v.name not in inits]


def _slots(model: Any) -> set[str]:
    return {n.input[i] for n in model.graph.node for i in SHAPE_OPERANDS.get(n.op_type, ())
            if i < len(n.input) and n.input[i]}


def _constants_from_data(case: Case, sets: DataSets) -> tuple[tuple[str, np.ndarray], ...]:
    """Inputs to bake in: those feeding a SHAPE_OPERANDS slot, and empty ones (CastLike's
    ``like`` only carries a dtype), provided every data set gives them the same value.

    An ``_expanded`` case is its twin's op written as the op's function body, with the same inputs:
    it is baked as the twin is, since the body hides the slot behind shape arithmetic (AffineGrid's
    ``size`` reaches ConstantOfShape and Range through a Split inside an ``If``)."""
    slots = _slots(case.model)
    if case.name.endswith("_expanded") and (twin := _cases_by_name().get(case.name.removesuffix("_expanded"))):
        slots |= _slots(twin.model)
    if not sets:
        return ()
    baked = []
    for i, name in enumerate(_input_names(case)):
        # A scalar input's data may be a numpy scalar rather than a 0-d array.
        values = [np.asarray(d[0][i]) if i < len(d[0]) and isinstance(d[0][i], np.generic)
                  else d[0][i] if i < len(d[0]) else None for d in sets]
        first = values[0]
        if not isinstance(first, np.ndarray) or first.dtype == object:
            continue
        if (name in slots or first.size == 0) and all(
                isinstance(v, np.ndarray) and v.shape == first.shape and np.array_equal(v, first) for v in values):
            baked.append((name, first))
    return tuple(baked)


def _shapes_from_data(case: Case, sets: DataSets, baked: Iterable[tuple[str, np.ndarray]] = ()
                      ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Pin each input to the shape of the case's first data set, as a user would with
    --input-shape; inputs that are not plain arrays (sequences, optionals) stay as they are."""
    skip = dict(baked)
    first = sets[0][0] if sets else []
    return tuple((n, tuple(a.shape)) for n, a in zip(_input_names(case), first)
                 if isinstance(a, np.ndarray) and a.ndim > 0 and n not in skip)


def _where_it_ran(manifest: Any, accel: str, fallbacks: list[str]) -> str:
    """A passing case's detail: empty when every region ran on the target's device, else the
    regions that ran on the host (the plan kept them there, or their compile fell back)."""
    host = [r.name for r in manifest.regions if r.target.is_host]
    if accel == "none" or not host:
        return ""
    return conformance_report.ON_HOST + ", ".join(host) + (f" (compile fell back: {', '.join(fallbacks)})" if fallbacks else "")


def _first_error(stderr: str) -> str:
    """The first ``error:`` line of a compiler's output without its file location (a temporary
    path that would eat the 200 characters kept), else the output's start."""
    for line in stderr.splitlines():
        if "error:" in line:
            return line[line.index("error:"):][:200]
    return stderr.strip()[:200]


_GIVEN: dict[str, Case] = {}   # a worker's cases, as the parent sent them (`_receive`)


def _receive(cases: dict[str, Case]) -> None:
    """A spawned worker's initializer: the parent's collected cases (10 MB pickled for all
    1,884, a tenth of a second) instead of collecting again, which runs every case's generator."""
    _GIVEN.update(cases)


@functools.lru_cache(maxsize=1)
def _cases_by_name() -> dict[str, Case]:
    # once per process: collecting takes 10-20 s
    return dict(_GIVEN) if _GIVEN else {c.name: c for c in collect()}


CASE_TIMEOUT_S = 600


def _run_named(args: tuple[str, str]) -> CaseResult:
    """Run one case in a forked child, so that a crash in the compiler bindings or a device
    driver (it happens on lavapipe) costs one case, not the whole run."""
    name, accel = args
    case = _cases_by_name()[name]   # collected before the fork: the child inherits it

    def work() -> list:
        result = run_case(case, accel)
        return [result.name, result.status, result.detail, result.seconds]

    result, how = in_child(work, CASE_TIMEOUT_S)
    if result is not None:
        return CaseResult(*result)
    assert how is not None     # work() returns a list, so no result comes with a reason
    if how.startswith("raised"):
        return CaseResult(name, "import error", how.removeprefix("raised ")[:200])
    return CaseResult(name, "runtime error", how)


def run(target: str, pattern: str | None = None, limit: int | None = None, workers: int = 2) -> dict:
    accel = "none" if Target.parse(target).is_host else target
    names = [c.name for c in collect(pattern, limit)]
    every = _cases_by_name()
    # each case, and an expanded case's twin (`_constants_from_data` bakes as the twin does)
    given = {n: every[n] for name in names for n in (name, name.removesuffix("_expanded")) if n in every}
    # Spawned, not forked, workers: a caller that has run IREE (pytest after the device tests) has
    # runtime threads and locks that do not survive a fork, and a forked worker's first invoke
    # then waits forever. Each worker forks its cases from its own clean, single-threaded state.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_receive, initargs=(given,)) as pool:
        results = list(pool.map(_run_named, [(n, accel) for n in names], chunksize=4))
    counts = Counter(r.status for r in results)
    return {"target": target, "total": len(results), "counts": {c: counts.get(c, 0) for c in CATEGORIES},
            "cases": [{"name": r.name, "status": r.status, "detail": r.detail, "seconds": round(r.seconds, 2)}
                      for r in results]}


def merge(previous: dict, fresh: dict, pattern: str) -> dict:
    """``previous`` (a full run's results) with the cases ``fresh`` re-ran under ``pattern``
    replaced: how a change to a few op families is measured without re-running all 1,884 cases.
    ``reruns`` lists the filters re-run since the last full run, oldest first."""
    if previous.get("target") != fresh["target"]:
        raise ValueError(f"cannot merge {fresh['target']} results into {previous.get('target')} results")
    cases = {c["name"]: c for c in previous["cases"]}
    cases.update({c["name"]: c for c in fresh["cases"]})
    ordered = [cases[name] for name in sorted(cases)]
    counts = Counter(c["status"] for c in ordered)
    earlier = previous.get("reruns", [previous["rerun"]] if "rerun" in previous else [])
    return {"target": fresh["target"], "total": len(ordered), "counts": {c: counts.get(c, 0) for c in CATEGORIES},
            "cases": ordered, "reruns": [*earlier, pattern]}


def write(results: dict, json_path: Path, markdown_path: Path | None = None) -> None:
    """Write this target's JSON; regenerate the markdown from every target's JSON beside it."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    if markdown_path is not None:
        runs = [json.loads(p.read_text()) for p in sorted(json_path.parent.glob("conformance-*.json"))]
        markdown_path.write_text(conformance_report.markdown(runs))
