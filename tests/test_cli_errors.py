"""Every subcommand answers bad arguments and bad files with a typed error: `ERROR: ...` and a hint
on stderr, exit code 1, no traceback, and never the catch-all's internal-error message (which
would mean an exception aot did not expect). In process through ``aot.cli.main``; every case
fails before anything is compiled or a device is opened."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from aot import cli
from aot.runtime import manifest as mf
from aot.runtime.target import Target
from conftest import small_manifest

# Files the corpus names, made once per test in ``files``. {bundle}: a bundle whose files match
# its manifest (a host region; its module is not real, so nothing of it may run).
MADE = {
    "empty.npy": b"",
    "text.npy": b"1, 2, 3\n",
    "empty.onnx": b"",
    "garbage.onnx": b"\x08\x07garbage that is not a protobuf \xff\xfe",
    "plan.txt": b"not a plan",
}


def _files(root: Path) -> dict[str, str]:
    for name, data in MADE.items():
        (root / name).write_bytes(data)
    np.save(root / "good.npy", np.zeros((1, 2), np.float32))
    np.save(root / "int64.npy", np.zeros((1, 2), np.int64))
    np.save(root / "pickled.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(root / "arrays.npz", a=np.zeros(2), b=np.ones(2))
    good = (root / "good.npy").read_bytes()
    (root / "truncated.npy").write_bytes(good[:len(good) - 3])
    (root / "folder").mkdir()
    (root / "folder.npy").mkdir()
    bundle = root / "bundle"
    (bundle / "modules").mkdir(parents=True)
    (bundle / "modules" / "r0.vmfb").write_bytes(b"module")
    (bundle / "weights.irpa").write_bytes(b"weights")
    host = dataclasses.replace(small_manifest().regions[0], target=Target.host(),
                               sha256=hashlib.sha256(b"module").hexdigest())
    dataclasses.replace(small_manifest(), regions=(host,), weights=mf.Weights(
        "weights.irpa", "model", hashlib.sha256(b"weights").hexdigest(), 7)).write(bundle)
    mf.read(bundle)   # the bundle is sound: the cases below fail for their own reason
    future = root / "future"
    future.mkdir()
    data = json.loads((bundle / "manifest.json").read_text())
    (future / "manifest.json").write_text(json.dumps({**data, "schema_version": 99}))
    (root / "manifest-is-a-folder" / "manifest.json").mkdir(parents=True)
    return {"bundle": str(bundle), "future": str(future), "nowhere": str(root / "missing"),
            "under_file": str(root / "plan.txt" / "out"), **{k.replace(".", "_").replace("-", "_"): str(root / k)
            for k in (*MADE, "good.npy", "int64.npy", "pickled.npy", "arrays.npz", "truncated.npy", "folder",
                      "folder.npy", "manifest-is-a-folder")}}


# (argv with {placeholders}, a fragment the error must contain)
CORPUS = [
    # argparse's own errors read like the others
    ("", "the following arguments are required"),
    ("frobnicate", "invalid choice"),
    ("run", "the following arguments are required: bundle"),
    ("build {good_npy}", "-o/--output"),
    ("report {bundle} --frobnicate", "unrecognized arguments"),
    # build / plan / tune: missing, empty, foreign or folder models, bad flag values
    ("build {nowhere}.onnx -o {folder}/o", "missing.onnx"),
    ("build {empty_onnx} -o {folder}/o", "empty.onnx"),
    ("build {garbage_onnx} -o {folder}/o", "garbage.onnx"),
    ("build {folder} -o {folder}/o", "folder"),
    ("build zoo:no-such-model -o {folder}/o", "no-such-model"),
    ("build no_such_pkg.mod:factory --example-input x=1x3 -o {folder}/o", "no_such_pkg"),
    ("build {garbage_onnx} -o {folder}/o --min-compute two", "--min-compute"),
    ("build {garbage_onnx} -o {folder}/o --input-shape x=1xabc", "--input-shape"),
    ("build {garbage_onnx} -o {folder}/o --plan {plan_txt}", ""),
    ("plan {nowhere}.onnx", "missing.onnx"),
    ("plan {garbage_onnx}", "garbage.onnx"),
    ("plan {empty_onnx} --accel vulkan --vulkan-target x --cuda-target sm_80", ""),
    ("tune {nowhere}", "missing"),
    ("tune {good_npy}", "good.npy"),
    ("tune {folder}", "folder"),
    # run: bundles that are not there or not readable, then input files of every bad kind
    ("run {nowhere}", "missing"),
    ("run {good_npy}", "good.npy"),
    ("run {future}", "schema_version 99"),
    ("run {manifest_is_a_folder}", "manifest.json"),
    ("run {bundle} --input image=@{empty_npy}", "empty.npy"),
    ("run {bundle} --input x=@{empty_npy}", "empty.npy"),
    ("run {bundle} --input x=@{truncated_npy}", "truncated.npy"),
    ("run {bundle} --input x=@{pickled_npy}", "pickled.npy"),
    ("run {bundle} --input x=@{text_npy}", "text.npy"),
    ("run {bundle} --input x=@{arrays_npz}", "arrays.npz"),
    ("run {bundle} --input x=@{folder_npy}", "folder.npy"),
    ("run {bundle} --input x=@{nowhere}.npy", "missing.npy"),
    ("run {bundle} --input x=@{int64_npy}", "int64.npy"),
    ("run {bundle} --input image=@{good_npy}", "'image'"),
    ("run {bundle} --input x={good_npy}", "NAME=@file.npy"),
    ("run {bundle} --input =@{good_npy}", "NAME=@file.npy"),
    ("run {bundle} --input x=@", "NAME=@file.npy"),
    ("run {bundle} --input x=@{good_npy} --input x=@{good_npy}", "given twice"),
    ("run {future} --input x=@{good_npy}", "schema_version 99"),
    ("run {bundle} --input x=@{good_npy} --device-memory lots", "lots"),
    ("run {bundle} --input x=@{good_npy} --output-dir {plan_txt}", "plan.txt"),
    # report / check / profile / bench-*: bundles and numbers
    ("report {nowhere}", "missing"),
    ("report {future}", "schema_version 99"),
    ("report {folder}", "folder"),
    ("check {nowhere}", "missing"),
    ("check {future}", "schema_version 99"),
    ("check {bundle}", "stub"),
    ("check {bundle} --atol -1", "--atol"),
    ("check {bundle} --atol nan", "--atol"),
    ("check {bundle} --seed -3", "--seed"),
    ("check --integrity {nowhere}", "missing"),
    ("check --integrity {future}", "schema_version 99"),
    ("profile {nowhere}", "missing"),
    ("profile {bundle} --runs 0", "--runs"),
    ("profile {bundle} --top -1", "--top"),
    ("bench {nowhere}.onnx", "missing.onnx"),
    ("bench {garbage_onnx} --iterations 0", "--iterations"),
    ("bench pkg.mod:factory", "PyTorch factory"),
    ("bench --models no-such-model", "no-such-model"),
    ("bench-batch {nowhere}", "missing"),
    ("bench-batch {bundle} --requests 0", "--requests"),
    ("bench-batch {future}", "schema_version 99"),
    ("bench-batch {bundle}", "weights archive 'weights.irpa' cannot be read"),   # IREE's parse error, named
    ("profile {future}", "schema_version 99"),
    ("profile {bundle} --json {folder}", "--json"),
    ("tune {future}", "build directory"),
    ("bench-replay {future}", "future"),
    ("report {manifest_is_a_folder}", "manifest.json"),
    ("bench-replay {nowhere}", "missing"),
    ("bench-replay {good_npy}", "good.npy"),
    ("bench-replay {nowhere} --calls x", "--calls"),
    ("bench-overlap {nowhere}", "missing"),
    ("bench-overlap {future}", "schema_version 99"),
    ("bench-overlap {bundle} --iterations -5", "--iterations"),
    ("bench-harness {nowhere}", "missing"),
    ("bench-harness {future}", "schema_version 99"),
    ("bench-harness {bundle} --iterations 0", "--iterations"),
    ("soak {nowhere}", "missing"),
    ("soak {future}", "schema_version 99"),
    ("soak {bundle} --clients 0", "--clients"),
    ("soak {bundle} --requests x", "--requests"),
    # learn collect: models, the database and numbers
    ("learn", "the following arguments are required"),
    ("learn collect {nowhere}.onnx --db {folder}/c.sqlite", "missing.onnx"),
    ("learn collect {garbage_onnx} --db {folder}/c.sqlite", "garbage.onnx"),
    ("learn collect {garbage_onnx} --iterations 0", "--iterations"),
    ("learn collect {garbage_onnx} --perturbations -1", "--perturbations"),
    ("learn collect {garbage_onnx} -o {under_file}", "plan.txt"),
    # calibrate: output places, numbers, and timing bundles that were never built
    ("calibrate --no-build --accel none", "no calibration bundle"),   # into the store: bundles first
    ("calibrate -o {under_file}", "plan.txt"),
    ("calibrate -o {folder}", "folder"),
    ("calibrate -o {folder}/p.json --work {under_file}", "plan.txt"),
    ("calibrate -o {folder}/p.json --repeats 0", "--repeats"),
    ("calibrate -o {folder}/p.json --no-build --work {nowhere} --accel none", "no calibration bundle"),
    ("calibrate -o {folder}/p.json --no-build --work {folder} --build-only", "not allowed with"),
    # fuzz / conformance / example: numbers and output places, checked before any work starts
    ("fuzz --count 0", "--count"),
    ("fuzz --workers 0", "--workers"),
    ("fuzz --seed -1", "--seed"),
    ("fuzz --count 1 -o {under_file}", "plan.txt"),
    ("conformance --filter (", "--filter"),
    ("conformance --limit 0", "--limit"),
    ("conformance --target nowhere", "invalid choice"),
    ("conformance --filter x -o {under_file}/c.json", "plan.txt"),
    ("conformance --filter x --markdown {folder}", "folder"),
    ("example -o {under_file}/m.onnx", "plan.txt"),
    ("example -o {folder}", "folder"),
]


def _commands() -> set[str]:
    parser = cli._parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


def test_the_corpus_drives_every_subcommand():
    used = {argv.split()[0] for argv, _ in CORPUS if argv and not argv.startswith("frobnicate")}
    assert used == _commands(), _commands() ^ used


@pytest.mark.parametrize("argv, fragment", CORPUS, ids=[a or "<nothing>" for a, _ in CORPUS])
def test_a_bad_argument_or_file_is_a_typed_error_that_names_it(argv, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)   # anything a command might write lands here
    files = _files(tmp_path)
    code = cli.main([a.format(**files) for a in argv.split()])
    out, err = capsys.readouterr()
    assert cli.INTERNAL_ERROR not in err, f"an untyped exception reached main: {err}"
    assert code == 1 and err.startswith("ERROR: "), (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert "hint:" in err, f"no hint saying what to do: {err}"
    assert fragment.format(**files) in err, f"the error does not name {fragment!r}: {err}"


def test_the_catch_all_says_it_is_a_bug_without_a_traceback(monkeypatch, capsys):
    """What the corpus guards against, so that the guard can fail: an unexpected exception."""
    monkeypatch.setattr(cli, "_cmd_example", lambda args: {}["boom"])
    assert cli.main(["example", "-o", "x.onnx"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(cli.INTERNAL_ERROR) and "KeyError" in err and "Traceback" not in err


def test_a_crash_in_native_code_says_where_python_was():
    """A segfault in the runtime or a driver kills the process before any handler runs; the
    command still prints each thread's stack, so a report names the stage that died."""
    import subprocess
    import sys

    crash = ("import ctypes, aot.cli as c; c._cmd_example = lambda args: ctypes.string_at(0); "
             "c.main(['example', '-o', 'x.onnx'])")
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120)
    assert done.returncode == -11, done.stderr
    assert "Segmentation fault" in done.stderr and "in main" in done.stderr and "<lambda>" in done.stderr
