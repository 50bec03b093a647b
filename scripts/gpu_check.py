"""Run prebuilt bundles on a GPU machine: golden check through the generated stub against
onnxruntime, then interleaved timing (aot.checks.timing's FAIR schedule, medians) of the bundle
vs onnxruntime on the CPU.

    python scripts/gpu_check.py BUNDLE[,BUNDLE...]=MODEL.onnx [...]

Several bundles of one model (a CUDA build and the host build the gate chose, say) are each
checked, then timed side by side with onnxruntime in one process.

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
        given, _, model_text = pair.partition("=")
        model = Path(model_text)
        bundles = [mf.bundle_dir(Path(b)) for b in given.split(",")]   # a bundle, or the `aot build -o` directory
        data = mf.read(bundles[0])
        inputs = inputs_for(data, model)
        labels = [f"{b.parent.parent.name}/{b.parent.name}" for b in bundles]
        for label, bundle in zip(labels, bundles):
            print(label, check.check_bundle(bundle, model, inputs=inputs).summary())
            print(semantics(data, model, bundle))
        names = [o.name for o in data.outputs]
        sess = reference.session(model)
        ort_inputs = {**inputs, **reference.constant_inputs(data)}  # the original model takes baked inputs
        sessions = [runtime.load(b) for b in bundles]
        try:
            # FAIR: onnxruntime's workers spin after each run; idle and settle before each turn.
            contenders = {**{label: (lambda s=s: s.run(inputs)) for label, s in zip(labels, sessions)},
                          "onnxruntime-cpu": lambda: sess.run(names, ort_inputs)}
            med = timing.medians_ms(timing.interleaved(contenders, timing.FAIR.with_counts(3, 50)))
        finally:
            for s in sessions:
                s.close()
        ort = med["onnxruntime-cpu"]
        print("  median " + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items()) + "; over onnxruntime: "
              + ", ".join(f"{k} {v / ort:.3f}" for k, v in med.items() if k != "onnxruntime-cpu"))


if __name__ == "__main__":
    main(sys.argv[1:])
