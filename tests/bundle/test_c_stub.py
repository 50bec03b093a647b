"""The generated C stub. Always: the header compiles standalone under -std=c11 -Wall -Wextra -Werror
beside a C file that uses every name it declares, for the example model and for every hostile
name; the example program compiles; rendering is deterministic. With an installed IREE runtime
(IREERuntime_DIR): the CMake project builds and its example matches onnxruntime."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from aot.checks.compare import assert_close
from aot.bundle import names
from aot.bundle.c_stub import c_stub, stub_prefix
from aot.runtime import manifest as mf
from aot.runtime.manifest import IndexOp, IndexStatus
from conftest import HOSTILE, hostile_manifest

CC = shutil.which("cc") or shutil.which("gcc")
STRICT = ("-std=c11", "-Wall", "-Wextra", "-Werror")


def _compile(tmp_path: Path, files: dict[str, str], main: str, *flags: str) -> None:
    assert CC, "no C compiler; `make test` installs gcc (scripts/setup.sh)"
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    proc = subprocess.run([CC, *STRICT, *flags, "-c", main, "-o", "out.o"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, f"{main} does not compile:\n{proc.stderr[:3000]}"


def uses_every_name(header_name: str, header: str) -> str:
    """A C file that uses every macro, struct field, type and function ``header`` declares,
    found by reading the header itself (so a name it declares badly fails to compile here)."""
    lines = [f'#include "{header_name}"', "#include <string.h>", "", "int use_everything(void);",
             "int use_everything(void) {", "  long total = 0;"]
    guard = re.search(r"#ifndef (\w+)", header).group(1)
    for i, (macro, value) in enumerate(re.findall(r"^#define (\w+) ?(.*)$", header, re.M)):
        if macro == guard or not value:   # include guards
            continue
        if value.startswith("{"):
            lines.append(f"  {{ long long v{i}[] = {macro}; total += (long)sizeof(v{i}) + (long)v{i}[0]; }}")
        elif value.startswith('"'):
            lines.append(f"  total += (long)strlen({macro}) + (long)sizeof({macro});")
        else:
            lines.append(f"  total += (long)({macro});")
    for struct, body in re.findall(r"^struct (\w+) \{(.*?)^\};", header, re.M | re.S):
        lines.append(f"  {{ struct {struct} s; memset(&s, 0, sizeof(s));")
        for field in re.findall(r"\*\s*(\w+);", body):
            lines.append(f"    total += s.{field} == 0;")
        lines.append("  }")
    for typedef, body_name in re.findall(r"typedef struct (\w+) \{.*?\} (\w+);", header, re.S):
        lines.append(f"  {{ {body_name} o; memset(&o, 0, sizeof(o)); total += (long)sizeof(struct {typedef}); }}")
    for typedef in re.findall(r"^typedef struct (\w+) \1;", header, re.M):
        lines.append(f"  {{ {typedef}* p = 0; total += p == 0; }}")
    for fn in re.findall(r"^(?:int|void|const char\*) (\w+)\(", header, re.M):
        lines.append(f"  total += (long)sizeof(&{fn});")
    lines += ["  return (int)total;", "}", ""]
    return "\n".join(lines)


def _check_header(manifest, tmp_path: Path) -> dict[str, str]:
    files = c_stub(manifest)
    (header_name,) = [n for n in files if n.endswith(".h")]
    header = files[header_name]
    assert "iree" not in re.sub(r"/\*.*?\*/", "", header, flags=re.S).lower(), "an IREE name leaks into the header"
    assert set(re.findall(r"#include <([^>]+)>", header)) == {"stddef.h", "stdint.h"}
    _compile(tmp_path, {header_name: header, "use.c": uses_every_name(header_name, header)}, "use.c")
    return files


def test_the_example_header_compiles_and_declares_its_signature(host_bundle, tmp_path):
    manifest = host_bundle.bundle.manifest
    files = _check_header(manifest, tmp_path)
    header = files["tiny_cnn.h"]
    assert "#define TINY_CNN_INPUT_IMAGE_SHAPE {1, 3, 64, 64}" in header
    assert "#define TINY_CNN_OUTPUT_TOP_CLASSES_DTYPE \"int64\"" in header
    assert "  int64_t* top_classes;" in header and "  const float* image;" in header
    # The example program compiles against it (it needs no IREE header).
    _compile(tmp_path, files, "main.c")


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_every_hostile_name_gives_a_header_that_compiles(name, tmp_path):
    manifest = hostile_manifest(name)
    files = _check_header(manifest, tmp_path)
    _compile(tmp_path, files, "main.c")
    header = next(v for k, v in files.items() if k.endswith(".h"))
    # Names survive as data: the literal decodes back to the name's UTF-8 bytes.
    literal = names.c_str(name)
    assert f"_NAME {literal}" in header


def test_duplicates_after_mangling_and_c_keywords_stay_distinct(tmp_path):
    manifest = hostile_manifest("a.b")
    sigs = tuple(mf.TensorSig(n, "float32", (2,)) for n in ("a.b", "a_b", "A_B", "a-b", "int", "return", "_Bool"))
    manifest = dataclasses.replace(manifest, inputs=sigs)
    files = _check_header(manifest, tmp_path)
    header = next(v for k, v in files.items() if k.endswith(".h"))
    fields = re.findall(r"const float\* (\w+);", header)
    assert len(fields) == len(set(fields)) == 7 and "int_" in fields and "return_" in fields


def test_float8_tensors_pass_as_raw_bytes_of_their_iree_element_type(tmp_path):
    manifest = hostile_manifest("f8")
    sigs = tuple(mf.TensorSig(f"x_{t}", t, (3,)) for t in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                                           "float8_e5m2fnuz"))
    region = dataclasses.replace(manifest.regions[0], inputs=tuple(x.name for x in sigs))
    files = _check_header(dataclasses.replace(manifest, inputs=sigs, regions=(region,)), tmp_path)
    header = next(v for k, v in files.items() if k.endswith(".h"))
    source = next(v for k, v in files.items() if k.endswith(".c") and "main" not in k)
    assert len(re.findall(r"const uint8_t\* x_float8_\w+;", header)) == 4
    for hal in ("FLOAT_8_E4M3_FN", "FLOAT_8_E4M3_FNUZ", "FLOAT_8_E5M2", "FLOAT_8_E5M2_FNUZ"):
        assert f"IREE_HAL_ELEMENT_TYPE_{hal}," in source


def test_rendering_is_deterministic_and_matches_the_bundle(host_bundle):
    manifest = host_bundle.bundle.manifest
    first, second = c_stub(manifest), c_stub(mf.read(host_bundle.bundle.path))
    assert first == second
    shipped = {p.name: p.read_text() for p in (host_bundle.bundle.path / "stubs" / "c").iterdir()}
    assert shipped == first and set(first) == {"tiny_cnn.h", "tiny_cnn.c", "main.c", "CMakeLists.txt"}


def test_the_implementation_checks_indices_and_guards_named_in_the_manifest(host_bundle):
    """The C stub applies the manifest's index-range checks at its boundary and refuses a guarded
    result, as the Python runtime does."""
    manifest = dataclasses.replace(
        hostile_manifest("ids"), inputs=(mf.TensorSig("ids", "int64", (2, 3)),),
        index_ops=(IndexOp("gather_node", "Gather", "ids", (10,), IndexStatus.CHECKED, input="ids"),
                   IndexOp("g2", "Gather", "computed", (4,), IndexStatus.GUARDED, flag="ids'out")))
    source = c_stub(manifest)["ids.c"]
    assert "static int check_indices_0(const int64_t* data)" in source
    assert "if (check_indices_0(inputs->ids)) return -1;" in source
    assert "index value(s) computed inside the model" in source


def _iree_runtime() -> tuple[Path, str | None]:
    """The installed IREE runtime to build against (IREERuntime_DIR), and where its headers are
    when the install lacks them (IREE_RUNTIME_INCLUDE_DIR); skip, saying why, without one."""
    value = os.environ.get("IREERuntime_DIR")
    if not value:
        pytest.skip("IREERuntime_DIR is not set: no installed IREE runtime to build the C example against "
                    "(no package registry ships IREE's runtime development files; see README, 'Embedding the C stub')")
    return Path(value), os.environ.get("IREE_RUNTIME_INCLUDE_DIR")


def _cmake(source: Path, build: Path, **defines: str) -> None:
    runtime_dir, include = _iree_runtime()
    configure = ["cmake", "-S", str(source), "-B", str(build), f"-DIREERuntime_DIR={runtime_dir}",
                 "-DCMAKE_BUILD_TYPE=Release", *([f"-DIREE_RUNTIME_INCLUDE_DIR={include}"] if include else []),
                 *(f"-D{k}={v}" for k, v in defines.items())]
    for argv in (configure, ["cmake", "--build", str(build), "-j2"]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _run_example(bundle: Path, model: Path, tmp_path: Path, seed: int = 5, bucket: int = 0) -> str:
    """Build the bundle's C example (of shape bucket ``bucket``), run it on random inputs, compare
    with onnxruntime."""
    from aot.checks import reference

    manifest = mf.read(bundle)
    if bucket:
        manifest = mf.read_bucket(bundle, manifest.shapes.buckets[bucket])
    prefix = stub_prefix(manifest, bucket)
    _cmake(bundle / "stubs" / "c" / (f"buckets/b{bucket}" if bucket else ""), tmp_path / "build")
    inputs = reference.random_inputs(manifest.inputs, seed=seed)
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    for i, sig in enumerate(manifest.inputs):
        np.save(tmp_path / "in" / f"input{i}.npy", inputs[sig.name])
    proc = subprocess.run([str(tmp_path / "build" / f"{prefix}_example"), str(bundle), str(tmp_path / "in"),
                           str(tmp_path / "out"), "20"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = reference.outputs(model, inputs, [o.name for o in manifest.outputs], manifest)
    for i, (want, sig) in enumerate(zip(expected, manifest.outputs)):
        got = np.load(tmp_path / "out" / f"output{i}.npy")
        assert got.dtype == want.dtype and got.shape == want.shape, sig.name
        c = assert_close(got, want, rtol=1e-4, atol=1e-4, what=sig.name)
        print(f"{sig.name}: max abs error vs onnxruntime {c.max_abs_diff:.3g}")
    print(proc.stdout)
    return proc.stdout


@pytest.mark.device
def test_the_example_builds_and_matches_onnxruntime_on_an_installed_iree_runtime(vulkan_bundle, example_model,
                                                                             tmp_path):
    out = _run_example(vulkan_bundle.bundle.path, example_model, tmp_path)
    assert re.search(r"tiny_cnn: load [\d.]+ ms; 20 runs: median [\d.]+ ms", out)


@pytest.mark.device
@pytest.mark.network
def test_a_zoo_model_through_the_c_stub_matches_onnxruntime_and_refuses_a_bad_id(tmp_path):
    """MiniLM: its token ids are checked at the C boundary as in Python."""
    _iree_runtime()
    from aot import api
    from aot.options import BuildOptions

    result = api.build("zoo:minilm", tmp_path / "minilm", BuildOptions(accel=None))
    bundle = result.bundle.path
    _run_example(bundle, result.bundle.manifest.model.source, tmp_path)
    ids = np.load(tmp_path / "in" / "input0.npy")
    ids[0, 5] = 10**9
    np.save(tmp_path / "in" / "input0.npy", ids)
    proc = subprocess.run([str(tmp_path / "build" / "minilm_example"), str(bundle), str(tmp_path / "in"),
                           str(tmp_path / "out"), "1"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "input 'input_ids': value 1000000000 at flat position 5 is outside [-30522, 30521]" in proc.stderr


SHARED_TEST = """
#include <math.h>
#include <stdio.h>
#include "tiny_cnn.h"
static int run(tiny_cnn_handle* h, const float* image, float* logits) {
  static float p[TINY_CNN_OUTPUT_TOP_PROBS_ELEMENTS];
  static int64_t c[TINY_CNN_OUTPUT_TOP_CLASSES_ELEMENTS];
  struct tiny_cnn_inputs in = {image};
  struct tiny_cnn_outputs out = {logits, p, c};
  return tiny_cnn_run(h, &in, &out);
}
int main(int argc, char** argv) {
  static float image[TINY_CNN_INPUT_IMAGE_ELEMENTS];
  float alone[TINY_CNN_OUTPUT_LOGITS_ELEMENTS], a[TINY_CNN_OUTPUT_LOGITS_ELEMENTS], b[TINY_CNN_OUTPUT_LOGITS_ELEMENTS];
  for (int i = 0; i < TINY_CNN_INPUT_IMAGE_ELEMENTS; ++i) image[i] = (float)((i * 7919) % 1000) / 1000.0f;
  tiny_cnn_handle *h = NULL, *ha = NULL, *hb = NULL;
  aot_shared_runtime* shared = NULL;
  if (argc < 2 || tiny_cnn_create(argv[1], NULL, &h) || run(h, image, alone)) goto fail;
  tiny_cnn_destroy(h);
  if (tiny_cnn_shared_runtime_create(&shared)) goto fail;
  tiny_cnn_options options = {0, shared};
  if (tiny_cnn_create(argv[1], &options, &ha)) goto fail;
  int after_one = tiny_cnn_shared_runtime_devices(shared);
  if (tiny_cnn_create(argv[1], &options, &hb)) goto fail;
  int after_two = tiny_cnn_shared_runtime_devices(shared);
  tiny_cnn_shared_runtime_release(shared);   /* the handles hold it */
  for (int r = 0; r < 3; ++r) if (run(ha, image, a) || run(hb, image, b)) goto fail;
  double diff = 0;
  int any_nan = 0;   /* fmax drops a NaN: count them apart, so a NaN logit cannot read as no difference */
  for (int i = 0; i < TINY_CNN_OUTPUT_LOGITS_ELEMENTS; ++i) {
    any_nan |= isnan(a[i]) || isnan(b[i]) || isnan(alone[i]);
    diff = fmax(diff, fmax(fabs(a[i] - b[i]), fabs(a[i] - alone[i])));
  }
  if (any_nan) diff = NAN;
  tiny_cnn_destroy(ha);
  tiny_cnn_destroy(hb);
  printf("DEVICES %d %d DIFF %g\\n", after_one, after_two, diff);
  return 0;
fail:
  printf("error: %s\\n", tiny_cnn_last_error());
  return 1;
}
"""


@pytest.mark.device
def test_handles_share_one_runtime_and_open_each_device_once(vulkan_bundle, tmp_path):
    _iree_runtime()
    (tmp_path / "shared_test.c").write_text(SHARED_TEST)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(shared_test C)\n"
        'add_subdirectory("${STUB_DIR}" stub)\nadd_executable(shared_test shared_test.c)\n'
        "target_link_libraries(shared_test PRIVATE tiny_cnn m)\n")
    _cmake(tmp_path, tmp_path / "build", STUB_DIR=str(vulkan_bundle.bundle.path / "stubs" / "c"))
    proc = subprocess.run([str(tmp_path / "build" / "shared_test"), str(vulkan_bundle.bundle.path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Vulkan and the CPU: two devices for one handle, still two for two; same logits as alone.
    assert "DEVICES 2 2 DIFF 0\n" in proc.stdout


def test_a_local_task_region_call_waits_as_sched_batch_and_a_local_sync_one_does_not(tmp_path):
    """The C stub waits for IREE's workers as the Python runtime does (runtime/invoke.py): its
    helpers, compiled from the rendered source and run, switch a default-policy caller to
    SCHED_BATCH for a local-task device only and put the policy back."""
    tasked = c_stub(hostile_manifest("m"))["m.c"]
    synced = c_stub(dataclasses.replace(hostile_manifest("m"), host_runtime=mf.HostRuntime("local-sync", ())))["m.c"]
    assert "kWorkerDevice[NUM_DEVICES] = { 1 };" in tasked and "kWorkerDevice[NUM_DEVICES] = { 0 };" in synced
    assert re.search(r"wait_as_batch\(r->device\);\s+status = iree_runtime_call_invoke\(&call, /\*flags=\*/0\);\s+"
                     r"back_to_default_policy\(switched\);", tasked)
    helpers = re.search(r"static int wait_as_batch\(.*?\n}\n\nstatic void back_to_default_policy\(.*?\n}\n", tasked, re.S)
    assert helpers, "the wait helpers are not in the rendered stub"
    program = ("#define _GNU_SOURCE 1\n#include <sched.h>\n#include <stdio.h>\n"
               "static const int kWorkerDevice[2] = {1, 0};  /* a local-task device, a local-sync one */\n"
               + helpers.group(0) + """
