"""`prepkit shard --executor dask`: per-shard encode on Dask workers, byte-identical stores."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from prepkit.cli import _register, cli
from prepkit.ingest.build import build_store
from prepkit.ingest.executors import DaskExecutor, Job, Result, make_executor
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import JpegLayout
from tests.conftest import smooth_image, store_files, write_image

_register()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dask") / "dataset"
    for number in range(13):
        write_image(root / f"class{number % 2}" / f"{number:03d}.png", smooth_image(10 + number % 5, 8 + number % 3, seed=number))
    return root


@pytest.fixture(scope="module")
def reference(dataset: Path) -> dict[str, bytes]:
    """The store written by the single-process path."""
    dest = dataset.parent / "reference"
    build_store(str(dataset), str(dest), layout=JpegLayout(quality=85), options=ImageOptions(), samples_per_shard=3, workers=1)
    return store_files(dest)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A LocalCluster of two spawned worker processes (each restarted by its nanny if it dies)."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local:
            yield local.scheduler_address


def build(dataset: Path, dest: Path, executor: DaskExecutor) -> None:
    build_store(str(dataset), str(dest), layout=JpegLayout(quality=85), options=ImageOptions(), samples_per_shard=3,
                workers=1, executor=executor)


def test_one_dask_worker_from_the_command_line_is_byte_identical(dataset: Path, reference: dict[str, bytes], tmp_path: Path) -> None:
    dest = tmp_path / "one"
    result = CliRunner().invoke(cli, ["shard", str(dataset), str(dest), "--layout", "jpeg", "--quality", "85",
                                      "--samples-per-shard", "3", "--workers", "1", "--executor", "dask"])
    assert result.exit_code == 0, result.output
    assert "wrote 13 samples" in result.output
    assert store_files(dest) == reference


def test_two_dask_workers_are_byte_identical(dataset: Path, reference: dict[str, bytes], tmp_path: Path, cluster: str) -> None:
    dest = tmp_path / "two"
    build(dataset, dest, DaskExecutor(scheduler=cluster, window=2))
    assert store_files(dest) == reference


@dataclass(frozen=True)
class DieOnce:
    """Kills its worker process the first time it meets item ``victim`` (a marker file remembers)."""

    job: Job
    victim: int
    marker: str

    def __call__(self, index: int) -> Result:
        if index == self.victim and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(17)  # the worker process dies mid-task, like a node lost or OOM-killed
        return self.job(index)


class KillingExecutor(DaskExecutor):
    def __init__(self, scheduler: str, marker: Path) -> None:
        super().__init__(scheduler=scheduler)
        self.marker = marker

    def map_shards(self, job: Job, shards: list[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Result]]]:
        return super().map_shards(DieOnce(job, victim=7, marker=str(self.marker)), shards)


def test_a_worker_killed_mid_job_is_retried_with_the_same_result(
    dataset: Path, reference: dict[str, bytes], tmp_path: Path, cluster: str
) -> None:
    marker = tmp_path / "died"
    dest = tmp_path / "killed"
    build(dataset, dest, KillingExecutor(cluster, marker))
    assert marker.exists(), "the worker was not killed: the test did not test anything"
    assert store_files(dest) == reference


def test_the_job_is_scattered_again_when_its_only_worker_dies(
    dataset: Path, reference: dict[str, bytes], tmp_path: Path
) -> None:
    """One worker: when it dies, the scattered job dies with it and the scheduler cancels every
    task that needs it (what failed a CI run with two workers). The executor waits for the
    nanny's new worker, scatters the job again and resubmits the cancelled shards."""
    import dask
    from distributed import LocalCluster

    marker = tmp_path / "died"
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as one:
            build(dataset, tmp_path / "one", KillingExecutor(one.scheduler_address, marker))
    assert marker.exists(), "the worker was not killed: the test did not test anything"
    assert store_files(tmp_path / "one") == reference


def test_executor_choice_is_checked() -> None:
    assert make_executor("local", None, 2) is None
    assert isinstance(make_executor("dask", "tcp://127.0.0.1:8786", 2), DaskExecutor)
    with pytest.raises(ValueError, match="Expected --scheduler only with --executor dask"):
        make_executor("local", "tcp://127.0.0.1:8786", 2)
    with pytest.raises(ValueError, match="Expected executor 'local' or 'dask'. Got 'ray'"):
        make_executor("ray", None, 2)
