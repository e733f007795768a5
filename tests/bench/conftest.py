"""Shared fixtures of the benchmark tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from prepkit.bench import evalsets


@pytest.fixture(scope="session")
def small_sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny evaluation sets (scikit-image and rendered images), built once per session."""
    out = tmp_path_factory.mktemp("evalsets")
    evalsets.build(out, small=True)
    return out
