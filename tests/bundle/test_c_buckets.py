"""The C side of a bucketed bundle: a fixed-shape stub per bucket, and the dispatcher
(``stubs/c/buckets/<model>_any``) that pads, chunks and crops around them.

Always: the dispatcher, linked against fake bucket stubs that report what they were given, serves
a two-dimensional ladder by the Python runtime's rules (the same buckets, chunks and padding as
``runtime/shapes.py`` computes) and refuses what it must. With an installed IREE runtime
(IREERuntime_DIR): a real bucketed bundle's dispatcher matches onnxruntime at batches that pad
and that chunk."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from aot.checks.compare import assert_close
from aot.bundle.c_buckets import c_dispatcher
from aot.bundle.c_stub import c_stub
from aot.runtime import shapes as sh
from aot.runtime.manifest import TensorSig
from conftest import hostile_manifest
from test_c_stub import CC, STRICT, _cmake, _compile, _iree_runtime, _run_example, uses_every_name

# x[N,S] float32 (padded with 7), k[N] int32 -> y[N,S] float32, z[N] int32; N a batch (1, 2), S not (4, 8).
DIMS = (sh.Dim("N", (sh.Axis("x", 0), sh.Axis("k", 0)), (sh.Axis("y", 0), sh.Axis("z", 0)), (1, 2), True),
        sh.Dim("S", (sh.Axis("x", 1),), (sh.Axis("y", 1),), (4, 8), False))


def _two_dims():
    """The manifest of a two-dimensional bucketed bundle and each bucket's, made by hand."""
    base = hostile_manifest("two")
    region = dataclasses.replace(base.regions[0], inputs=("x", "k"), outputs=("y", "z"))
    sizes = sh.all_sizes(DIMS)
    shapes = sh.Shapes(DIMS, tuple(sh.Bucket(s, "manifest.json" if i == 0 else f"buckets/b{i}/manifest.json",
                                              None if i == 0 else "0" * 64) for i, s in enumerate(sizes)),
                       (("x", 7.0),))
    buckets = []
    for s in sizes:
        n, w = dict(s)["N"], dict(s)["S"]
        buckets.append(dataclasses.replace(
            base, regions=(region,), inputs=(TensorSig("x", "float32", (n, w)), TensorSig("k", "int32", (n,))),
            outputs=(TensorSig("y", "float32", (n, w)), TensorSig("z", "int32", (n,)))))
    return dataclasses.replace(buckets[0], shapes=shapes), buckets


FAKE_BUCKET = """
struct {p}_handle {{ aot_shared_runtime* shared; }};
int {p}_create(const char* dir, const {p}_options* o, {p}_handle** h) {{
  (void)dir; *h = calloc(1, sizeof(**h)); (*h)->shared = o->shared; o->shared->refs++; return 0;
}}
int {p}_run({p}_handle* h, const struct {p}_inputs* in, struct {p}_outputs* out) {{
  (void)h; return fake_run({i}, {P}_INPUT_X_ELEMENTS, {P}_INPUT_K_ELEMENTS, in->x, in->k, out->y, out->z);
}}
void {p}_destroy({p}_handle* h) {{ if (h) {{ two_shared_runtime_release(h->shared); free(h); }} }}
const char* {p}_last_error(void) {{ return "the fake failed"; }}
"""

# Fake buckets: y = 2x, z = k + 1 over the whole bucket; each call prints its bucket and how many
# elements of x hold the pad value. x = -1 makes a bucket fail.
FAKE_RUNTIME = """
#include <stdio.h>
#include <stdlib.h>
{includes}
struct aot_shared_runtime {{ int refs; }};
int live_runtimes = 0;
int two_shared_runtime_create(aot_shared_runtime** out) {{
  *out = calloc(1, sizeof(**out)); (*out)->refs = 1; live_runtimes++; return 0;
}}
void two_shared_runtime_release(aot_shared_runtime* s) {{ if (s && --s->refs == 0) {{ free(s); live_runtimes--; }} }}
static int fake_run(int bucket, long xs, long ks, const float* x, const int32_t* k, float* y, int32_t* z) {{
  long pads = 0;
  for (long i = 0; i < xs; ++i) {{
    if (x[i] == -1.0f) return -1;
    pads += x[i] == 7.0f;
    y[i] = 2 * x[i];
  }}
  for (long i = 0; i < ks; ++i) z[i] = k[i] + 1;
  printf("bucket %d pads %ld\\n", bucket, pads);
  return 0;
}}
{buckets}
"""

