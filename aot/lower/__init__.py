"""Import to MLIR, outline one function per region, compile each with iree-compile.

The only package that imports ``iree.compiler``."""
