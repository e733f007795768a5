"""Bitstream version 2: header, frequency tables, tile table and tile headers, all validated.

docs/LOSSLESS.md (section "Version 2") is the normative description. Everything here is
plain Python/numpy and runs before any unchecked kernel: after `read_stream` returns, every
tile's mode bytes, lane count, table references and payload lengths are known to be
consistent, so a kernel only has to bound its 16-bit word reads by the tile's payload end
and check the rANS final states.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from prepkit.errors import CodecError
from prepkit.lossless import format as fmt

VERSION = 2
HEADER_SIZE = 24
# magic, version, flags, channels, table sets, W, H, tile, reserved, tables_size
_HEADER = struct.Struct("<4sBBBBIIHHI")
assert _HEADER.size == HEADER_SIZE

FLAG_2D = fmt.FLAG_2D
# Bit 2, wide contexts (A4): a symbol's context comes from the largest of the symbols 63, 64,
# 65 and 128 positions earlier (above-right, above, above-left and two rows up in a full
# tile) instead of the symbol 64 earlier alone (the first v2 streams, still decoded).
# Decoders that predate it refuse the flag as unknown.
FLAG_WIDE_CONTEXT = 4  # not bit 1: that is v1's FLAG_COLOUR (fmt.Header.colour)
# Bit 3, short tile table (A1): each tile's length in one byte, or two for 128 and more,
# instead of N + 1 u32 offsets (masks, whose tiles are mostly a few dozen bytes, 6.5% smaller).
# Streams without it (every stream written before) keep the u32 offsets.
FLAG_SHORT_TILE_TABLE = 8
# Bit 4, plane contexts (A4): eight tables per set instead of four. A symbol of a coded tile
# of at least PLANE_CONTEXT_MIN_PIXELS pixels that lies past the tile's first rANS plane adds
# 4 to its context when the symbol th*tw earlier (the same pixel of the plane coded before it)
# is not 0: rendered images' flat areas, where one plane's residual is zero, are mostly zero
# in the next. Decoders that predate it refuse the flag as unknown.
FLAG_PLANE_CONTEXT = 16
KNOWN_FLAGS = FLAG_2D | FLAG_WIDE_CONTEXT | FLAG_SHORT_TILE_TABLE | FLAG_PLANE_CONTEXT
# The fewest pixels a tile's plane has for plane contexts: the symbol th*tw back must lie in
# an earlier round of every lane count (<= 32), as the other context symbols (>= 63 back) do.
PLANE_CONTEXT_MIN_PIXELS = 64
SHORT_ONE_BYTE = 128  # lengths below this take one byte in a short tile table
# The largest tile (raw, 64 x 64 x 4 plus its mode byte) fits a short table's two bytes.
assert 1 + 64 * 64 * 4 < SHORT_ONE_BYTE << 8

PROB_BITS = 12
PROB_SCALE = 1 << PROB_BITS  # frequencies of a table sum to this
STATE_LOW = 1 << 16  # rANS states live in [STATE_LOW, 2^32); also every lane's initial state
CONTEXTS = 4  # contexts from the earlier symbols of the same plane (see contexts())
PLANE_CONTEXT = 4  # added to a symbol's context by the plane bit (FLAG_PLANE_CONTEXT)
MAX_SET_TABLES = 8  # tables per set with FLAG_PLANE_CONTEXT (set_tables)
CONTEXT_DISTANCE = 64  # the one context symbol of a stream without FLAG_WIDE_CONTEXT
WIDE_DISTANCES = (63, 64, 65, 128)  # the context symbols of a stream with it
CONTEXT_HISTORY = 128  # the farthest back a context looks (decoders keep 128 zeros before symbol 0)
# ctx = (u > t0) + (u > t1) + (u > t2) for the context value u, narrow and wide streams.
NARROW_THRESHOLDS = (0, 2, 8)
WIDE_THRESHOLDS = (0, 2, 6)
MAX_LANES_LOG2 = 5
MAX_SETS_PER_CHANNEL = 2  # table sets per image: 1 .. 2 * C + 2 (max_sets; the reference encoder uses C)

TILE_RAW = 0
TILE_CODED = 1
TILE_PALETTE = 2  # A2: one rANS-coded index plane and a palette of up to 256 colours
PALETTE_MAX = 256
# A2 mode 3: a palette and the index plane as runs, each row's run boundaries coded against
# the row above's (after CCITT group 4 fax coding, with labels). One rANS lane; decoders that
# predate it refuse the mode.
TILE_RUNS = 3
# A2 mode 4: mode 3 with row repeats (P at most REPEAT_MAX_COLOURS) and one more context. A
# row's start (y > 0) is a RUN_CTX_ROW symbol: a label rank, or RUN_REPEAT and then a
# RUN_CTX_LENGTH symbol n: this row and the n rows after it repeat the row above. Half a mask's
# rows repeat the row above: each cost a label, a move and a label per boundary, and an END,
# every one a symbol decoded after the one before. Decoders that predate the mode refuse it.
TILE_RUNS_REPEAT = 4
# A2 mode 5: mode 4 whose boundaries say whether their run's label is the first in the rank
# order. A length or near-move run symbol m (RUN_LENGTH, RUN_NEAR ..) stands for the boundary
# and label rank 0, with no label symbol; m + RUN_OTHER for the boundary and then a
# RUN_CTX_LABEL symbol, the rank (as in modes 3 and 4). Nine labels in ten after a boundary
# are rank 0 on masks: a mask's tiles decode a quarter fewer symbols, each waiting for the
# one before, and code 1.5% fewer bytes. Decoders that predate the mode refuse it.
TILE_RUNS_SAME = 5
# A2 mode 6: mode 5 whose palette is rANS symbols at the head of its lane (RUN_CTX_PALETTE),
# not raw bytes: each colour's channels as differences from the colour before it (channels 1
# and 2 less channel 0's difference). Runs tiles' palettes were half the bytes of the
# screenshots' runs tiles and 7% of those streams, 5% of the masks'. Decoders that predate
# the mode refuse it.
TILE_RUNS_PALETTE = 6
RUNS_MODES = (TILE_RUNS, TILE_RUNS_REPEAT, TILE_RUNS_SAME, TILE_RUNS_PALETTE)  # the runs tiles' modes
LAST_MODE = TILE_RUNS_PALETTE
RUN_REPEAT = 255
REPEAT_MAX_COLOURS = 255  # so that RUN_REPEAT is never a label rank
RUNS_HEADER = 3  # mode, table set, P - 1
RUN_END = 0  # run symbols (contexts RUN_CTX_NEAR / RUN_CTX_FAR): the row's last run goes to its end
RUN_LENGTH = 1  # the next boundary at a0 + 1 + (a RUN_CTX_LENGTH symbol)
RUN_PASS = 2  # skip the next boundary of the row above
RUN_REACH = 3  # RUN_NEAR + RUN_REACH + d: the next boundary at b1 + d, |d| <= RUN_REACH
RUN_NEAR = 3
RUN_SYMBOLS = RUN_NEAR + 2 * RUN_REACH + 1  # run symbols 0 .. RUN_SYMBOLS - 1 (modes 3 and 4)
RUN_OTHER = RUN_SYMBOLS  # mode 5: added to a length or near-move run symbol when a label symbol follows
RUN_SYMBOLS_SAME = RUN_SYMBOLS + RUN_OTHER  # mode 5's run symbols: below this, none of RUN_OTHER + END or + PASS
RUN_CTX_NEAR = 0  # run symbol with a boundary b1 of the row above right of a0
RUN_CTX_FAR = 1  # run symbol without one (only RUN_END and RUN_LENGTH are then valid)
RUN_CTX_LENGTH = 2
RUN_CTX_LABEL = 3  # a run's palette index, as its rank in the candidate list (A2)
RUN_CTX_ROW = 4  # mode 4: a row's first label (y > 0) or RUN_REPEAT
RUN_CTX_PALETTE = 5  # mode 6: channel k of a palette colour has context RUN_CTX_PALETTE + min(k, 2)
# A runs tile's tables: G*s + context (with G = 4, contexts 4 to 7 are set s + 1's). Modes 4
# and 5 use the first five, and need the same sets as eight would.
RUN_CONTEXTS = 8
CH_CONST = 0
CH_RANS = 1
# A channel byte 1 | P<<2 | s<<4 names predictors 0-3; 3 | s<<4 (bit 1 set, bits 2-3 zero)
# names predictor 4, MED. Decoders older than MED read bit 1 as a bad channel mode and refuse.
CH_EXTENDED = 2  # bit 1 of a rANS channel byte: the predictor is 4 + bits 2-3
PREDICTORS = 5  # 0 none, 1 left, 2 up, 3 gradient, 4 MED (median edge detector, A4)
PRED_MED = 4


def channel_byte(predictor: int, table_set: int) -> int:
    """The channel byte of a rANS-coded plane (A2): predictor 0..4, table set s."""
    if predictor >= 4:
        return CH_RANS | CH_EXTENDED | (predictor - 4) << 2 | table_set << 4
    return CH_RANS | predictor << 2 | table_set << 4


def encoder_predictors(fast_decode: bool) -> int:
    """How many predictors an encoder tries (not normative, A9): all five, or with
    fast_decode the four whose inverse is a prefix sum (MED's serial inverse costs about
    1 ns per pixel-channel more on a CPU, a warp wavefront on a GPU)."""
    return PRED_MED if fast_decode else PREDICTORS


# Lane counts (not normative, A9): an encoder gives a tile the most lanes (up to 32) whose
# 4-byte final states stay under 1/16 of its estimated bytes (64 bytes per lane), or under 1/4
# (16 bytes per lane) in a tile of LONG_TILE_SYMBOLS or more: a rANS lane is a serial chain,
# and a long tile of few bytes (a smooth colour tile: 0.3-0.5 bits per symbol) decoded with 8
# or 16 lanes waits on it (docs/BENCHMARKS.md "Lanes for long tiles").
LANE_BYTES = 64
LONG_TILE_LANE_BYTES = 16
LONG_TILE_SYMBOLS = 8192  # two full 64 x 64 planes


def lane_bytes(n_symbols: int) -> int:
    """Estimated bytes of a tile of n_symbols symbols per rANS lane an encoder gives it (A9)."""
    return LONG_TILE_LANE_BYTES if n_symbols >= LONG_TILE_SYMBOLS else LANE_BYTES


def min_lanes_log2(fast_decode: bool) -> int:
    """Fewest rANS lanes (log2) an encoder gives a tile (not normative, A9): 2 lanes, or 4 with
    fast_decode (a tiny tile pays 4 bytes per lane state; fewer lanes make its symbols a
    longer serial chain to decode)."""
    return 2 if fast_decode else 1


def channel_predictor(chb: Any) -> Any:
    """Predictor of a rANS channel byte (int or int64 array): bits 2-3, plus 4 when bit 1 is set."""
    return ((chb >> 2) & 3) + ((chb >> 1) & 1) * 4


# 0 none, 1 subtract green, 2 YCoCg-R lifting, 3 subtract green then blue minus the mean of red
# and green (3 added after the first v2 streams: decoders that predate it refuse it)
COLOURS = 4
# The transforms the encoders try, in this order (ties: the first). Not YCoCg-R: with 3 among
# them it still won some tiles by the encoders' bit-length costs, but it puts luma in plane 0
# where the others put a colour difference, and the planes share table sets by number; left
# out, the evaluation sets' streams are 0.07-0.12% smaller and the encoders cost 6 planes per
# tile instead of 9 (docs/BENCHMARKS.md "A fourth colour transform"). Decoders keep it.
ENCODER_COLOURS = (0, 1, 3)


@dataclass(frozen=True)
class TablesV2:
    """The frequency tables of one stream, (n_sets * set_tables(flags)) tables of 256 symbols."""

    freq: np.ndarray  # int32 (n_tables, 256); a row of zeros is an empty (unusable) table
    cum: np.ndarray  # int32 (n_tables, 257): exclusive prefix sums of freq

    @property
    def n_tables(self) -> int:
        return int(self.freq.shape[0])

    def lut(self) -> np.ndarray:
        """uint8 (n_tables, PROB_SCALE): slot -> symbol (0 for every slot of an empty table)."""
        out = np.zeros((self.n_tables, PROB_SCALE), np.uint8)
        for t in range(self.n_tables):
            if self.cum[t, 256]:
                out[t] = np.repeat(np.arange(256, dtype=np.uint8), self.freq[t])
        return out


def encoder_wide_context(channels: int) -> bool:
    """Whether the encoders write wide contexts (FLAG_WIDE_CONTEXT) for an image of this many
    channels: always. One-channel images since they came (masks 9.3% smaller, grey scans
    1-3%); colour images since stop 34 (photographs 1.7% smaller, rendered images 2.5%,
    medical 1.6%; with the CPU decoder's fused 32-lane round they decode within 1-2% of narrow
    streams' time: docs/BENCHMARKS.md "Wide contexts for colour images"). The narrow kind stays
    decodable (and `reference_v2.encode` writes it on request)."""
    return channels >= 1


def set_tables(flags: int) -> int:
    """Tables per table set of a stream with these flags: 8 with FLAG_PLANE_CONTEXT, else 4.
    Table set s's tables are rows s * set_tables .. of the table section (A3)."""
    return MAX_SET_TABLES if flags & FLAG_PLANE_CONTEXT else CONTEXTS


# The encoders try plane contexts on images of at most this many (tile, plane) pairs: their
# per-tile histograms, 8 tables x 256 uint16 per pair, stay within 64 MiB (the table-set
# proposal's budget, table_sets.ITEMS_BUDGET): a 22-megapixel RGB image.
PLANE_CONTEXT_MAX_TILE_PLANES = (64 << 20) // (MAX_SET_TABLES * 256 * 2)


def encoder_plane_context(channels: int, n_tiles: int, fast_decode: bool = False) -> bool:
    """Whether the encoders try plane contexts (FLAG_PLANE_CONTEXT; A9: they keep them where
    they save enough, table_sets.plane_contexts_pay) on an image of this many channels and
    tiles: images of two channels or more (a one-channel image has one plane per tile: the
    four extra tables per set would all be empty), not with fast_decode (eight tables per
    set make a decode slower), not for small images (encoder_tries_one_set: their tables
    cost more than plane bits save, and the try cost a 32x32 image's encode 40%), and within
    PLANE_CONTEXT_MAX_TILE_PLANES."""
    return (channels > 1 and not fast_decode and not encoder_tries_one_set(n_tiles)
            and n_tiles * channels <= PLANE_CONTEXT_MAX_TILE_PLANES)


def context_of_value(u: np.ndarray, wide: bool) -> np.ndarray:
    """Context (0..3) from the context value u (A4)."""
    t = WIDE_THRESHOLDS if wide else NARROW_THRESHOLDS
    p = np.asarray(u, np.int64)
    return (p > t[0]).astype(np.int64) + (p > t[1]) + (p > t[2])


def context_values(symbols: np.ndarray, wide: bool) -> np.ndarray:
    """Context value u of every symbol of a tile's sequence (A4): the symbol 64 earlier, or
    with wide contexts the largest of those 63, 64, 65 and 128 earlier; 0 before the start."""
    s = np.asarray(symbols, np.int64)
    u = np.zeros(s.size, np.int64)
    for d in WIDE_DISTANCES if wide else (CONTEXT_DISTANCE,):
        if d < s.size:
            u[d:] = np.maximum(u[d:], s[:-d])
    return u


def plane_bits(symbols: np.ndarray, plane: int) -> np.ndarray:
    """The plane bit (A4, FLAG_PLANE_CONTEXT) of every symbol of a coded tile's sequence whose
    planes have `plane` = th*tw symbols each: 1 where the symbol `plane` earlier (the same
    pixel of the plane coded before) is not 0, for tiles of at least PLANE_CONTEXT_MIN_PIXELS
    pixels; 0 for the first plane's symbols and for smaller tiles."""
    s = np.asarray(symbols, np.int64)
    p = np.zeros(s.size, np.int64)
    if plane >= PLANE_CONTEXT_MIN_PIXELS and plane < s.size:
        p[plane:] = s[:-plane] > 0
    return p


def contexts(symbols: np.ndarray, wide: bool, plane: int = 0) -> np.ndarray:
    """Context of every symbol of a tile's sequence: 0..3 from the same plane's earlier
    symbols, plus PLANE_CONTEXT for a plane bit (plane: th*tw of a coded tile of a stream
    with FLAG_PLANE_CONTEXT, 0 otherwise: no plane bits)."""
    ctx = context_of_value(context_values(symbols, wide), wide)
    if plane:
        ctx = ctx + PLANE_CONTEXT * plane_bits(symbols, plane)
    return ctx


def encoder_flags(flags: int, wide: bool, plane_context: bool = False) -> int:
    """The flags both encoders write: FLAG_2D kept from `flags`, FLAG_WIDE_CONTEXT when
    `wide` (encoder_wide_context), FLAG_PLANE_CONTEXT when `plane_context`
    (encoder_plane_context), and always the short tile table."""
    return ((flags & FLAG_2D) | (FLAG_WIDE_CONTEXT if wide else 0) | (FLAG_PLANE_CONTEXT if plane_context else 0)
            | FLAG_SHORT_TILE_TABLE)


def tile_table(lengths: np.ndarray, short: bool, at: int) -> bytes:
    """The tile table (A1) of tiles with these payload lengths, the table placed at stream
    offset `at`. Short: a byte per tile, the length or 0x80 | its low 7 bits, then for each
    tile of 128 bytes or more, in tile order, the length >> 7. Otherwise N + 1 u32 offsets."""
    lengths = np.asarray(lengths, np.int64)
    if short:
        big = lengths >= SHORT_ONE_BYTE
        low = np.where(big, 0x80 | (lengths & 127), lengths)
        return low.astype(np.uint8).tobytes() + (lengths[big] >> 7).astype(np.uint8).tobytes()
    offsets = np.concatenate([[0], np.cumsum(lengths)]) + at + 4 * (lengths.size + 1)
    return offsets.astype("<u4").tobytes()


def read_tile_table(buf: np.ndarray, at: int, n: int, short: bool) -> np.ndarray:
    """The n + 1 absolute tile offsets from the tile table at `at` (A1), checked: the table
    inside the stream, the first tile right after it, the last ending the stream, and in a
    short table every two-byte length at least 128."""
    if short:
        if buf.size < at + n:
            raise CodecError(f"stream too short for the tile table: need {at + n} bytes, got {buf.size}")
        low = buf[at : at + n].astype(np.int64)
        big = low >= SHORT_ONE_BYTE
        start = at + n + int(big.sum())
        if buf.size < start:
            raise CodecError(f"stream too short for the tile table: need {start} bytes, got {buf.size}")
        high = buf[at + n : start].astype(np.int64)
        lengths = low.copy()
        lengths[big] = (low[big] & 127) | high << 7
        if (high == 0).any():
            i = int(np.flatnonzero(big)[np.argmax(high == 0)])
            raise CodecError(f"tile {i}: two-byte length in the tile table: expected 128 or more. Got {lengths[i]}.")
        offsets = np.concatenate([[0], np.cumsum(lengths)]) + start
        if offsets[n] != buf.size:
            raise CodecError(
                f"tile lengths: expected them to add up to the rest of the stream, {buf.size - start} bytes. "
                f"Got {offsets[n] - start}."
            )
        return offsets
    return fmt.u32_offsets(buf, at, n)


def pack_header(
    height: int, width: int, channels: int, tile: int, flags: int, n_sets: int, tables_size: int
) -> bytes:
    return _HEADER.pack(fmt.MAGIC, VERSION, flags, channels, n_sets, width, height, tile, 0, tables_size)


TABLE_EMPTY = 0
TABLE_LIST = 1
TABLE_BITMAP = 2
LIST_MAX = 31  # the encoder lists up to this many symbols, and uses a bitmap beyond


def pack_tables(freq: np.ndarray) -> bytes:
    """Serialise tables. Per table a kind byte: 0 empty; 1 a list (a byte n - 1, then the n
    present symbols in increasing order); 2 a 32-byte presence bitmap (symbol s is bit s % 8
    of byte s // 8). Then f - 1 of each present symbol, in increasing symbol order, as 1 byte
    (< 128) or 2 bytes (low 7 bits | 0x80, then the rest)."""
    out = bytearray()
    for row in np.asarray(freq):
        present = np.flatnonzero(row > 0)
        if present.size == 0:
            out.append(TABLE_EMPTY)
            continue
        if present.size <= LIST_MAX:
            out += bytes([TABLE_LIST, present.size - 1]) + bytes(int(s) for s in present)
        else:
            out.append(TABLE_BITMAP)
            out += np.packbits(row > 0, bitorder="little").tobytes()
        # f - 1 as one byte (< 128) or two (low 7 bits | 0x80, then the rest): both bytes of
        # every symbol laid side by side, the second kept only where it is needed.
        v = row[present].astype(np.int64) - 1
        big = v >= 128
        both = np.stack([np.where(big, 0x80 | (v & 127), v), v >> 7], axis=1).ravel()
        out += both[np.stack([np.ones_like(big), big], axis=1).ravel()].astype(np.uint8).tobytes()
    return bytes(out)


def parse_tables(raw: np.ndarray, n_tables: int) -> TablesV2:
    """Parse and validate serialised tables that must fill `raw` exactly."""
    freq = np.zeros((n_tables, 256), np.int32)
    pos = 0
    data = raw.tobytes()
    for t in range(n_tables):
        if pos >= len(data):
            raise CodecError(f"frequency table {t}: expected a kind byte. Got the end of the table section.")
        kind = data[pos]
        pos += 1
        if kind == TABLE_EMPTY:
            continue
        if kind == TABLE_LIST:
            if pos >= len(data) or pos + 1 + data[pos] + 1 > len(data):
                raise CodecError(f"frequency table {t}: truncated symbol list")
            present = np.frombuffer(data[pos + 1 : pos + 2 + data[pos]], np.uint8).astype(np.int64)
            pos += 1 + present.size
            if (np.diff(present) <= 0).any():
                raise CodecError(f"frequency table {t}: expected symbols in increasing order")
        elif kind == TABLE_BITMAP:
            if pos + 32 > len(data):
                raise CodecError(f"frequency table {t}: truncated bitmap")
            present = np.flatnonzero(np.unpackbits(raw[pos : pos + 32], bitorder="little"))
            pos += 32
        else:
            raise CodecError(f"frequency table {t}: expected kind 0, 1 or 2. Got {kind}.")
        # Varints without a loop: a byte with 0x80 starts a 2-byte value whose second byte
        # is < 32 (f - 1 <= 4095), so every byte that does not follow a 0x80 byte starts one.
        if present.size == 0:
            raise CodecError(f"frequency table {t}: expected at least one symbol in a bitmap table")
        window = raw[pos : pos + 2 * present.size].astype(np.int64)
        follows = np.zeros(window.size, np.bool_)
        follows[1:] = window[:-1] >= 0x80
        starts = np.flatnonzero(~follows)[: present.size]
        if starts.size < present.size or (starts[-1] + (window[starts[-1]] >= 0x80) >= window.size):
            raise CodecError(f"frequency table {t}: truncated frequencies")
        two = window[starts] >= 0x80
        used = int(starts[-1]) + 1 + int(two[-1])
        if (window[:used][follows[:used]] >= 32).any():
            raise CodecError(f"frequency table {t}: expected frequencies of at most {PROB_SCALE}")
        second = np.where(two, window[np.minimum(starts + 1, window.size - 1)], 0)
        freq[t, present] = (window[starts] & 127) + np.where(two, second << 7, 0) + 1
        pos += used
        total = int(freq[t].sum())
        if total != PROB_SCALE:
            raise CodecError(f"frequency table {t}: expected frequencies summing to {PROB_SCALE}. Got {total}.")
    if pos != len(data):
        raise CodecError(f"table section: expected {pos} bytes for {n_tables} tables. Got {len(data)}.")
    cum = np.zeros((n_tables, 257), np.int32)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    return TablesV2(freq, cum)


# Images of at most this many tiles are encoded twice, the second time with one table set
# shared by every plane (4 tables instead of 4C or 4C + 4), and the smaller stream is kept:
# small images pay for their tables out of few symbols (crops of the evaluation sets: -12% on
# 32x32 photographs, -5% at 64x64, -1% at 128x128; docs/BENCHMARKS.md "Small images"), and a
# decoder expands 16 KiB per table whatever the image's size.
ONE_SET_MAX_TILES = 4


def encoder_tries_one_set(n_tiles: int) -> bool:
    """Whether the encoders also try one table set for every plane (both must decide alike)."""
    return n_tiles <= ONE_SET_MAX_TILES


def max_sets(channels: int) -> int:
    """Most table sets of a stream: MAX_SETS_PER_CHANNEL per channel, and two for runs tiles
    (RUN_CONTEXTS tables: one set of eight, or two of four)."""
    return MAX_SETS_PER_CHANNEL * channels + 2


def runs_sets(tables_per_set: int) -> int:
    """How many sets the runs tables take (RUN_CONTEXTS, rounded up to whole sets)."""
    return -(-RUN_CONTEXTS // tables_per_set)


def max_tables_size(channels: int, tables_per_set: int = MAX_SET_TABLES) -> int:
    """Largest table section: max_sets sets of tables_per_set tables (the most a stream can
    have by default), bitmap, 2 bytes per symbol."""
    return max_sets(channels) * tables_per_set * (1 + 32 + 2 * 256)


def max_encoded_size(height: int, width: int, channels: int, tile: int = 64) -> int:
    """Every tile may be stored raw (1 + th*tw*C bytes), so this bounds any v2 stream."""
    fmt.check_shape(height, width, channels, tile)
    header = fmt.Header(height, width, channels, tile, 0)
    th, tw = fmt.tile_geometry(header)
    raw = 1 + th * tw * channels
    return HEADER_SIZE + max_tables_size(channels) + header.table_size + int(raw.sum())


@dataclass(frozen=True)
class StreamV2:
    """A validated v2 stream: header, tables, tile offsets and the decoded tile headers."""

    header: fmt.Header
    tables: TablesV2
    offsets: np.ndarray  # int64 (N + 1): absolute tile offsets
    mode: np.ndarray  # int64 (N,): TILE_RAW, TILE_CODED, TILE_PALETTE or one of RUNS_MODES
    colour: np.ndarray  # int64 (N,)
    lanes_log2: np.ndarray  # int64 (N,)
    ch_mode: np.ndarray  # int64 (N, C)
    predictor: np.ndarray  # int64 (N, C)
    table_set: np.ndarray  # int64 (N, C)
    words_start: np.ndarray  # int64 (N,): absolute offset of the 16-bit word stream (after the states)
    # int64 (N,): palette size P of a palette or runs tile (a palette tile's index plane is
    # ch_mode/predictor/table_set column 0; a runs tile's table set is table_set column 0),
    # 0 for other tiles.
    palette_size: np.ndarray


def read_header(buf: np.ndarray) -> tuple[fmt.Header, int, int]:
    """Parse a v2 header: (header, n_sets, tables_size). Magic and version are checked here
    too, so read_stream (and the reference decoder) refuse what format.read_header refuses."""
    if buf.size < HEADER_SIZE:
        raise CodecError(f"stream too short for a v2 header: need {HEADER_SIZE} bytes, got {buf.size}")
    magic, version, flags, channels, n_sets, width, height, tile, reserved, tables_size = _HEADER.unpack(
        buf[:HEADER_SIZE].tobytes()
    )
    if magic != fmt.MAGIC:
        raise CodecError(f"bad magic: Expected {fmt.MAGIC!r}. Got {magic!r}.")
    if version != VERSION:
        raise CodecError(f"codec version: Expected {VERSION}. Got {version}.")
    if flags & ~KNOWN_FLAGS:
        raise CodecError(f"unknown flags 0x{flags:02x} (known: 0x{KNOWN_FLAGS:02x})")
    if reserved:
        raise CodecError(f"reserved header field is {reserved}, expected 0")
    try:
        fmt.check_shape(height, width, channels, tile)
    except ValueError as exc:
        raise CodecError(f"invalid header: {exc}") from None
    if flags & FLAG_2D and channels != 1:
        raise CodecError(f"2-D flag set with {channels} channels (expected 1)")
    if not 1 <= n_sets <= max_sets(channels):
        raise CodecError(f"table sets: expected 1..{max_sets(channels)}. Got {n_sets}.")
    largest = max_tables_size(channels, set_tables(flags))
    if tables_size > largest:
        raise CodecError(f"table section: expected at most {largest} bytes. Got {tables_size}.")
    return fmt.Header(height, width, channels, tile, flags, VERSION), n_sets, tables_size


def read_stream(buf: np.ndarray) -> StreamV2:
    """Validate a whole v2 stream except the rANS words themselves (vectorised over tiles)."""
    header, n_sets, tables_size = read_header(buf)
    c = header.channels
    n = header.n_tiles
    table_at = HEADER_SIZE + tables_size
    if buf.size < table_at:
        raise CodecError(f"stream too short for its tables: need {table_at} bytes, got {buf.size}")
    tables = parse_tables(buf[HEADER_SIZE:table_at], n_sets * set_tables(header.flags))
    offsets = read_tile_table(buf, table_at, n, bool(header.flags & FLAG_SHORT_TILE_TABLE))
    lengths = np.diff(offsets)
    if (lengths < 1).any():
        i = int(np.flatnonzero(lengths < 1)[0])
        raise CodecError(f"tile {i}: expected a payload of at least 1 byte. Got {int(lengths[i])}.")
    th, tw = fmt.tile_geometry(header)
    first = offsets[:-1]
    mode = buf[first].astype(np.int64)
    _check(mode > LAST_MODE, mode, "tile mode",
           "0 (raw), 1 (coded), 2 (palette), 3 (runs), 4 (runs with repeats), 5 (runs with repeats and implied labels)"
           " or 6 (runs with a coded palette)")
    runs = np.isin(mode, RUNS_MODES)
    raw = mode == TILE_RAW
    pal = mode == TILE_PALETTE
    raw_len = 1 + th * tw * c
    _check(raw & (lengths != raw_len), lengths, "raw tile length", "1 + th*tw*C")
    coded = mode == TILE_CODED
    _check(coded & (lengths < 2 + c), lengths, "coded tile length", f"at least {2 + c}")
    _check(pal & (lengths < 4), lengths, "palette tile length", "at least 4")
    _check(runs & (lengths < RUNS_HEADER), lengths, "runs tile length", f"at least {RUNS_HEADER}")

    def byte(k: int, where: np.ndarray) -> np.ndarray:  # byte k of the tiles `where` (0 elsewhere)
        return np.where(where, buf[np.minimum(first + k, buf.size - 1)], 0).astype(np.int64)

    # Runs tiles: byte 1 is the table set, byte 2 P - 1, then the palette, one lane state, words.
    runs_set = byte(1, runs)
    _check(runs_set >= n_sets, runs_set, "runs tile table set", f"below {n_sets}")
    repeats = runs & (mode != TILE_RUNS)
    repeat_colours = byte(2, repeats) + 1
    _check(repeat_colours > REPEAT_MAX_COLOURS, repeat_colours, "palette size of a runs tile with row repeats",
           f"at most {REPEAT_MAX_COLOURS}")
    g = set_tables(header.flags)
    _check(repeats & (runs_set * g + RUN_CONTEXTS > n_sets * g), runs_set, "table set of a runs tile with row repeats",
           f"below {n_sets - runs_sets(g) + 1} (its {RUN_CONTEXTS} tables in the stream)")
    raw_palette = runs & (mode != TILE_RUNS_PALETTE)
    runs_fixed = RUNS_HEADER + np.where(raw_palette, byte(2, runs) + 1, 0) * c + 4
    _check(runs & ((lengths < runs_fixed) | ((lengths - runs_fixed) % 2 != 0)), lengths, "runs tile length",
           "header + palette (modes 3 to 5) + state + whole words")
    info = byte(1, ~raw & ~runs)
    colour = info & 15
    lanes_log2 = info >> 4
    _check(coded & (colour >= (COLOURS if c >= 3 else 1)), colour, "colour transform", "0..3 (0 for 1 channel)")
    _check(pal & (colour != 0), colour, "palette tile byte 1 bits 0-3", "0")
    _check(lanes_log2 > MAX_LANES_LOG2, lanes_log2, "lane count log2", f"0..{MAX_LANES_LOG2}")
    # Palette tiles: byte 2 is P - 1, byte 3 the index plane's channel byte (rANS only).
    palette_size = np.where(pal | runs, byte(2, pal | runs) + 1, 0)
    chb = np.stack([byte(2 + k, coded) + (byte(3, pal) if k == 0 else 0) for k in range(c)], axis=1)
    ch_mode = chb & 1
    predictor = channel_predictor(chb)
    table_set = chb >> 4
    table_set[:, 0] += runs_set
    bad_ch = ((ch_mode == CH_CONST) & (chb != CH_CONST)) | (table_set >= n_sets) | (predictor >= PREDICTORS)
    _check(bad_ch.any(axis=1), chb.max(axis=1), "channel byte",
           "0 (constant) or a rANS byte with a known predictor and table set")
    _check(pal & (ch_mode[:, 0] != CH_RANS), chb[:, 0], "palette index channel byte", "1 | P<<2 | s<<4")
    n_const = (coded[:, None] & (ch_mode == CH_CONST)).sum(axis=1)
    any_rans = ~raw & (ch_mode == CH_RANS).any(axis=1)
    fixed = np.where(pal, 4 + palette_size * c, 2 + c + n_const) + np.where(any_rans, 4 << lanes_log2, 0)
    fixed = np.where(runs, runs_fixed, fixed)
    _check(coded & ~any_rans & (lengths != fixed), lengths, "constant tile length", "2 + 2C")
    words = lengths - fixed
    _check(any_rans & ((words < 0) | (words % 2 != 0)), lengths, "rANS tile length", "header + states + whole words")
    return StreamV2(
        header, tables, offsets, mode, colour, lanes_log2, ch_mode, predictor, table_set, first + fixed,
        palette_size,
    )


def _check(bad: np.ndarray, values: np.ndarray, what: str, expected: str) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CodecError(f"tile {i}: {what}: expected {expected}. Got {int(values[i])}.")


# Shared by the reference encoder and the numba encoder (no numpy reference in production).
def normalize(counts: np.ndarray) -> np.ndarray:
    """Frequencies summing to PROB_SCALE, >= 1 for every counted symbol (all 0 if none).

    Shared by both encoders: floor(count * 4096 / total) raised to 1, then the difference
    to 4096 taken from or given to the largest entries (lowest symbol first on ties).
    """
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(256, np.int32)
    freq = np.where(counts > 0, np.maximum(1, counts * PROB_SCALE // total), 0)
    diff = PROB_SCALE - int(freq.sum())
    while diff != 0:
        i = int(np.argmax(freq))
        step = diff if diff > 0 else -min(-diff, int(freq[i]) - 1)
        if step == 0:  # the largest entry is 1: spread the excess over the next largest ones
            order = np.argsort(-freq, kind="stable")
            i = int(order[np.argmax(freq[order] > 1)])
            step = -min(-diff, int(freq[i]) - 1)
        freq[i] += step
        diff -= step
    return freq.astype(np.int32)


def cost_table(freq: np.ndarray) -> np.ndarray:
    """Cost of each (table, symbol) in 1/16 bits, an integer (same in both encoders)."""
    with np.errstate(divide="ignore"):
        bits = -np.log2(np.maximum(freq, 1) / PROB_SCALE)
    return np.round(bits * 16).astype(np.int64)


def assemble(header: fmt.Header, freq: np.ndarray, payloads: list[bytes]) -> bytes:
    """Header, tables, tile table and payloads (shared by both encoders)."""
    return stream_head(header, freq, np.array([len(p) for p in payloads], np.int64)) + b"".join(payloads)


def stream_head(header: fmt.Header, freq: np.ndarray, lengths: np.ndarray) -> bytes:
    """What comes before the payloads: header, tables, and the tile table of payloads of
    these lengths."""
    from prepkit.lossless import frequencies  # compiled pack_tables (it imports this module)

    tables = frequencies.pack_tables(freq)
    n_sets = freq.shape[0] // set_tables(header.flags)
    head = pack_header(header.height, header.width, header.channels, header.tile, header.flags,
                          n_sets, len(tables))
    table = tile_table(lengths, bool(header.flags & FLAG_SHORT_TILE_TABLE), HEADER_SIZE + len(tables))
    return head + tables + table


def tile_table_size(lengths: np.ndarray, flags: int) -> int:
    """Bytes of the tile table of tiles with these lengths in a stream with these flags."""
    return len(tile_table(lengths, bool(flags & FLAG_SHORT_TILE_TABLE), 0))


def with_payloads(data: bytes, payloads: dict[int, bytes]) -> bytes:
    """The same stream (header, tables, tile table form) with the payloads of some tiles
    replaced, {tile index: new payload}; the tile table is rewritten to match. Tests build
    damaged streams with it; the new payloads are not checked."""
    return _rebuilt(data, payloads, None)


def with_tile_table(data: bytes, short: bool) -> bytes:
    """The same stream with its tile table in the other form (FLAG_SHORT_TILE_TABLE set or
    cleared): decodes to the same image. Tests make streams of the older form with it."""
    return _rebuilt(data, {}, short)


def _rebuilt(data: bytes, payloads: dict[int, bytes], short: bool | None) -> bytes:
    """A valid stream's header and tables, then a tile table of the form `short` (None: the
    stream's own) for its payloads with those in `payloads` replaced."""
    buf = fmt.as_bytes(data)
    stream = read_stream(buf)
    table_at = HEADER_SIZE + read_header(buf)[2]
    head = bytearray(buf[:table_at].tobytes())
    if short is None:
        short = bool(stream.header.flags & FLAG_SHORT_TILE_TABLE)
    head[5] = (head[5] & ~FLAG_SHORT_TILE_TABLE) | (FLAG_SHORT_TILE_TABLE if short else 0)
    tiles = [payloads.get(i, buf[int(a) : int(b)].tobytes()) for i, (a, b) in
             enumerate(zip(stream.offsets[:-1], stream.offsets[1:], strict=True))]
    lengths = np.array([len(t) for t in tiles], np.int64)
    return bytes(head) + tile_table(lengths, short, table_at) + b"".join(tiles)
