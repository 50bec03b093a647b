"""Run prebuilt bundles on a GPU machine: golden check through the generated stub against
onnxruntime, then interleaved timing (aot.checks.timing's FAIR schedule, medians) of the bundle
vs onnxruntime on the CPU.

    python scripts/gpu_check.py BUNDLE=MODEL.onnx [BUNDLE=MODEL.onnx ...]

Needs only numpy, iree-base-runtime and onnxruntime (bundles are built elsewhere with
`aot build --accel cuda --host-cpu x86-64-v3`, since iree-compile needs no GPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aot import runtime  # noqa: E402
from aot.checks import golden as check, reference, timing  # noqa: E402
from aot.runtime import manifest as mf  # noqa: E402


def inputs_for(data: mf.Manifest, model: Path) -> dict[str, np.ndarray]:
    """A zoo model's meaningful sample (bundles built from zoo:NAME carry NAME); random otherwise."""
    from aot.models import samples
    from aot.models import zoo

    if any(m.name == data.model.name for m in zoo.MODELS):
        return samples.for_model(zoo.by_name(data.model.name), model)
    return reference.random_inputs(data.inputs, seed=0)


def semantics(data: mf.Manifest, model: Path, bundle: Path) -> str:
    """What a user of the model would check: the OCR text, the VAD decisions."""
    from aot.models import samples

    name = data.model.name
    if name not in ("ppocr-rec", "silero-vad"):
        return ""
    stub = check.load_stub_class(bundle)(bundle)
    try:
        if name == "ppocr-rec":
            (probs,) = stub(samples.ppocr_tensor(samples.text_line(), (1, 3, 48, 320)))
            return f"  decoded text {samples.ctc_decode(probs[0], samples.ctc_characters(model))!r}"
        audio, label = samples.vad_audio()
        speech = samples.stream_vad(stub, audio) > 0.5
        return (f"  VAD stream: {int((speech == (label == 1))[label >= 0].sum())}/{int((label >= 0).sum())} "
                f"judged chunks decided as labelled")
    finally:
        stub.close()


def main(pairs: list[str]) -> None:
    for pair in pairs:
        bundle, model = (Path(p) for p in pair.split("="))
        bundle = mf.bundle_dir(bundle)   # the bundle, or the directory given to `aot build -o`
        data = mf.read(bundle)
        inputs = inputs_for(data, model)
        result = check.check_bundle(bundle, model, inputs=inputs)
        print(result.summary())
        print(semantics(data, model, bundle))
        names = [o.name for o in data.outputs]
        sess = reference.session(model)
        ort_inputs = {**inputs, **reference.constant_inputs(data)}  # the original model takes baked inputs
        with runtime.load(bundle) as s:
            # FAIR: onnxruntime's workers spin after each run; idle and settle before each turn.
            times = timing.interleaved({"bundle": lambda: s.run(inputs),
                                        "onnxruntime-cpu": lambda: sess.run(names, ort_inputs)},
                                       timing.FAIR.with_counts(3, 50))
        med = timing.medians_ms(times)
        print(f"  median bundle {med['bundle']:.3f} ms, onnxruntime-cpu {med['onnxruntime-cpu']:.3f} ms, "
              f"ratio bundle/onnxruntime {med['bundle'] / med['onnxruntime-cpu']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
