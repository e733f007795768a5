"""Decoding stored samples into packed uint8 batches on the CPU or the GPU."""

from prepkit.decode.engine import decode_samples, gather_bytes
from prepkit.decode.packed import PackedImages, packed_offsets

__all__ = ["PackedImages", "decode_samples", "gather_bytes", "packed_offsets"]
