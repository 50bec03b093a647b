"""Developer tools over the library: benchmarks, conformance, fuzzing, profiling, replay and
serving measurements, the ONNX backend adapter. Only the CLI imports this package: the build
stages, the API and the runtime never do (tests/test_layout.py)."""
