"""aot: ahead-of-time build system for ONNX models on IREE, partitioned across devices."""

__version__ = "0.1.0"
