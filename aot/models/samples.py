"""Deterministic inputs that mean something to each zoo model, and the decoders that read the
answers back (CTC text for PP-OCR rec, speech/silence for Silero VAD).

Random noise exercises the arithmetic but not the model: a recognizer fed noise emits blanks
whatever the backend does. These inputs are what each model was trained on, prepared the way
its own package prepares them (RapidOCR's resize and ``(x/255 - 0.5)/0.5``, MTCNN's
``(pixel - 127.5)/128``, BERT's ``[CLS] ... [SEP]`` with an attention mask, Silero's 64-sample
context in front of each 512-sample 16 kHz chunk).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import onnx

if TYPE_CHECKING:
    from aot.models.zoo import ZooModel

VAD_RATE, VAD_CHUNK, VAD_CONTEXT = 16000, 512, 64
OCR_TEXT = "AOT builds 2026"   # ASCII the PP-OCR character table holds; rendered by `text_line`


def text_line(text: str = OCR_TEXT, height: int = 48) -> np.ndarray:
    """Black text on white as an (height, width) uint8 image, in Pillow's built-in font (no
    system fonts needed), tightly cropped with a small margin like a detector's crop."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=int(height * 0.7))
    left, top, right, bottom = map(int, font.getbbox(text))   # whole pixels (typed float for TrueType)
    pad = height // 8
    img = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 255)
    ImageDraw.Draw(img).text((pad - left, pad - top), text, fill=0, font=font)
    return np.asarray(img)


