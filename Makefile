# A thin shell over the `aot` CLI. `make model` and `make test` install what they need.
VENV   ?= .venv
AOT    := $(VENV)/bin/aot
PY     := $(VENV)/bin/python
ACCEL  ?= vulkan
EXAMPLE := artifacts/tiny_cnn/tiny_cnn.onnx
MODEL  ?= $(EXAMPLE)
NAME   ?= $(basename $(notdir $(subst zoo:,,$(MODEL))))
OUT    := artifacts/$(NAME)

.PHONY: setup model test test-fast test-all test-full bench conformance fuzz soak learn-host learn-vulkan calibrate gpu-bundles clean

setup:
	@bash scripts/setup.sh

$(EXAMPLE): | setup
	$(AOT) example -o $@

# Build MODEL (default: the example CNN) into artifacts/NAME/bundle, then run the bundle once
# through its generated Python stub and compare with onnxruntime.
model: setup $(if $(filter $(EXAMPLE),$(MODEL)),$(EXAMPLE))
	$(AOT) build $(MODEL) --accel $(ACCEL) -o $(OUT)
	$(AOT) check $(OUT)
	$(AOT) report $(OUT)

# mypy over aot/ first ([tool.mypy] in pyproject.toml: zero errors, a few seconds), then every test,
# on as many workers as cores (pytest-xdist; one pytest process alone kept two cores ~70% busy).
TEST_WORKERS ?= auto
test: setup
	$(PY) -m mypy
	$(PY) -m pytest -m "not full" -n $(TEST_WORKERS) --durations=25

# Everything that does not compile with IREE, run on a device, download a model or take long:
# under a minute, for the edit loop (tests/conftest.py keeps the marks honest).
test-fast: setup
	$(PY) -m pytest -m "not device and not network and not slow"

# The exhaustive sweeps whose seeded subsets `make test` runs, after it (2-core machine): the tests
# marked `full` (~10 min: PP-OCR's host, lavapipe and CUDA builds, 20 kill points, 100 fuzz mutants,
# the 91 pinned conformance cases, Vulkan tuning, aot tune), fuzz 1,000 mutants (~5 min; make test
# runs 12), every ONNX node test case on llvm-cpu and Vulkan (~25 min; make test runs 32 of the 91
# pinned ones and the expansion checks), and the 10,000-request soak (~75 s; make test runs 1,000).
test-all: test test-full fuzz conformance soak

# The tests marked `full` (pyproject): the exhaustive side of what make test samples.
test-full: setup
	$(PY) -m pytest -m full -n $(TEST_WORKERS) --durations=10

# `make bench`: every zoo model, default vs tuned vs onnxruntime (docs/bench-llvm-cpu.{json,svg});
# `make bench MODEL=...`: one model, its bundle vs the whole model vs onnxruntime.
bench: setup $(if $(filter $(EXAMPLE),$(MODEL)),$(EXAMPLE))
ifeq ($(origin MODEL),file)
	$(AOT) bench -o artifacts/bench/corpus
else
	$(AOT) bench $(MODEL) -o artifacts/bench/$(NAME)
endif

# Every ONNX node test case through the pipeline, on the CPU and on the Vulkan device.
conformance: setup
	$(AOT) conformance --target llvm-cpu
	$(AOT) conformance --target vulkan-spirv

# 1,000 mutated models through plan and build, each in a child process (make test runs 100).
FUZZ_COUNT ?= 1000
fuzz: setup
	$(AOT) fuzz --count $(FUZZ_COUNT) -o artifacts/fuzz

# Serving under load: 10,000 requests from 16 threads through one Batcher over MTCNN's ONet with
# batch buckets (a public model with a symbolic batch), a tenth malformed (make test runs 1,000).
SOAK_REQUESTS ?= 10000
# (The model file itself: the zoo's recipe pins ONet's batch to 1.)
ONET = $(shell $(PY) -c "from aot.models import zoo; print(zoo.fetch(zoo.by_name('mtcnn-onet')))")
soak: setup
	$(AOT) build $(ONET) --accel none --batch-buckets 1,2,4,8 -o artifacts/soak
	$(AOT) soak artifacts/soak --requests $(SOAK_REQUESTS)

