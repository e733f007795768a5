"""Table sets per tile class (prepkit.lossless.table_sets, docs/LOSSLESS.md A9): the proposal
itself, and streams of more than one set per plane through both encoders and decoders."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2
from prepkit.lossless import table_sets

from .images import assert_byte_flips_refused_or_agree, mixed_image, mixed_tiles


def _n_sets(stream: bytes) -> int:
    return f2.read_header(np.frombuffer(stream, np.uint8))[1]


def _n_runs_sets(stream: bytes) -> int:
    """The sets of the runs tables (after the others) when the stream has runs tiles, else 0."""
    modes = f2.read_stream(np.frombuffer(stream, np.uint8)).mode
    has_runs = np.isin(modes, f2.RUNS_MODES).any()
    return f2.runs_sets(f2.set_tables(stream[5])) if has_runs else 0


def _one_set_per_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_sets, "applies", lambda n_tiles, c, fast_decode, tables_per_set=4: False)


@pytest.mark.parametrize("c", [None, 3])
def test_mixed_content_gets_more_sets_than_planes_and_both_encoders_agree(
        c: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    image = mixed_tiles(c)
    channels = 1 if c is None else c
    stream = lossless.encode(image, version=2)
    assert stream == r2.encode(image)
    assert channels < _n_sets(stream) - _n_runs_sets(stream) <= f2.MAX_SETS_PER_CHANNEL * channels
    np.testing.assert_array_equal(lossless.decode(stream), image)
    np.testing.assert_array_equal(r2.decode(stream), image)
    with monkeypatch.context() as one_set:
        _one_set_per_plane(one_set)
        plain = lossless.encode(image, version=2)
        assert plain == r2.encode(image)
    assert _n_sets(plain) - _n_runs_sets(plain) == channels  # one set per plane
    assert _n_runs_sets(plain) == (2 if c is not None else 0)  # the colour image's label tile, four tables a set
    assert _n_sets(stream) > _n_sets(plain)
    assert len(stream) < len(plain)


def test_the_planes_of_one_tile_can_name_any_set() -> None:
    """Channel bytes name sets beyond the plane's own index: the decoders follow the bytes,
    not the plane number."""
    image = mixed_tiles(3)
    stream = lossless.encode(image, version=2)
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    coded = (s.mode == f2.TILE_CODED)[:, None] & (s.ch_mode != f2.CH_CONST)
    named = {(k, int(s.table_set[i, k])) for i, k in zip(*np.nonzero(coded), strict=True)}
    assert any(table_set != k for k, table_set in named), named
    assert_byte_flips_refused_or_agree(stream, flips=40, seed=3)


def test_images_over_the_budget_keep_one_set_per_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    image = mixed_tiles(3)
    monkeypatch.setattr(table_sets, "ITEMS_BUDGET", 0)
    stream = lossless.encode(image, version=2)
    assert stream == r2.encode(image)
    assert _n_sets(stream) - _n_runs_sets(stream) == 3  # one per plane, then the runs tiles' sets


def _two_classes(m: int) -> np.ndarray:
    """Items alternately peaked (all mass on symbols 0-1) and spread (symbols 0-199)."""
    rng = np.random.default_rng(0)
    items = np.zeros((m, f2.CONTEXTS, 256), np.uint16)
    for i in range(m):
        if i % 2:
            items[i, 0, :200] = rng.integers(1, 20, 200)
        else:
            items[i, 0, :2] = [3000, 40]
    return items


def test_propose_separates_two_classes() -> None:
    items = _two_classes(40)
    sets, n_sets = table_sets.propose(items, np.zeros(40, np.int64), 1, 2)
    assert n_sets == 2
    assert len(set(sets[0::2])) == 1 and len(set(sets[1::2])) == 1
    assert sets[0] != sets[1]


def test_propose_uses_sets_numbered_from_zero_and_up_to_the_limit() -> None:
    items = _two_classes(2000)  # more than SAMPLE: the final pass assigns the unsampled items
    sets, n_sets = table_sets.propose(items, np.zeros(2000, np.int64), 1, 6)
    assert 2 <= n_sets <= 6
    assert sorted(set(sets.tolist())) == list(range(n_sets))
    assert (sets[0::2] != sets[1::2]).all()


def test_propose_leaves_what_it_cannot_split() -> None:
    items = _two_classes(10)
    now = np.arange(10, dtype=np.int64) % 2
    same, n = table_sets.propose(items, now, 2, 2)  # already at the limit
    assert n == 2 and same is now
    one, n = table_sets.propose(items[:1], np.zeros(1, np.int64), 1, 4)  # one item
    assert n == 1 and one.tolist() == [0]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_compiled_proposal_is_the_python_one(seed: int) -> None:
    """propose_compiled (cpu_v2's) against propose (reference_v2's) on random items: Laplacian
    symbols of random spread in 4 or 8 contexts, empty items, one set or several, up to four
    more allowed, and more items than the sample. The same sets and count, also where nothing
    changes (then the given array itself)."""
    rng = np.random.default_rng(seed)
    changed = 0
    for trial in range(30):
        m = int(rng.integers(1, 50)) if trial % 10 else int(rng.integers(table_sets.SAMPLE, 1400))
        contexts = int(rng.choice([4, 8]))
        items = np.zeros((m, contexts, 256), np.int64)
        for i in range(m):
            n = int(rng.integers(0, 4097))
            values = np.minimum(np.abs(rng.laplace(0, rng.uniform(0.5, 30), n)).astype(np.int64) * 2, 255)
            np.add.at(items[i], (rng.integers(0, contexts, n), values), 1)
        n_sets = int(rng.integers(1, 4))
        now = rng.integers(0, n_sets, m) if trial % 2 else np.zeros(m, np.int64)
        max_sets = n_sets + int(rng.integers(0, 5))
        full = table_sets.sparse_items(items)
        want_sets, want_n = table_sets.propose(full, now, n_sets, max_sets)
        got_sets, got_n = table_sets.propose_compiled(full, now, n_sets, max_sets)
        assert got_n == want_n and got_sets.tolist() == want_sets.tolist(), trial
        assert (got_sets is now) == (want_sets is now)
        changed += got_sets is not now
    assert changed >= 15, changed


def _measure(items: np.ndarray, sets: np.ndarray, n_sets: int) -> int:
    counts, freq = table_sets._stream_tables(table_sets.sparse_items(items), sets, n_sets)
    return table_sets.stream_bytes(0, counts, freq)


def test_refine_moves_a_misplaced_item_to_the_set_that_codes_it_cheaper() -> None:
    items = _two_classes(40)
    right = np.arange(40, dtype=np.int64) % 2  # peaked items in set 0, spread ones in set 1
    wrong = right.copy()
    wrong[[4, 10]] = 1  # two peaked items among the spread ones
    refined = table_sets.refine(table_sets.sparse_items(items), wrong, 2)
    assert refined.tolist() == right.tolist()
    assert _measure(items, refined, 2) < _measure(items, wrong, 2)


def test_propose_at_the_set_limit_still_moves_misplaced_items() -> None:
    items = _two_classes(40)
    wrong = np.arange(40, dtype=np.int64) % 2
    wrong[6] = 1
    sets, n = table_sets.propose(items, wrong, 2, 2)
    assert n == 2 and sets.tolist() == (np.arange(40) % 2).tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_refine_never_returns_sets_the_measure_finds_larger(seed: int) -> None:
    """On random items and sets (some symbols absent from some sets' tables), the sets
    refine returns measure at most what the given ones do, and every item's symbols are
    in its set's tables."""
    rng = np.random.default_rng(seed)
    m, n_sets = 60, 4
    items = np.zeros((m, f2.CONTEXTS, 256), np.uint16)
    for i in range(m):
        width = int(rng.integers(2, 200))
        items[i, rng.integers(0, f2.CONTEXTS), :width] = rng.integers(0, 50, width)
    given = rng.integers(0, n_sets, m).astype(np.int64)
    refined = table_sets.refine(table_sets.sparse_items(items), given, n_sets)
    assert _measure(items, refined, n_sets) <= _measure(items, given, n_sets)
    _, freq = table_sets._stream_tables(table_sets.sparse_items(items), refined, n_sets)
    tables = freq.reshape(n_sets, f2.CONTEXTS, 256)
    assert ((items == 0) | (tables[refined] > 0)).all()


def test_applies_follows_the_histogram_budget_the_tile_count_and_not_fast_decode() -> None:
    per_tile = f2.CONTEXTS * 256 * 2
    assert table_sets.applies(table_sets.ITEMS_BUDGET // (3 * per_tile), 3, False)
    assert not table_sets.applies(table_sets.ITEMS_BUDGET // (3 * per_tile) + 1, 3, False)
    assert not table_sets.applies(table_sets.MIN_TILES, 3, True)
    assert not table_sets.applies(table_sets.MIN_TILES - 1, 3, False)
    assert table_sets.applies(table_sets.MIN_TILES, 3, False)


def test_images_of_fewer_tiles_keep_one_set_per_plane() -> None:
    """mixed_tiles' first 2 x 3 tiles, alone: too few planes for table sets per tile class."""
    image = mixed_image(3)
    stream = lossless.encode(image, version=2)
    assert stream == r2.encode(image)
    assert _n_sets(stream) - _n_runs_sets(stream) == 3


def test_fast_decode_streams_keep_one_set_per_plane() -> None:
    image = mixed_tiles(3)
    stream = lossless.encode(image, version=2, fast_decode=True)
    assert stream == r2.encode(image, fast_decode=True)
    assert _n_sets(stream) - _n_runs_sets(stream) == 3


def test_the_compiled_plane_context_test_decides_as_the_numpy_one() -> None:
    """plane_contexts_pay_compiled (the numba encoders') against plane_contexts_pay (the
    reference's) on random counts of 1-4 sets of eight tables: plane bits that split each
    context into a peaked and a spread half (they pay), or into halves drawn alike (they do
    not), mixed in random proportions so that cases near the threshold occur."""
    from prepkit.lossless import frequencies

    rng = np.random.default_rng(59)
    answers = set()
    for k in range(80):
        n_sets = int(rng.integers(1, 5))
        shape = (n_sets, f2.CONTEXTS, 256)
        alike = rng.integers(0, 40, (n_sets, 2, *shape[1:]))
        peaked = np.zeros(shape, np.int64)
        peaked[:, :, 0] = rng.integers(100, 4000, shape[:2])
        split = np.stack([peaked, rng.integers(0, 40, shape)], axis=1)
        mix = rng.random()
        counts = (mix * split + (1 - mix) * alike).astype(np.int64).reshape(n_sets * f2.MAX_SET_TABLES, 256)
        freq = frequencies.normalize_rows(counts).astype(np.int64)
        want = table_sets.plane_contexts_pay(counts, freq)
        assert table_sets.plane_contexts_pay_compiled(counts, freq) == want, k
        answers.add(want)
    assert answers == {False, True}