def ppocr_tensor(gray: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """RapidOCR's recognizer/classifier preprocessing: resize to the input height keeping the
    aspect ratio (at most the input width), normalise to [-1, 1], zero-pad on the right."""
    from PIL import Image

    _, channels, height, width = shape
    resized_w = min(width, int(np.ceil(height * gray.shape[1] / gray.shape[0])))
    img = np.asarray(Image.fromarray(gray).resize((resized_w, height), Image.Resampling.BILINEAR), dtype=np.float32)
    out = np.zeros(shape, dtype=np.float32)
    out[:, :, :, :resized_w] = ((img / 255.0 - 0.5) / 0.5)[None, None]
    return out


def ppocr_page(shape: tuple[int, ...], lines: tuple[str, ...] = (OCR_TEXT, "golden 42")) -> np.ndarray:
    """A white page with text lines, normalised for the detector; (N, C, H, W)."""
    _, _, height, width = shape
    page = np.full((height, width), 255, dtype=np.uint8)
    y = height // 8
    for text in lines:
        line = text_line(text, height=40)[:, :width - 16]
        page[y:y + line.shape[0], 16:16 + line.shape[1]] = line
        y += line.shape[0] + height // 8
    return np.broadcast_to(((page / 255.0 - 0.5) / 0.5).astype(np.float32), shape).copy()


def ctc_characters(model_path: Path) -> list[str]:
    """PP-OCR's character table as RapidOCR builds it: blank, the model's ``character``
    metadata one per line, then a space."""
    proto = onnx.load(str(model_path), load_external_data=False)
    meta = {p.key: p.value for p in proto.metadata_props}
    if "character" not in meta:
        raise ValueError(f"{model_path} has no 'character' metadata (not a PP-OCR recognizer)")
    return ["blank", *meta["character"].splitlines(), " "]


def ctc_decode(probs: np.ndarray, characters: list[str]) -> str:
    """Greedy CTC: best class per time step, merge repeats, drop blanks. `probs` is (T, C)."""
    best = probs.argmax(-1)
    keep = np.ones(len(best), dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    return "".join(characters[i] for i in best[keep] if i != 0)


def voiced_syllables(seconds: float = 1.0, rate: int = VAD_RATE) -> np.ndarray:
    """Synthetic speech: a 120 Hz glottal pulse train with vibrato through three vowel formants
    (/a/: 700, 1220, 2600 Hz), gated into 2 syllables per second. Silero scores it as speech."""
    t = np.arange(int(seconds * rate)) / rate
    phase = np.cumsum(2 * np.pi * (120 + 10 * np.sin(2 * np.pi * 3 * t)) / rate)
    source = sum(np.sin(k * phase) / k for k in range(1, 40))
    spectrum, freqs = np.fft.rfft(source), np.fft.rfftfreq(len(t), 1 / rate)
    gain = sum(1 / (1 + ((freqs - f) / bw) ** 2) for f, bw in ((700, 130), (1220, 70), (2600, 160)))
    voiced = np.fft.irfft(spectrum * gain, len(t)) * np.sqrt(np.clip(np.sin(2 * np.pi * 2 * t), 0, 1))
    return (0.3 * voiced / np.abs(voiced).max()).astype(np.float32)


def vad_audio(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """1 s silence, 2 s voiced syllables, 1 s faint noise; and a label per 512-sample chunk:
    1 inside a syllable, 0 in silence or noise, -1 at a syllable edge (not judged)."""
    rng = np.random.default_rng(seed)
    speech = voiced_syllables(2.0)
    audio = np.concatenate([np.zeros(VAD_RATE, np.float32), speech,
                            (0.01 * rng.standard_normal(VAD_RATE)).astype(np.float32)])
    energy = np.zeros(len(audio))
    energy[VAD_RATE:3 * VAD_RATE] = np.abs(speech)
    chunks = len(audio) // VAD_CHUNK
    loud = np.array([energy[i * VAD_CHUNK:(i + 1) * VAD_CHUNK].mean() for i in range(chunks)])
    # Speech: clearly voiced chunks; silence: nothing voiced in or next to the chunk (Silero's
    # state carries about one chunk of memory, so chunks beside a syllable edge are not judged).
    label = np.full(chunks, -1)
    label[loud > 0.25 * loud.max()] = 1
    quiet = np.convolve(loud == 0, np.ones(5), mode="same") == 5
    label[quiet] = 0
    return audio, label


def vad_frames(audio: np.ndarray) -> list[np.ndarray]:
    """Silero's call inputs: each 512-sample chunk behind the previous 64 samples, (1, 576)."""
    padded = np.concatenate([np.zeros(VAD_CONTEXT, np.float32), audio])
    return [padded[None, i:i + VAD_CONTEXT + VAD_CHUNK].copy()
            for i in range(0, len(audio) - VAD_CHUNK + 1, VAD_CHUNK)]


def stream_vad(call: Callable[[np.ndarray, np.ndarray], tuple[Any, np.ndarray]], audio: np.ndarray) -> np.ndarray:
    """Speech probability per chunk, feeding each call's state into the next. `call(frame, state)`
    returns (probability (1, 1), new state (2, 1, 128))."""
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for frame in vad_frames(audio):
        p, state = call(frame, state)
        probs.append(float(np.asarray(p).reshape(-1)[0]))
    return np.array(probs)


def _vocab_size(proto: onnx.ModelProto, ids_input: str, default: int = 30522) -> int:
    """Rows of the embedding table gathered by `ids_input` (seen through Cast/Mul dequant)."""
    inits = {i.name: i for i in proto.graph.initializer}
    producer = {o: n for n in proto.graph.node for o in n.output}
    for node in proto.graph.node:
        if node.op_type == "Gather" and node.input[1:2] == [ids_input]:
            name = node.input[0]
            for _ in range(8):
                if name in inits or name not in producer:
                    break
                name = producer[name].input[0]
            if name in inits and inits[name].dims:
                return int(inits[name].dims[0])
    return default


def _tokens(name: str, shape: tuple[int, ...], dtype: np.dtype, proto: onnx.ModelProto,
            rng: np.random.Generator) -> np.ndarray:
    """``input_ids``: 101, random ids in [1000, vocab), 102, then padding 0; ``attention_mask``:
    ones on those tokens; other integer inputs (``token_type_ids``): zeros."""
    n_tok = max(2, shape[-1] * 7 // 8)
    arr = np.zeros(shape, dtype=dtype)
    if name == "input_ids":
        arr[..., :n_tok] = rng.integers(1000, _vocab_size(proto, name), (*shape[:-1], n_tok))
        arr[..., 0], arr[..., n_tok - 1] = 101, 102  # [CLS] ... [SEP]
    elif name == "attention_mask":
        arr[..., :n_tok] = 1
    return arr


def _image(model: "ZooModel", name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if model.name == "ppocr-det":
        return ppocr_page(shape)
    if model.name.startswith("ppocr-"):
        return ppocr_tensor(text_line(), shape)
    if model.name == "silero-vad":
        if name == "state":
            return np.zeros(shape, np.float32)
        return vad_frames(voiced_syllables(0.5))[4]  # a chunk inside the first syllable
    pixels = rng.integers(0, 256, size=shape).astype(np.float32)  # MTCNN: NHWC, (p - 127.5) / 128
    return (pixels - 127.5) * 0.0078125


def for_model(model: "ZooModel", onnx_path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """One call's inputs at the recipe's shapes, named and typed as the model says (baked-in
    constant inputs excluded)."""
    from aot.models.zoo import ZooError

    proto = onnx.load(str(onnx_path), load_external_data=False)
    pinned, skip = dict(model.input_shapes), {i.name for i in proto.graph.initializer} | dict(model.constants).keys()
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for vi in (v for v in proto.graph.input if v.name not in skip):
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = pinned.get(vi.name, tuple(d.dim_value or -1 for d in vi.type.tensor_type.shape.dim))
        if any(d <= 0 for d in shape):
            raise ZooError(f"{model.name}: input {vi.name!r} has dynamic shape {shape}",
                           hint="add it to the zoo table's input_shapes")
        value = (_image(model, vi.name, shape, rng) if np.issubdtype(dtype, np.floating)
                 else _tokens(vi.name, shape, dtype, proto, rng))
        out[vi.name] = np.asarray(value, dtype=dtype)
    return out
