"""Shape buckets: a model with symbolic dimensions built as a ladder of static bundles in one."""

from aot.buckets.build import build

__all__ = ["build"]
