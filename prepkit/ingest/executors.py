"""Where the per-shard encode runs: engine-agnostic shard jobs, and a Dask launcher.

A sharding job is three steps, and only the middle one is distributed:

1. plan (the coordinator): list the source, bound the shard sizes, fix every byte's place;
2. encode (anywhere): :func:`encode_shard_items` is a pure function of the job and a
   shard's item indices; it returns the shard's encoded samples and failures;
3. commit (the coordinator): ``StoreWriter.write_shard`` writes each shard in order and
   ``finalize`` marks the store complete.

Because the encode is pure and the coordinator writes, the store is byte-identical
whatever engine or number of workers ran step 2, and a task retried after its worker died
returns the same bytes. A :class:`ShardExecutor` only has to map shards to results; a Ray
launcher would be another class with the same method.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any

from prepkit.parallel import limit_numba_threads
from prepkit.store.writer import EncodedSample, SampleFailure, ShardExecutor

Result = EncodedSample | SampleFailure
Job = Callable[[int], Result]

# Times a run scatters its job again after the workers holding it died (each time the
# cancelled shards are resubmitted): a cluster losing workers faster than that fails the run.
RESCATTERS = 3
WORKER_WAIT_S = 120  # how long a run waits for a worker to come back before it fails


def encode_shard_items(job: Job, items: list[int], numba_threads: int = 1) -> list[Result]:
    """Encode the source items of one shard, in order (the pure, distributable step)."""
    limit_numba_threads(numba_threads)
    return [job(index) for index in items]


class DaskExecutor:
    """Per-shard encode as Dask distributed tasks.

    ``scheduler``: the address of a running Dask scheduler (``tcp://host:8786``); without it
    a ``LocalCluster`` of ``workers`` spawned worker processes is started and stopped here.
    ``numba_threads``: numba threads in each task (one per worker process by default, so
    Dask's parallelism is the only one). A task whose worker dies is rerun by Dask on
    another worker; ``window`` bounds the shards in flight (and held in memory).
    """

    def __init__(self, scheduler: str | None = None, workers: int = 1, numba_threads: int = 1, window: int | None = None) -> None:
        self.scheduler = scheduler
        self.workers = workers
        self.numba_threads = numba_threads
        self.window = window

    def map_shards(self, job: Job, shards: list[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Result]]]:
        import dask
        from distributed import Client, LocalCluster

        with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
            cluster: Any = None
            if self.scheduler is None:
                cluster = LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                    env={"NUMBA_NUM_THREADS": str(self.numba_threads), "OMP_NUM_THREADS": str(self.numba_threads)},
                )
            try:
                with Client(cluster if cluster is not None else self.scheduler) as client:
                    yield from self._run(client, job, shards)
            finally:
                if cluster is not None:
                    cluster.close()

    def _run(self, client: Any, job: Job, shards: list[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Result]]]:
        # The job (the source list) travels once to every worker, not once per task. If the
        # workers holding it die, the scheduler forgets it and cancels the tasks that need it:
        # it is scattered again and those shards resubmitted (at most RESCATTERS times).
        shared = client.scatter(job, broadcast=True, hash=False)
        run = uuid.uuid4().hex[:8]
        window = self.window or max(4, 4 * max(1, len(client.scheduler_info().get("workers", {})) or self.workers))
        pending: list[tuple[int, list[int], Any]] = []
        queue = iter(shards)
        attempt = 0

        def task(shard: int, items: list[int]) -> Any:  # reads shared and attempt as they are now
            return client.submit(encode_shard_items, shared, items, self.numba_threads,
                                 key=f"prepkit-shard-{run}-{shard}-{attempt}", pure=False)

        def submit() -> bool:
            entry = next(queue, None)
            if entry is None:
                return False
            shard, items = entry
            pending.append((shard, items, task(shard, items)))
            return True

        while len(pending) < window and submit():
            pass
        try:
            while pending:
                shard, items, future = pending[0]
                try:
                    results = future.result()
                except CancelledError:
                    if attempt >= RESCATTERS:
                        raise
                    attempt += 1
                    client.wait_for_workers(1, timeout=WORKER_WAIT_S)  # a nanny restarts a dead worker
                    shared = client.scatter(job, broadcast=True, hash=False)
                    for k, (other, other_items, other_future) in enumerate(pending):
                        if other_future.cancelled():
                            pending[k] = (other, other_items, task(other, other_items))
                    continue
                pending.pop(0)
                future.release()
                submit()
                yield shard, results
        finally:
            for _, _, future in pending:
                future.cancel()


def make_executor(executor: str, scheduler: str | None, workers: int) -> ShardExecutor | None:
    """``None`` for the built-in process pool (``local``), a :class:`DaskExecutor` for ``dask``."""
    if executor == "local":
        if scheduler:
            raise ValueError(f"Expected --scheduler only with --executor dask. Got --executor {executor}.")
        return None
    if executor == "dask":
        return DaskExecutor(scheduler=scheduler, workers=workers, numba_threads=int(os.environ.get("PREPKIT_NUMBA_THREADS", "1")))
    raise ValueError(f"Expected executor 'local' or 'dask'. Got {executor!r}.")
