"""Streaming a store into training: order, prefetch, GPU staging, framework adapters."""

from prepkit.reader.batch import Batch
from prepkit.reader.order import EpochPlan, plan_epoch
from prepkit.reader.reader import Reader

__all__ = ["Batch", "EpochPlan", "Reader", "plan_epoch"]
