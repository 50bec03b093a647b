"""Shape buckets end to end: built with IREE, run on lavapipe and the CPU, compared with
onnxruntime on the unpadded inputs."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from aot.checks.compare import assert_close, compare
from aot import api, runtime
from aot.buckets.padding import PaddingError
from aot.checks import reference
from aot.errors import BundleError, ModelError, RuntimeInputError
from aot.options import BuildOptions
from aot.partition.plan import GateMode

import bucket_models as models

pytestmark = pytest.mark.device
HOST = BuildOptions(accel=None)


def _x(n: int, seed: int, shape=(3, 16, 16)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _ort(model, **inputs) -> list[np.ndarray]:
    return reference.session(model).run(None, inputs)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return models.batch_cnn(tmp_path_factory.mktemp("models") / "cnn.onnx")


@pytest.fixture(scope="module")
def cnn_buckets(cnn, tmp_path_factory):
    """The CNN with buckets 1, 2, 4 on Vulkan (lavapipe) + CPU, and the folders it published (the
    gate off: the roofline would keep this small CNN on the host)."""
    from aot.bundle import write

    real = write.publish
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(write, "publish", lambda staging, target: (PUBLISHED.append(target), real(staging, target)))
        return api.build(cnn, tmp_path_factory.mktemp("cnn") / "out", BuildOptions(batch_buckets="1,2,4", gate=GateMode.OFF))


PUBLISHED: list = []   # the folders the cnn_buckets build published, in order


def test_a_bucketed_build_publishes_once(cnn_buckets):
    """Each bucket is staged, checked and merged; only the merged bundle is published."""
    assert PUBLISHED == [cnn_buckets.bundle.path]
    assert not list((cnn_buckets.bundle.path.parent / "build" / "buckets").glob("b*/bundle"))
    assert (cnn_buckets.bundle.path / "record.json").is_file()
    assert sorted(p.name for p in (cnn_buckets.bundle.path / "buckets").glob("*.record.json")) == \
        ["b1.record.json", "b2.record.json"]


def test_a_symbolic_batch_builds_with_no_flag_and_any_batch_runs(cnn, tmp_path):
    result = api.build(cnn, tmp_path / "out", HOST)
    (dim,) = result.bundle.manifest.shapes.dims
    assert (dim.symbol, dim.sizes, dim.batch) == ("N", (1,), True)
    with runtime.load(result.bundle.path) as session:
        x = _x(3, 0)
        (y,) = session(x)   # three chunks of the one bucket
    assert_close(y, _ort(cnn, x=x)[0], rtol=1e-4, atol=1e-5)


def test_buckets_pad_chunk_and_match_onnxruntime(cnn, cnn_buckets):
    manifest = cnn_buckets.bundle.manifest
    assert [dict(b.sizes)["N"] for b in manifest.shapes.buckets] == [1, 2, 4]
    assert any(not r.target.is_host for r in manifest.regions)   # the convolutions run on lavapipe
    four = manifest.shapes.buckets[2]
    assert [(c.valid, c.padded) for c in four.checks] == [(3, 4)] and four.checks[0].max_abs_diff < 1e-3
    from aot import report

    assert "bucket N=4: N 3->4 max abs diff" in report.text(manifest, cnn_buckets.bundle.record)
    with runtime.load(cnn_buckets.bundle.path) as session:
        for n in (1, 3, 4, 9):   # exact, padded into 4, exact, chunked 4 + 4 + 1
            x = _x(n, n)
            (y,) = session.run({"x": x})
            assert y.shape == (n, 4)
            assert_close(y, _ort(cnn, x=x)[0], rtol=1e-4, atol=1e-5)


def test_every_bucket_records_its_memory_and_loading_needs_them_all(cnn_buckets):
    from aot.runtime import manifest as mf
    from aot.runtime.memory import DeviceMemoryError

    bundle = cnn_buckets.bundle.path
    m = mf.read(bundle)
    per_bucket = [{d.driver: d.total for d in (m if b.manifest == mf.MANIFEST else mf.read_bucket(bundle, b)).memory}
                  for b in m.shapes.buckets]
    vulkan = [b["vulkan"] for b in per_bucket]
    assert vulkan == sorted(vulkan) and vulkan[0] < vulkan[-1]    # outputs and scratch grow with the batch
    # Room for the largest bucket alone is not enough: all three stay loaded.
    with pytest.raises(DeviceMemoryError, match="3 shape buckets loaded together"):
        runtime.load(bundle, device_memory={"vulkan": max(vulkan)})
    with runtime.load(bundle, device_memory={"vulkan": sum(vulkan)}) as session:
        assert len(session.sessions) == 3


def test_run_batch_gives_every_request_its_own_single_run_answer(cnn_buckets):
    requests = [{"x": _x(n, 10 + i)} for i, n in enumerate((1, 2, 1, 1, 3))]
    with runtime.load(cnn_buckets.bundle.path) as session:
        singles = [session.run(r)[0] for r in requests]
        batched = [out[0] for out in session.run_batch(requests)]
    for i, (got, want) in enumerate(zip(batched, singles)):
        assert got.shape == want.shape
        assert_close(got, want, rtol=1e-5, atol=1e-6)
        others = [s for j, s in enumerate(singles) if j != i and s.shape == got.shape]
        assert all(not compare(got, o, rtol=1e-5, atol=1e-8).ok for o in others)   # not a neighbour's answer


def test_calls_across_buckets_hold_no_memory_past_the_first_of_each(cnn_buckets):
    """Every bucket runs on the one shared device, whose allocator (IREE's Vulkan queue-allocation
    pool) serves them all: after a warm call per bucket, a thousand more calls over all buckets
    and the chunked path leave the process's resident memory where it was."""
    def resident_kib() -> int:
        return int(open("/proc/self/statm").read().split()[1]) * 4096 // 1024

    with runtime.load(cnn_buckets.bundle.path) as session:
        for n in (1, 2, 4, 3, 7):
            session(_x(n, n))
        before = resident_kib()
        for i in range(1000):
            session(_x(1 + i % 7, i))
        grown = resident_kib() - before
    # 1000 calls move 3-21 KiB of input each: 12 MiB in all; a per-call leak would show here.
    assert grown < 4096, f"resident memory grew {grown} KiB over 1000 calls"


