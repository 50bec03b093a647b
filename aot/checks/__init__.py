"""Checks against onnxruntime: per-region verification, golden outputs, device measurements."""