# The learned model's host database (docs/learned.md): every real model of the zoo and corpus but
# the validation pair, plus 16 seeded generated graphs, through the host's cuts x flag sets x
# runtimes; then the leave-one-out evaluation; then every plan of each real model timed again side
# by side (from the collection's compile cache) into a second database, three rounds each (a
# plan's label is the median of its rows: sub-millisecond models' rankings move with the host's
# load), and the same evaluation on it: what the shipped host model is trained on. Resumable (a
# plan measured before, or timed its three rounds, is skipped); ~3 hours on 2 cores; needs the
# [learn] extra for the evaluation.
LEARN_MODELS ?= zoo:mtcnn-pnet zoo:mtcnn-rnet zoo:mtcnn-onet zoo:silero-vad zoo:ppocr-cls zoo:ppocr-rec \
	zoo:ppocr-det zoo:minilm corpus:magika corpus:oww-melspec corpus:oww-embedding corpus:lcnet-orientation \
	corpus:minilm-l3 corpus:opennsfw-resnet50 corpus:nudenet-yolov8n corpus:basic-pitch corpus:crepe-tiny corpus:pesto corpus:iclabel \
	corpus:ddddocr-ocr corpus:dnsmos-p808 corpus:aecmos
LEARN_DB ?= artifacts/learn/host.sqlite
LEARN_SIDE_DB ?= artifacts/learn/host-side-by-side.sqlite
learn-host: setup $(EXAMPLE)
	$(AOT) learn generate -o artifacts/learn/gen --count 8 --seed 11
	$(AOT) learn generate -o artifacts/learn/gen2 --count 8 --seed 12
	$(AOT) learn collect $(EXAMPLE) $(LEARN_MODELS) artifacts/learn/gen/*.onnx artifacts/learn/gen2/*.onnx \
		--accel none --host-decisions --mixed 12 --perturbations 0 --iterations 20 --db $(LEARN_DB)
	$(AOT) learn eval --db $(LEARN_DB) --accel none --json artifacts/learn/eval-host.json
	$(AOT) learn retime $(EXAMPLE) $(LEARN_MODELS) --accel none --db $(LEARN_DB) --into $(LEARN_SIDE_DB) --rounds 3
	$(AOT) learn eval --db $(LEARN_SIDE_DB) --accel none --json artifacts/learn/eval-host-side-by-side.json

# The lavapipe side: the zoo's candidate plans on Vulkan (a few per model: a lavapipe plan costs
# seconds per run, PP-OCR-det's most; then more boundary perturbations for the seven models whose
# plans cost least, up to 16-24 plans each), then each model held out and built with --policy
# learned --gate learned beside the default build, timed (docs/learned.md). Resumable; ~95 minutes.
LEARN_VULKAN_DB ?= artifacts/learn/vulkan.sqlite
LEARN_VULKAN = --accel vulkan --iterations 5 --perturbations 4 --db $(LEARN_VULKAN_DB)
learn-vulkan: setup $(EXAMPLE)
	$(AOT) learn collect $(EXAMPLE) zoo:silero-vad zoo:mtcnn-pnet zoo:mtcnn-rnet zoo:mtcnn-onet zoo:ppocr-cls \
		zoo:minilm zoo:ppocr-rec $(LEARN_VULKAN) --max-plans 12
	$(AOT) learn collect zoo:ppocr-det $(LEARN_VULKAN) --max-plans 4
	$(AOT) learn collect $(EXAMPLE) zoo:silero-vad zoo:mtcnn-rnet zoo:mtcnn-pnet zoo:mtcnn-onet $(LEARN_VULKAN) \
		--perturbations 40 --max-plans 16
	$(AOT) learn collect zoo:ppocr-cls zoo:minilm $(LEARN_VULKAN) --perturbations 40 --max-plans 14
	$(AOT) learn eval --db $(LEARN_VULKAN_DB) --accel vulkan --end-to-end --iterations 3 \
		--json artifacts/learn/end-to-end.json

# This machine's cost-model entries, measured (docs/calibrate.md; about a minute): the host and
# CALIBRATE_ACCEL's device, stored for these devices, where every later build for them finds it
# (`aot calibrate --where` says where; `--cost-params shipped` builds from the hand-set entries).
CALIBRATE_ACCEL ?= vulkan
calibrate: setup
	$(AOT) calibrate --accel $(CALIBRATE_ACCEL)

# What a GPU machine needs to reproduce docs/cuda.md: the torch models built for CUDA (sm_80) and
# for Vulkan (ampere, no verification here: lavapipe is not that GPU), with golden inputs and
# outputs, in artifacts/gpu; carry it there with iree-base-runtime and run
# `python scripts/gpu_torch_bench.py run artifacts/gpu resnet18_half resnet18_half@vulkan ...`.
gpu-bundles: setup
	$(PY) scripts/gpu_torch_bench.py bundles artifacts/gpu resnet18_half encoder_base resnet_like encoder decoder

clean:
	rm -rf artifacts/*/ .pytest_cache