# Runs each "N S" pair of argv; x[i] = i % 5 (never the pad value), k[i] = 100 + i; checks the outputs.
DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "two_any.h"
extern int live_runtimes;
int main(int argc, char** argv) {
  two_any_handle* h = NULL;
  if (two_any_create("unused", NULL, &h)) return printf("create: %s\n", two_any_last_error()), 1;
  for (int a = 1; a + 1 < argc; a += 2) {
    struct two_any_sizes sizes = {atoll(argv[a]), atoll(argv[a + 1])};
    int64_t shape[TWO_ANY_MAX_RANK];
    int64_t xs = two_any_input_shape(0, &sizes, shape), ks = two_any_input_shape(1, &sizes, shape);
    int64_t ys = two_any_output_shape(0, &sizes, shape), zs = two_any_output_shape(1, &sizes, shape);
    if (xs < 0) { printf("case %s %s refused: %s\n", argv[a], argv[a + 1], two_any_last_error()); continue; }
    float* x = malloc(sizeof(float) * xs); float* y = malloc(sizeof(float) * ys);
    int32_t* k = malloc(sizeof(int32_t) * ks); int32_t* z = malloc(sizeof(int32_t) * zs);
    for (int64_t i = 0; i < xs; ++i) x[i] = (float)(i % 5);
    for (int64_t i = 0; i < ks; ++i) k[i] = 100 + (int32_t)i;
    if (sizes.s == 3) x[xs - 1] = -1.0f;
    printf("case %s %s\n", argv[a], argv[a + 1]);
    struct two_inputs in = {x, k};
    struct two_outputs out = {y, z};
    if (two_any_run(h, &sizes, &in, &out)) {
      printf("failed: %s\n", two_any_last_error());
    } else {
      int bad = ys != xs || zs != ks;
      for (int64_t i = 0; i < ys && !bad; ++i) bad = y[i] != 2 * x[i];
      for (int64_t i = 0; i < zs && !bad; ++i) bad = z[i] != k[i] + 1;
      printf("%s, last bucket %d\n", bad ? "WRONG" : "right", two_any_last_bucket(h));
    }
    free(x); free(y); free(k); free(z);
  }
  two_any_destroy(h);
  printf("live runtimes %d\n", live_runtimes);
  return 0;
}
"""


def _expected(shapes: sh.Shapes, n: int, s: int) -> list[str]:
    """What the Python runtime's rules do with a call of these sizes, as the fakes print it."""
    lines = [f"case {n} {s}"]
    for part in sh.chunks(n, shapes.dim("N").largest):
        rows = part.stop - part.start
        bucket = sh.fitting(shapes, {"N": rows, "S": s})
        lines.append(f"bucket {shapes.buckets.index(bucket)} pads {math.prod(dict(bucket.sizes).values()) - rows * s}")
    return [*lines, f"right, last bucket {shapes.buckets.index(bucket)}"]


