"""ONNX in: checks, normalising passes and the read-only graph view. No IREE import here."""