def test_a_batcher_serves_many_threads_each_its_own_answer(cnn_buckets):
    with runtime.load(cnn_buckets.bundle.path) as session:
        requests = [_x(1 + i % 2, 100 + i) for i in range(16)]
        expected = [session(x)[0] for x in requests]
        got: dict[int, object] = {}
        with runtime.Batcher(session, max_batch=4, max_wait_ms=50) as batcher:
            def call(i: int) -> None:
                try:
                    got[i] = batcher({"x": requests[i]})[0]
                except Exception as e:   # noqa: BLE001 - the test reports it below
                    got[i] = e

            def bad() -> None:
                try:
                    batcher({"x": np.zeros((1, 3, 8, 8), np.float32)})
                except RuntimeInputError as e:
                    got["bad"] = e

            threads = [threading.Thread(target=call, args=(i,)) for i in range(16)] + [threading.Thread(target=bad)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert isinstance(got["bad"], RuntimeInputError) and "expected shape" in str(got["bad"])
        for i in range(16):
            assert_close(got[i], expected[i], rtol=1e-5, atol=1e-6)
        assert max(batcher.batches) > 1 and sum(batcher.batches) == 16


def test_a_ratio_ladder_on_a_position_wise_axis_is_exact(tmp_path):
    model = models.per_token(tmp_path / "tokens.onnx")
    result = api.build(model, tmp_path / "out", BuildOptions(accel=None, dim_ladders=(("S", "ratio:16:1.0,0.5"),)))
    shapes = result.bundle.manifest.shapes
    assert shapes.dim("S").sizes == (8, 16) and shapes.dim("S").batch is False
    assert [(c.valid, c.padded) for b in shapes.buckets for c in b.checks] == [(1, 8), (9, 16)]
    assert all(c.max_abs_diff < 1e-5 for b in shapes.buckets for c in b.checks)
    with runtime.load(result.bundle.path) as session:
        for s in (3, 8, 12):
            x = _x(1, s, (s, 16))
            (y,) = session(x)
            assert_close(y, _ort(model, x=x)[0], rtol=1e-4, atol=1e-5)
        with pytest.raises(RuntimeInputError, match=r"'x' axis 1 \('S'\) is 17; the largest bucket compiled for it is 16"):
            session(_x(1, 0, (17, 16)))


def test_an_axis_where_padding_changes_results_is_refused_with_the_difference(tmp_path):
    model = models.across_tokens(tmp_path / "softmax.onnx")
    out = tmp_path / "out"
    options = BuildOptions(accel=None, dim_ladders=(("S", "4,8"),))
    api.build(model, out, BuildOptions(accel=None, dim_ladders=(("S", "8"),), padding_tolerances=(("S", 1.0),)))
    before = (out / "bundle" / "manifest.json").read_bytes()
    with pytest.raises(PaddingError, match=r"padding 'S' from 1 to 4 changes the model's results") as e:
        api.build(model, out, options)
    measured = float(e.value.hint.rpartition("=")[2])
    assert measured > 0.01 and "--accept-padding S=" in e.value.hint
    assert (out / "bundle" / "manifest.json").read_bytes() == before   # the previous bundle survives
    accepted = api.build(model, out, BuildOptions(accel=None, dim_ladders=(("S", "4,8"),),
                                                  padding_tolerances=(("S", 1.0),)))
    checks = [c for b in accepted.bundle.manifest.shapes.buckets for c in b.checks]
    assert checks and all(c.accepted_tolerance == 1.0 and c.max_abs_diff > 0.01 for c in checks)


@pytest.mark.parametrize("ladder, note", [("1", None), ("8,16", "padding  not checked (S): no cuda device")])
def test_a_cross_build_for_a_gpu_not_here_runs_nothing_and_says_which_padding_went_unchecked(
        tmp_path, monkeypatch, ladder, note):
    """Built on a machine without the target GPU, a bucket cannot run: a rung that serves its own
    size only needs no run at all, and a padded rung's check is reported as not done (as
    verification is), instead of failing the build on opening the device."""
    from aot.checks import verify
    from aot.runtime.target import Target

    monkeypatch.setattr(verify, "device_present", lambda driver: driver == "local-task")
    lines: list[str] = []
    result = api.build(models.per_token(tmp_path / "tokens.onnx"), tmp_path / "out",
                       BuildOptions(accel=Target.accelerator("cuda"), gate=GateMode.OFF, dim_ladders=(("S", ladder),)),
                       progress=lines.append)
    manifest = result.bundle.manifest
    assert {r.target.backend for r in manifest.regions} == {"cuda"}
    assert [b.checks for b in manifest.shapes.buckets] == [()] * len(ladder.split(","))
    said = [s for s in lines if "padding" in s]
    assert len(said) == (0 if note is None else 2) and all(note in s for s in said)   # once per padded rung


def test_symbolic_dimensions_without_a_size_are_listed(tmp_path):
    model = models.per_token(tmp_path / "tokens.onnx")
    with pytest.raises(ModelError, match=r"without a size: 'S' \('x' axis 1\)") as e:
        api.build(model, tmp_path / "out", HOST)
    assert "--dim S=SIZE" in e.value.hint
    with pytest.raises(ModelError, match="--dim names 'T'"):
        api.build(model, tmp_path / "out", BuildOptions(accel=None, dim_ladders=(("T", "4"),)))


def test_an_output_that_does_not_follow_its_dimension_is_refused(tmp_path):
    model = models.strided(tmp_path / "strided.onnx")
    with pytest.raises(ModelError, match=r"output 'y' axis 2 is 4 when 'L' is 8 and 8 when it is 16"):
        api.build(model, tmp_path / "out", BuildOptions(accel=None, dim_ladders=(("L", "8,16"),)))


def test_a_batch_that_an_output_sums_over_is_padded_but_never_chunked(tmp_path):
    """Chunks could not be joined along an output that has no batch axis: such a batch keeps its
    ladder (padding is checked as for any axis) and a call past it is refused, not chunked."""
    model = models.batch_sum(tmp_path / "sum.onnx")
    result = api.build(model, tmp_path / "out", BuildOptions(accel=None, batch_buckets="1,2"))
    (dim,) = result.bundle.manifest.shapes.dims
    assert (dim.batch, [a.tensor for a in dim.outputs]) == (False, ["r"])
    with runtime.load(result.bundle.path) as session:
        x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
        for got, want in zip(session(x), _ort(model, x=x)):
            assert_close(got, want, rtol=1e-5, atol=1e-6)
        with pytest.raises(RuntimeInputError, match=r"axis 0 \('N'\) is 3; the largest bucket compiled for it is 2"):
            session(np.zeros((3, 4), np.float32))


def test_a_damaged_bucket_is_a_bundle_error(cnn_buckets, tmp_path, capsys):
    from aot import cli

    copy = tmp_path / "bundle"
    shutil.copytree(cnn_buckets.bundle.path, copy)
    # `aot check --integrity` walks every bucket's manifest to its modules, each file once.
    assert cli.main(["check", "--integrity", str(copy)]) == 0
    lines = capsys.readouterr().out.splitlines()
    named = [line.split()[1] for line in lines if line.startswith("ok")]
    assert "buckets/b1.json" in named and any(n.startswith("modules/b2/") for n in named)
    assert len(named) == len(set(named)) and lines[-1] == f"{len(named)} files match the manifest"
    bucket = copy / "buckets" / "b1.json"
    bucket.write_text(bucket.read_text() + " ")
    with pytest.raises(BundleError, match=r"the manifest of bucket N=2, does not match its sha256"):
        runtime.load(copy)
    assert cli.main(["check", "--integrity", str(copy)]) == 1
    assert "FAIL  buckets/b1.json: " in capsys.readouterr().out
    shutil.copytree(cnn_buckets.bundle.path, copy, dirs_exist_ok=True)
    next((copy / "modules" / "b2").glob("*.vmfb")).unlink()
    with pytest.raises(BundleError, match="lacks module 'modules/b2/"):
        runtime.load(copy)


def test_the_stub_shows_the_symbolic_batch_and_runs_batches(cnn_buckets):
    from aot.checks.golden import load_stub_class

    stub = cnn_buckets.bundle.stub.read_text()
    assert "[N, 3, 16, 16]" in stub and "[N, 4]" in stub
    with load_stub_class(cnn_buckets.bundle.path)() as model:
        (a,), (b,) = model.run_batch([{"x": _x(1, 1)}, {"x": _x(2, 2)}])
        assert a.shape == (1, 4) and b.shape == (2, 4)


def test_bench_batch_times_both_ways_on_the_same_requests(cnn_buckets, host_bundle):
    from aot.errors import AotError
    from aot.tools import serving

    result = serving.batch_vs_single(cnn_buckets.bundle.path, requests=4, iterations=2)
    assert result.single_us > 0 and result.batched_us > 0 and result.max_abs_diff < 1e-4
    assert "one by one / run_batch" in result.text()
    with pytest.raises(AotError, match="no batch buckets"):
        serving.batch_vs_single(host_bundle.bundle.path)
