"""Epoch order: coverage, determinism, equal batch counts across ranks, shard-aware order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit.reader.order import plan_epoch, shard_aware_permutation


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), world=st.integers(1, 8), batch=st.integers(1, 17), seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_ranks_cover_every_sample_with_equal_batch_counts(n: int, world: int, batch: int, seed: int, epoch: int) -> None:
    plans = [plan_epoch(n, batch_size=batch, seed=seed, epoch=epoch, rank=r, world_size=world) for r in range(world)]
    assert len({len(p) for p in plans}) == 1  # no DDP hang: same number of batches everywhere
    assert len({len(p.indices) for p in plans}) == 1
    together = np.concatenate([p.indices for p in plans])
    assert set(together.tolist()) == set(range(n))
    assert len(together) - n == (-n) % world  # padding only as much as needed, like DistributedSampler
    counts = np.bincount(together, minlength=n)
    assert counts.max() <= 1 + (-(-world // n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), world=st.integers(1, 8), batch=st.integers(1, 17))
def test_drop_last_gives_whole_batches_and_no_repeats(n: int, world: int, batch: int) -> None:
    plans = [plan_epoch(n, batch_size=batch, seed=0, epoch=0, rank=r, world_size=world, drop_last=True) for r in range(world)]
    together = np.concatenate([p.indices for p in plans])
    assert len(set(together.tolist())) == len(together)
    for plan in plans:
        assert len(plan.indices) % batch == 0 and len(plan) == len(plans[0])


def test_same_seed_same_order_other_epoch_other_order() -> None:
    first = plan_epoch(1000, batch_size=10, seed=7, epoch=0).indices
    assert np.array_equal(first, plan_epoch(1000, batch_size=10, seed=7, epoch=0).indices)
    assert not np.array_equal(first, plan_epoch(1000, batch_size=10, seed=7, epoch=1).indices)
    assert not np.array_equal(first, plan_epoch(1000, batch_size=10, seed=8, epoch=0).indices)
    assert np.array_equal(plan_epoch(10, batch_size=3, seed=0, epoch=0, shuffle=False).indices, np.arange(10))


def test_shard_aware_order_bounds_shards_in_use() -> None:
    shard_of = np.repeat(np.arange(20), 50)
    order = shard_aware_permutation(shard_of, seed=3, epoch=1, shards_in_use=4)
    assert sorted(order.tolist()) == list(range(1000))
    for start in range(0, 1000, 200):  # each window of 4 shards' worth of samples
        assert len(set(shard_of[order[start : start + 200]].tolist())) == 4
    assert not np.array_equal(order, shard_aware_permutation(shard_of, seed=3, epoch=2, shards_in_use=4))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rank"):
        plan_epoch(10, batch_size=2, seed=0, epoch=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        plan_epoch(10, batch_size=0, seed=0, epoch=0)
