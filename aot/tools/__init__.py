"""Tooling around the build (model zoo, samples, conformance, ONNX backend adapter, benchmark,
the example model). The build stages never import this package; the CLI and the public API do."""
