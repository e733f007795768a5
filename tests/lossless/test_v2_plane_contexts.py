"""Plane contexts (docs/LOSSLESS.md A4, FLAG_PLANE_CONTEXT): eight tables per set, the four
more chosen where the same pixel's symbol in the tile's previous rANS plane is not 0. Both
encoders write them where they pay, byte-identical; every decoder reads them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu_v2, table_sets
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2

from .images import general_encode, make_image, rendered


def test_plane_bits_follow_the_text() -> None:
    """A4 written out: bit i is S(i - P) > 0 for i >= P (the tile's later planes), 0 in the
    first plane and in tiles under PLANE_CONTEXT_MIN_PIXELS pixels; a bit adds PLANE_CONTEXT."""
    s = np.array([0, 5, 0, 2] * 48)  # three planes of 64 symbols
    bits = f2.plane_bits(s, 64)
    assert bits[:64].tolist() == [0] * 64
    assert bits[64:].tolist() == [int(v > 0) for v in s[:-64]]
    assert not f2.plane_bits(s[:96], 32).any()  # a 32-pixel tile: no plane bits
    assert (f2.contexts(s, True, 64) - f2.contexts(s, True) == f2.PLANE_CONTEXT * bits).all()
    assert f2.set_tables(f2.FLAG_PLANE_CONTEXT) == 8 and f2.set_tables(f2.FLAG_WIDE_CONTEXT) == 4


@pytest.mark.parametrize("seed", [0, 2])
def test_encoders_keep_plane_contexts_where_they_pay_and_agree(seed: int) -> None:
    image = rendered(192, 256, seed)
    data = lossless.encode(image, version=2)
    assert data == r2.encode(image)
    assert data[5] & f2.FLAG_PLANE_CONTEXT
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert stream.tables.n_tables == 8 * data[7]
    without = r2.encode(image, plane_context=False)
    assert not without[5] & f2.FLAG_PLANE_CONTEXT
    assert len(data) < len(without)
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data, roi=(5, 70, 150, 200)), image[5:150, 70:200])
    for got in lossless.decode_batch([without, data, without]):  # both kinds in one batch
        np.testing.assert_array_equal(got, image)


def test_images_where_they_do_not_pay_are_written_with_four_tables_per_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the extra tables cost more than the plane bits save (table_sets.plane_contexts_pay),
    the encoders write the stream without the flag, byte-identical to one that never tried
    them. Weighed before the table-set proposal already: a smooth image, which gains nothing
    from plane bits, runs the proposal with four tables per set only."""
    proposals: list[int] = []
    propose = cpu_v2._with_table_sets

    def spy(counted: Any, *args: Any) -> Any:
        proposals.append(1 << counted.tshift)
        return propose(counted, *args)

    monkeypatch.setattr(cpu_v2, "_with_table_sets", spy)
    # 48 tiles of 32: plane contexts tried, and table sets (table_sets.MIN_TILES)
    image = make_image("smooth", 256, 192, 3, seed=1)
    assert f2.encoder_plane_context(3, 48, False) and 48 >= table_sets.MIN_TILES
    data = general_encode(image, 32)  # (the short path runs the same steps compiled)
    assert proposals == [4]
    assert not data[5] & f2.FLAG_PLANE_CONTEXT
    assert data == r2.encode(image, tile=32) == r2.encode(image, tile=32, plane_context=False)
    np.testing.assert_array_equal(lossless.decode(data), image)
    proposals.clear()
    kept = general_encode(rendered(192, 256, 0), 32)  # they pay: one proposal, eight tables
    assert kept[5] & f2.FLAG_PLANE_CONTEXT and proposals == [8]
    grey = make_image("smooth", 200, 150, None, seed=2)  # one plane per tile: never written
    assert not lossless.encode(grey, version=2)[5] & f2.FLAG_PLANE_CONTEXT


@pytest.mark.parametrize(("shape", "tile", "wide", "fast"), [
    ((70, 90, 3), 16, True, False),  # 16 x 16 tiles, 8 x 16 and 6 x 10 edge tiles
    ((67, 70, 4), 64, True, False),  # RGBA; 3 x 64 and 64 x 6 edge tiles (under 64 pixels: no bits)
    ((60, 61, 3), 32, False, False),  # narrow contexts with plane bits
    ((96, 100, 3), 64, True, True),  # fast_decode: 4 lanes or more, no MED
])
def test_forced_plane_contexts_decode_everywhere(shape: tuple[int, ...], tile: int, wide: bool, fast: bool) -> None:
    """Streams with plane contexts kept whatever they cost: tiles of every lane count and
    size (edge tiles under 64 pixels take no plane bits), narrow and wide contexts; the
    numba decoder and the reference agree with the image."""
    image = make_image("smooth", *shape, seed=3) // 16 * 16  # coarse steps: many zero residuals
    image[::7, ::5] += 3
    data = r2.encode(image, tile, fast_decode=fast, wide_context=wide, plane_context=True)
    assert data[5] & f2.FLAG_PLANE_CONTEXT
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert (stream.mode == f2.TILE_CODED).any()
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(lossless.decode_batch([data, data])[1], image)


def _with_tables(data: bytes, freq: np.ndarray) -> bytes:
    """The same stream (header, tile payloads) with other frequency tables."""
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    payloads = data[int(stream.offsets[0]) :]
    return f2.stream_head(stream.header, freq, np.diff(stream.offsets)) + payloads


def test_a_symbol_from_an_empty_plane_bit_table_is_refused() -> None:
    """A plane-bit table (context 4-7) the payloads draw from, stored empty: every decoder
    refuses the stream; emptying an unused one changes nothing."""
    image = rendered(128, 128, 4)
    data = r2.encode(image, plane_context=True)
    freq = f2.read_stream(np.frombuffer(data, np.uint8)).tables.freq
    used = [t for t in range(freq.shape[0]) if t % 8 >= 4 and freq[t].any()]
    assert used
    bad = freq.copy()
    bad[used[0]] = 0
    stream = _with_tables(data, bad)
    with pytest.raises(CodecError, match="empty frequency table"):
        r2.decode(stream)
    with pytest.raises(CodecError, match="empty frequency table"):
        lossless.decode(stream)
    assert _with_tables(data, freq) == data


def test_the_table_section_bound_follows_the_tables_per_set() -> None:
    """A stream may have a table section up to max_sets * 8 tables with plane contexts, and
    up to max_sets * 4 without: a larger Z is refused before the tables are parsed."""
    image = rendered(64, 64, 5)
    data = bytearray(r2.encode(image, plane_context=False))
    data[20:24] = (f2.max_tables_size(3, 4) + 1).to_bytes(4, "little")
    with pytest.raises(CodecError, match="table section: expected at most"):
        f2.read_header(np.frombuffer(bytes(data), np.uint8))
    data[5] |= f2.FLAG_PLANE_CONTEXT
    assert f2.read_header(np.frombuffer(bytes(data), np.uint8))[2] == f2.max_tables_size(3, 4) + 1
