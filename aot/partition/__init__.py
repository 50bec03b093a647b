"""The partitioner: label -> merge -> select -> order, producing a validated Plan.

Pure Python over a GraphView; nothing here imports IREE.
"""

from aot.partition.plan import Plan, Region, validate
from aot.partition.partitioner import make_plan

__all__ = ["Plan", "Region", "validate", "make_plan"]
