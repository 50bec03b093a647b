"""Models in. ONNX: checks, normalising passes and the read-only graph view, no IREE import.
PyTorch (``frontend/torch``): an iree-turbine export and the same graph view, read from its MLIR."""