int main(void) {
  int tasked = wait_as_batch(0), during = sched_getscheduler(0);
  back_to_default_policy(tasked);
  int after = sched_getscheduler(0), synced = wait_as_batch(1), during_sync = sched_getscheduler(0);
  back_to_default_policy(synced);
  printf("%d %d %d %d %d\\n", tasked, during == SCHED_BATCH, after == SCHED_OTHER, synced, during_sync == SCHED_OTHER);
  return 0;
}
""")
    (tmp_path / "wait.c").write_text(program)
    assert CC, "no C compiler; `make test` installs gcc (scripts/setup.sh)"
    built = subprocess.run([CC, *STRICT, "wait.c", "-o", "wait"], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[:3000]
    ran = subprocess.run([str(tmp_path / "wait")], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.split() == ["1", "1", "1", "0", "1"], ran.stdout + ran.stderr


# glibc's own names for malloc's settings, and the opt-out: cleared so each case starts untuned
_MALLOC_SETTINGS = ("AOT_KEEP_HEAP", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


@pytest.mark.parametrize(("env", "kept"), [
    ({}, True),
    ({"AOT_KEEP_HEAP": "0"}, False),
    ({"AOT_KEEP_HEAP": " OFF "}, False),
    ({"AOT_KEEP_HEAP": "1"}, True),
    ({"AOT_KEEP_HEAP": "offline"}, True),                 # not one of the words
    ({"MALLOC_MMAP_THRESHOLD_": "131072"}, False),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}, False),   # (hugetlb would change the faults)
    ({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"}, True),
], ids=["untuned", "opt-out", "opt-out-words", "opt-in", "other-word", "mmap-threshold", "malloc-tunable", "other-tunable"])
def test_the_c_runtime_keeps_a_freed_64_mib_buffer_for_the_next_one_as_the_python_one_does(env, kept, tmp_path):
    """The stub's heap helper, compiled from the rendered source and run in a fresh process: it
    sets malloc's thresholds unless the operator tuned malloc or opted out (runtime/heap.py's
    rules), and with them set a freed 64 MiB buffer is not faulted in again."""
    source = c_stub(hostile_manifest("m"))["m.c"]
    assert re.search(r"s->refs = 1;\s+\(void\)keep_intermediates\(\);", source)   # at each shared runtime's creation
    helpers = re.search(r"#define AOT_KEEP_BELOW .*?\nstatic int keep_intermediates\(void\) \{.*?\n}\n", source, re.S)
    assert helpers, "the heap helpers are not in the rendered stub"
    program = ("#include <malloc.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
               "#include <sys/resource.h>\n" + helpers.group(0) + """
static long faults(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_minflt; }
static void touch(size_t size) { char* p = malloc(size); memset(p, 1, size); free(p); }
int main(void) {
  int kept = keep_intermediates();
  touch(64u << 20);
  long before = faults();
  touch(64u << 20);
  printf("%d %d %ld\\n", kept, keep_intermediates(), faults() - before);
  return 0;
}
""")
    (tmp_path / "heap.c").write_text(program)
    assert CC, "no C compiler; `make test` installs gcc (scripts/setup.sh)"
    built = subprocess.run([CC, *STRICT, "-D_GNU_SOURCE", "heap.c", "-o", "heap"], cwd=tmp_path, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr[:3000]
    environ = {k: v for k, v in os.environ.items() if k not in _MALLOC_SETTINGS} | env
    ran = subprocess.run([str(tmp_path / "heap")], capture_output=True, text=True, env=environ)
    assert ran.returncode == 0, ran.stderr
    set_, again, faulted = (int(w) for w in ran.stdout.split())
    pages = (64 << 20) // 4096
    assert (set_, again) == (int(kept), int(kept))       # decided once, the same answer after
    assert (faulted < pages // 20) if kept else (faulted > pages // 2), faulted
