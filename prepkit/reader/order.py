"""Which samples each rank reads, in which order, batch by batch.

The order is a pure function of (number of samples, seed, epoch, rank, world size, batch
size, drop_last, shuffle, shard layout), so every rank computes its own share without
talking to the others, and a resumed job recomputes exactly the batches it had left.

Like ``torch.utils.data.DistributedSampler``: one permutation per (seed, epoch), the same on
every rank; rank ``r`` takes positions ``r, r + world_size, ...``. Unless ``drop_last``, the
permutation is padded by repeating its first samples so every rank gets the same number of
samples (and therefore the same number of batches: no DDP hang at the end of an epoch);
with ``drop_last`` the tail is cut so that every rank holds whole batches only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of all samples for (seed, epoch), identical on every rank."""
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return generator.permutation(num_samples)


def shard_aware_permutation(shard_of_sample: np.ndarray, seed: int, epoch: int, shards_in_use: int) -> np.ndarray:
    """A shuffled order that reads at most ``shards_in_use`` shards at a time.

    Shards are visited in a random order, ``shards_in_use`` at once; the samples of the
    shards in use are shuffled together. Memory and open files stay bounded on stores much
    larger than RAM, at the price of a less thorough shuffle (as WebDataset's shard
    shuffling).
    """
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, 1])))
    shards = np.unique(shard_of_sample)
    shards = shards[generator.permutation(len(shards))]
    by_shard = {int(s): np.flatnonzero(shard_of_sample == s) for s in shards}
    order = []
    for start in range(0, len(shards), max(1, shards_in_use)):
        group = np.concatenate([by_shard[int(s)] for s in shards[start : start + shards_in_use]])
        order.append(group[generator.permutation(len(group))])
    return np.concatenate(order) if order else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class EpochPlan:
    """One rank's batches for one epoch."""

    indices: np.ndarray  # this rank's sample indices in order (padded or cut)
    batch_size: int

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def batch(self, number: int) -> np.ndarray:
        return self.indices[number * self.batch_size : (number + 1) * self.batch_size]


def plan_epoch(
    num_samples: int,
    *,
    batch_size: int,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
    drop_last: bool = False,
    shard_of_sample: np.ndarray | None = None,
    shards_in_use: int | None = None,
) -> EpochPlan:
    """This rank's sample order for ``epoch``; see the module docstring for the rules."""
    if not 0 <= rank < world_size:
        raise ValueError(f"Expected rank to be in [0, {world_size}). Got {rank}.")
    if batch_size < 1:
        raise ValueError(f"Expected batch_size to be at least 1. Got {batch_size}.")
    if not shuffle:
        order = np.arange(num_samples, dtype=np.int64)
    elif shards_in_use is not None and shard_of_sample is not None:
        order = shard_aware_permutation(shard_of_sample, seed, epoch, shards_in_use)
    else:
        order = epoch_permutation(num_samples, seed, epoch)
    if drop_last:
        per_rank = (num_samples // world_size) // batch_size * batch_size
        order = order[: per_rank * world_size]
    else:
        per_rank = -(-num_samples // world_size)
        padding = per_rank * world_size - num_samples
        if padding and num_samples:
            order = np.concatenate([order, np.resize(order, padding)])
    mine = order[rank::world_size][:per_rank]
    return EpochPlan(indices=mine.astype(np.int64), batch_size=batch_size)
