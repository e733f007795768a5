"""hostplan: the numba-built plan equals plan.build's, refuses exactly what it refuses, and the
threaded gather stages the bytes the plan reads, byte for byte."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.fuzz import mutate
from prepkit.lossless import cpu_v2, hostplan
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod

from .images import make_image
from .test_fuzz import _mutations, _streams


def _assorted() -> list[bytes]:
    mask = np.zeros((70, 90), np.uint8)
    mask[10:50, 20:80] = 3
    out = []
    for version in (1, 2):
        out += [
            lossless.encode(make_image("smooth", 70, 90, 3, seed=1), tile=32, version=version),
            lossless.encode(make_image("noise", 20, 33, 4, seed=2), tile=16, version=version),
            lossless.encode(make_image("gradient", 40, 17, None, seed=3), tile=16, version=version),
            lossless.encode(make_image("smooth", 130, 65, 3, seed=4), tile=64, version=version),
            lossless.encode(make_image("constant", 1, 1, 1, seed=5), tile=16, version=version),
            lossless.encode(mask, tile=32, version=version),
        ]
    from prepkit.fuzz import palette_images

    out += [lossless.encode(image, tile=16) for image in palette_images(np.random.default_rng(6))]  # mode 2
    out += [f2.with_tile_table(stream, short=False) for stream in out[6:12]]  # u32 offsets, the first v2 form
    return out


def _rois(streams: list[bytes], seed: int) -> list[tuple[int, int, int, int] | None]:
    rng = random.Random(seed)
    rois: list[tuple[int, int, int, int] | None] = []
    for data in streams:
        header = lossless.read_header(data)
        if rng.random() < 0.25:
            rois.append(None)
            continue
        y0, y1 = sorted(rng.sample(range(header.height + 1), 2)) if header.height > 1 else (0, 1)
        x0, x1 = sorted(rng.sample(range(header.width + 1), 2)) if header.width > 1 else (0, 1)
        rois.append((y0, x0, y1, x1))
    return rois


def _assert_same(new: plan_mod.Plan, old: plan_mod.Plan) -> None:
    cols = [c for c in range(plan_mod.N_COLS) if c not in (plan_mod.SRC_START, plan_mod.SRC_END)]
    np.testing.assert_array_equal(new.work[:, cols], old.work[:, cols])
    np.testing.assert_array_equal(new.work[:, plan_mod.SRC_END] - new.work[:, plan_mod.SRC_START],
                                  old.work[:, plan_mod.SRC_END] - old.work[:, plan_mod.SRC_START])
    for a, b in zip(new.work, old.work, strict=True):  # every tile's staged bytes are its stored bytes
        np.testing.assert_array_equal(new.src[a[0] : a[1]], old.src[b[0] : b[1]])
    np.testing.assert_array_equal(new.image_of_item, old.image_of_item)
    np.testing.assert_array_equal(new.offsets, old.offsets)
    np.testing.assert_array_equal(new.shapes, old.shapes)
    assert new.out_shapes == old.out_shapes and new.total == old.total and new.versions == old.versions
    np.testing.assert_array_equal(new.freq, old.freq)
    np.testing.assert_array_equal(new.cum, old.cum)
    np.testing.assert_array_equal(new.empty, old.empty)
    if old.freq.shape[0]:  # the tables in use (an empty table's slots are undefined)
        used = old.empty == 0
        np.testing.assert_array_equal(cpu_v2.decode_table(new)[used], cpu_v2.decode_table(old)[used])
    assert new.dec is not None and new.dec.dtype == np.uint32 and new.work.dtype == np.int64


@pytest.mark.parametrize("threads", [1, 3])
def test_plan_equals_plan_build(threads: int) -> None:
    streams = _assorted()
    whole_new = hostplan.plan_buffers(streams, threads=threads)
    whole_old = plan_mod.build(streams)
    _assert_same(whole_new, whole_old)
    # Whole images: the staged bytes are the streams back to back, as plan.build's src.
    np.testing.assert_array_equal(whole_new.src, whole_old.src)
    for seed in range(4):
        rois = _rois(streams, seed)
        new = hostplan.plan_buffers(streams, rois, threads=threads)
        _assert_same(new, plan_mod.build(streams, rois))
        # Only the tile rows of the regions are staged.
        assert new.src.size < whole_old.src.size
        np.testing.assert_array_equal(lossless.decode_batch(streams, rois=rois)[0], _decode(new)[0])


def _decode(plan: plan_mod.Plan) -> list[np.ndarray]:
    from prepkit.lossless import cpu

    flat = cpu.decode_plan(plan)
    return [flat[o : o + int(np.prod(s))].reshape(s) for o, s in zip(plan.offsets, plan.out_shapes, strict=True)]


def test_staging_buffer_is_used() -> None:
    streams = _assorted()
    staging = np.zeros(sum(len(s) for s in streams) + 100, np.uint8)
    plan = hostplan.plan_buffers(streams, staging=staging, threads=2)
    assert np.shares_memory(plan.src, staging)
    np.testing.assert_array_equal(staging[: plan.src.size], np.frombuffer(b"".join(streams), np.uint8))


def _table_damage(stream: bytes, rng: random.Random) -> bytes:
    """Damage inside the v2 frequency tables or a tile's header bytes (what numba re-implements)."""
    buf = bytearray(stream)
    z = struct.unpack_from("<I", stream, 20)[0]
    if rng.random() < 0.6 and z:
        for _ in range(rng.randint(1, 3)):
            at = f2.HEADER_SIZE + rng.randrange(z)
            buf[at] = rng.choice([0, 1, 2, 3, 0x7F, 0x80, 0x81, 0xFF, rng.randrange(256)])
    else:
        header = lossless.read_header(stream)
        tile = rng.randrange(header.n_tiles)
        start = int(f2.read_stream(np.frombuffer(stream, np.uint8)).offsets[tile])
        buf[min(len(buf) - 1, start + rng.randrange(2 + header.channels))] = rng.randrange(256)
    return bytes(buf)


