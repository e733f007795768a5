"""Work lists for batch decoding: validate every stream, then list the tiles to decode.

Both the CPU and the CUDA decoder run over one flat list of (image, tile) work items built
here, after every header and tile table has been checked, so the kernels only see source
ranges that lie inside the concatenated input and destination ranges inside the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prepkit.errors import CodecError
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2

# Columns of a work item (int64). VERSION is the stream's bitstream version; TABLE_BASE
# (version 2 only) is the row of the image's first frequency table in Plan.freq/cum/lut;
# WIDE (version 2 only) is 1 when the stream has wide contexts (format_v2.FLAG_WIDE_CONTEXT),
# PLANE 1 when it has plane contexts (FLAG_PLANE_CONTEXT: eight tables per set, plane bits).
SRC_START, SRC_END, TH, TW, CH, COLOUR, OUT_BASE, OUT_H, OUT_W, OY, OX, VERSION, TABLE_BASE, WIDE, PLANE = range(15)
N_COLS = 15

Roi = tuple[int, int, int, int]


@dataclass
class Plan:
    """Everything a decoder kernel needs, all validated."""

    src: np.ndarray  # uint8, read-only: every stream back to back
    work: np.ndarray  # int64 (n_items, N_COLS)
    image_of_item: np.ndarray  # int64 (n_items,): which image each item belongs to
    offsets: np.ndarray  # int64 (n_images,): start of each image in the flat output
    shapes: np.ndarray  # int32 (n_images, 3): (h, w, c) of each decoded region
    out_shapes: list[tuple[int, ...]]  # what decode returns per image (2-D or 3-D)
    total: int  # bytes of the flat output
    # Version 2 frequency tables of every v2 image, back to back (TABLE_BASE points here).
    freq: np.ndarray  # int32 (n_tables, 256)
    cum: np.ndarray  # int32 (n_tables, 257)
    lut: np.ndarray  # uint8 (n_tables, 4096): slot -> symbol
    empty: np.ndarray  # int32 (n_tables,): 1 for an empty table (decoding from it is an error)
    # The packed v2 decode table (uint32, n_tables * 4096) when the plan was built with it
    # (hostplan): then lut may be empty and decoders use this instead of rebuilding it.
    dec: np.ndarray | None = None
    # The bitstream versions present, when the builder knows them (saves a sort of the work table).
    known_versions: frozenset[int] | None = field(default=None)

    @property
    def versions(self) -> set[int]:
        """The bitstream versions present in the batch."""
        if self.known_versions is not None:
            return set(self.known_versions)
        return {int(v) for v in np.unique(self.work[:, VERSION])}


def validate_stream(buf: np.ndarray) -> tuple[fmt.Header, np.ndarray, format_v2.TablesV2 | None]:
    """Validate one stream's header and tables: (header, tile offsets, v2 tables or None).

    Raises CodecError; the numba batch validation (hostplan) refuses exactly these streams.
    """
    header = fmt.read_header(buf)
    if header.version == format_v2.VERSION:
        stream = format_v2.read_stream(buf)
        return header, stream.offsets, stream.tables
    return header, fmt.read_tile_table(buf, header), None


def build(buffers: Sequence[object], rois: Sequence[Roi | None] | None = None) -> Plan:
    """Validate every stream and list the tiles each requested region touches."""
    if rois is not None and len(rois) != len(buffers):
        raise ValueError(f"rois must have one entry per buffer: {len(buffers)} buffers, {len(rois)} rois")
    arrays = [fmt.as_bytes(b) for b in buffers]
    items = []
    owners = []
    shapes = np.zeros((len(arrays), 3), np.int32)
    out_offsets = np.zeros(len(arrays), np.int64)
    out_shapes: list[tuple[int, ...]] = []
    src_base = 0
    out_base = 0
    tables: list[format_v2.TablesV2] = []
    n_tables = 0
    for index, buf in enumerate(arrays):
        try:
            header, table, v2_tables = validate_stream(buf)
            if v2_tables is not None:
                tables.append(v2_tables)
        except CodecError as exc:
            raise CodecError(f"image {index}: {exc}") from None
        y0, x0, y1, x1 = fmt.normalize_roi(header, None if rois is None else rois[index])
        t = header.tile
        oh, ow, c = y1 - y0, x1 - x0, header.channels
        ty = np.arange(y0 // t, (y1 - 1) // t + 1)
        tx = np.arange(x0 // t, (x1 - 1) // t + 1)
        tyy, txx = np.meshgrid(ty, tx, indexing="ij")
        tiles = (tyy * header.tiles_x + txx).reshape(-1)
        th_all, tw_all = fmt.tile_geometry(header)
        block = np.empty((tiles.size, N_COLS), np.int64)
        block[:, SRC_START] = table[tiles] + src_base
        block[:, SRC_END] = table[tiles + 1] + src_base
        block[:, TH] = th_all[tiles]
        block[:, TW] = tw_all[tiles]
        block[:, CH] = c
        block[:, COLOUR] = int(header.colour)
        block[:, OUT_BASE] = out_base
        block[:, OUT_H] = oh
        block[:, OUT_W] = ow
        block[:, OY] = tyy.reshape(-1) * t - y0
        block[:, OX] = txx.reshape(-1) * t - x0
        block[:, VERSION] = header.version
        block[:, TABLE_BASE] = n_tables if header.version == format_v2.VERSION else 0
        block[:, WIDE] = int(header.version == format_v2.VERSION and bool(header.flags & format_v2.FLAG_WIDE_CONTEXT))
        block[:, PLANE] = int(header.version == format_v2.VERSION and bool(header.flags & format_v2.FLAG_PLANE_CONTEXT))
        if header.version == format_v2.VERSION:
            block[:, COLOUR] = 0
            n_tables += tables[-1].n_tables
        items.append(block)
        owners.append(np.full(tiles.size, index, np.int64))
        shapes[index] = (oh, ow, c)
        out_offsets[index] = out_base
        out_shapes.append((oh, ow) if header.is_2d else (oh, ow, c))
        src_base += buf.size
        out_base += oh * ow * c
    if len(arrays) == 1:
        src = arrays[0]  # no copy: a fresh buffer costs page faults (about 9 us per 4 KiB here)
    else:
        src = np.concatenate(arrays) if arrays else np.zeros(0, np.uint8)
    if src.flags.writeable:
        src = src.view()
        src.flags.writeable = False  # one numba specialization: kernels see read-only input
    work = np.concatenate(items) if items else np.zeros((0, N_COLS), np.int64)
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    if tables:
        freq = np.concatenate([t.freq for t in tables])
        cum = np.concatenate([t.cum for t in tables])
        lut = np.concatenate([t.lut() for t in tables])
    else:
        freq, cum, lut = np.zeros((0, 256), np.int32), np.zeros((0, 257), np.int32), np.zeros((0, 4096), np.uint8)
    empty = (cum[:, 256] == 0).astype(np.int32)
    return Plan(src, np.ascontiguousarray(work), owner, out_offsets, shapes, out_shapes, out_base,
                freq, cum, lut, empty)


# Error codes a kernel writes per work item (0 = fine).
ERR_K = 1
ERR_LOW_BITS = 2
ERR_UNARY = 3
ERR_VALUE = 4
ERR_STATE = 5
ERR_WORDS = 6
ERR_TABLE = 7
ERR_INDEX = 8
ERR_RUNS = 9

ERROR_TEXT = {
    ERR_K: "a Rice parameter above 7",
    ERR_LOW_BITS: "low-bit section longer than the tile payload",
    ERR_UNARY: "unary section does not hold exactly one terminator per value",
    ERR_VALUE: "a decoded value above 255",
    ERR_STATE: "a rANS lane state outside [2^16, 2^32) or not back at 2^16 at the end",
    ERR_WORDS: "the rANS word stream ends early or has words left over",
    ERR_TABLE: "a rANS symbol from an empty frequency table",
    ERR_INDEX: "a palette index at or above the palette size",
    ERR_RUNS: "a runs tile's run symbol, run boundary or label rank out of range",
}


def raise_errors(plan: Plan, errors: np.ndarray) -> None:
    """Turn per-item kernel error codes into one CodecError naming the first bad tile."""
    bad = np.flatnonzero(errors)
    if bad.size:
        i = int(bad[0])
        image = int(plan.image_of_item[i])
        text = ERROR_TEXT.get(int(errors[i]), f"error code {int(errors[i])}")
        raise CodecError(f"image {image}: corrupt tile payload ({text}); {bad.size} bad tile(s) in the batch")


def staged_in(source: np.ndarray, pinned: np.ndarray) -> bool:
    """Whether ``source`` already is the start of ``pinned`` (hostplan gathered the batch
    there): then the decoders copy it to the device from where it is."""
    return bool(source.size == 0 or source.ctypes.data == pinned.ctypes.data)


def check_out(out: object, total: int) -> None:
    """Raise ValueError unless out is a writable contiguous 1-D uint8 array of >= total bytes."""
    shape = getattr(out, "shape", None)
    dtype = getattr(out, "dtype", None)
    if dtype != np.uint8 or shape is None or len(shape) != 1 or shape[0] < total:
        raise ValueError(f"Expected out to be a 1-D uint8 array of at least {total} bytes. Got {dtype} {shape}.")
    flags = getattr(out, "flags", None)
    for name in ("C_CONTIGUOUS", "WRITEABLE"):  # device arrays have no WRITEABLE flag
        try:
            ok = flags is None or bool(flags[name])
        except KeyError:
            ok = True
        if not ok:
            raise ValueError(f"Expected out to be contiguous and writable. Got {name} False.")
