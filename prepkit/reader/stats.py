"""What one pass of a Reader over an epoch cost: time to first batch, epoch time, and, for a
remote store read through a cache, the bytes and requests sent and the cache hit rate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prepkit.reader.remote import FetchStats


@dataclass
class EpochStats:
    """One iteration of a Reader (``reader.stats``; finished epochs in ``reader.history``).

    ``time_to_first_batch_s`` runs from the start of the iteration (the first ``next()``) to
    the moment the first batch is handed to the caller; ``epoch_s`` to the end of the
    iteration (None while it runs). The remote figures are those of the store's
    :class:`~prepkit.reader.remote.FetchStats` for this epoch, read live (they include the
    prefetch of the next epoch's first blocks); they are 0 for a store without a cache.
    """

    epoch: int
    first_batch: int = 0  # the batch number the iteration started at (a resumed epoch starts later)
    batches: int = 0
    samples: int = 0
    time_to_first_batch_s: float | None = None
    epoch_s: float | None = None
    fetch: FetchStats | None = None

    @property
    def bytes_fetched(self) -> int:
        return self.fetch.bytes_fetched if self.fetch is not None else 0

    @property
    def requests(self) -> int:
        return self.fetch.requests if self.fetch is not None else 0

    @property
    def hits(self) -> int:
        return self.fetch.hits if self.fetch is not None else 0

    @property
    def misses(self) -> int:
        return self.fetch.misses if self.fetch is not None else 0

    @property
    def hit_rate(self) -> float:
        """Share of the block reads served by blocks cached before this epoch fetched anything."""
        return self.fetch.hit_rate if self.fetch is not None else 0.0

    def summary(self) -> dict[str, float | int | None]:
        """The figures as a dict (for a log line)."""
        return {
            "epoch": self.epoch, "batches": self.batches, "samples": self.samples,
            "time_to_first_batch_s": None if self.time_to_first_batch_s is None else round(self.time_to_first_batch_s, 4),
            "epoch_s": None if self.epoch_s is None else round(self.epoch_s, 4),
            "bytes_fetched": self.bytes_fetched, "requests": self.requests, "hit_rate": round(self.hit_rate, 4),
        }