def _outcome(build, data: bytes) -> str | plan_mod.Plan:  # type: ignore[no-untyped-def]
    try:
        return build([data])
    except CodecError as error:
        return str(error)


def test_refuses_what_plan_build_refuses() -> None:
    rng = random.Random(7)
    np_rng = np.random.default_rng(7)
    seeds = _streams() + _assorted()
    v2_seeds = [s for s in seeds if s[4] == 2]
    refused = accepted = 0
    for case in range(1500):
        kind = case % 3
        if kind == 0:
            data = mutate(rng.choice(seeds), rng)
        elif kind == 1:
            data = _mutations(rng.choice(seeds), np_rng)
        else:
            data = _table_damage(rng.choice(v2_seeds), rng)
        old = _outcome(plan_mod.build, data)
        new = _outcome(hostplan.plan_buffers, data)
        if isinstance(old, str):
            assert new == old, (case, data[:32])
            refused += 1
        else:
            assert not isinstance(new, str), (case, new)
            _assert_same(new, old)
            accepted += 1
    assert refused > 300 and accepted > 300  # both outcomes are exercised


@pytest.mark.parametrize("data", [b"", b"PKLL", b"XXXX" + bytes(40), b"PKLL\x01\x00\x03\x00" + bytes(12),
                                  b"PKLL\x02\x00\x03\x01" + bytes(16), b"PKLL\x03" + bytes(30)])
def test_garbage_refused_with_the_same_message(data: bytes) -> None:
    with pytest.raises(CodecError) as old:
        plan_mod.build([data])
    with pytest.raises(CodecError) as new:
        hostplan.plan_buffers([data])
    assert str(new.value) == str(old.value)


def test_bad_sample_is_named_by_its_position() -> None:
    streams = _assorted()
    bad = bytearray(streams[7])
    bad[-1] = 0
    bad = bad[:-1]  # the tile lengths no longer add up to the stream's
    with pytest.raises(CodecError, match=r"^image 2: tile lengths: expected them to add up"):
        hostplan.plan_buffers([streams[0], streams[1], bytes(bad), streams[2]])


