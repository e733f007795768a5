"""A real S3-compatible server for the remote-store tests: SeaweedFS on 127.0.0.1.

Started once per test session (a few seconds) and stopped at its end. Each test writes
under its own prefix of the one bucket.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from prepkit.seaweedfs import SeaweedServer

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """The running server: ``.url(prefix)``, ``.storage_options()``, ``.stop()``/``.start()``."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(seaweed: SeaweedServer, request: pytest.FixtureRequest) -> str:
    """A fresh ``s3://`` prefix for this test."""
    return seaweed.url(f"{request.node.name.replace('[', '-').replace(']', '')}-{next(_prefixes)}")


@pytest.fixture(autouse=True)
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Local staging of remote writes goes under the test's temporary folder."""
    folder = tmp_path / "staging"
    monkeypatch.setenv("PREPKIT_STAGING_DIR", str(folder))
    return folder
