"""PyTorch in: an ``nn.Module`` exported through iree-turbine to torch-dialect MLIR.

The ONNX front end reads a file and builds its graph view from the proto; this one exports the
module (``export.py``) and builds the same ``GraphView`` from the exported MLIR (``view.py``), so
the partitioner, outliner, bundle and runtime treat both alike. Importing this package does not
import torch: only a torch build does.
"""