@pytest.mark.parametrize("version", [1, 2])
def test_tile_offsets_past_the_end_are_refused_before_any_tile_byte_is_read(version: int) -> None:
    """Offsets that climb past the end of the stream and come back down (every length up to
    there positive, a later one negative): refused like plan.build, without reading the tile
    bytes at the wild offset (a fuzz case once crashed the numba validation there)."""
    stream = bytearray(lossless.encode(make_image("smooth", 70, 90, 1, seed=8), tile=32, version=version))
    if version == 2:  # offsets exist in the u32 form of the table (short tables hold lengths)
        stream = bytearray(f2.with_tile_table(bytes(stream), short=False))
    header = lossless.read_header(bytes(stream))
    n = header.n_tiles
    assert n >= 4
    if version == 2:
        table_at = f2.HEADER_SIZE + struct.unpack_from("<I", stream, 20)[0]  # after the tables
    else:
        from prepkit.lossless import format as fmt

        table_at = fmt.HEADER_SIZE
    # Tiles 2 and 3 start far past the stream, tile 2 with its own length (so its checks
    # would pass) and tile 3 with a negative one: no byte may be read at tile 2's offset.
    for k in (2, 3):
        (offset,) = struct.unpack_from("<I", stream, table_at + 4 * k)
        struct.pack_into("<I", stream, table_at + 4 * k, offset + 0xFF000000)
    with pytest.raises(CodecError) as old:
        plan_mod.build([bytes(stream)])
    with pytest.raises(CodecError) as new:
        hostplan.plan_buffers([bytes(stream)])
    assert str(new.value) == str(old.value)
    with pytest.raises(CodecError):
        lossless.decode(bytes(stream))


@pytest.mark.parametrize("separate_bytes", [0, 1 << 40])
def test_buffers_read_in_place_or_joined_plan_alike(monkeypatch: pytest.MonkeyPatch, separate_bytes: int) -> None:
    # 0: every buffer is read in place (one source array each); 2**40: all are joined first.
    monkeypatch.setattr(hostplan, "SEPARATE_BYTES", separate_bytes)
    streams = _assorted()
    space = hostplan.Workspace()
    for threads in (1, 3):
        plan = hostplan.plan_buffers(streams, threads=threads, workspace=space)
        _assert_same(plan, plan_mod.build(streams))
        np.testing.assert_array_equal(plan.src, np.frombuffer(b"".join(streams), np.uint8))
        rois = _rois(streams, 7)
        _assert_same(hostplan.plan_buffers(streams, rois, threads=threads, workspace=space), plan_mod.build(streams, rois))
    header = bytearray(streams[3])
    header[:4] = b"XXXX"  # refused with the headers, before any table is read
    cut = streams[9][:-10]  # a v2 stream whose last tile lies beyond its end: refused by the validation
    for bad in (bytes(header), cut):
        for threads in (1, 3):  # the refusal names the first bad buffer, however many threads validate
            with pytest.raises(CodecError, match="image 2"):
                hostplan.plan_buffers([streams[0], streams[1], bad] + streams[:9] + [bad], threads=threads,
                                      workspace=space)


def test_plan_without_packed_tables() -> None:
    streams = _assorted()
    plan = hostplan.plan_buffers(streams, pack_tables=False)
    assert plan.dec is None
    np.testing.assert_array_equal(plan.work, hostplan.plan_buffers(streams).work)


def test_split_by_groups_positions_in_order() -> None:
    which = np.random.default_rng(3).integers(0, 5, 200)
    groups = hostplan.split_by(which, 6)  # the last value never occurs: an empty group
    assert [g.tolist() for g in groups] == [np.flatnonzero(which == k).tolist() for k in range(6)]


def test_decode_batch_results_outlive_the_reused_host_buffers() -> None:
    # decode_batch(_packed) plan in this thread's reused buffers: a later batch must not
    # change what an earlier call returned.
    first = [make_image("smooth", 300, 280, 3, seed=8), make_image("noise", 260, 300, 3, seed=9)]
    second = [make_image("gradient", 90, 70, 4, seed=10)] * 3
    flat, offsets, shapes = lossless.decode_batch_packed([lossless.encode(i) for i in first])
    images = lossless.decode_batch([lossless.encode(i) for i in first])
    lossless.decode_batch([lossless.encode(i) for i in second])
    lossless.decode_batch_packed([lossless.encode(i) for i in second])
    for k, image in enumerate(first):
        np.testing.assert_array_equal(flat[offsets[k] : offsets[k] + image.size].reshape(shapes[k]), image)
        np.testing.assert_array_equal(images[k], image)