def test_the_dispatcher_pads_chunks_and_crops_as_the_python_runtime_does(tmp_path):
    assert CC, "no C compiler; `make test` installs gcc (scripts/setup.sh)"
    manifest, buckets = _two_dims()
    files = c_dispatcher(manifest, buckets)
    header = files["two_any.h"]
    assert "#define TWO_ANY_DIM_S_LARGEST 8" in header and "struct two_any_sizes {\n  int64_t n;\n  int64_t s;\n};" in header
    for i, m in enumerate(buckets):
        files.update({k: v for k, v in c_stub(m, (i, "")).items() if k.endswith(".h")})
    prefixes = ["two", *(f"two_b{i}" for i in range(1, len(buckets)))]
    files["fake.c"] = FAKE_RUNTIME.format(
        includes="\n".join(f'#include "{p}.h"' for p in prefixes),
        buckets="".join(FAKE_BUCKET.format(p=p, P=p.upper(), i=i) for i, p in enumerate(prefixes)))
    files["driver.c"] = DRIVER
    files["use.c"] = uses_every_name("two_any.h", header)
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    for source in ("two_any.c", "driver.c", "use.c"):
        _compile(tmp_path, {}, source)
    build = subprocess.run([CC, *STRICT, "-o", "driver", "two_any.c", "fake.c", "driver.c"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[:3000]
    cases = [(1, 4), (2, 8), (1, 1), (2, 5), (3, 4), (5, 7), (8, 8)]
    argv = [str(v) for c in [*cases, (1, 9), (0, 4), (2, 3)] for v in c]
    proc = subprocess.run([str(tmp_path / "driver"), *argv], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    want = [line for n, s in cases for line in _expected(manifest.shapes, n, s)]
    assert lines[:len(want)] == want
    assert lines[len(want)] == ("case 1 9 refused: input 'x' axis 1 ('S') is 9; the largest bucket compiled for it "
                                "is 8. Rebuild with a ladder reaching 9 (--dim S=...); the dynamic fallback "
                                "(--fallback dynamic) serves larger sizes from the Python runtime only")
    assert lines[len(want) + 1] == "case 0 4 refused: dimension 'N' is 0; sizes start at 1"
    # A bucket's failure names the bucket and carries the bucket's own message.
    assert lines[len(want) + 2:] == ["case 2 3", "failed: shape bucket N=2, S=4: the fake failed", "live runtimes 0"]


@pytest.fixture(scope="module")
def bucketed(tmp_path_factory):
    """x[N,16] -> MatMul -> Relu -> y[N,16], built on the host for batch buckets 1 and 2."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from aot import api
    from aot.options import BuildOptions

    folder = tmp_path_factory.mktemp("bucketed")
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], [w])
    model = folder / "rows.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    return api.build(model, folder / "out", BuildOptions(accel=None, batch_buckets="1,2")).bundle.path, model


def test_every_bucket_has_its_own_fixed_shape_c_stub_and_they_link_together(bucketed, tmp_path):
    bundle, _ = bucketed
    first = (bundle / "stubs" / "c" / "rows.h").read_text()
    second = (bundle / "stubs" / "c" / "buckets" / "b1" / "rows_b1.h").read_text()
    assert "Shape bucket N 1:" in first and "#define ROWS_INPUT_X_SHAPE {1, 16}" in first
    assert "Shape bucket N 2:" in second and "#define ROWS_B1_INPUT_X_SHAPE {2, 16}" in second
    # Both headers in one translation unit: distinct prefixes, nothing declared twice.
    use = "\n".join([uses_every_name("rows.h", first).replace("use_everything", "use_first"),
                     uses_every_name("rows_b1.h", second).replace("use_everything", "use_second")])
    _compile(tmp_path, {"rows.h": first, "rows_b1.h": second, "use.c": use}, "use.c")


def test_a_bucket_stub_runs_its_bucket_and_matches_onnxruntime(bucketed, tmp_path):
    bundle, model = bucketed
    _iree_runtime()
    out = _run_example(bundle, model, tmp_path, bucket=1)
    assert re.search(r"rows_b1: load [\d.]+ ms; 20 runs: median [\d.]+ ms", out)


def test_the_dispatcher_serves_any_batch_on_an_installed_iree_runtime(bucketed, tmp_path):
    """Batch 3 pads its last chunk into bucket N=1... and batch 5 runs as 2 + 2 + 1; both match onnxruntime."""
    import onnxruntime as ort

    bundle, model = bucketed
    _cmake(bundle / "stubs" / "c" / "buckets", tmp_path / "build")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for n in (1, 2, 3, 5):
        folder = tmp_path / f"n{n}"
        folder.mkdir()
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        np.save(folder / "input0.npy", x)
        proc = subprocess.run([str(tmp_path / "build" / "rows_any_example"), str(bundle), str(folder), str(folder), "3"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        # The last call's bucket: N=2 for batch 2, N=1 for the odd chunk of 1, 3 and 5.
        assert f"rows_any: bucket {1 if n == 2 else 0}; load" in proc.stdout
        got, (want,) = np.load(folder / "output0.npy"), session.run(None, {"x": x})
        assert got.shape == want.shape == (n, 16)
        assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_static_bundle_has_no_dispatcher(host_bundle):
    assert not (host_bundle.bundle.path / "stubs" / "c" / "buckets").exists()
