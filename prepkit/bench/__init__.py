"""Measured comparisons: benchmark image sets and codec timings."""