def test_unknown_device_is_refused_before_any_planning() -> None:
    for decode in (lossless.decode_batch, lossless.decode_batch_packed):
        with pytest.raises(ValueError, match="Expected device to be 'cpu' or 'cuda'. Got 'gpu'"):
            decode([b"not a stream"], device="gpu")  # a CodecError would mean it planned first


def _table_sections(rng: np.random.Generator) -> list[tuple[bytes, int]]:
    """Serialised tables (list and bitmap kinds, 1- and 2-byte frequencies), then the same
    with bytes changed where the varint rules bite, cut short or extended, and random bytes."""
    sections = []
    for n_tables in (1, 3, 8):
        freq = np.zeros((n_tables, 256), np.int64)
        for t in range(n_tables):
            used = int(rng.choice([0, 1, 2, 5, 40, 200, 256]))
            symbols = rng.choice(256, used, replace=False)
            if used:
                counts = rng.multinomial(f2.PROB_SCALE - used, rng.dirichlet(np.full(used, 0.3))) + 1
                freq[t, symbols] = counts
        sections.append((f2.pack_tables(freq), n_tables))
    out = list(sections)
    for data, n_tables in sections:
        for _ in range(60):
            buf = bytearray(data)
            for _ in range(int(rng.integers(1, 3))):
                buf[int(rng.integers(len(buf)))] = int(rng.choice([0x00, 0x1F, 0x20, 0x7F, 0x80, 0x81, 0xFF, rng.integers(256)]))
            out.append((bytes(buf), n_tables))
        out += [(data[:-1], n_tables), (data + b"\x00", n_tables), (data[: len(data) // 2], n_tables)]
    out += [(bytes(rng.integers(0, 256, int(rng.integers(1, 600)), dtype=np.uint8)), int(rng.integers(1, 5)))
            for _ in range(100)]
    return out


@pytest.mark.parametrize("pack", [False, True])
def test_parse_tables_equals_format_v2(pack: bool) -> None:
    accepted = refused = 0
    for data, n_tables in _table_sections(np.random.default_rng(11)):
        src = np.frombuffer(b"\xaa" * 5 + data + b"\x80\xff", np.uint8)  # the section inside a larger stream
        freq = np.full((n_tables + 2, 256), 7, np.int32)  # stale values, as in a reused workspace
        cum = np.zeros((n_tables + 2, 257), np.int32)
        dec = np.zeros((n_tables + 2) * f2.PROB_SCALE, np.uint32)
        ok = hostplan._parse_tables(src, 5, 5 + len(data), n_tables, freq, cum, dec, 1, pack)
        try:
            tables = f2.parse_tables(np.frombuffer(data, np.uint8), n_tables)
        except CodecError:
            assert not ok, data
            refused += 1
            continue
        assert ok, data
        accepted += 1
        np.testing.assert_array_equal(freq[1 : 1 + n_tables], tables.freq)
        np.testing.assert_array_equal(cum[1 : 1 + n_tables], tables.cum)
    assert accepted >= 10 and refused > 100


@pytest.mark.parametrize(("cores", "local_world_size", "expected"), [
    (1, None, 1), (2, None, 2), (4, None, 4), (8, None, 4), (16, None, 8), (64, None, 8),
    (16, "2", 4), (96, "8", 6), (8, "8", 1), (16, "bad", 8), (None, None, 1),
])
def test_default_gather_threads(monkeypatch: pytest.MonkeyPatch, cores: int | None, local_world_size: str | None,
                                expected: int) -> None:
    """Every core up to 4, then half the cores up to 8, of this process's share of the node."""
    monkeypatch.setattr(hostplan.os, "cpu_count", lambda: cores)
    if local_world_size is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world_size)
    assert hostplan.default_threads() == expected
